"""Device buffers and dtype helpers shared by the CUDA op implementations and selftest.

:class:`CupyBuffers` (CuPy arrays, bf16 stored as its 16 bits) and :class:`TorchBuffers`
(torch CUDA tensors) offer one interface: ``fill_random``, ``poison``, ``nonfinite``,
``host`` (a float64 host copy of sampled rows and columns) and ``release``. Both refuse an
allocation that would not fit *before* making it (``device.require``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from roofprof.devices.base import tolerance
from roofprof.specs import BYTES_PER_ELEMENT

if TYPE_CHECKING:
    from roofprof.devices.cuda.device import CudaDevice

__all__ = [
    "FILL_CHUNK",
    "ITEMSIZE",
    "CupyBuffers",
    "TorchBuffers",
    "bf16_bits",
    "bf16_to_f32",
    "check_tolerance",
    "gemm_buffer_bytes",
    "host_f64",
    "numba_cuda_reason",
    "nvvm_cuda_home",
    "sample_indices",
    "storage_dtype",
    "torch_cuda_reason",
]

#: Bytes per element of each dtype (:data:`roofprof.specs.BYTES_PER_ELEMENT`).
ITEMSIZE = BYTES_PER_ELEMENT
FILL_CHUNK = 1 << 26
_BF16_NAN = 0x7FC0
#: Output rounding allowed by the GPU checks, in units of the dtype's epsilon (16-bit and tf32
#: outputs round once; wider outputs take the default of :func:`~roofprof.devices.base.tolerance`).
_CHECK_ULPS = {"bf16": 2.0, "fp16": 3.0, "tf32": 5.0}


def check_tolerance(dtype: str, reduction: int = 1) -> float:
    """Norm-wise relative tolerance of a GPU check of an output in ``dtype`` reducing over
    ``reduction`` terms: :func:`roofprof.devices.base.tolerance` with the rounding allowance
    of this device's kernels (2 ulps bf16, 3 fp16, 5 tf32, 8 otherwise).

    >>> round(check_tolerance("bf16", 4096), 4)
    0.0157
    """
    return tolerance(dtype, reduction, ulps=_CHECK_ULPS.get(dtype, 8.0))


def bf16_bits(a: np.ndarray) -> np.ndarray:
    """float → bf16 bit patterns (uint16), round to nearest even (host).

    >>> bf16_bits(np.array([1.0, -2.0, 1.0 + 2**-8], np.float32)).tolist()
    [16256, 49152, 16256]
    """
    bits = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF).astype(np.uint16)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16) → float32 (exact, host).

    >>> bf16_to_f32(np.array([16256, 49152], np.uint16)).tolist()
    [1.0, -2.0]
    """
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def storage_dtype(dtype: str) -> str:
    """numpy/cupy dtype name holding ``dtype`` (bf16 as its 16 bits in ``uint16``).

    >>> storage_dtype("bf16"), storage_dtype("tf32")
    ('uint16', 'float32')
    """
    return {
        "fp64": "float64",
        "fp32": "float32",
        "tf32": "float32",
        "fp16": "float16",
        "bf16": "uint16",
    }[dtype]


def host_f64(a: np.ndarray, dtype: str) -> np.ndarray:
    """Host copy of device data in storage dtype → float64."""
    a = np.asarray(a)
    return bf16_to_f32(a).astype(np.float64) if dtype == "bf16" else a.astype(np.float64)


