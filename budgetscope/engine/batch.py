"""The tensors one forward pass needs to find and write its KV in the paged cache."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(slots=True)
class Batch:
    """A step's tokens, flattened: sequence i owns rows query_starts[i]:query_starts[i+1].

    slot_mapping[r] is the cache slot (block_id * block_size + offset) where row r's K/V goes.
    Single-token sequences ("decode" rows) attend together through decode_context_slots [B, L] with
    decode_context_mask [B, L]; longer ones ("prefill" segments) one by one, each with its own slots.
    """

    input_ids: torch.Tensor  # [N] int64
    positions: torch.Tensor  # [N] int64
    slot_mapping: torch.Tensor  # [N] int64
    logits_rows: torch.Tensor  # [S] rows whose logits are sampled
    decode_rows: torch.Tensor | None  # [B] rows of single-token sequences
    decode_context_slots: torch.Tensor | None  # [B, L] cache slots of their whole context
    decode_context_mask: torch.Tensor | None  # [B, L] True where a slot is part of the context
    prefill_segments: list[tuple[int, int, torch.Tensor | None]]  # (row start, row end, context slots or None)
