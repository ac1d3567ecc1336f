"""What every Numba-CUDA kernel module here shares: types, warp constants, checks, simulator.

The numba scalar types (from ``numba.cuda.types``, or ``numba.core.types`` on numba-cuda 0.20),
the :data:`Launch` and :data:`Shape` aliases, :func:`cdiv` and :func:`positive_sizes` (the size
checks, ``ValueError`` on a bad shape), and :func:`simulator_active`. Importing this module adds
a ``shfl_down_sync`` to numba-cuda's simulator when the simulator is active and lacks one (see
``numba_cuda``). Nothing here imports roofprof.

>>> positive_sizes({"M": 2, "K": 8}, "M", "K")
(2, 8)
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping

from numba.cuda import config as _cuda_config

try:  # numba-cuda >= 0.21 vendors its own type system ("Vendor in types and datamodel", #533)
    from numba.cuda.types import float16, float32, float64, int64, uint64
except ImportError:  # numba-cuda 0.20.x types its kernels with numba.core.types
    from numba.core.types import float16, float32, float64, int64, uint64

__all__ = [
    "FULL_MASK",
    "Launch",
    "Shape",
    "WARP_SIZE",
    "cdiv",
    "float16",
    "float32",
    "float64",
    "int64",
    "positive_sizes",
    "simulator_active",
    "uint64",
]


Shape = Mapping[str, int]
Launch = tuple[tuple[int, int, int], tuple[int, int, int]]

FULL_MASK = 0xFFFFFFFF
WARP_SIZE = 32

# --------------------------------------------------------------------------------------------
# Simulator support
# --------------------------------------------------------------------------------------------


_SIM_SHUFFLE_TIMEOUT_S = 120.0


def _sim_shfl_down_sync(self, mask, value, delta):
    """Simulator ``shfl_down_sync``: lane l gets lane l+delta's value (its own past the warp).

    Each warp meets at its own ``threading.Barrier``, so every live lane of the warp must make
    the same sequence of calls (true for every kernel in this module: no lane returns or
    branches around a shuffle). Values are posted under a per-thread call counter, so a fast
    lane's next shuffle cannot overwrite a value a slow lane has yet to read. ``mask`` is
    ignored. A lane missing from a shuffle breaks the barrier after a timeout (an error, not a
    hang).
    """
    thread = threading.current_thread()
    manager = thread._manager
    state = manager.__dict__.setdefault("_roofprof_shfl", {})
    tid = thread.thread_id
    warp = tid // WARP_SIZE
    barrier = state.get(("barrier", warp))
    if barrier is None:
        block = math.prod(manager._block_dim)
        parties = min(WARP_SIZE, block - warp * WARP_SIZE)
        barrier = state.setdefault(("barrier", warp), threading.Barrier(parties))
    call = getattr(thread, "_roofprof_shfl_calls", 0)
    thread._roofprof_shfl_calls = call + 1
    state[call, tid] = value
    barrier.wait(_SIM_SHUFFLE_TIMEOUT_S)
    # Every lane of the warp has posted this call, so all have read the previous one.
    state.pop((call - 1, tid), None)
    src = tid + delta if (tid % WARP_SIZE) + delta < WARP_SIZE else tid
    return state.get((call, src), value)


def simulator_active() -> bool:
    """True when numba-cuda runs kernels on the CPU simulator (``NUMBA_ENABLE_CUDASIM=1``).

    Example: ``if simulator_active(): shapes = small_shapes``.
    """
    return bool(_cuda_config.ENABLE_CUDASIM)


def _install_simulator_shuffle() -> None:
    if not simulator_active():
        return
    from numba.cuda.simulator import kernelapi

    if not hasattr(kernelapi.FakeCUDAModule, "shfl_down_sync"):
        kernelapi.FakeCUDAModule.shfl_down_sync = _sim_shfl_down_sync


_install_simulator_shuffle()


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------
# Warp reductions are written inline in each kernel (``offset = 16, 8, 4, 2, 1`` with
# ``cuda.shfl_down_sync``) rather than as a ``cuda.jit(device=True)`` function: compiling a
# kernel that calls a device dispatcher asks the driver for the current device, which makes
# ``cuda.compile_ptx`` fail on machines without a GPU.


def cdiv(a: int, b: int) -> int:
    """Ceiling division ``ceil(a / b)`` of integers (``b > 0``). Example: ``cdiv(5, 4) == 2``."""
    return -(-a // b)


def positive_sizes(shape: Shape, *keys: str, zero_ok: tuple[str, ...] = ()) -> tuple[int, ...]:
    """The integer sizes ``shape[key]`` for ``keys``: >= 1 (>= 0 for keys in ``zero_ok``)."""
    vals = []
    for key in keys:
        if key not in shape:
            raise ValueError(f"shape {dict(shape)} lacks {key!r}; needs {', '.join(keys)}")
        val = int(shape[key])
        low = 0 if key in zero_ok else 1
        if val < low:
            raise ValueError(f"shape[{key!r}] = {val}; must be >= {low}")
        vals.append(val)
    return tuple(vals)
