"""SiLU(gate) · up in one Triton kernel, read straight from the fused gate/up GEMM's output.

`silu_mul(gate_up)` takes [N, 2I] (gate in the first I columns, up in the last I, as `LlamaMLP.gate_up_weight`
lays them out) and returns [N, I]: one launch instead of the two (silu, mul) of the torch ops, and no
intermediate [N, I] tensor written and read back. SiLU is computed in float32 and rounded to the input dtype
before the product, as torch's `F.silu(gate) * up` rounds it.
"""

from __future__ import annotations

import torch

from budgetscope.engine.triton_support import kernel, tl

BLOCK = 1024  # columns a program takes: 8 programs a row for the `1b` MLP (I = 8192)


def _silu_mul_kernel(gate_up_ptr, out_ptr, stride_in, stride_out, width, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < width
    gate = tl.load(gate_up_ptr + row * stride_in + cols, mask=ok, other=0.0).to(tl.float32)
    up = tl.load(gate_up_ptr + row * stride_in + width + cols, mask=ok, other=0.0).to(tl.float32)
    silu = (gate / (1.0 + tl.exp(-gate))).to(out_ptr.dtype.element_ty).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (silu * up).to(out_ptr.dtype.element_ty), mask=ok)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate_up[:, :I]) * gate_up[:, I:] as [N, I] in gate_up's dtype; one kernel launch (none when N = 0)."""
    rows, double = gate_up.shape
    assert double % 2 == 0 and gate_up.stride(1) == 1
    width = double // 2
    out = torch.empty((rows, width), dtype=gate_up.dtype, device=gate_up.device)
    if rows:
        kernel(_silu_mul_kernel)[(rows, -(-width // BLOCK))](
            gate_up, out, gate_up.stride(0), out.stride(0), width, BLOCK=BLOCK, num_warps=4
        )
    return out
