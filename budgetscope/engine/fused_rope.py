"""Rotary positions of q and k and the write of k and v into the paged KV cache, in one Triton kernel.

`rope_write_kv(qkv, cos, sin, slot_mapping, k_cache, v_cache, num_heads, num_kv_heads)` takes the fused q/k/v
GEMM's output [N, (H + 2 KVH) * D], rotates q in place (rotate-half convention, as `model._rope`), and writes the
rotated k and the plain v of token i into cache slot `slot_mapping[i]`. It returns q as [N, H, D] (a view of
qkv). In torch ops that is ~6 elementwise kernels for the rotation (cat, mul, neg, cat, mul, add) and two
`index_copy_` launches; here one program a token does all of it, reading each element once.

cos/sin are the model's per-step lookups ([N, 1, D] or [N, D], the two halves equal); the rotation is computed
in float32 and rounded once to the input dtype (the torch ops round after each op: a difference of an ulp).
Nothing is read back on the host and the grid is the token count, so a CUDA graph holds the launch.
"""

from __future__ import annotations

import torch

from budgetscope.engine.triton_support import kernel, next_power_of_2, tl


def _rope_write_kv_kernel(
    qkv_ptr,
    cos_ptr,
    sin_ptr,
    slot_ptr,
    k_cache_ptr,
    v_cache_ptr,
    stride_t,
    stride_c,
    stride_s,
    stride_ks,
    stride_kh,
    stride_vs,
    stride_vh,
    HEADS: tl.constexpr,
    KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HALF: tl.constexpr,
    HEADS_PAD: tl.constexpr,
    KV_HEADS_PAD: tl.constexpr,
    HALF_PAD: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    dims = tl.arange(0, HALF_PAD)
    dim_ok = dims < HALF
    cos = tl.load(cos_ptr + token * stride_c + dims, mask=dim_ok, other=0.0).to(tl.float32)[None, :]
    sin = tl.load(sin_ptr + token * stride_s + dims, mask=dim_ok, other=0.0).to(tl.float32)[None, :]
    row = qkv_ptr + token * stride_t

    # q: rotated in place
    heads = tl.arange(0, HEADS_PAD)
    ok = (heads < HEADS)[:, None] & dim_ok[None, :]
    first = row + heads[:, None] * HEAD_DIM + dims[None, :]
    x1 = tl.load(first, mask=ok, other=0.0).to(tl.float32)
    x2 = tl.load(first + HALF, mask=ok, other=0.0).to(tl.float32)
    tl.store(first, (x1 * cos - x2 * sin).to(qkv_ptr.dtype.element_ty), mask=ok)
    tl.store(first + HALF, (x2 * cos + x1 * sin).to(qkv_ptr.dtype.element_ty), mask=ok)

    # k: rotated into its cache slot; v: copied into its slot
    slot = tl.load(slot_ptr + token).to(tl.int64)
    kv_heads = tl.arange(0, KV_HEADS_PAD)
    ok = (kv_heads < KV_HEADS)[:, None] & dim_ok[None, :]
    first = row + (HEADS + kv_heads[:, None]) * HEAD_DIM + dims[None, :]
    x1 = tl.load(first, mask=ok, other=0.0).to(tl.float32)
    x2 = tl.load(first + HALF, mask=ok, other=0.0).to(tl.float32)
    k_out = k_cache_ptr + slot * stride_ks + kv_heads[:, None] * stride_kh + dims[None, :]
    tl.store(k_out, (x1 * cos - x2 * sin).to(k_cache_ptr.dtype.element_ty), mask=ok)
    tl.store(k_out + HALF, (x2 * cos + x1 * sin).to(k_cache_ptr.dtype.element_ty), mask=ok)
    v_in = first + KV_HEADS * HEAD_DIM
    v_out = v_cache_ptr + slot * stride_vs + kv_heads[:, None] * stride_vh + dims[None, :]
    tl.store(v_out, tl.load(v_in, mask=ok, other=0.0), mask=ok)
    tl.store(v_out + HALF, tl.load(v_in + HALF, mask=ok, other=0.0), mask=ok)


def rope_write_kv(
    qkv: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
) -> torch.Tensor:
    """Rotate q in qkv [N, (H + 2 KVH) * D] in place, write rotated k and v to the caches [slots, KVH, D] at
    slot_mapping [N]; returns q [N, H, D] (a view of qkv). One kernel launch (none when N = 0)."""
    tokens, width = qkv.shape
    dim = k_cache.shape[2]
    assert width == (num_heads + 2 * num_kv_heads) * dim and dim % 2 == 0 and qkv.stride(1) == 1
    assert k_cache.stride(2) == 1 and v_cache.stride(2) == 1 and cos.shape[-1] == dim and cos.stride(-1) == 1
    if tokens:
        kernel(_rope_write_kv_kernel)[(tokens,)](
            qkv,
            cos,
            sin,
            slot_mapping,
            k_cache,
            v_cache,
            qkv.stride(0),
            cos.stride(0),
            sin.stride(0),
            *k_cache.stride()[:2],
            *v_cache.stride()[:2],
            HEADS=num_heads,
            KV_HEADS=num_kv_heads,
            HEAD_DIM=dim,
            HALF=dim // 2,
            HEADS_PAD=next_power_of_2(num_heads),
            KV_HEADS_PAD=next_power_of_2(num_kv_heads),
            HALF_PAD=next_power_of_2(dim // 2),
            num_warps=4,
        )
    return qkv[:, : num_heads * dim].view(tokens, num_heads, dim)
