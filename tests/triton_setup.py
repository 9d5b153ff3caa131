"""Triton for kernel tests: the real compiler on a CUDA GPU, its CPU interpreter everywhere else.

Triton reads TRITON_INTERPRET when it wraps a kernel — its own helpers (tl.zeros …) are wrapped when
`triton.language` is first imported — so this must run before anything in the process imports triton.
"""

from __future__ import annotations

import os

import pytest


def kernel_device() -> str:
    """'cuda' or 'cpu' (then TRITON_INTERPRET=1); skips the calling test module when Triton cannot run here."""
    torch = pytest.importorskip("torch")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    pytest.importorskip("triton", reason="triton is not installed")
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    if device == "cpu" and isinstance(tl.zeros, JITFunction):
        pytest.skip(
            "triton was imported before TRITON_INTERPRET=1 was set; run this file on its own", allow_module_level=True
        )
    return device


def kernel_dtypes(device: str) -> list:
    """The dtypes a kernel test runs: float32 and float16; bfloat16 too on a GPU (the interpreter's bf16 tl.dot
    is not exact)."""
    import torch

    return [torch.float32, torch.float16] + ([torch.bfloat16] if device == "cuda" else [])


def kernel_tolerance(dtype) -> dict:
    """assert_close's rtol/atol for a kernel's output in `dtype` against its float32/float64 reference."""
    import torch

    return {
        torch.float32: dict(rtol=1e-5, atol=1e-5),
        torch.float16: dict(rtol=1e-2, atol=4e-3),
        torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
    }[dtype]
