"""Continuous batching under a token budget: which sequences run this step, and with how many tokens."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from budgetscope.engine.block_manager import BlockManager
from budgetscope.engine.engine_config import EngineConfig
from budgetscope.engine.sequence import Sequence, SequenceStatus


@dataclass(slots=True)
class ScheduledBatch:
    """One step's work: seqs[i] computes num_new_tokens[i] tokens; is_sampled[i] when that ends its input.

    inflight_src[i] >= 0 when seqs[i]'s one input token is still on the device (async scheduling): the row of that
    token among the sampled ids of the step in flight, which the model runner gathers it from; -1 otherwise."""

    seqs: list[Sequence] = field(default_factory=list)
    num_new_tokens: list[int] = field(default_factory=list)
    is_sampled: list[bool] = field(default_factory=list)
    inflight_src: list[int] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    needs_sync: bool = False  # scheduled around a step in flight, it had to preempt: discard, finish that step first
    is_launched: bool = False  # Scheduler.launched() has accounted it

    @property
    def is_empty(self) -> bool:
        return not self.seqs

    @property
    def num_prefill_tokens(self) -> int:
        """Tokens of sequences whose input is longer than one token this step (prompt or recompute)."""
        return sum(n for n in self.num_new_tokens if n > 1)

    @property
    def num_decode_seqs(self) -> int:
        return sum(1 for n in self.num_new_tokens if n == 1)

    @property
    def num_tokens(self) -> int:
        return sum(self.num_new_tokens)

    @property
    def sampled_seqs(self) -> list[Sequence]:
        """The sequences that get a token this step, in the order of the step's sampled ids."""
        return [s for s, is_sampled in zip(self.seqs, self.is_sampled) if is_sampled]

    def add(self, seq: Sequence, num_new_tokens: int) -> None:
        self.seqs.append(seq)
        self.num_new_tokens.append(num_new_tokens)
        self.is_sampled.append(seq.num_computed_tokens + num_new_tokens == seq.num_total_tokens)
        self.inflight_src.append(seq.inflight_row if seq.num_inflight_tokens else -1)

    def remove(self, seq: Sequence) -> None:
        """Take seq back out of this step (it is being preempted)."""
        i = next(i for i, s in enumerate(self.seqs) if s is seq)
        del self.seqs[i], self.num_new_tokens[i], self.is_sampled[i], self.inflight_src[i]


