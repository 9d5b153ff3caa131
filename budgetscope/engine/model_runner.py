"""Turns a scheduled batch into tensors, runs the model on the paged cache, and samples."""

from __future__ import annotations

import torch

from budgetscope.engine.batch import Batch, StepBuffer, StepShape, gather_inflight
from budgetscope.engine.cuda_graphs import DecodeGraphs, StepGraphs
from budgetscope.engine.kv_cache import KVCache
from budgetscope.engine.model import LlamaForCausalLM
from budgetscope.engine.sampler import Sampler
from budgetscope.engine.scheduler import ScheduledBatch
from budgetscope.engine.sequence import Sequence


class PendingTokens:
    """The sampled ids of a launched step: `wait()` blocks until the device has them and returns them.

    On CUDA the ids are copied (non-blocking) into pinned host memory behind a recorded event, so the host can
    schedule the next step while the GPU still runs this one; elsewhere they are ready at once."""

    __slots__ = ("_host", "_event")

    def __init__(self, ids: torch.Tensor | None):
        self._event = None
        if ids is None or ids.device.type != "cuda":
            self._host = ids
            return
        self._host = torch.empty(ids.shape, dtype=ids.dtype, pin_memory=True)
        self._host.copy_(ids, non_blocking=True)
        self._event = torch.cuda.Event()
        self._event.record()

    def wait(self) -> list[int]:
        """One sampled id per sequence of the step with is_sampled set, in the step's order ([] when none)."""
        if self._host is None:
            return []
        if self._event is not None:
            self._event.synchronize()
        return self._host.tolist()


