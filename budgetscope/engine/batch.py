"""The tensors one forward pass needs to find and write its KV in the paged cache.

Two layouts. The "sdpa" attention backend (the plain-PyTorch path) gets decode rows' gathered context slots and
prefill segments. The "triton" backend (`paged_attention.py`) gets `query_start_loc`, `seq_lens` and
`block_tables`; all of a step's metadata then lives in one int64 buffer (`StepShape`), filled on the host and
copied to the device in one non-blocking copy from pinned memory (`StepBuffer`), every tensor a view of it.

With async scheduling a decode row's input token may still be on the device (sampled by the step in flight):
`prev_index` names its row among that step's sampled ids and `gather_inflight` puts it into `input_ids` inside the
step, from a static buffer, so no host round trip is needed and a CUDA graph can hold the gather.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass(slots=True)
class Batch:
    """A step's tokens, flattened: sequence i owns rows query_start_loc[i]:query_start_loc[i+1].

    slot_mapping[r] is the cache slot (block_id * block_size + offset) where row r's K/V goes.
    sdpa layout: single-token sequences ("decode" rows) attend together through decode_context_slots [B, L] with
    decode_context_mask [B, L]; longer ones ("prefill" segments) one by one, each with its own slots.
    paged layout (block_tables set): one kernel over query_start_loc, seq_lens and block_tables.
    """

    input_ids: torch.Tensor  # [N] int64
    positions: torch.Tensor  # [N] int64
    slot_mapping: torch.Tensor  # [N] int64
    logits_rows: torch.Tensor | None  # [R] rows whose logits are sampled
    decode_rows: torch.Tensor | None = None  # [B] rows of single-token sequences
    decode_context_slots: torch.Tensor | None = None  # [B, L] cache slots of their whole context
    decode_context_mask: torch.Tensor | None = None  # [B, L] True where a slot is part of the context
    prefill_segments: list[tuple[int, int, torch.Tensor | None]] = field(default_factory=list)
    query_start_loc: torch.Tensor | None = None  # [S+1] int64: sequence i's rows start at query_start_loc[i]
    seq_lens: torch.Tensor | None = None  # [S] int64: context incl. this step's tokens
    block_tables: torch.Tensor | None = None  # [S, W] int64: sequence i's cache blocks
    block_size: int = 0  # tokens per block (paged layout)
    prev_index: torch.Tensor | None = None  # [N] int64: row's input among the last step's sampled ids; -1: input_ids


FIELDS = (
    "input_ids",
    "positions",
    "slot_mapping",
    "prev_index",
    "query_start_loc",
    "seq_lens",
    "logits_rows",
    "block_tables",
)


def gather_inflight(input_ids: torch.Tensor, prev_index: torch.Tensor | None, sampled: torch.Tensor) -> torch.Tensor:
    """input_ids with each row whose prev_index is >= 0 replaced by sampled[prev_index] (the previous step's sampled
    id, read where it lies: on the device). Shapes stay static, so a CUDA graph can capture it."""
    if prev_index is None:
        return input_ids
    return torch.where(prev_index >= 0, sampled[prev_index.clamp(min=0)], input_ids)


@dataclass(frozen=True, slots=True)
class StepShape:
    """Sizes of one step's packed metadata: tokens, sequences, block-table width, sampled rows.

    Buffer order (FIELDS): input ids, positions, slots, prev_index [tokens each]; query_start_loc [seqs + 1]; seq_lens [seqs];
    logits rows [logits]; block tables [seqs x width]. Each field starts at an even element (16 bytes), so a
    kernel's pointer alignment, which Triton compiles for, is the same for every shape."""

    tokens: int
    seqs: int
    width: int
    logits: int

    def spans(self) -> dict[str, slice]:
        """Each field's elements in the buffer."""
        t, s = self.tokens, self.seqs
        out, at = {}, 0
        for name, n in zip(FIELDS, (t, t, t, t, s + 1, s, self.logits, s * self.width)):
            out[name] = slice(at, at + n)
            at += n + (n & 1)
        return out

    @property
    def size(self) -> int:
        return self.spans()["block_tables"].stop

    def views(self, buf, block_size: int) -> Batch:
        """A paged Batch whose tensors are slices of buf (host or device)."""
        f = {name: buf[span] for name, span in self.spans().items()}
        f["block_tables"] = f["block_tables"].reshape(self.seqs, self.width)
        return Batch(logits_rows=f.pop("logits_rows"), block_size=block_size, **f)


