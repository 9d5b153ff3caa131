"""Residual add + RMSNorm in one Triton kernel: a layer's two norms become one kernel each instead of ~5.

`add_rms_norm(x, residual, weight, eps)` returns (rms_norm(x + residual) * weight, x + residual). The sum is
rounded to the input dtype first and the norm computed from that, in float32, as the unfused torch ops do.
"""

from __future__ import annotations

import torch

from budgetscope.engine.triton_support import kernel, next_power_of_2, tl


def _add_rms_norm_kernel(
    x_ptr,
    residual_ptr,
    weight_ptr,
    out_ptr,
    sum_ptr,
    stride_x,
    stride_r,
    stride_o,
    stride_s,
    width,
    eps,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    ok = cols < width
    x = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
    r = tl.load(residual_ptr + row * stride_r + cols, mask=ok, other=0.0).to(tl.float32)
    total = (x + r).to(sum_ptr.dtype.element_ty)
    tl.store(sum_ptr + row * stride_s + cols, total, mask=ok)
    h = total.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / width + eps)
    w = tl.load(weight_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, (h * rstd * w).to(out_ptr.dtype.element_ty), mask=ok)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(normed [N, H], x + residual [N, H]) from x, residual [N, H] and weight [H]; one kernel launch."""
    rows, width = x.shape
    assert x.stride(1) == 1 and residual.stride(1) == 1 and weight.is_contiguous()
    out = torch.empty_like(x)
    total = torch.empty_like(x)
    if rows:
        block = next_power_of_2(width)
        kernel(_add_rms_norm_kernel)[(rows,)](
            x,
            residual,
            weight,
            out,
            total,
            x.stride(0),
            residual.stride(0),
            out.stride(0),
            total.stride(0),
            width,
            eps,
            BLOCK=block,
            num_warps=min(max(block // 256, 1), 8),
        )
    return out, total