class ModelRunner:
    """attention "sdpa": the plain-PyTorch gather path (decode-only steps through DecodeGraphs when given);
    "triton": the paged-attention kernel, metadata packed in one buffer, every step through StepGraphs when given.
    max_* bound the packed metadata buffer of eager "triton" steps.

    `keep_sampled` (async scheduling): each step's sampled ids are also copied, on the device, into `self.sampled`
    (the graphs' static buffer when there are graphs), where the next step gathers the inputs still in flight."""

    def __init__(
        self,
        model: LlamaForCausalLM,
        kv_cache: KVCache,
        device: torch.device,
        graphs: DecodeGraphs | StepGraphs | None = None,
        attention: str = "sdpa",
        max_num_seqs: int = 32,
        max_num_batched_tokens: int = 512,
        max_model_len: int = 2048,
    ):
        self.model = model
        self.kv_cache = kv_cache
        self.block_size = kv_cache.block_size
        self.device = device
        self.sampler = Sampler()
        self.attention = attention
        self.graphs = graphs  # steps go through these when they fit a bucket
        self.graph_steps = 0  # steps that ran padded/static (as graphs on CUDA)
        self.keep_sampled = False
        self.sampled = (
            graphs.sampled if graphs is not None else torch.zeros(max_num_seqs, dtype=torch.long, device=device)
        )
        self.step_buffer = None
        if attention == "triton":
            if isinstance(graphs, StepGraphs):
                self.step_buffer = graphs.buffer
            else:
                width = -(-max(max_model_len, max_num_batched_tokens) // self.block_size)
                shape = StepShape(max_num_batched_tokens, max_num_seqs, width, max_num_seqs)
                self.step_buffer = StepBuffer(shape.size, device)

    def run(self, scheduled: ScheduledBatch) -> list[int]:
        """Compute every scheduled token's KV; return one sampled id per sequence with is_sampled set."""
        return self.launch(scheduled).wait()

    @torch.inference_mode()
    def launch(self, scheduled: ScheduledBatch) -> PendingTokens:
        """Queue the step on the device and return at once; `.wait()` on the result gives run()'s ids.

        A row whose input is still in flight (scheduled.inflight_src) reads it from the previous launch's sampled
        ids on the device, so this step may be launched before that one's wait() (async scheduling); at most one
        step may be in flight when the next is launched. What overlaps the GPU is the host work between launch()
        and wait(): scheduling the next step, detokenizing, streaming."""
        return PendingTokens(self._keep(self._launch(scheduled)))

    def _keep(self, ids: torch.Tensor | None) -> torch.Tensor | None:
        """With keep_sampled, copy the step's sampled ids into the static buffer the next step gathers from."""
        if self.keep_sampled and ids is not None:
            self.sampled[: len(ids)].copy_(ids, non_blocking=True)
        return ids

    def _launch(self, scheduled: ScheduledBatch) -> torch.Tensor | None:
        """The step's sampled ids on the device, not waited for (None when no sequence is sampled)."""
        sampled = scheduled.sampled_seqs
        if isinstance(self.graphs, StepGraphs) and self.graphs.bucket(scheduled.num_tokens, len(scheduled.seqs)):
            logits, greedy = self.graphs.run(
                scheduled.seqs, scheduled.num_new_tokens, scheduled.is_sampled, scheduled.inflight_src
            )
            self.graph_steps += 1
            return self.sampler.sample(logits, sampled, greedy=greedy) if sampled else None
        if isinstance(self.graphs, DecodeGraphs) and self._graphable(scheduled):
            return self._run_graph(scheduled.seqs, scheduled.inflight_src)
        batch = self.prepare(scheduled)
        input_ids = gather_inflight(batch.input_ids, batch.prev_index, self.sampled)
        hidden = self.model(input_ids, batch.positions, batch, self.kv_cache.layers)
        if not sampled:
            return None
        logits = self.model.compute_logits(hidden[batch.logits_rows])
        return self.sampler.sample(logits, sampled)

    def _graphable(self, scheduled: ScheduledBatch) -> bool:
        """A decode-only step (one new token a sequence, every one sampled) that fits a graph bucket."""
        if not scheduled.seqs or not all(n == 1 for n in scheduled.num_new_tokens) or not all(scheduled.is_sampled):
            return False
        longest = max(s.num_computed_tokens for s in scheduled.seqs) + 1
        return self.graphs.bucket(len(scheduled.seqs), longest) is not None

    def _run_graph(self, seqs: list[Sequence], inflight_src: list[int]) -> torch.Tensor:
        size = self.block_size
        pos = [s.num_computed_tokens for s in seqs]
        logits, greedy = self.graphs.run(
            input_ids=[0 if src >= 0 else s.token_ids[p] for s, p, src in zip(seqs, pos, inflight_src)],
            positions=pos,
            slot_mapping=[s.block_table[p // size] * size + p % size for s, p in zip(seqs, pos)],
            block_tables=[s.block_table for s in seqs],
            context_lens=[p + 1 for p in pos],
            prev_index=inflight_src,
        )
        self.graph_steps += 1
        return self.sampler.sample(logits, seqs, greedy=greedy)

    def prepare(self, scheduled: ScheduledBatch) -> Batch:
        """The step's Batch in the layout of this runner's attention backend."""
        if self.attention == "triton":
            return self._prepare_paged(scheduled)
        return self._prepare_sdpa(scheduled)

    def _prepare_paged(self, scheduled: ScheduledBatch) -> Batch:
        """Packed metadata, exactly sized (no padding): one host buffer, one non-blocking copy."""
        size = self.block_size
        width = max(-(-(s.num_computed_tokens + n) // size) for s, n in zip(scheduled.seqs, scheduled.num_new_tokens))
        shape = StepShape(scheduled.num_tokens, len(scheduled.seqs), width, sum(scheduled.is_sampled))
        return self.step_buffer.pack(
            shape,
            scheduled.seqs,
            scheduled.num_new_tokens,
            scheduled.is_sampled,
            size,
            self.kv_cache.scratch_block,
            scheduled.inflight_src,
        )

    def _prepare_sdpa(self, scheduled: ScheduledBatch) -> Batch:
        size = self.block_size
        input_ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        logits_rows: list[int] = []
        decode_rows: list[int] = []
        decode_seqs: list[Sequence] = []
        prev_index: list[int] = []
        segments = []
        row = 0
        for seq, num_new, is_sampled, src in zip(
            scheduled.seqs, scheduled.num_new_tokens, scheduled.is_sampled, scheduled.inflight_src
        ):
            start, end = seq.num_computed_tokens, seq.num_computed_tokens + num_new
            table = seq.block_table
            if src >= 0:  # its one input token is still on the device: gathered there (gather_inflight)
                input_ids.append(0)
                prev_index.append(src)
            else:
                input_ids.extend(seq.token_ids[start:end])
                prev_index.extend([-1] * num_new)
            positions.extend(range(start, end))
            slots.extend(table[p // size] * size + p % size for p in range(start, end))
            if num_new == 1:
                decode_rows.append(row)
                decode_seqs.append(seq)
            else:
                context = None if start == 0 else self._context_slots([seq], [end])[0][0]
                segments.append((row, row + num_new, context))
            if is_sampled:
                logits_rows.append(row + num_new - 1)
            row += num_new
        dev = self.device
        decode_slots = decode_mask = rows = None
        if decode_rows:
            rows = torch.tensor(decode_rows, device=dev)
            decode_slots, decode_mask = self._context_slots(
                decode_seqs, [s.num_computed_tokens + 1 for s in decode_seqs]
            )
        return Batch(
            input_ids=torch.tensor(input_ids, device=dev),
            positions=torch.tensor(positions, device=dev),
            slot_mapping=torch.tensor(slots, device=dev),
            logits_rows=torch.tensor(logits_rows, device=dev, dtype=torch.long),
            decode_rows=rows,
            decode_context_slots=decode_slots,
            decode_context_mask=decode_mask,
            prefill_segments=segments,
            prev_index=torch.tensor(prev_index, device=dev) if max(prev_index) >= 0 else None,
        )

    def _context_slots(self, seqs: list[Sequence], lengths: list[int]):
        """Cache slots of positions 0..len-1 of each sequence, padded: ([B, L] slots, [B, L] valid mask)."""
        size = self.block_size
        width = max(-(-n // size) for n in lengths)
        tables = torch.tensor([s.block_table[:width] + [0] * (width - len(s.block_table[:width])) for s in seqs])
        longest = max(lengths)
        pos = torch.arange(longest)
        slots = tables[:, pos // size] * size + pos % size
        mask = pos[None, :] < torch.tensor(lengths)[:, None]
        if len(seqs) == 1 and lengths[0] == longest:
            return slots.to(self.device), None
        return slots.to(self.device), mask.to(self.device)