def pack_step(
    out: np.ndarray,
    shape: StepShape,
    seqs,
    num_new_tokens,
    is_sampled,
    block_size: int,
    scratch_block: int,
    inflight_src=None,
) -> None:
    """Write a step's metadata into out[:shape.size] (int64), padded up to `shape`.

    Tokens beyond the real ones form one padding sequence right after the real sequences: positions 0.., K/V in
    the scratch block, attending only to it. Sequences beyond that have no tokens. Padded logits rows read row 0.
    inflight_src (ScheduledBatch.inflight_src): a sequence whose one input token is still on the device gets input
    id 0 and prev_index its row among the last step's sampled ids; every other row's prev_index is -1.
    """
    b = shape.views(out, block_size)
    t, s = shape.tokens, shape.seqs
    n, real = sum(num_new_tokens), len(seqs)
    q_lens = np.zeros(s, dtype=np.int64)
    q_lens[:real] = num_new_tokens
    starts = np.zeros(s, dtype=np.int64)
    starts[:real] = [seq.num_computed_tokens for seq in seqs]
    if t > n:  # the padding sequence
        q_lens[real] = t - n
    qsl = b.query_start_loc
    qsl[0] = 0
    np.cumsum(q_lens, out=qsl[1:])
    b.seq_lens[:] = starts + q_lens
    tables = b.block_tables
    tables[:] = scratch_block
    for i, seq in enumerate(seqs):
        table = seq.block_table[: shape.width]
        tables[i, : len(table)] = table
    owner = np.repeat(np.arange(s), q_lens)  # sequence of each row
    positions = b.positions
    positions[:] = np.arange(t) - np.repeat(qsl[:-1] - starts, q_lens)
    positions[n:] %= block_size  # padding rows: one block of the scratch block, whatever their number
    b.slot_mapping[:] = tables[owner, positions // block_size] * block_size + positions % block_size
    ids, prev = b.input_ids, b.prev_index
    prev[:] = -1
    row = 0
    for i, (seq, num) in enumerate(zip(seqs, num_new_tokens)):
        if inflight_src is not None and inflight_src[i] >= 0:
            ids[row], prev[row] = 0, inflight_src[i]
        else:
            ids[row : row + num] = seq.token_ids[seq.num_computed_tokens : seq.num_computed_tokens + num]
        row += num
    ids[n:] = 0
    logits = b.logits_rows
    sampled = (qsl[1 : real + 1] - 1)[np.asarray(is_sampled, dtype=bool)] if real else np.zeros(0, dtype=np.int64)
    logits[: len(sampled)] = sampled
    logits[len(sampled) :] = 0


class StepBuffer:
    """Pinned host staging buffers (two, used in turn) and one device buffer for packed step metadata.

    A step fills a host buffer, copies it to the device with one non-blocking copy, and records an event; the
    host buffer is refilled two steps later, after that event (long done by then: the step was waited for).
    On the CPU the host buffer is the batch itself (no copy)."""

    def __init__(self, capacity: int, device: torch.device):
        self.device = device
        self.on_cuda = device.type == "cuda"
        self.capacity = capacity
        self._host = [torch.zeros(capacity, dtype=torch.long, pin_memory=self.on_cuda) for _ in range(2)]
        self._events = [None, None]
        self._turn = 0
        self.dev = torch.zeros(capacity, dtype=torch.long, device=device) if self.on_cuda else None

    def pack(
        self, shape: StepShape, seqs, num_new_tokens, is_sampled, block_size: int, scratch_block: int, inflight_src=None
    ) -> Batch:
        """The step's paged Batch on the device (views of the device buffer at fixed addresses per shape)."""
        if shape.size > self.capacity:  # never within the scheduler's limits; a one-off buffer if it happens
            return StepBuffer(shape.size, self.device).pack(
                shape, seqs, num_new_tokens, is_sampled, block_size, scratch_block, inflight_src
            )
        i, self._turn = self._turn, 1 - self._turn
        host = self._host[i]
        event = self._events[i]
        if event is not None and not event.query():  # query: no wait (and no sync) in the usual case
            event.synchronize()
        pack_step(host.numpy(), shape, seqs, num_new_tokens, is_sampled, block_size, scratch_block, inflight_src)
        if not self.on_cuda:
            return shape.views(host, block_size)
        self.dev[: shape.size].copy_(host[: shape.size], non_blocking=True)
        event = self._events[i] = event or torch.cuda.Event()
        event.record()
        return shape.views(self.dev, block_size)

    def static_views(self, shape: StepShape, block_size: int) -> Batch:
        """The views pack() returns for `shape` on the device (what a CUDA graph captures)."""
        return shape.views(self.dev if self.on_cuda else self._host[0], block_size)
