"""A Llama-style decoder: RMSNorm, rotary positions, grouped-query attention over paged KV, SwiGLU.

Parameter names follow Hugging Face's LlamaForCausalLM, so a checkpoint's state dict loads as is.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from budgetscope.engine.batch import Batch
from budgetscope.engine.model_config import ModelConfig


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps
        self.fused = False  # set by LlamaForCausalLM.use_triton(): residual add + norm in one Triton kernel

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        """rms_norm(x); with `residual`: (rms_norm(x + residual), x + residual)."""
        if residual is None:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        if self.fused and not torch.compiler.is_compiling():  # inductor fuses the torch ops by itself
            from budgetscope.engine.fused_norm import add_rms_norm

            return add_rms_norm(x, residual, self.weight, self.eps)
        total = x + residual
        return F.rms_norm(total, self.weight.shape, self.weight, self.eps), total


class RotaryEmbedding(nn.Module):
    """cos/sin tables for every position, rotate-half convention (as Hugging Face Llama checkpoints)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        dim = config.head_dim
        inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        if config.rope_scaling and config.rope_scaling.get("rope_type", config.rope_scaling.get("type")) == "llama3":
            inv_freq = _llama3_scaled(inv_freq, config.rope_scaling)
        t = torch.arange(config.max_position_embeddings, dtype=torch.float64)
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos().float(), persistent=False)
        self.register_buffer("sin", emb.sin().float(), persistent=False)

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin of the positions, [n, 1, head_dim] in `dtype`: looked up once a forward, used by every layer."""
        return self.cos[positions].unsqueeze(1).to(dtype), self.sin[positions].unsqueeze(1).to(dtype)


def _rope(q: torch.Tensor, k: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]):
    """Rotate q [n, H, D] and k [n, KVH, D] together (one set of kernels for both)."""
    cos, sin = rope
    qk = torch.cat((q, k), dim=1)
    qk = qk * cos + _rotate_half(qk) * sin
    return qk[:, : q.shape[1]], qk[:, q.shape[1] :]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _llama3_scaled(inv_freq: torch.Tensor, scaling: dict) -> torch.Tensor:
    """Llama 3.1 long-context frequency scaling: low frequencies divided by `factor`, a smooth band between."""
    factor = scaling["factor"]
    low, high = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
    old_len = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    smooth = (old_len / wavelen - low) / (high - low)
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    band = (wavelen <= old_len / low) & (wavelen >= old_len / high)
    return torch.where(band, (1 - smooth) * inv_freq / factor + smooth * inv_freq, scaled)


class LlamaAttention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        h, d = config.hidden_size, config.head_dim
        self.q_proj = nn.Linear(h, self.num_heads * d, bias=False)
        self.k_proj = nn.Linear(h, self.num_kv_heads * d, bias=False)
        self.v_proj = nn.Linear(h, self.num_kv_heads * d, bias=False)
        self.o_proj = nn.Linear(self.num_heads * d, h, bias=False)
        self.qkv_weight: torch.Tensor | None = None  # set by fuse(): q, k, v weights as one matrix
        self.fused = False  # set by LlamaForCausalLM.use_triton(): rotary + K/V write in one Triton kernel

    def fuse(self) -> None:
        """One [q; k; v] weight matrix, one GEMM; q/k/v_proj.weight become views of it (same memory, same names)."""
        self.qkv_weight = _fuse(self.q_proj, self.k_proj, self.v_proj)

    def forward(self, x, rope, batch: Batch | None, kv_cache) -> torch.Tensor:
        if self._fused_paged(batch):
            return self._forward_fused(x, rope, batch, kv_cache)
        n, d = x.shape[0], self.head_dim
        if self.qkv_weight is not None:
            q, k, v = F.linear(x, self.qkv_weight).split(
                (self.num_heads * d, self.num_kv_heads * d, self.num_kv_heads * d), dim=-1
            )
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q, k = _rope(q.view(n, self.num_heads, d), k.view(n, self.num_kv_heads, d), rope)
        v = v.view(n, self.num_kv_heads, d)
        if batch is None:
            out = _sdpa(q, k, v, is_causal=True)
        else:
            out = self._paged(q, k, v, batch, kv_cache)
        return self.o_proj(out.reshape(n, self.num_heads * self.head_dim))

    def _fused_paged(self, batch: Batch | None) -> bool:
        """The Triton path: paged layout, fused q/k/v weights, not under torch.compile (inductor fuses by itself)."""
        return (
            self.fused
            and batch is not None
            and batch.block_tables is not None
            and self.qkv_weight is not None
            and not torch.compiler.is_compiling()
        )

    def _forward_fused(self, x, rope, batch: Batch, kv_cache) -> torch.Tensor:
        """qkv GEMM, one kernel for rotary + K/V into the cache, the paged attention kernel, o GEMM."""
        # imported on use: Triton and the kernels 193 ms to import, and only the triton path runs them
        from budgetscope.engine.fused_rope import rope_write_kv
        from budgetscope.engine.paged_attention import paged_attention

        k_cache, v_cache = kv_cache
        q = rope_write_kv(
            F.linear(x, self.qkv_weight), *rope, batch.slot_mapping, k_cache, v_cache, self.num_heads, self.num_kv_heads
        )
        out = paged_attention(
            q, k_cache, v_cache, batch.query_start_loc, batch.seq_lens, batch.block_tables, batch.block_size
        )
        return self.o_proj(out.view(x.shape[0], self.num_heads * self.head_dim))

    def _paged(self, q, k, v, batch: Batch, kv_cache) -> torch.Tensor:
        k_cache, v_cache = kv_cache
        k_cache.index_copy_(0, batch.slot_mapping, k)
        v_cache.index_copy_(0, batch.slot_mapping, v)
        if batch.block_tables is not None:  # the "triton" backend: one kernel reads the pages in place
            from budgetscope.engine.paged_attention import paged_attention

            return paged_attention(
                q, k_cache, v_cache, batch.query_start_loc, batch.seq_lens, batch.block_tables, batch.block_size
            )
        if batch.decode_rows is not None and not batch.prefill_segments:
            return self._decode(q, k_cache, v_cache, batch)
        out = torch.empty_like(q)
        if batch.decode_rows is not None:
            out[batch.decode_rows] = self._decode(q[batch.decode_rows], k_cache, v_cache, batch)
        for start, end, context_slots in batch.prefill_segments:
            if context_slots is None:  # nothing cached before this chunk: its own K/V is the context
                out[start:end] = _sdpa(q[start:end], k[start:end], v[start:end], is_causal=True)
            else:
                ctx, num_new = context_slots.shape[0], end - start
                # query i sits at position ctx - num_new + i and sees keys up to there
                mask = torch.arange(ctx, device=q.device)[None, :] <= (
                    torch.arange(num_new, device=q.device)[:, None] + (ctx - num_new)
                )
                out[start:end] = _sdpa(q[start:end], k_cache[context_slots], v_cache[context_slots], mask=mask)
        return out

    def _decode(self, q, k_cache, v_cache, batch: Batch) -> torch.Tensor:
        """One query row per sequence against its gathered, padded context: [B, H, D]."""
        keys = k_cache[batch.decode_context_slots].transpose(1, 2)  # [B, KVH, L, D]
        values = v_cache[batch.decode_context_slots].transpose(1, 2)
        mask = None if batch.decode_context_mask is None else batch.decode_context_mask[:, None, None, :]
        out = F.scaled_dot_product_attention(q.unsqueeze(2), keys, values, attn_mask=mask, enable_gqa=True)
        return out.squeeze(2)


def _sdpa(q, k, v, is_causal=False, mask=None) -> torch.Tensor:
    """Attention of rows [n, H, D] over keys [ctx, KVH, D]; returns [n, H, D]."""
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1)[None],
        k.transpose(0, 1)[None],
        v.transpose(0, 1)[None],
        attn_mask=mask,
        is_causal=is_causal,
        enable_gqa=True,
    )
    return out[0].transpose(0, 1)


class LlamaMLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.gate_up_weight: torch.Tensor | None = None  # set by fuse()
        self.fused = False  # set by LlamaForCausalLM.use_triton(): SiLU(gate) * up in one Triton kernel

    def fuse(self) -> None:
        self.gate_up_weight = _fuse(self.gate_proj, self.up_proj)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate_up_weight is not None and self.fused and not torch.compiler.is_compiling():
            # imported on use: Triton and the kernel ~190 ms to import, only on the triton path
            from budgetscope.engine.fused_activation import silu_mul

            return self.down_proj(silu_mul(F.linear(x, self.gate_up_weight)))
        if self.gate_up_weight is not None:
            gate, up = F.linear(x, self.gate_up_weight).chunk(2, dim=-1)
            return self.down_proj(F.silu(gate) * up)
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def _fuse(*linears: nn.Linear) -> torch.Tensor:
    """Concatenate the linears' weights (rows) into one tensor and make each weight a view of its rows."""
    fused = torch.cat([lin.weight.data for lin in linears], dim=0)
    row = 0
    for lin in linears:
        rows = lin.weight.shape[0]
        lin.weight.data = fused[row : row + rows]
        row += rows
    return fused


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = LlamaAttention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = LlamaMLP(config)

    def forward(self, x, residual, rope, batch, kv_cache) -> tuple[torch.Tensor, torch.Tensor]:
        """(this layer's MLP output, the residual stream before it); the next norm adds the two (fused)."""
        if residual is None:
            h, residual = self.input_layernorm(x), x
        else:
            h, residual = self.input_layernorm(x, residual)
        h = self.self_attn(h, rope, batch, kv_cache)
        h, residual = self.post_attention_layernorm(h, residual)
        return self.mlp(h), residual