def sample_indices(n: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """Up to ``count`` sorted distinct indices below ``n`` including the first and the last.

    >>> sample_indices(5, 16, np.random.default_rng(0)).tolist()
    [0, 1, 2, 3, 4]
    """
    if n <= count:
        return np.arange(n)
    inner = rng.choice(np.arange(1, n - 1), size=count - 2, replace=False)
    return np.sort(np.concatenate([[0, n - 1], inner])).astype(np.int64)


def gemm_buffer_bytes(m: int, n: int, k: int, dtype: str, extra: int = 0) -> int:
    """Device bytes of one GEMM's buffers: x [m,k], W [n,k], y [m,n] (+ ``extra``).

    >>> gemm_buffer_bytes(1, 4096, 4096, "bf16")
    33570816
    """
    return ITEMSIZE[dtype] * (m * k + n * k + m * n) + int(extra)


def torch_cuda_reason() -> str | None:
    """Why ``torch`` cannot run on the GPU here (None: it can). Never raises."""
    try:
        import torch
    except ImportError:
        return "torch is not installed (pip install 'roofprof[torch]')"
    try:
        if not torch.cuda.is_available():
            return f"torch {torch.__version__} has no usable CUDA here"
    except Exception as exc:  # noqa: BLE001
        return f"torch.cuda failed: {exc}"
    return None


#: CUDA toolkit roots searched for ``nvvm/`` when neither CUDA_HOME nor CUDA_PATH is set.
CUDA_ROOTS = ("/usr/local/cuda",)


def nvvm_cuda_home(environ: Any = None, roots: tuple[str, ...] = CUDA_ROOTS) -> str | None:
    """The ``CUDA_HOME`` to give numba-cuda so that it finds NVVM, or None (CUDA_HOME or
    CUDA_PATH already set, or no root with an ``nvvm/`` folder).

    numba-cuda 0.30 (``numba/cuda/cuda_paths.py``: ``get_cuda_home``, ``_get_nvvm``) and
    cuda-pathfinder 1.9 (``_utils/env_vars.py``) read ``CUDA_PATH`` then ``CUDA_HOME``; with
    neither set, NVVM is looked for in a pip ``nvidia-nvvm`` wheel, then beside a
    system-found ``libnvrtc`` only, which a CUDA image with pip's NVRTC does not give.

    >>> nvvm_cuda_home({"CUDA_HOME": "/opt/cuda"}) is None
    True
    """
    import os

    env = os.environ if environ is None else environ
    if env.get("CUDA_HOME") or env.get("CUDA_PATH"):
        return None
    return next((r for r in roots if os.path.isdir(os.path.join(r, "nvvm"))), None)


def numba_cuda_reason() -> str | None:
    """Why Numba-CUDA kernels cannot run on a real GPU here (None: they can). Never raises.

    Sets ``CUDA_HOME`` to :func:`nvvm_cuda_home` when that finds a toolkit numba-cuda
    would otherwise miss, and reports an NVVM that still does not load."""
    import os

    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return "the numba-cuda simulator is on (NUMBA_ENABLE_CUDASIM=1)"
    home = nvvm_cuda_home()
    if home is not None:
        os.environ["CUDA_HOME"] = home
    try:
        from numba import cuda

        if not cuda.is_available():
            return "numba-cuda sees no usable GPU"
        from numba.cuda.cudadrv import nvvm

        if not nvvm.is_available():
            return (
                "numba-cuda finds no NVVM (libnvvm): set CUDA_HOME to a CUDA toolkit with an "
                "nvvm/ folder, or pip install nvidia-nvvm"
            )
    except Exception as exc:  # noqa: BLE001
        return f"numba-cuda unavailable: {exc}"
    return None


# --------------------------------------------------------------------------- buffers


class CupyBuffers:
    """Named device arrays in a dtype's storage, with the check helpers the impls share."""

    def __init__(
        self,
        device: CudaDevice,
        shapes: dict[str, tuple[int, ...]],
        dtype: str,
        what: str,
        extra_bytes: int = 0,
        dtypes: dict[str, str] | None = None,
    ):
        cp = device.cupy
        self.device, self.cp, self.dtype = device, cp, dtype
        self.dtypes = {name: (dtypes or {}).get(name, dtype) for name in shapes}
        need = (
            sum(math.prod(s) * ITEMSIZE.get(self.dtypes[n], 4) for n, s in shapes.items())
            + extra_bytes
        )
        device.require(need, what)
        self.arrays = {
            name: cp.empty(shape, dtype=storage_dtype(self.dtypes[name]))
            for name, shape in shapes.items()
        }

    def __getitem__(self, name: str):
        return self.arrays[name]

    def fill_random(self, name: str, seed: int, low: float = -1.0, high: float = 1.0) -> None:
        """Fresh uniform(low, high) values (never all zeros), rounded to the storage dtype.

        Contiguous arrays are filled in chunks of :data:`FILL_CHUNK` elements, so the float32
        temporaries stay small next to a multi-GB weight matrix.
        """
        cp, arr, dt = self.cp, self.arrays[name], self.dtypes[name]
        rs = cp.random.RandomState(seed)
        if not arr.flags.c_contiguous:
            arr[...] = self.from_f32(
                rs.uniform(low, high, size=arr.size, dtype=cp.float32).reshape(arr.shape), dt
            )
            return
        flat = arr.reshape(-1)
        for start in range(0, flat.size, FILL_CHUNK):
            n = min(FILL_CHUNK, flat.size - start)
            flat[start : start + n] = self.from_f32(
                rs.uniform(low, high, size=n, dtype=cp.float32), dt
            )

    def from_f32(self, u, dt: str):
        cp = self.cp
        if dt == "bf16":
            b = u.astype(cp.float32).view(cp.uint32)
            return (
                (b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
            ).astype(cp.uint16)
        return u.astype(storage_dtype(dt))

    def to_f32(self, a, dt: str):
        cp = self.cp
        if dt == "bf16":
            return (a.astype(cp.uint32) << np.uint32(16)).view(cp.float32)
        return a.astype(cp.float32)

    def poison(self, name: str) -> None:
        arr = self.arrays[name]
        arr.fill(_BF16_NAN if self.dtypes[name] == "bf16" else np.nan)

    def nonfinite(self, name: str) -> int:
        cp, arr = self.cp, self.arrays[name]
        if self.dtypes[name] == "bf16":
            return int(cp.count_nonzero((arr & np.uint16(0x7F80)) == np.uint16(0x7F80)))
        return int(arr.size - cp.count_nonzero(cp.isfinite(arr)))

    def host(
        self, name: str, rows: np.ndarray | None = None, cols: np.ndarray | None = None
    ) -> np.ndarray:
        cp, arr = self.cp, self.arrays[name]
        if rows is not None:
            arr = arr[cp.asarray(rows)]
        if cols is not None:
            arr = arr[:, cp.asarray(cols)]
        return host_f64(cp.asnumpy(arr), self.dtypes[name])

    def release(self) -> None:
        self.arrays.clear()


class TorchBuffers:
    """The :class:`CupyBuffers` interface over torch CUDA tensors (torch's own allocator)."""

    _DT = {
        "fp64": "float64",
        "fp32": "float32",
        "tf32": "float32",
        "fp16": "float16",
        "bf16": "bfloat16",
    }

    def __init__(
        self, device: CudaDevice, shapes: dict[str, tuple[int, ...]], dtype: str, what: str
    ):
        import torch

        self.torch, self.device, self.dtype = torch, device, dtype
        need = sum(math.prod(s) for s in shapes.values()) * ITEMSIZE[dtype]
        device.require(need, what)
        self.dev = f"cuda:{device.info.index}"
        tdt = getattr(torch, self._DT[dtype])
        self.arrays = {
            name: torch.empty(shape, dtype=tdt, device=self.dev) for name, shape in shapes.items()
        }

    def __getitem__(self, name: str):
        return self.arrays[name]

    def fill_random(self, name: str, seed: int, low: float = -1.0, high: float = 1.0) -> None:
        gen = self.torch.Generator(device=self.dev).manual_seed(int(seed))
        t = self.arrays[name]
        t.copy_(
            self.torch.rand(t.shape, generator=gen, device=self.dev, dtype=self.torch.float32)
            * (high - low)
            + low
        )

    def poison(self, name: str) -> None:
        self.arrays[name].fill_(float("nan"))

    def nonfinite(self, name: str) -> int:
        return int((~self.torch.isfinite(self.arrays[name])).sum().item())

    def host(
        self, name: str, rows: np.ndarray | None = None, cols: np.ndarray | None = None
    ) -> np.ndarray:
        t = self.arrays[name]
        if rows is not None:
            t = t[self.torch.as_tensor(rows, device=t.device)]
        if cols is not None:
            t = t[:, self.torch.as_tensor(cols, device=t.device)]
        return t.double().cpu().numpy()

    def release(self) -> None:
        self.arrays.clear()
