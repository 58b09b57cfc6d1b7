"""What the Triton kernels of the CUDA path share: the import (None on CPU-only installs,
where the PyTorch path runs) and programmatic dependent launch (PDL).

A batch-64 decode step of the 1B model is some 130 short kernels, and every boundary
costs the next kernel's launch and ramp while the previous one drains. With PDL (Hopper
and later) a kernel is launched while its predecessor still runs: it waits in
`griddepcontrol.wait` for the predecessor to complete and its writes to land, then lets
its own successor launch. So every kernel launched with `launch_options()` calls
`pdl_enter` before its first load or store; that keeps completion ordered along the
chain (a kernel cannot complete before its predecessor has). Kernels from cuBLAS or
PyTorch in between simply start after full completion, as without PDL.

`MRBENCH_TRITON_PDL=0` turns it off (for A/B timing).
"""
from __future__ import annotations

import functools
import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None
    pdl_enter = prefetch_l2 = None

_HAS_GDC = False
if triton is not None:
    try:
        from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
        _HAS_GDC = True
    except ImportError:  # a Triton without grid dependency control: never PDL
        pass

    @triton.jit
    def prefetch_l2(ptrs):
        """Ask L2 for the 128-byte lines at `ptrs` (a hint: no data comes back, nothing can
        be stale, since L2 is where global memory is coherent)."""
        tl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [ptrs],
                                  dtype=tl.int32, is_pure=False, pack=1)

    if _HAS_GDC:
        @triton.jit
        def pdl_enter(PDL: tl.constexpr):
            if PDL:
                gdc_wait()
                gdc_launch_dependents()
    else:
        @triton.jit
        def pdl_enter(PDL: tl.constexpr):
            pass


@functools.cache
def pdl() -> bool:
    """Whether kernels are launched with PDL: a Triton that has it, a Hopper-or-later GPU,
    and not turned off."""
    if not _HAS_GDC or os.environ.get("MRBENCH_TRITON_PDL", "1") == "0":
        return False
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)


def launch_options() -> dict:
    """Keyword arguments for a kernel launch: the kernel's PDL constexpr and the launch
    flag, both from `pdl()`."""
    on = pdl()
    return dict(PDL=on, launch_pdl=True) if on else dict(PDL=False)