class LlamaModel(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config)

    def forward(self, input_ids, positions, batch=None, kv_caches=None) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        rope = self.rotary_emb(positions, x.dtype)
        residual = None
        for i, layer in enumerate(self.layers):
            x, residual = layer(x, residual, rope, batch, None if kv_caches is None else kv_caches[i])
        return self.norm(x, residual)[0]


class LlamaForCausalLM(nn.Module):
    """forward() gives hidden states of the flattened rows; compute_logits() the next-token logits."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.model = LlamaModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids, positions, batch: Batch | None = None, kv_caches=None) -> torch.Tensor:
        """Hidden states [N, hidden]. Without a batch: one sequence, plain causal attention, no cache."""
        return self.model(input_ids, positions, batch, kv_caches)

    def fuse_projections(self) -> LlamaForCausalLM:
        """Fuse q/k/v and gate/up weights (fewer, larger GEMMs: a decode step's kernel count is its cost on a GPU).
        Parameter names and state dict are unchanged; call after loading weights and moving the model."""
        for layer in self.model.layers:
            layer.self_attn.fuse()
            layer.mlp.fuse()
        return self

    def use_triton(self, enabled: bool = True) -> LlamaForCausalLM:
        """Run the layer's elementwise work as Triton kernels (the "triton" attention backend): each residual add
        with the next RMSNorm, rotary + the K/V cache write, SiLU(gate) * up. A batch-1 decode step is many small
        kernels a layer; each fusion removes launches and a round trip of its tensors through memory."""
        for module in self.modules():
            if isinstance(module, (RMSNorm, LlamaAttention, LlamaMLP)):
                module.fused = enabled
        return self

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()

    def init_random(self, seed: int, std: float = 0.02) -> LlamaForCausalLM:
        """Fill every weight from a fixed seed (norms to one), the same on every machine."""
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, param in self.named_parameters():
                if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
                    param.fill_(1.0)
                else:
                    param.copy_(torch.randn(param.shape, generator=gen, dtype=torch.float32) * std)
        return self
