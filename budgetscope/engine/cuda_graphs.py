"""Steps replayed as CUDA graphs: one launch a step instead of ~35 kernel launches a layer.

Two kinds, one per attention backend. `StepGraphs` ("triton" backend) holds every step — decode rows and
prefill chunks alike — since its attention is one kernel whose shapes are only (tokens, sequences): a step is
padded to a bucket of tokens (`token_buckets`) and a fixed number of sequences (`max_seqs` + one padding
sequence), its metadata packed in one buffer (`batch.StepBuffer`). `DecodeGraphs` ("sdpa" backend, below) holds
decode-only steps, whose gathered context also needs a context-length bucket; prefill and mixed steps run eager.

At batch 1 a `1b` decode step reads ~2 GB of weights, ~0.7 ms of HBM time on an H100, while launching its ~560
kernels one by one from Python costs several ms: eager decode leaves the GPU idle most of the step. A CUDA graph
records the launches once and replays them in one call. Graphs need fixed shapes and fixed addresses, so a step is
padded to a *bucket* (batch size from `batch_buckets`, context length up to a multiple of `context_step`) and its
inputs are copied into that bucket's static buffers:

- the decode tokens, their positions and the slots where their K/V go (`slot_mapping`);
- each sequence's block table (padded with the KV cache's *scratch block*) and its context length.

The context's cache slots and the attention mask are computed from the block tables inside the graph. Padded rows
write their K/V into the scratch block (never owned by a sequence: `KVCache.scratch_block`) and attend to one
scratch slot, so they cannot disturb a real sequence; their logits are dropped. Prefill and mixed steps run eager.

`capture=False` runs the same padded, static-buffer forward without a graph (CPU, tests): it checks the padding
on any machine; `tests/test_engine_cuda_graphs.py` compares both with the eager path.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import torch

from budgetscope.engine.batch import Batch, StepBuffer, StepShape, gather_inflight
from budgetscope.engine.kv_cache import KVCache
from budgetscope.engine.model import LlamaForCausalLM

log = logging.getLogger(__name__)

CONTEXT_STEP = 256  # tokens: context lengths are padded up to a multiple of this


def batch_buckets(max_batch: int) -> list[int]:
    """1, 2, 4, 8, then steps of 8 up to 32, of 16 beyond; the last is max_batch itself."""
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b = b * 2 if b < 8 else b + (8 if b < 32 else 16)
    return out + [max_batch]


def token_buckets(max_seqs: int, max_tokens: int) -> list[int]:
    """Token counts a StepGraphs step is padded to: batch_buckets up to max_seqs (decode-only steps), then
    multiples of 64 up to 512 and of 256 beyond; the last is max_tokens itself."""
    out = batch_buckets(min(max_seqs, max_tokens))
    while out[-1] < max_tokens:
        t = out[-1]
        out.append(min((t // 64 + 1) * 64 if t < 512 else (t // 256 + 1) * 256, max_tokens))
    return out


@dataclass(slots=True)
class _StepGraph:
    batch: Batch  # static views of the device buffer for this bucket's shape
    logits: torch.Tensor  # [max_seqs, vocab] float32, written by the replay
    greedy: torch.Tensor  # [max_seqs] their argmax
    graph: torch.cuda.CUDAGraph


class StepGraphs:
    """Every step (decode, prefill, mixed) padded to a token bucket, replayed from CUDA graphs when `capture`.

    Shapes: `tokens` from token_buckets, max_seqs + 1 sequences (the last real one is followed by one padding
    sequence that owns the padding tokens: K/V into the scratch block, attention over it alone), block tables of
    `width` = max(max_model_len, max_tokens) / block_size entries, max_seqs logits rows. `capture=False` runs the
    same padded forward without a graph (CPU tests, under Triton's interpreter)."""

    def __init__(
        self,
        model: LlamaForCausalLM,
        kv_cache: KVCache,
        device: torch.device,
        max_seqs: int,
        max_tokens: int,
        max_model_len: int,
        capture: bool | None = None,
    ):
        self.model = model
        self.kv_cache = kv_cache
        self.device = device
        self.block_size = kv_cache.block_size
        self.capture = device.type == "cuda" if capture is None else capture
        self.max_seqs = max_seqs
        self.sizes = token_buckets(max_seqs, max_tokens)
        self.width = -(-max(max_model_len, max_tokens) // self.block_size)
        self.buffer = StepBuffer(self.shape(self.sizes[-1]).size, device)
        # the last step's sampled ids (ModelRunner copies them here): a static buffer the captured gather reads
        self.sampled = torch.zeros(max_seqs, dtype=torch.long, device=device)
        self._graphs: dict[int, _StepGraph] = {}
        self._pool = None
        self.capture_s = 0.0

    def shape(self, tokens: int) -> StepShape:
        return StepShape(tokens, self.max_seqs + 1, self.width, self.max_seqs)

    def bucket(self, num_tokens: int, num_seqs: int) -> int | None:
        """The padded token count of a step of num_tokens tokens over num_seqs sequences; None: run it eager."""
        if num_seqs > self.max_seqs or num_tokens > self.sizes[-1]:
            return None
        return next(t for t in self.sizes if t >= num_tokens)

    def _forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        input_ids = gather_inflight(batch.input_ids, batch.prev_index, self.sampled)
        hidden = self.model(input_ids, batch.positions, batch, self.kv_cache.layers)
        logits = self.model.compute_logits(hidden[batch.logits_rows])
        return logits, logits.argmax(dim=-1)

    @torch.inference_mode()
    def capture_all(self) -> int:
        """Capture every bucket's graph now (engine start): the Triton kernels compile during the warm-up."""
        if not self.capture:
            return 0
        t0 = time.perf_counter()
        for tokens in reversed(self.sizes):  # largest first: the smaller graphs reuse its memory in the pool
            self._get(tokens)
        self.capture_s = time.perf_counter() - t0
        log.info(
            "step CUDA graphs: %d captured (tokens %s, %d sequences) in %.1f s",
            len(self._graphs),
            self.sizes,
            self.max_seqs,
            self.capture_s,
        )
        return len(self._graphs)

    def _get(self, tokens: int) -> _StepGraph:
        g = self._graphs.get(tokens)
        if g is not None:
            return g
        shape = self.shape(tokens)
        scratch = self.kv_cache.scratch_block
        self.buffer.pack(shape, [], [], [], self.block_size, scratch)  # all padding: safe to run
        batch = self.buffer.static_views(shape, self.block_size)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):  # warm-up: Triton compiles, cuBLAS picks its kernels
            for _ in range(2):
                self._forward(batch)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            logits, greedy = self._forward(batch)
        g = self._graphs[tokens] = _StepGraph(batch, logits, greedy, graph)
        return g

    def run(
        self, seqs, num_new_tokens: list[int], is_sampled: list[bool], inflight_src: list[int] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits [R, vocab] float32, their argmax [R]) of the R sampled sequences; every token's K/V is cached.
        inflight_src: as ScheduledBatch's (inputs gathered from `self.sampled`)."""
        tokens = self.bucket(sum(num_new_tokens), len(seqs))
        shape = self.shape(tokens)
        rows = sum(is_sampled)
        scratch = self.kv_cache.scratch_block
        if self.capture:
            g = self._get(tokens)
            self.buffer.pack(shape, seqs, num_new_tokens, is_sampled, self.block_size, scratch, inflight_src)
            g.graph.replay()
            return g.logits[:rows], g.greedy[:rows]
        batch = self.buffer.pack(shape, seqs, num_new_tokens, is_sampled, self.block_size, scratch, inflight_src)
        logits, greedy = self._forward(batch)
        return logits[:rows], greedy[:rows]

    @property
    def num_graphs(self) -> int:
        return len(self._graphs)


@dataclass(slots=True)
class _Static:
    """One bucket's fixed-address inputs and outputs.

    Every input is a view of one int64 device buffer, filled from one pinned host buffer by a single copy a step
    (each CUDA call costs host time: a step makes three — this copy, the replay, the read-back of the ids)."""

    batch: int
    context: int
    host: torch.Tensor  # [5b + b * width] int64, pinned on CUDA
    dev: torch.Tensor  # the same on the device; the views below are slices of it
    input_ids: torch.Tensor  # [b]
    positions: torch.Tensor  # [b]
    slot_mapping: torch.Tensor  # [b]
    context_lens: torch.Tensor  # [b]
    prev_index: torch.Tensor  # [b]: the row's input among the last step's sampled ids; -1: input_ids
    block_tables: torch.Tensor  # [b, context / block_size]
    copied: torch.cuda.Event | None = None  # recorded behind the last host-to-device copy of `host`
    logits: torch.Tensor | None = None  # [b, vocab] float32, written by the forward
    greedy: torch.Tensor | None = None  # [b] argmax of the logits, computed in the graph
    graph: torch.cuda.CUDAGraph | None = None


class DecodeGraphs:
    """Padded decode steps, replayed from CUDA graphs when `capture` (the default on CUDA)."""

    def __init__(
        self,
        model: LlamaForCausalLM,
        kv_cache: KVCache,
        device: torch.device,
        max_batch: int,
        max_context: int,
        capture: bool | None = None,
        context_step: int = CONTEXT_STEP,
        compile: bool = False,
    ):
        self.model = model
        self.kv_cache = kv_cache
        self.device = device
        self.block_size = kv_cache.block_size
        self.capture = device.type == "cuda" if capture is None else capture
        step = -(-context_step // self.block_size) * self.block_size
        self.context_step = step
        self.max_context = -(-max_context // step) * step
        self.batch_sizes = batch_buckets(max_batch)
        self.max_batch = max_batch
        self._static: dict[tuple[int, int], _Static] = {}
        self._pool = None
        self.capture_s = 0.0  # time spent capturing graphs (engine start)
        # the last step's sampled ids (ModelRunner copies them here): a static buffer the captured gather reads
        self.sampled = torch.zeros(max_batch, dtype=torch.long, device=device)
        # torch.compile (inductor) fuses the elementwise work of a layer (norms, rotary, SiLU, residuals) into a
        # few kernels; shapes are symbolic (dynamic=True), so every bucket shares one compiled graph (two: batch 1
        # is specialised). Off by default: it costs a minute or more at engine start.
        self.compiled = compile
        self._step = torch.compile(self._forward_tensors, dynamic=True) if compile else self._forward_tensors

    # -- shapes ----------------------------------------------------------------------------------------------
    def bucket(self, batch: int, context: int) -> tuple[int, int] | None:
        """The (batch, context) bucket a decode step of `batch` rows and longest context `context` runs in."""
        if batch > self.max_batch or context > self.max_context:
            return None
        b = next(x for x in self.batch_sizes if x >= batch)
        return b, -(-context // self.context_step) * self.context_step

    def _buffers(self, b: int, length: int) -> _Static:
        width = length // self.block_size
        host = torch.zeros(5 * b + b * width, dtype=torch.long, pin_memory=self.device.type == "cuda")
        dev = torch.zeros_like(host, device=self.device)
        st = _Static(
            b,
            length,
            host,
            dev,
            input_ids=dev[:b],
            positions=dev[b : 2 * b],
            slot_mapping=dev[2 * b : 3 * b],
            context_lens=dev[3 * b : 4 * b],
            prev_index=dev[4 * b : 5 * b],
            block_tables=dev[5 * b :].view(b, width),
        )
        self._fill(st, [], [], [], [], [], [])  # every row padding: safe to run during warm-up and capture
        st.dev.copy_(st.host)
        return st

    def _fill(self, st: _Static, input_ids, positions, slot_mapping, block_tables, context_lens, prev_index) -> None:
        """Write one step's inputs, padded to the bucket, into the pinned host buffer (once its last copy is done:
        with async scheduling the step before may not have been waited for)."""
        if st.copied is not None:
            st.copied.synchronize()
        b, n, width = st.batch, len(input_ids), st.context // self.block_size
        scratch = self.kv_cache.scratch_block
        h = st.host.numpy()
        for k, (values, pad) in enumerate(
            (
                (input_ids, 0),
                (positions, 0),
                (slot_mapping, scratch * self.block_size),
                (context_lens, 1),
                (prev_index or [-1] * n, -1),
            )
        ):
            h[k * b : k * b + n] = values
            h[k * b + n : (k + 1) * b] = pad
        tables = h[5 * b :].reshape(b, width)
        tables[:] = scratch
        for i, t in enumerate(block_tables):
            m = min(len(t), width)
            tables[i, :m] = t[:m]

    # -- the forward every bucket runs ---------------------------------------------------------------------
    def _forward(self, st: _Static) -> torch.Tensor:
        return self._step(
            st.input_ids, st.positions, st.slot_mapping, st.block_tables, st.context_lens, st.prev_index, self.sampled
        )

    def _forward_tensors(
        self, input_ids, positions, slot_mapping, block_tables, context_lens, prev_index, sampled
    ) -> torch.Tensor:
        input_ids = gather_inflight(input_ids, prev_index, sampled)
        size = self.block_size
        pos = torch.arange(block_tables.shape[1] * size, device=input_ids.device)
        slots = block_tables[:, pos // size] * size + pos % size  # [b, L]
        mask = pos[None, :] < context_lens[:, None]  # [b, L]; padded rows see one scratch slot
        batch = Batch(
            input_ids=input_ids,
            positions=positions,
            slot_mapping=slot_mapping,
            logits_rows=None,
            decode_rows=positions,
            decode_context_slots=slots,
            decode_context_mask=mask,
            prefill_segments=[],
        )
        hidden = self.model(input_ids, positions, batch, self.kv_cache.layers)
        return self.model.compute_logits(hidden)

    @torch.inference_mode()
    def capture_all(self) -> int:
        """Capture every bucket's graph now (engine start), so that no request pays for a capture."""
        if not self.capture:
            return 0
        t0 = time.perf_counter()
        try:
            self._capture_buckets()
        except Exception as e:  # noqa: BLE001 - a compiler failure must not stop the engine: plain graphs instead
            if not self.compiled:
                raise
            log.warning("torch.compile failed (%s: %s); capturing uncompiled graphs", type(e).__name__, e)
            self.compiled, self._step = False, self._forward_tensors
            self._static.clear()
            self._capture_buckets()
        self.capture_s = time.perf_counter() - t0
        log.info(
            "decode CUDA graphs: %d captured (batch %s, context to %d by %d) in %.1f s",
            len(self._static),
            self.batch_sizes,
            self.max_context,
            self.context_step,
            self.capture_s,
        )
        return len(self._static)

    def _capture_buckets(self) -> None:
        for b in self.batch_sizes:
            for length in range(self.context_step, self.max_context + 1, self.context_step):
                self._get(b, length)

    def _get(self, b: int, length: int) -> _Static:
        st = self._static.get((b, length))
        if st is not None:
            return st
        st = self._buffers(b, length)
        if self.capture:
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):  # warm-up on a side stream (cuBLAS workspaces, SDPA kernel choice)
                for _ in range(2):
                    self._forward(st)
            torch.cuda.current_stream(self.device).wait_stream(side)
            st.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(st.graph, pool=self._pool):
                st.logits = self._forward(st)
                st.greedy = st.logits.argmax(dim=-1)
        self._static[(b, length)] = st
        return st

    # -- one step ----------------------------------------------------------------------------------------------
    def run(
        self,
        input_ids: list[int],
        positions: list[int],
        slot_mapping: list[int],
        block_tables: list[list[int]],
        context_lens: list[int],
        prev_index: list[int] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits [B, vocab] float32, their argmax [B]) of one decode step of B sequences; its K/V land in the cache.
        prev_index[i] >= 0: row i's input is that row of the last step's sampled ids (`self.sampled`), not input_ids."""
        n = len(input_ids)
        b, length = self.bucket(n, max(context_lens))
        st = self._get(b, length)
        self._fill(st, input_ids, positions, slot_mapping, block_tables, context_lens, prev_index)
        st.dev.copy_(st.host, non_blocking=True)  # pinned: asynchronous; the next fill of this bucket waits for it
        if self.device.type == "cuda":
            st.copied = st.copied or torch.cuda.Event()
            st.copied.record()
        if st.graph is not None:
            st.graph.replay()
            return st.logits[:n], st.greedy[:n]
        logits = self._forward(st)
        return logits[:n], logits[:n].argmax(dim=-1)

    @property
    def num_graphs(self) -> int:
        return sum(1 for st in self._static.values() if st.graph is not None)
