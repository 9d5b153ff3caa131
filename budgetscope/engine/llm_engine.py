"""The engine: model, KV cache, block manager and scheduler, stepped one batch at a time."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import torch

from budgetscope.engine.block_manager import BlockManager
from budgetscope.engine.checkpoint import load_checkpoint
from budgetscope.engine.cuda_graphs import DecodeGraphs, StepGraphs
from budgetscope.engine.engine_config import EngineConfig
from budgetscope.engine.engine_metrics import EngineMetrics
from budgetscope.engine.frontend import Frontend
from budgetscope.engine.kv_cache import KVCache
from budgetscope.engine.model import LlamaForCausalLM
from budgetscope.engine.model_runner import ModelRunner, PendingTokens
from budgetscope.engine.sampling_params import SamplingParams
from budgetscope.engine.scheduler import ScheduledBatch, Scheduler
from budgetscope.engine.sequence import Sequence
from budgetscope.engine.telemetry import Telemetry

log = logging.getLogger(__name__)


@dataclass(slots=True)
class LaunchedStep:
    """A step between its two halves: launched on the device, its tokens not yet read back."""

    start_ns: int  # Unix-epoch ns the step began
    expired: list[Sequence]  # sequences whose deadline passed at the start of the step
    batch: ScheduledBatch
    pending: PendingTokens | None  # None when nothing was scheduled
    previous: LaunchedStep | None = None  # async: the step in flight when this one launched, finished next
    touched: list[Sequence] = field(default_factory=list)  # got a token or finished before this step launched


class LLMEngine:
    """Not thread-safe: one thread steps it (EngineLoop in the server, the caller offline).

    engine = LLMEngine(EngineConfig(model="tiny"))
    engine.generate(["hello"], SamplingParams(max_tokens=8, temperature=0))
    """

    def __init__(self, config: EngineConfig, telemetry: Telemetry | None = None, metrics: EngineMetrics | None = None):
        self.config = config
        self.telemetry = telemetry or Telemetry(None)
        self.metrics = metrics or EngineMetrics()
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        self.device = resolve_device(config)
        self.dtype = _dtype(config.dtype, self.device)
        self.attention_backend = attention_backend(config, self.device)  # refused before anything loads
        self._adopt_front(Frontend(config, self.telemetry, self.metrics))
        self.model = self._load_model()
        self.kv_cache = KVCache(self.model_config, config.num_kv_blocks, config.block_size, self.dtype, self.device)
        self.block_manager = BlockManager(config.num_kv_blocks, config.block_size, config.enable_prefix_caching)
        self.scheduler = Scheduler(config, self.block_manager)
        if self.attention_backend == "triton":
            self.model.use_triton()
        graphs = None
        if self.device.type == "cuda" and not config.enforce_eager:
            if self.attention_backend == "triton":
                graphs = StepGraphs(
                    self.model,
                    self.kv_cache,
                    self.device,
                    config.max_num_seqs,
                    config.max_num_batched_tokens,
                    self.max_model_len,
                )
            else:
                graphs = DecodeGraphs(
                    self.model,
                    self.kv_cache,
                    self.device,
                    config.max_num_seqs,
                    self.max_model_len,
                    compile=config.compile,
                )
            graphs.capture_all()
        self._inflight: LaunchedStep | None = None  # async: the step launched last, its tokens not yet read back
        self.runner = ModelRunner(
            self.model,
            self.kv_cache,
            self.device,
            graphs,
            attention=self.attention_backend,
            max_num_seqs=config.max_num_seqs,
            max_num_batched_tokens=config.max_num_batched_tokens,
            max_model_len=self.max_model_len,
        )
        # async scheduling: step N+1 is scheduled and launched before step N's tokens are read back. None (auto)
        # is off here: the engine process of `engine serve` resolves it (on with CUDA) before it builds the engine
        self.async_scheduling = bool(config.async_scheduling)
        self.runner.keep_sampled = self.async_scheduling
        log.info(
            "engine: %s (%.1fM params) on %s/%s, %d KV blocks of %d tokens (%.1f MiB), %s attention, %s scheduling",
            self.model_name,
            self.model_config.num_parameters / 1e6,
            self.device,
            self.dtype,
            config.num_kv_blocks,
            config.block_size,
            self.kv_cache.num_bytes / 2**20,
            self.attention_backend,
            "async" if self.async_scheduling else "sync",
        )

    def _adopt_front(self, front: Frontend) -> None:
        """The request-facing half, and what the engine reads off it: the model's config and name, the tokenizer,
        the EOS ids, the context length."""
        self.front = front
        self.model_config = front.model_config
        self.model_name = front.model_name
        self.tokenizer = front.tokenizer
        self.eos_token_ids = front.eos_token_ids
        self.max_model_len = front.max_model_len

    def _load_model(self) -> LlamaForCausalLM:
        torch.manual_seed(self.config.seed)
        with torch.device("cpu"):
            model = LlamaForCausalLM(self.model_config)
        if self.config.checkpoint:
            load_checkpoint(model, self.config.checkpoint)
        else:
            model.init_random(self.config.seed)
        return model.to(device=self.device, dtype=self.dtype).eval().fuse_projections()

    # -- requests ---------------------------------------------------------------------------------
    def make_sequence(self, prompt_token_ids: list[int], params: SamplingParams, **fields) -> Sequence:
        """A validated Sequence (Frontend.make_sequence); RequestError(400) when a limit is broken."""
        return self.front.make_sequence(prompt_token_ids, params, **fields)

    def validate(self, prompt_token_ids: list[int], params: SamplingParams) -> None:
        self.front.validate(prompt_token_ids, params)

    def add(self, seq: Sequence) -> None:
        """Enqueue seq now (marks the queue stage)."""
        seq.trace.mark("queue")
        self.scheduler.add(seq)

    def abort(self, seq: Sequence, outcome: str = "cancelled", reason: str = "abort") -> bool:
        """Finish seq now and free its blocks; False when it had already finished."""
        if seq.is_finished:
            return False
        self.scheduler.finish(seq, reason, outcome)
        return True

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work or self._inflight is not None

    @property
    def runs_behind_host(self) -> bool:
        """Whether `launch_step` returns before the step is computed (CUDA): then the host's work overlaps it."""
        return self.device.type == "cuda"

    def discard_inflight(self) -> None:
        """Forget the step in flight without reading its tokens (after a failed step: its requests are failed)."""
        self._inflight = None

    # -- one step -------------------------------------------------------------------------------
    def step(self) -> list[Sequence]:
        """Run one batch. Returns sequences that got a token or finished; their on_output was called.

        With async scheduling this launches step N+1 and finishes step N (the one launched by the call before)."""
        return self.finish_step(self.launch_step())

    def launch_step(self) -> LaunchedStep:
        """First half of a step: expire deadlines, schedule, and queue the batch on the device (ModelRunner.launch);
        returns at once on a GPU. finish_step() must follow before the next launch_step().

        Async scheduling: the batch is scheduled around the step still in flight (its sampled tokens counted, read
        on the device) and that step is finished by the finish_step() that follows, while this one stays in
        flight. Where that schedule would have to preempt, the step in flight is finished first and the batch is
        scheduled again synchronously (its touched sequences ride on the returned step)."""
        start_ns = time.time_ns()
        expired = self.scheduler.expire(start_ns)
        for seq in expired:
            seq.trace.mark("postprocess")
        previous, self._inflight = self._inflight, None
        batch = self.scheduler.schedule(may_preempt=previous is None)
        touched = []
        if batch.needs_sync:
            touched = self._complete(previous)
            previous = None
            batch = self.scheduler.schedule()
        pending = None
        if not batch.is_empty:
            pending = self.runner.launch(batch)
            self.scheduler.launched(batch)
        return LaunchedStep(start_ns, expired, batch, pending, previous, touched)

    def finish_step(self, launched: LaunchedStep) -> list[Sequence]:
        """Second half: wait for the sampled tokens, append them, finish what ended, record the step. Returns the
        sequences that got a token or finished; their on_output was called.

        Async scheduling: finishes the step in flight when `launched` was launched, and keeps `launched` in flight
        (finished by the next call), unless it is empty."""
        touched = launched.expired + launched.touched
        if launched.previous is not None:
            touched += self._complete(launched.previous)
        if self.async_scheduling and launched.pending is not None:
            self._inflight = launched
        else:
            touched += self._complete(launched)
        for seq in touched:
            if seq.on_output is not None:
                seq.on_output(seq)
        return touched

    def _complete(self, launched: LaunchedStep) -> list[Sequence]:
        """Read a launched step's tokens back and account them (append, finish, metrics, the engine.step record).
        Returns the sequences that got a token or finished; on_output is the caller's to call."""
        if launched.pending is None:
            return []
        batch = launched.batch
        emitted, finished = self.scheduler.postprocess(batch, launched.pending.wait(), self.eos_token_ids)
        now_ns = time.time_ns()
        for seq in emitted:
            self.metrics.observe_token(seq, now_ns)
            seq.first_token_ns = seq.first_token_ns or now_ns
            seq.last_token_ns = now_ns
            seq.trace.token()
        for seq in finished:
            seq.trace.mark("postprocess")
        self.metrics.steps += 1
        self.telemetry.step(
            start_ns=launched.start_ns,
            end_ns=time.time_ns(),
            batch_size=len(batch.seqs),
            prefill_tokens=batch.num_prefill_tokens,
            decode_seqs=batch.num_decode_seqs,
            kv_blocks_used=self.block_manager.num_used_blocks,
            kv_blocks_total=self.block_manager.num_blocks,
            queue_depth=self.scheduler.num_waiting,
            preempted=len(batch.preempted),
            max_seqs=self.config.max_num_seqs,
            token_budget=self.config.max_num_batched_tokens,
        )
        return emitted

    # -- offline ----------------------------------------------------------------------------------
    def generate(
        self, prompts: list[str] | list[list[int]], params: SamplingParams | list[SamplingParams], tier: str = "default"
    ) -> list[Sequence]:
        """Run prompts (text or token ids) to completion with full request tracing; returns the sequences."""
        params_list = params if isinstance(params, list) else [params] * len(prompts)
        seqs = []
        for prompt, p in zip(prompts, params_list):
            ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
            trace = self.telemetry.start_request(
                model=self.model_name,
                tier=tier,
                tenant=None,
                traceparent=None,
                request_id=None,
                operation="text_completion",
            )
            seq = self.make_sequence(ids, p, tier=tier, trace=trace)
            self.add(seq)
            seqs.append(seq)
        while self.has_work:
            self.step()
        for seq in seqs:
            self.finish_trace(seq)
        return seqs

    def finish_trace(self, seq: Sequence, outcome: str | None = None) -> None:
        """End seq's request trace and count it in the metrics (once the response is complete)."""
        self.front.finish_trace(seq, outcome)


def resolve_device(config: EngineConfig) -> torch.device:
    """The device config names; "auto": cuda when available, else cpu."""
    if config.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(config.device)


def attention_backend(config: EngineConfig, device: torch.device) -> str:
    """ "triton" or "sdpa" for this config on this device; ValueError when "triton" cannot run here.

    auto: triton on CUDA when Triton imports, unless --compile (which compiles the sdpa decode graphs);
    sdpa elsewhere (a CPU engine never imports Triton)."""
    choice = config.attention_backend
    if choice == "sdpa" or (choice == "auto" and (device.type != "cuda" or config.compile)):
        return "sdpa"
    # imported on use: triton 496 ms to import
    from budgetscope.engine import triton_support

    if choice == "auto":
        return "triton" if triton_support.available() else "sdpa"
    if config.compile:
        raise ValueError("--compile works with --attention sdpa only")
    if not triton_support.available():
        raise ValueError("--attention triton needs the triton package (pip install triton)")
    if not triton_support.usable_on(device):
        raise ValueError("--attention triton needs a CUDA device (or TRITON_INTERPRET=1, Triton's CPU interpreter)")
    return "triton"


def _dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]