class Scheduler:
    """Policy, in order, each step (Sarathi-style: decodes never wait behind a long prompt):

    1. running sequences that decode (one token each), by priority then arrival;
    2. running sequences part-way through a chunked prefill, as much as the token budget leaves;
    3. waiting sequences, by tier priority then arrival, while budget, `max_num_seqs` and blocks allow;
       a prefix-cache hit skips its blocks. Nothing is admitted in a step that preempted.

    When blocks run out, the least important running sequence (if less important than the one asking;
    else the asker itself) is preempted by recompute: its blocks are freed, it leaves this step if it
    was in it, and it goes back to the front of its waiting queue.

    Async scheduling (`schedule(may_preempt=False)`, while a step is in flight): each sequence sampled by that step
    counts its in-flight token (`Sequence.num_total_tokens`), one whose in-flight token is certain to be its last
    (max_tokens, max_model_len) is left out, and nothing is preempted: where a preemption would be needed the batch
    comes back with `needs_sync` set, and the engine finishes the step in flight before scheduling again.
    """

    def __init__(self, config: EngineConfig, block_manager: BlockManager):
        self.config = config
        self.block_manager = block_manager
        self.waiting: dict[int, deque[Sequence]] = {}
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    # -- queues ---------------------------------------------------------------------------------
    @property
    def num_waiting(self) -> int:
        # list() copies the values in one C call, so a scrape from another thread never sees the dict grow
        return sum(len(q) for q in list(self.waiting.values()))

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def has_work(self) -> bool:
        return bool(self.running) or self.num_waiting > 0

    def add(self, seq: Sequence) -> None:
        """Enqueue a new sequence at the back of its priority's queue."""
        seq.status = SequenceStatus.WAITING
        self.waiting.setdefault(seq.priority, deque()).append(seq)

    def _head(self) -> Sequence | None:
        for priority in sorted(self.waiting):
            if self.waiting[priority]:
                return self.waiting[priority][0]
        return None

    # -- one step ---------------------------------------------------------------------------------
    def schedule(self, may_preempt: bool = True) -> ScheduledBatch:
        """Pick this step's sequences and token counts, allocating (or preempting for) their blocks.

        may_preempt=False (a step is in flight): stop with `needs_sync` set where a preemption would be needed."""
        batch = ScheduledBatch()
        limit = self.config.max_num_batched_tokens
        self.running.sort(key=Sequence.sort_key)
        runnable = [s for s in self.running if not self._ends_in_flight(s)]
        decoding = [s for s in runnable if s.num_total_tokens - s.num_computed_tokens == 1]
        prefilling = [s for s in runnable if s.num_total_tokens - s.num_computed_tokens > 1]
        for seq in decoding + prefilling:
            budget = limit - batch.num_tokens
            if budget == 0:
                break
            if seq.status is not SequenceStatus.RUNNING:  # preempted earlier in this loop
                continue
            num_new = min(seq.num_total_tokens - seq.num_computed_tokens, budget)
            if num_new < seq.num_total_tokens - seq.num_computed_tokens and not self.config.enable_chunked_prefill:
                continue
            if self._make_room(seq, seq.num_computed_tokens + num_new, batch, may_preempt):
                batch.add(seq, num_new)
            elif batch.needs_sync:
                return batch
        if not batch.preempted:
            self._admit(batch, may_preempt)
        return batch

    def _ends_in_flight(self, seq: Sequence) -> bool:
        """seq's in-flight token is certain to be its last (by length): scheduling it again would be wasted."""
        if not seq.num_inflight_tokens:
            return False
        return (
            seq.num_output_tokens + seq.num_inflight_tokens >= seq.params.max_tokens
            or seq.num_total_tokens >= self.config.max_model_len
        )

    def _make_room(self, seq: Sequence, num_tokens: int, batch: ScheduledBatch, may_preempt: bool = True) -> bool:
        """Allocate blocks for seq, preempting less important sequences; False if seq itself went (or, without
        may_preempt, when a preemption would be needed: batch.needs_sync is set then)."""
        while not self.block_manager.allocate(seq, num_tokens):
            if not may_preempt:
                batch.needs_sync = True
                return False
            victim = self._victim(than=seq)
            if victim is None:
                self._preempt(seq, batch)
                return False
            self._preempt(victim, batch)
        return True

    def _victim(self, than: Sequence) -> Sequence | None:
        """The least important running sequence, if it is less important than `than`."""
        for seq in reversed(self.running):
            if seq is not than:
                return seq if seq.sort_key() > than.sort_key() else None
        return None

    def _preempt(self, seq: Sequence, batch: ScheduledBatch) -> None:
        if seq in batch.seqs:
            batch.remove(seq)
        self.running.remove(seq)
        self.block_manager.free(seq)
        seq.num_computed_tokens = 0
        seq.num_preemptions += 1
        seq.status = SequenceStatus.WAITING
        self.waiting.setdefault(seq.priority, deque()).appendleft(seq)
        self.num_preemptions += 1
        batch.preempted.append(seq)
        seq.trace.mark("queue")

    def _admit(self, batch: ScheduledBatch, may_preempt: bool = True) -> None:
        while len(self.running) < self.config.max_num_seqs:
            budget = self.config.max_num_batched_tokens - batch.num_tokens
            seq = self._head()
            if seq is None or budget == 0:
                return
            hit = self.block_manager.match_prefix(seq)
            num_cached = len(hit) * self.block_manager.block_size
            num_new = seq.num_tokens - num_cached
            if num_new > budget:
                if not self.config.enable_chunked_prefill:
                    return
                num_new = budget
            if not self.block_manager.allocate(seq, num_cached + num_new, hit):
                victim = self._victim(than=seq)
                if victim is None:
                    return
                if not may_preempt:
                    batch.needs_sync = True
                    return
                self._preempt(victim, batch)
                queue = self.waiting[seq.priority]
                if queue[0] is victim:  # same tier: the less important victim queues behind seq, not before it,
                    queue.popleft()  # else it is admitted again at once and preempted again, for ever
                    queue.insert(1, victim)
                continue
            self.waiting[seq.priority].popleft()
            seq.status = SequenceStatus.RUNNING
            seq.num_computed_tokens = num_cached
            if not seq.is_admitted:
                seq.is_admitted = True
                seq.num_cached_tokens = num_cached
                seq.admitted_mono_ns = time.monotonic_ns()
            self.running.append(seq)
            seq.trace.mark("prefill")
            batch.add(seq, num_new)

    # -- launched, then after the model ran ------------------------------------------------------------------
    def launched(self, batch: ScheduledBatch) -> None:
        """The batch is on the device: its tokens count as computed, and each sampled sequence has one more token
        in flight (the row of its id among the step's sampled ids is where the next step may gather it from)."""
        if batch.is_launched:
            return
        batch.is_launched = True
        for seq, num_new in zip(batch.seqs, batch.num_new_tokens):
            seq.num_computed_tokens += num_new
        for row, seq in enumerate(batch.sampled_seqs):
            seq.num_inflight_tokens += 1
            seq.inflight_row = row

    def postprocess(
        self, batch: ScheduledBatch, sampled_ids: list[int], eos_ids: set[int]
    ) -> tuple[list[Sequence], list[Sequence]]:
        """Append the sampled tokens (in order of batch.is_sampled), register full blocks, finish the done.

        A sequence that finished while the step was in flight (stop at the step before, abort, deadline) has its
        token dropped. Returns (sequences that got a token, sequences that finished this step)."""
        self.launched(batch)  # a caller that steps by hand (schedule, run, postprocess) skips launched()
        emitted, finished = [], []
        it = iter(sampled_ids)
        for seq, is_sampled in zip(batch.seqs, batch.is_sampled):
            token_id = next(it) if is_sampled else None
            if is_sampled:
                seq.num_inflight_tokens -= 1
            if seq.is_finished:
                continue
            self.block_manager.commit(seq)
            if token_id is None:
                continue
            seq.token_ids.append(token_id)
            emitted.append(seq)
            reason = self._stop_reason(seq, token_id, eos_ids)
            if reason:
                self.finish(seq, reason, "ok")
                finished.append(seq)
        return emitted, finished

    def _stop_reason(self, seq: Sequence, token_id: int, eos_ids: set[int]) -> str | None:
        if token_id in eos_ids and not seq.params.ignore_eos:
            return "stop"
        if seq.num_output_tokens >= seq.params.max_tokens or seq.num_tokens >= self.config.max_model_len:
            return "length"
        return None

    def finish(self, seq: Sequence, reason: str, outcome: str) -> None:
        """Take seq out of the queues and free its blocks (abort, timeout, stop)."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting[seq.priority].remove(seq)
        else:
            return
        self.block_manager.free(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        seq.outcome = outcome

    def expire(self, now_ns: int | None = None) -> list[Sequence]:
        """Finish every sequence whose deadline has passed, with outcome `timeout`."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        late = [s for s in self._all() if s.deadline_ns is not None and s.deadline_ns <= now_ns]
        for seq in late:
            self.finish(seq, "timeout", "timeout")
        return late

    def _all(self) -> list[Sequence]:
        return self.running + [s for q in self.waiting.values() for s in q]
