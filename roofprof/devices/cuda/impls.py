"""Op implementations on a CUDA GPU (:class:`~roofprof.devices.base.OpImpl`).

GEMM/GEMV ops of :func:`roofprof.workload.llama_ops` (``y[m,n] = x[m,k]·W[n,k]ᵀ``, the
``nn.Linear`` layout) run through:

| name | kernels | dtypes |
| --- | --- | --- |
| ``cupy`` | own CUDA C through CuPy: ``gemv.cu`` for ``m ≤ 16`` (split-K when the N blocks would not fill the GPU), ``gemm_mma.cu`` (``mma.sync``) above | bf16, fp16 |
| ``numba`` | ``kernels/numba_cuda.py`` registry: ``gemv_<dt>`` for ``m ≤ 16``, ``gemm_tiled_<dt>`` above | fp32, fp16 |
| ``cublas`` | cuBLAS: ``cupy.matmul`` (fp64, fp32, fp16), ``cublasGemmEx`` (bf16; tf32 compute) | fp64, fp32, tf32, fp16, bf16 |
| ``torch`` | ``torch.matmul`` on CUDA (when torch has CUDA) | fp64, fp32, fp16, bf16 |

The other ops of a pass (RMSNorm, RoPE, residual adds, SiLU·mul, the embedding gather,
fused attention) run through ``cupy-ref``: plain CuPy array code computing in float32
(bf16 stored as its 16 bits), and fused attention through ``torch``'s SDPA when torch has
CUDA (else CuPy: batched matmuls and a softmax, chunked over heads). It exists so that a
profile on a GPU without torch covers the whole pass; with torch, ``roofprof.profile``
also adds ``torch-eager`` (:mod:`roofprof.torch_ops`).

Correct first: ``prepare`` refuses (``ConfigError`` with the numbers) buffers that would
not fit *before* allocating; ``check`` draws fresh uniform(−1, 1) inputs on the device,
poisons the output with NaN, runs once (a CUDA error names the kernel), requires every
output element to be finite, and compares a sampled block (≤ 16 rows × 64 columns) with
float64 numpy through :func:`roofprof.devices.base.compare`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from roofprof.devices.base import CheckResult, ProbeRun, compare
from roofprof.errors import ConfigError

if TYPE_CHECKING:
    from roofprof.devices.cuda import CudaDevice
    from roofprof.workload import Op

ITEMSIZE = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}
#: Norm-wise relative tolerance of an output stored in each dtype (fp32 accumulation):
#: a few units of the output's rounding plus accumulation-order differences.
TOLERANCE = {"fp64": 1e-10, "fp32": 1e-4, "tf32": 5e-3, "fp16": 3e-3, "bf16": 1.6e-2}
GEMV_MAX_M = 16
FILL_CHUNK = 1 << 26
SAMPLE_ROWS = 16
SAMPLE_COLS = 64
_BF16_NAN = 0x7FC0


# --------------------------------------------------------------------------- dtype helpers


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
    return {"fp64": "float64", "fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "uint16"}[dtype]


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


def numba_cuda_reason() -> str | None:
    """Why Numba-CUDA kernels cannot run on a real GPU here (None: they can). Never raises."""
    import os

    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return "the numba-cuda simulator is on (NUMBA_ENABLE_CUDASIM=1)"
    try:
        from numba import cuda

        if not cuda.is_available():
            return "numba-cuda sees no usable GPU"
    except Exception as exc:  # noqa: BLE001
        return f"numba-cuda unavailable: {exc}"
    return None


# --------------------------------------------------------------------------- buffers


class CupyBuffers:
    """Named device arrays in a dtype's storage, with the check helpers the impls share."""

    def __init__(self, device: CudaDevice, shapes: dict[str, tuple[int, ...]], dtype: str, what: str,
                 extra_bytes: int = 0, dtypes: dict[str, str] | None = None):
        cp = device.cupy
        self.device, self.cp, self.dtype = device, cp, dtype
        self.dtypes = {name: (dtypes or {}).get(name, dtype) for name in shapes}
        need = sum(math.prod(s) * ITEMSIZE.get(self.dtypes[n], 4) for n, s in shapes.items()) + extra_bytes
        device.require(need, what)
        self.arrays = {name: cp.empty(shape, dtype=storage_dtype(self.dtypes[name])) for name, shape in shapes.items()}

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
            arr[...] = self.from_f32(rs.uniform(low, high, size=arr.size, dtype=cp.float32).reshape(arr.shape), dt)
            return
        flat = arr.reshape(-1)
        for start in range(0, flat.size, FILL_CHUNK):
            n = min(FILL_CHUNK, flat.size - start)
            flat[start:start + n] = self.from_f32(rs.uniform(low, high, size=n, dtype=cp.float32), dt)

    def from_f32(self, u, dt: str):
        cp = self.cp
        if dt == "bf16":
            b = u.astype(cp.float32).view(cp.uint32)
            return ((b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(cp.uint16)
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

    def host(self, name: str, rows: np.ndarray | None = None, cols: np.ndarray | None = None) -> np.ndarray:
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

    _DT = {"fp64": "float64", "fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}

    def __init__(self, device: CudaDevice, shapes: dict[str, tuple[int, ...]], dtype: str, what: str):
        import torch

        self.torch, self.device, self.dtype = torch, device, dtype
        need = sum(math.prod(s) for s in shapes.values()) * ITEMSIZE[dtype]
        device.require(need, what)
        self.dev = f"cuda:{device.info.index}"
        tdt = getattr(torch, self._DT[dtype])
        self.arrays = {name: torch.empty(shape, dtype=tdt, device=self.dev) for name, shape in shapes.items()}

    def __getitem__(self, name: str):
        return self.arrays[name]

    def fill_random(self, name: str, seed: int, low: float = -1.0, high: float = 1.0) -> None:
        gen = self.torch.Generator(device=self.dev).manual_seed(int(seed))
        t = self.arrays[name]
        t.copy_(self.torch.rand(t.shape, generator=gen, device=self.dev, dtype=self.torch.float32) * (high - low) + low)

    def poison(self, name: str) -> None:
        self.arrays[name].fill_(float("nan"))

    def nonfinite(self, name: str) -> int:
        return int((~self.torch.isfinite(self.arrays[name])).sum().item())

    def host(self, name: str, rows: np.ndarray | None = None, cols: np.ndarray | None = None) -> np.ndarray:
        t = self.arrays[name]
        if rows is not None:
            t = t[self.torch.as_tensor(rows, device=t.device)]
        if cols is not None:
            t = t[:, self.torch.as_tensor(cols, device=t.device)]
        return t.double().cpu().numpy()

    def release(self) -> None:
        self.arrays.clear()


# --------------------------------------------------------------------------- cuBLAS / torch calls


def _cublas_consts():
    from cupy_backends.cuda.api import runtime
    from cupy_backends.cuda.libs import cublas

    return cublas, {
        "N": getattr(cublas, "CUBLAS_OP_N", 0), "T": getattr(cublas, "CUBLAS_OP_T", 1),
        "compute_32f": getattr(cublas, "CUBLAS_COMPUTE_32F", 68),
        "compute_tf32": getattr(cublas, "CUBLAS_COMPUTE_32F_FAST_TF32", 77),
        "algo": getattr(cublas, "CUBLAS_GEMM_DEFAULT", -1),
        "bf16": getattr(runtime, "CUDA_R_16BF", 14), "f32": getattr(runtime, "CUDA_R_32F", 0),
    }


def cublas_gemm_nt(device: CudaDevice, a, w, out, dtype: str) -> None:
    """``out[m,n] = a[m,k]·w[n,k]ᵀ`` through cuBLAS on the current stream.

    fp64/fp32/fp16: ``cupy.matmul`` (no copy: cuBLAS reads ``w`` transposed). bf16 (uint16
    bits) and tf32: ``cublasGemmEx`` with fp32 accumulation, column-major ``Cᵀ = W·Aᵀ``
    (``transa=T``, ``m=n``, ``n=m``, ``lda=ldb=k``, ``ldc=n``).
    """
    cp = device.cupy
    device.last_kernel = f"cuBLAS {dtype} GEMM"
    if dtype in ("fp64", "fp32", "fp16"):
        cp.matmul(a, w.T, out=out)
        return
    cublas, c = _cublas_consts()
    m, k = a.shape
    n = w.shape[0]
    alpha = np.ones(1, dtype=np.float32)
    beta = np.zeros(1, dtype=np.float32)
    dtype_code = c["bf16"] if dtype == "bf16" else c["f32"]
    compute = c["compute_tf32"] if dtype == "tf32" else c["compute_32f"]
    handle = cp.cuda.device.get_cublas_handle()
    try:
        cublas.gemmEx(handle, c["T"], c["N"], n, m, k, alpha.ctypes.data, w.data.ptr, dtype_code, k,
                      a.data.ptr, dtype_code, k, beta.ctypes.data, out.data.ptr, dtype_code, n, compute, c["algo"])
    except Exception as exc:
        from roofprof.devices.cuda import CudaKernelError

        raise CudaKernelError(f"cublasGemmEx ({dtype}, m={m} n={n} k={k}) failed: {exc}") from exc


def torch_gemm_nt(a, w, out) -> None:
    """``out = a·wᵀ`` with ``torch.matmul`` (cuBLAS/cuBLASLt)."""
    import torch

    torch.matmul(a, w.t(), out=out)


# --------------------------------------------------------------------------- prepared GEMM


class PreparedGemm:
    """One GEMM op's buffers and its runner: ``run()`` (one call), ``check()``, ``release()``.

    ``kernels`` is the number of kernel launches per call (split-K GEMV: 2).
    """

    def __init__(self, device: CudaDevice, op: Op, rng: np.random.Generator, bufs: Any,
                 runner: Callable[[], Any], name: str, *, kernels: int = 1, note: str = "",
                 extra: Sequence[Any] = ()):
        self.device, self.op, self.rng, self.bufs = device, op, rng, bufs
        self._runner, self.name, self.kernels, self.note = runner, name, kernels, note
        self._extra = list(extra)

    def run(self) -> Any:
        return self._runner()

    def check(self) -> CheckResult:
        op, rng, b = self.op, self.rng, self.bufs
        b.fill_random("x", int(rng.integers(1, 2**31 - 1)))
        b.fill_random("w", int(rng.integers(1, 2**31 - 1)))
        b.poison("y")
        self.run()
        self.device.checked(self.name)
        bad = b.nonfinite("y")
        if bad:
            return CheckResult(False, math.inf, math.inf, TOLERANCE[op.dtype],
                               f"{self.name}: {bad} of {op.m * op.n} outputs not finite (poison left, or NaN)")
        rows = sample_indices(op.m, SAMPLE_ROWS, rng)
        cols = sample_indices(op.n, SAMPLE_COLS, rng)
        ref = b.host("x", rows) @ b.host("w", cols).T
        got = b.host("y", rows, cols)
        return compare(got, ref, TOLERANCE[op.dtype],
                       f"{self.name} vs float64 numpy on a {len(rows)}×{len(cols)} sampled block; output poisoned "
                       "with NaN, every element finite")

    def release(self) -> None:
        self.bufs.release()
        self._extra.clear()
        self.device.release_memory()


def _gemm_reason(op: Op, impl: str) -> str | None:
    if op.kind != "gemm":
        return f"{impl} implements GEMM/GEMV ops only, not {op.kind!r}"
    if op.batch != 1:
        return f"{impl}: batched GEMMs (batch={op.batch}) are not implemented"
    if min(op.m, op.n, op.k) < 1:
        return f"empty GEMM shape m={op.m} n={op.n} k={op.k}"
    return None


class CupyKernels:
    """Own CUDA C through CuPy: ``gemv.cu`` (m ≤ 16) and ``gemm_mma.cu`` (bf16/fp16)."""

    name = "cupy"

    def __init__(self, device: CudaDevice):
        self.device = device

    def supports(self, op: Op) -> str | None:
        reason = _gemm_reason(op, self.name)
        if reason:
            return reason
        if op.dtype not in ("bf16", "fp16"):
            return f"own CUDA C kernels are bf16/fp16 only, not {op.dtype}"
        if op.m <= GEMV_MAX_M:
            return self.device.unsupported(op.dtype, "gemv")
        if op.k % 8:
            return f"gemm_mma.cu needs K % 8 == 0, got K={op.k}"
        return self.device.unsupported(op.dtype, "mma.sync")

    def prepare(self, op: Op, rng: np.random.Generator) -> PreparedGemm:
        reason = self.supports(op)
        if reason:
            raise ConfigError(reason)
        dev = self.device
        cm = dev.kernels.models
        m, n, k = op.m, op.n, op.k
        if m <= GEMV_MAX_M:
            return gemv_prepared(dev, op, rng, cm.gemv_plan(m, n, k, op.dtype, dev.sm_count))
        launch = cm.gemm_launch(m, n, k, op.dtype)
        bufs = CupyBuffers(dev, {"x": (m, k), "w": (n, k), "y": (m, n)}, op.dtype, f"op {op.name!r} ({self.name})")
        x, w, y = bufs["x"], bufs["w"], bufs["y"]
        args = (x, w, y, np.int32(m), np.int32(n), np.int32(k))

        def run() -> None:
            dev.launch(launch.entry, launch.grid, launch.block, args)

        return PreparedGemm(dev, op, rng, bufs, run, launch.entry,
                            note=f"{launch.entry} grid {launch.grid}, mma.sync m16n8k16, 128×128×32 tiles")


def gemv_prepared(dev: CudaDevice, op: Op, rng: np.random.Generator, plan: Any, ldx: int | None = None,
                  ldw: int | None = None) -> PreparedGemm:
    """A :class:`PreparedGemm` running ``gemv.cu`` by ``plan`` (``cuda_models.gemv_plan``).

    ``ldx``/``ldw`` > K pad the rows (x [m, ldx], W [n, ldw], the op reads the first K).
    """
    m, n, k = op.m, op.n, op.k
    ldx, ldw = ldx or k, ldw or k
    bufs = CupyBuffers(dev, {"xs": (m, ldx), "ws_": (n, ldw), "y": (m, n)}, op.dtype,
                       f"op {op.name!r} (cupy gemv)", extra_bytes=plan.workspace_bytes)
    bufs.arrays["x"] = bufs.arrays["xs"][:, :k]
    bufs.arrays["w"] = bufs.arrays["ws_"][:, :k]
    bufs.dtypes["x"] = bufs.dtypes["w"] = op.dtype
    cp = dev.cupy
    xs, wsb, y = bufs["xs"], bufs["ws_"], bufs["y"]
    work = cp.empty(plan.workspace_bytes // 4, dtype=cp.float32) if plan.workspace_bytes else None
    main, red = plan.main, plan.reduce
    if red is None:
        args = (xs, wsb, y, np.int32(m), np.int32(n), np.int32(k), np.int32(ldx), np.int32(ldw))
    else:
        args = (xs, wsb, work, np.int32(m), np.int32(n), np.int32(k), np.int32(ldx), np.int32(ldw),
                np.int32(plan.k_chunk))
        red_args = (work, y, np.int32(m), np.int32(n), np.int32(plan.splits))

    def run() -> None:
        dev.launch(main.entry, main.grid, main.block, args)
        if red is not None:
            dev.launch(red.entry, red.grid, red.block, red_args)

    name = main.entry + (f" + {red.entry}" if red is not None else "")
    note = (f"{main.entry} grid {main.grid}" + (f", split-K {plan.splits}×{plan.k_chunk} + {red.entry}" if red else "")
            + (f", padded rows ldx={ldx} ldw={ldw}" if (ldx, ldw) != (k, k) else ""))
    return PreparedGemm(dev, op, rng, bufs, run, name, kernels=2 if red is not None else 1, note=note,
                        extra=[work] if work is not None else [])


class NumbaKernels:
    """``kernels/numba_cuda.py`` registry kernels: GEMV (m ≤ 16) and tiled GEMM, fp32/fp16."""

    name = "numba"

    def __init__(self, device: CudaDevice):
        self.device = device

    def supports(self, op: Op) -> str | None:
        reason = _gemm_reason(op, self.name)
        if reason:
            return reason
        if op.dtype not in ("fp32", "fp16"):
            return f"the Numba kernels are fp32/fp16 only (numba has no {op.dtype} arithmetic here)"
        return numba_cuda_reason()

    def prepare(self, op: Op, rng: np.random.Generator) -> PreparedGemm:
        reason = self.supports(op)
        if reason:
            raise ConfigError(reason)
        from numba import cuda

        from roofprof.devices.cuda import kernels_module

        nk = kernels_module("numba_cuda")
        dev = self.device
        key = f"{'gemv' if op.m <= GEMV_MAX_M else 'gemm_tiled'}_{op.dtype}"
        spec = nk.KERNELS[key]
        shape = {"M": op.m, "N": op.n, "K": op.k}
        bufs = CupyBuffers(dev, {"x": (op.m, op.k), "w": (op.n, op.k), "y": (op.m, op.n)}, op.dtype,
                           f"op {op.name!r} ({self.name})")
        views = {"x": cuda.as_cuda_array(bufs["x"]), "w": cuda.as_cuda_array(bufs["w"])}
        out = cuda.as_cuda_array(bufs["y"])
        grid, block = spec.launch(shape, dev.sm_count)
        kern = spec.kernel_for(shape, dev.sm_count)[grid, block]
        args = spec.call_args(views, out)

        def run() -> None:
            dev.last_kernel = f"numba {key}"
            kern(*args)

        return PreparedGemm(dev, op, rng, bufs, run, f"numba {key}", note=f"numba {key} grid {grid} block {block}",
                            extra=[views, out])


class CublasGemm:
    """cuBLAS GEMM/GEMV (``cupy.matmul``; bf16/tf32 through ``cublasGemmEx``)."""

    name = "cublas"

    def __init__(self, device: CudaDevice):
        self.device = device

    def supports(self, op: Op) -> str | None:
        reason = _gemm_reason(op, self.name)
        if reason:
            return reason
        if op.dtype not in ITEMSIZE:
            return f"no cuBLAS path for {op.dtype} here (fp8/int8 need cuBLASLt)"
        reason = self.device.unsupported(op.dtype, "cublas")
        if reason or op.dtype not in ("bf16", "tf32"):
            return reason
        try:
            _cublas_consts()
        except Exception as exc:  # noqa: BLE001 - ImportError when libcublas is missing
            return f"CuPy's cuBLAS binding is unavailable: {exc}"
        return None

    def prepare(self, op: Op, rng: np.random.Generator) -> PreparedGemm:
        reason = self.supports(op)
        if reason:
            raise ConfigError(reason)
        dev = self.device
        bufs = CupyBuffers(dev, {"x": (op.m, op.k), "w": (op.n, op.k), "y": (op.m, op.n)}, op.dtype,
                           f"op {op.name!r} ({self.name})")
        x, w, y = bufs["x"], bufs["w"], bufs["y"]
        call = "cublasGemmEx" if op.dtype in ("bf16", "tf32") else "cupy.matmul"
        return PreparedGemm(dev, op, rng, bufs, lambda: cublas_gemm_nt(dev, x, w, y, op.dtype),
                            f"cuBLAS {op.dtype} ({call})", note=f"{call}, C = A·Wᵀ")


class TorchGemm:
    """``torch.matmul`` on the GPU (when torch has CUDA)."""

    name = "torch"

    def __init__(self, device: CudaDevice):
        self.device = device

    def supports(self, op: Op) -> str | None:
        reason = _gemm_reason(op, self.name)
        if reason:
            return reason
        if op.dtype not in ("fp64", "fp32", "fp16", "bf16"):
            return f"torch.matmul has no {op.dtype} path here"
        return torch_cuda_reason() or self.device.unsupported(op.dtype, "cublas")

    def prepare(self, op: Op, rng: np.random.Generator) -> PreparedGemm:
        reason = self.supports(op)
        if reason:
            raise ConfigError(reason)
        dev = self.device
        bufs = TorchBuffers(dev, {"x": (op.m, op.k), "w": (op.n, op.k), "y": (op.m, op.n)}, op.dtype,
                            f"op {op.name!r} ({self.name})")
        x, w, y = bufs["x"], bufs["w"], bufs["y"]

        def run() -> None:
            dev.last_kernel = "torch.matmul"
            torch_gemm_nt(x, w, y)

        return PreparedGemm(dev, op, rng, bufs, run, f"torch.matmul {op.dtype}", note="torch.matmul(x, w.t())")


# --------------------------------------------------------------------------- reference ops


def attention_group(op: Op) -> int:
    """Query heads per KV head of a fused attention op, inferred from its byte count.

    ``llama_ops`` counts (per layer, ``e`` bytes per element, ``B = batch·heads``):
    prefill ``e·(2·B·tq·d + 4·(B/g)·tq·d)``, decode ``e·(2·B·d + 2·(B/g)·d·(keys+1))``.
    Returns 1 when the bytes do not fit that form (e.g. fused elementwise conventions).

    >>> from roofprof.specs import load_model
    >>> from roofprof.workload import llama_ops
    >>> ops = llama_ops(load_model("llama-3.1-8b"), "decode", batch=2, context_tokens=100).ops
    >>> attention_group(next(o for o in ops if o.name == "attention"))
    4
    """
    e = ITEMSIZE.get(op.dtype, 2)
    big_b, tq, keys, d = op.batch, op.m, op.n, op.k
    units = op.bytes / e
    if op.phase == "prefill":
        rest, per_g = units - 2 * big_b * tq * d, 4 * big_b * tq * d
    else:
        rest, per_g = units - 2 * big_b * d, 2 * big_b * d * (keys + 1)
    if rest <= 0:
        return 1
    g = per_g / rest
    gi = int(round(g))
    return gi if gi >= 1 and abs(g - gi) < 1e-6 and big_b % gi == 0 else 1


class PreparedRef:
    """A non-GEMM op on the GPU: ``calls`` (one here), a float64 host reference for ``check``."""

    def __init__(self, device: CudaDevice, op: Op, bufs: Any, run: Callable[[], Any],
                 reference: Callable[[], tuple[np.ndarray, np.ndarray]], inputs: Sequence[str], rng: np.random.Generator,
                 name: str, kernels: int, note: str, tolerance: float | None = None):
        self.device, self.op, self.bufs, self._run = device, op, bufs, run
        self._reference, self._inputs, self.rng = reference, list(inputs), rng
        self.name, self.kernels, self.note = name, kernels, note
        self.tolerance = tolerance

    def run(self) -> Any:
        return self._run()

    def check(self) -> CheckResult:
        for name in self._inputs:
            self.bufs.fill_random(name, int(self.rng.integers(1, 2**31 - 1)))
        self.bufs.poison("out")
        self.run()
        self.device.checked(self.name)
        bad = self.bufs.nonfinite("out")
        tol = self.tolerance if self.tolerance is not None else TOLERANCE.get(self.op.dtype, 1e-2)
        if bad:
            return CheckResult(False, math.inf, math.inf, tol, f"{self.name}: {bad} outputs not finite")
        got, ref = self._reference()
        return compare(got, ref, tol, f"{self.name} vs float64 numpy on sampled rows; output poisoned")

    def release(self) -> None:
        self.bufs.release()
        self.device.release_memory()


class CupyReference:
    """``cupy-ref``: the non-GEMM ops of a pass as plain CuPy array code (fp32 compute).

    RMSNorm (as transformers: normalise in fp32, round, times the weight), residual add,
    SiLU·mul, RoPE (rotate-half over heads of 128 or the head size the op's bytes imply),
    embedding gather, and fused attention: ``torch`` SDPA when torch has CUDA, else CuPy
    (scores, softmax, PV in fp32, chunked over KV heads). Eager attention steps are left to
    ``torch-eager``.
    """

    name = "cupy-ref"
    DTYPES = ("fp32", "fp16", "bf16")

    def __init__(self, device: CudaDevice):
        self.device = device

    def supports(self, op: Op) -> str | None:
        if op.kind == "gemm":
            return "cupy-ref covers the non-GEMM ops (GEMMs: cupy, numba, cublas, torch)"
        if op.dtype not in self.DTYPES:
            return f"cupy-ref computes fp32/fp16/bf16 only, not {op.dtype}"
        if op.kind == "attention" and op.name != "attention":
            return "eager attention steps are measured by torch-eager (roofprof.torch_ops)"
        if op.kind == "embedding" and op.k:
            return "embedding counted as a matmul (seed convention) is not a gather"
        if op.kind not in ("norm", "elementwise", "embedding", "attention"):
            return f"no cupy-ref implementation of {op.kind!r}"
        if op.kind == "elementwise" and not (op.name == "rope" or op.name.endswith("residual") or op.name == "silu_mul"):
            return f"no cupy-ref implementation of elementwise op {op.name!r}"
        return None

    def prepare(self, op: Op, rng: np.random.Generator) -> PreparedRef:
        reason = self.supports(op)
        if reason:
            raise ConfigError(reason)
        if op.kind == "attention":
            return self._attention(op, rng)
        if op.kind == "norm":
            return self._norm(op, rng)
        if op.kind == "embedding":
            return self._embedding(op, rng)
        if op.name == "rope":
            return self._rope(op, rng)
        if op.name == "silu_mul":
            return self._binary(op, rng, "silu_mul")
        return self._binary(op, rng, "add")

    # -- elementwise -----------------------------------------------------------------
    def _binary(self, op: Op, rng: np.random.Generator, kind: str) -> PreparedRef:
        dev, dt, m, n = self.device, op.dtype, op.m, op.n
        bufs = CupyBuffers(dev, {"a": (m, n), "b": (m, n), "out": (m, n)}, dt, f"op {op.name!r} (cupy-ref)")
        cp = dev.cupy
        a, b, out = bufs["a"], bufs["b"], bufs["out"]

        def run() -> None:
            dev.last_kernel = f"cupy-ref {op.name}"
            x, y = bufs.to_f32(a, dt), bufs.to_f32(b, dt)
            r = x / (1.0 + cp.exp(-x)) * y if kind == "silu_mul" else x + y
            out[...] = bufs.from_f32(r, dt)

        rows = sample_indices(m, 8, rng)

        def reference():
            x, y = bufs.host("a", rows), bufs.host("b", rows)
            ref = x / (1.0 + np.exp(-x)) * y if kind == "silu_mul" else x + y
            return bufs.host("out", rows), ref

        return PreparedRef(dev, op, bufs, run, reference, ["a", "b"], rng, f"cupy-ref {op.name}",
                           5 if kind == "silu_mul" else 3, f"CuPy {kind} in fp32")

    def _norm(self, op: Op, rng: np.random.Generator) -> PreparedRef:
        dev, dt, m, n = self.device, op.dtype, op.m, op.n
        bufs = CupyBuffers(dev, {"x": (m, n), "weight": (1, n), "out": (m, n)}, dt, f"op {op.name!r} (cupy-ref)")
        cp = dev.cupy
        x, wt, out = bufs["x"], bufs["weight"], bufs["out"]
        eps = 1e-5

        def run() -> None:
            dev.last_kernel = f"cupy-ref {op.name}"
            h = bufs.to_f32(x, dt)
            h = h * (1.0 / cp.sqrt((h * h).mean(axis=1, keepdims=True) + eps))
            h = bufs.to_f32(bufs.from_f32(h, dt), dt)  # round to the dtype, as transformers does
            out[...] = bufs.from_f32(h * bufs.to_f32(wt, dt), dt)

        rows = sample_indices(m, 8, rng)

        def reference():
            h = bufs.host("x", rows)
            h = h / np.sqrt((h * h).mean(axis=1, keepdims=True) + eps)
            return bufs.host("out", rows), h * bufs.host("weight")

        return PreparedRef(dev, op, bufs, run, reference, ["x", "weight"], rng, f"cupy-ref {op.name}", 5,
                           "CuPy RMSNorm in fp32 (transformers' order)", tolerance=2 * TOLERANCE[dt])

    def _rope(self, op: Op, rng: np.random.Generator) -> PreparedRef:
        dev, dt, m, n = self.device, op.dtype, op.m, op.n
        e = ITEMSIZE[dt]
        hd = int(round((op.bytes / e - 2 * m * n) / (2 * m))) if op.bytes else 128
        if hd < 2 or hd % 2 or n % hd:
            hd = 128 if n % 128 == 0 else 2
        bufs = CupyBuffers(dev, {"x": (m, n), "cos": (m, hd), "sin": (m, hd), "out": (m, n)}, dt,
                           f"op {op.name!r} (cupy-ref)")
        cp = dev.cupy
        x, cos, sin, out = bufs["x"], bufs["cos"], bufs["sin"], bufs["out"]
        heads, half = n // hd, hd // 2

        def run() -> None:
            dev.last_kernel = "cupy-ref rope"
            v = bufs.to_f32(x, dt).reshape(m, heads, hd)
            rot = cp.concatenate([-v[..., half:], v[..., :half]], axis=-1)
            c, s = bufs.to_f32(cos, dt)[:, None, :], bufs.to_f32(sin, dt)[:, None, :]
            out[...] = bufs.from_f32((v * c + rot * s).reshape(m, n), dt)

        rows = sample_indices(m, 8, rng)

        def reference():
            v = bufs.host("x", rows).reshape(len(rows), heads, hd)
            rot = np.concatenate([-v[..., half:], v[..., :half]], axis=-1)
            c, s = bufs.host("cos", rows)[:, None, :], bufs.host("sin", rows)[:, None, :]
            return bufs.host("out", rows), (v * c + rot * s).reshape(len(rows), n)

        return PreparedRef(dev, op, bufs, run, reference, ["x", "cos", "sin"], rng, "cupy-ref rope", 6,
                           f"CuPy rotate-half RoPE over {heads} heads of {hd}", tolerance=2 * TOLERANCE[dt])

    def _embedding(self, op: Op, rng: np.random.Generator) -> PreparedRef:
        dev, dt, m, n = self.device, op.dtype, op.m, op.n
        table_rows = max(4096, m)
        bufs = CupyBuffers(dev, {"table": (table_rows, n), "out": (m, n)}, dt, f"op {op.name!r} (cupy-ref)",
                           extra_bytes=8 * m)
        cp = dev.cupy
        table, out = bufs["table"], bufs["out"]
        ids_host = rng.integers(0, table_rows, size=m)
        ids = cp.asarray(ids_host)

        def run() -> None:
            dev.last_kernel = "cupy-ref embedding"
            cp.take(table, ids, axis=0, out=out)

        rows = sample_indices(m, 8, rng)

        def reference():
            return bufs.host("out", rows), bufs.host("table", ids_host[rows])

        return PreparedRef(dev, op, bufs, run, reference, ["table"], rng, "cupy-ref embedding", 1,
                           f"cupy.take of {m} rows from a {table_rows}-row table", tolerance=0.0)

    # -- attention -----------------------------------------------------------------------
    def _attention(self, op: Op, rng: np.random.Generator) -> PreparedRef:
        dev, dt = self.device, op.dtype
        g = attention_group(op)
        bkv, tq, keys, d = op.batch // g, op.m, op.n, op.k
        causal = op.phase == "prefill" and tq > 1
        shapes = {"q": (bkv, g, tq, d), "k": (bkv, 1, keys, d), "v": (bkv, 1, keys, d), "out": (bkv, tq, g * d)}
        use_torch = torch_cuda_reason() is None
        what = f"op {op.name!r} (cupy-ref)"
        if use_torch:
            bufs = TorchBuffers(dev, shapes, dt, what)
        else:
            scores = bkv * g * tq * keys * 4
            bufs = CupyBuffers(dev, shapes, dt, what, extra_bytes=min(scores, 1 << 30) * 2)
        q, k, v, out = bufs["q"], bufs["k"], bufs["v"], bufs["out"]
        scale = 1.0 / math.sqrt(d)
        if use_torch:
            from roofprof.llama_torch import attention_sdpa

            def run() -> None:
                dev.last_kernel = "torch SDPA"
                out.copy_(attention_sdpa(q, k, v).reshape(out.shape))

            kernels, how = 2, "torch SDPA (enable_gqa)"
        else:
            cp = dev.cupy
            per_head = g * tq * keys * 4
            chunk = max(1, min(bkv, (512 << 20) // max(per_head, 1)))
            mask = None
            if causal:
                mask = cp.triu(cp.full((tq, keys), -cp.inf, dtype=cp.float32), k=1 + keys - tq)

            def run() -> None:
                dev.last_kernel = "cupy-ref attention"
                for s in range(0, bkv, chunk):
                    qq = bufs.to_f32(q[s:s + chunk], dt).reshape(-1, g * tq, d)
                    kk = bufs.to_f32(k[s:s + chunk], dt).reshape(-1, keys, d)
                    vv = bufs.to_f32(v[s:s + chunk], dt).reshape(-1, keys, d)
                    sc = cp.matmul(qq, kk.transpose(0, 2, 1)) * scale
                    if mask is not None:
                        sc = (sc.reshape(-1, g, tq, keys) + mask).reshape(-1, g * tq, keys)
                    sc = cp.exp(sc - sc.max(axis=-1, keepdims=True))
                    sc /= sc.sum(axis=-1, keepdims=True)
                    o = cp.matmul(sc, vv).reshape(-1, g, tq, d).transpose(0, 2, 1, 3).reshape(-1, tq, g * d)
                    out[s:s + chunk] = bufs.from_f32(o, dt)

            kernels, how = 10 * (-(-bkv // chunk)), "CuPy fp32 scores, softmax, PV (chunked over KV heads)"

        heads = sample_indices(bkv, 3, rng)

        def reference():
            got = bufs.host("out", heads).reshape(len(heads), tq, g, d)
            qh = bufs.host("q", heads)  # [h, g, tq, d]
            kh = bufs.host("k", heads)[:, 0]
            vh = bufs.host("v", heads)[:, 0]
            sc = np.einsum("hgqd,hkd->hgqk", qh, kh) * scale
            if causal:
                allowed = np.arange(keys)[None, :] <= (np.arange(tq)[:, None] + (keys - tq))
                sc = np.where(allowed, sc, -np.inf)
            sc = np.exp(sc - sc.max(-1, keepdims=True))
            sc /= sc.sum(-1, keepdims=True)
            ref = np.einsum("hgqk,hkd->hqgd", sc, vh)
            return got, ref

        note = (f"{how}; {bkv} KV heads × {g} query heads, {tq} queries, {keys} keys, head dim {d}"
                + (", causal" if causal else ""))
        return PreparedRef(dev, op, bufs, run, reference, ["q", "k", "v"], rng, "cupy-ref attention", kernels, note,
                           tolerance=2 * TOLERANCE[dt])


# --------------------------------------------------------------------------- registry


def cuda_implementations(device: CudaDevice) -> tuple:
    """Every op implementation of ``device``; ``supports(op)`` says per op why one cannot run."""
    return (CupyKernels(device), NumbaKernels(device), CublasGemm(device), TorchGemm(device), CupyReference(device))


# --------------------------------------------------------------------------- GEMM probes


def gemm_probe_setup(device: CudaDevice, dtype: str, backend: str) -> Callable[..., ProbeRun]:
    """``setup(size=n)`` of the ``gemm-<dtype>[-torch]`` probes: an n×n×n GEMM (C = A·Wᵀ)
    through cuBLAS (``backend="cublas"``) or ``torch.matmul`` (``"torch"``)."""
    from roofprof.workload import Op

    def setup(*, size: int) -> ProbeRun:
        n = int(size)
        op = Op(f"gemm-probe-{n}", "gemm", "prefill", n, n, n, dtype, 2.0 * n**3, 3.0 * n * n * ITEMSIZE[dtype])
        rng = np.random.default_rng(n)
        impl = CublasGemm(device) if backend == "cublas" else TorchGemm(device)
        prep = impl.prepare(op, rng)
        for name in ("x", "w"):
            prep.bufs.fill_random(name, int(rng.integers(1, 2**31 - 1)))

        def run(reps: int) -> None:
            for _ in range(int(reps)):
                prep.run()

        return ProbeRun(run=run, flops_per_rep=2.0 * n**3, bytes_per_rep=3.0 * n * n * ITEMSIZE[dtype],
                        check=prep.check, working_set_bytes=3 * n * n * ITEMSIZE[dtype], release=prep.release,
                        params={"n": n, "backend": backend})

    return setup
