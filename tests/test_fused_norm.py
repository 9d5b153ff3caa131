"""The fused residual-add + RMSNorm kernel equals the torch ops it replaces (CPU: Triton's interpreter)."""

from __future__ import annotations

import pytest

from triton_setup import kernel_device

DEVICE = kernel_device()
torch = pytest.importorskip("torch")

from budgetscope.engine.fused_norm import add_rms_norm
from budgetscope.engine.model import RMSNorm


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 2e-3)])
@pytest.mark.parametrize("rows,width", [(5, 256), (3, 200), (0, 64)])
def test_add_rms_norm_matches_torch(dtype, tol, rows, width):
    gen = torch.Generator().manual_seed(rows * width)
    x, residual = (torch.randn(rows, width, generator=gen).to(DEVICE, dtype) for _ in range(2))
    weight = (1 + 0.1 * torch.randn(width, generator=gen)).to(DEVICE, dtype)
    normed, total = add_rms_norm(x, residual, weight, 1e-5)
    want_total = x + residual
    want = torch.nn.functional.rms_norm(want_total.float(), (width,), weight.float(), 1e-5)
    torch.testing.assert_close(total, want_total, rtol=0, atol=0)
    torch.testing.assert_close(normed.float(), want, rtol=tol, atol=tol)


def test_rmsnorm_module_with_residual_gives_the_sum_and_its_norm():
    """The model's RMSNorm(x, residual) (torch ops here) returns what the fused kernel returns."""
    norm = RMSNorm(64, 1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 1.5, 64))
    x, residual = torch.randn(4, 64), torch.randn(4, 64)
    normed, total = norm(x, residual)
    torch.testing.assert_close(total, x + residual)
    torch.testing.assert_close(normed, norm(x + residual))
    kernel_normed, _ = add_rms_norm(x.to(DEVICE), residual.to(DEVICE), norm.weight.detach().to(DEVICE), 1e-6)
    torch.testing.assert_close(kernel_normed.cpu(), normed, rtol=1e-5, atol=1e-5)
