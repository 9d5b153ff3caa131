"""Triton, when it imports: the engine's own kernels (paged attention, the fused norm, rotary + K/V write and
activation) are wrapped here.

Kernels are wrapped with `triton.jit` on first use, not at import, once per interpreter setting: Triton reads
TRITON_INTERPRET (its CPU interpreter, used by the tests) when it wraps a kernel. Nothing imports this module
unless a Triton kernel may run (CUDA, or a test), so a CPU engine never loads Triton.
"""

from __future__ import annotations

import functools
import os

try:  # optional: the "triton" attention backend, the fused norm and their tests need it
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the environment
    triton = tl = None


def available() -> bool:
    """True when Triton imports (its kernels run on CUDA, or on CPU under TRITON_INTERPRET=1)."""
    return triton is not None


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def usable_on(device) -> bool:
    """True when a Triton kernel can run on tensors of `device`: CUDA, or the CPU under the interpreter."""
    return available() and (torch_device_type(device) == "cuda" or interpreting())


def torch_device_type(device) -> str:
    return device.type if hasattr(device, "type") else str(device).split(":")[0]


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (>= 1): tl.arange and tile shapes take powers of two only."""
    return 1 << (n - 1).bit_length() if n > 1 else 1


def kernel(fn, do_not_specialize: tuple[str, ...] = ()):
    """fn (a kernel written for triton.jit) wrapped for the current interpreter setting; cached.

    do_not_specialize: integer arguments that vary step to step (Triton would otherwise compile a variant for
    the value 1 and for multiples of 16: a compile in the middle of serving)."""
    return _jit(fn, do_not_specialize, interpreting())


@functools.cache
def _jit(fn, do_not_specialize: tuple[str, ...], interpret: bool):
    if interpret:
        _interpreter_compat()
    return triton.jit(fn, do_not_specialize=do_not_specialize)


def _interpreter_compat() -> None:
    """Let Triton 3.6's interpreter use a scalar as a loop bound with NumPy >= 2.4.

    The interpreter keeps scalars as one-element arrays and converts them with int(array), which NumPy 2.4
    refuses for arrays of one dimension; `range(0, n, TILE_N)` then fails in the interpreter only."""
    # imported on use: triton 496 ms to import
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "budgetscope_compat", False):
        return

    def patch(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patch.budgetscope_compat = True
    interpreter._patch_lang_tensor = patch
