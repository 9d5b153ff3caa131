"""The paged KV storage: per layer, one K and one V tensor of num_blocks * block_size slots."""

from __future__ import annotations

import torch

from budgetscope.engine.model_config import ModelConfig


class KVCache:
    """Slot s of block b is row b * block_size + s; the block manager decides which blocks a sequence owns.

    One block more than `num_blocks` is allocated: the *scratch block* (`scratch_block`), which the block manager
    never hands out. Padded rows of a CUDA-graph decode step write their K/V there (`cuda_graphs.py`)."""

    def __init__(self, config: ModelConfig, num_blocks: int, block_size: int, dtype: torch.dtype, device):
        shape = ((num_blocks + 1) * block_size, config.num_key_value_heads, config.head_dim)
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.scratch_block = num_blocks
        self.layers = [
            (torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
            for _ in range(config.num_hidden_layers)
        ]

    @property
    def num_bytes(self) -> int:
        k, _ = self.layers[0]
        return 2 * len(self.layers) * k.numel() * k.element_size()

    def __getitem__(self, layer: int):
        return self.layers[layer]
