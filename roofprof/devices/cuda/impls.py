"""Op implementations on a CUDA GPU (:class:`~roofprof.devices.base.OpImpl`).

GEMM/GEMV ops of :func:`roofprof.models.ops` (``y[m,n] = x[m,k]·W[n,k]ᵀ``, the
``nn.Linear`` layout) run through:

| name | kernels | dtypes |
| --- | --- | --- |
| ``cupy`` | own CUDA C via CuPy: ``gemv.cu`` for ``m ≤ 16``, ``gemm_mma.cu`` above | bf16, fp16 |
| ``numba`` | registry: ``gemv_<dt>`` for ``m ≤ 16``, ``gemm_tiled_<dt>`` above | fp32, fp16 |
| ``cublas`` | cuBLAS: ``cupy.matmul`` (fp64, fp32, fp16), ``cublasGemmEx`` | all five |
| ``torch`` | ``torch.matmul`` on CUDA (when torch has CUDA) | fp64, fp32, fp16, bf16 |

``gemv.cu`` splits K when the N blocks would not fill the GPU; ``gemm_mma.cu`` uses
``mma.sync``. The ``numba`` registry is ``kernels/numba_cuda.py``. ``cublas`` covers all
five of fp64, fp32, tf32, fp16 and bf16, through ``cublasGemmEx`` for bf16 (and for tf32
compute).

The other ops of a pass (RMSNorm, RoPE, residual adds, SiLU·mul, the embedding gather,
fused attention) run through ``cupy-ref``: plain CuPy array code computing in float32
(bf16 stored as its 16 bits), and fused attention through ``torch``'s SDPA when torch has
CUDA (else CuPy: batched matmuls and a softmax, chunked over heads). It exists so that a
profile on a GPU without torch covers the whole pass; with torch, ``roofprof.profile``
also adds ``torch-eager`` (:mod:`roofprof.profiling.torch_ops`).

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

from roofprof.devices.base import CheckResult, OpImpl, ProbeRun, compare
from roofprof.devices.cuda._runtime import CudaKernelError, kernels_module
from roofprof.devices.cuda.buffers import (
    ITEMSIZE,
    CupyBuffers,
    TorchBuffers,
    check_tolerance,
    numba_cuda_reason,
    sample_indices,
    torch_cuda_reason,
)
from roofprof.devices.cuda.reference import CupyReference
from roofprof.errors import ConfigError
from roofprof.workload import Op

if TYPE_CHECKING:
    from roofprof.devices.cuda.device import CudaDevice

__all__ = [
    "CUBLAS_DTYPES",
    "GEMV_MAX_M",
    "CublasGemm",
    "CupyKernels",
    "NumbaKernels",
    "PreparedGemm",
    "TorchGemm",
    "cublas_gemm_nt",
    "cuda_implementations",
    "gemm_probe_setup",
    "gemv_prepared",
    "torch_fp8_gemm_reason",
    "torch_fp8_gemm_setup",
    "torch_gemm_nt",
]

GEMV_MAX_M = 16
SAMPLE_ROWS = 16
SAMPLE_COLS = 64
#: The dtypes cuBLAS GEMMs run here (fp8/int8 need cuBLASLt).
CUBLAS_DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16")


# --------------------------------------------------------------------------- cuBLAS / torch calls


def _cublas_consts():
    from cupy_backends.cuda.api import runtime
    from cupy_backends.cuda.libs import cublas

    return cublas, {
        "N": getattr(cublas, "CUBLAS_OP_N", 0),
        "T": getattr(cublas, "CUBLAS_OP_T", 1),
        "compute_32f": getattr(cublas, "CUBLAS_COMPUTE_32F", 68),
        "compute_tf32": getattr(cublas, "CUBLAS_COMPUTE_32F_FAST_TF32", 77),
        "algo": getattr(cublas, "CUBLAS_GEMM_DEFAULT", -1),
        "bf16": getattr(runtime, "CUDA_R_16BF", 14),
        "f32": getattr(runtime, "CUDA_R_32F", 0),
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
        cublas.gemmEx(
            handle,
            c["T"],
            c["N"],
            n,
            m,
            k,
            alpha.ctypes.data,
            w.data.ptr,
            dtype_code,
            k,
            a.data.ptr,
            dtype_code,
            k,
            beta.ctypes.data,
            out.data.ptr,
            dtype_code,
            n,
            compute,
            c["algo"],
        )
    except Exception as exc:
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

    def __init__(
        self,
        device: CudaDevice,
        op: Op,
        rng: np.random.Generator,
        bufs: Any,
        runner: Callable[[], Any],
        name: str,
        *,
        kernels: int = 1,
        note: str = "",
        extra: Sequence[Any] = (),
    ):
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
            return CheckResult(
                False,
                math.inf,
                math.inf,
                check_tolerance(op.dtype, op.k),
                f"{self.name}: {bad} of {op.m * op.n} outputs not finite (poison left, or NaN)",
            )
        rows = sample_indices(op.m, SAMPLE_ROWS, rng)
        cols = sample_indices(op.n, SAMPLE_COLS, rng)
        ref = b.host("x", rows) @ b.host("w", cols).T
        got = b.host("y", rows, cols)
        return compare(
            got,
            ref,
            check_tolerance(op.dtype, op.k),
            f"{self.name} vs float64 numpy on a {len(rows)}×{len(cols)} sampled block; "
            "output poisoned with NaN, every element finite",
        )

    def release(self) -> None:
        self.bufs.release()
        self._extra.clear()
        self.device.release_memory()


class _GemmImpl:
    """What the GEMM implementations share: the device, and the GEMM/dtype prelude of
    :meth:`supports` (subclasses add their own limits in :meth:`_supports`)."""

    name = "gemm"
    #: dtypes this implementation runs; an op in another dtype gets :meth:`_dtype_reason`.
    DTYPES: tuple[str, ...] = ()

    def __init__(self, device: CudaDevice):
        self.device = device

    def supports(self, op: Op) -> str | None:
        """None when ``op`` runs here, otherwise why not (one line)."""
        if op.kind != "gemm":
            return f"{self.name} implements GEMM/GEMV ops only, not {op.kind!r}"
        if op.batch != 1:
            return f"{self.name}: batched GEMMs (batch={op.batch}) are not implemented"
        if min(op.m, op.n, op.k) < 1:
            return f"empty GEMM shape m={op.m} n={op.n} k={op.k}"
        if op.dtype not in self.DTYPES:
            return self._dtype_reason(op.dtype)
        return self._supports(op)

    def _dtype_reason(self, dtype: str) -> str:
        return f"{self.name} has no {dtype} path here"

    def _supports(self, op: Op) -> str | None:
        return None

    def _refuse(self, op: Op) -> None:
        reason = self.supports(op)
        if reason:
            raise ConfigError(reason)


class CupyKernels(_GemmImpl):
    """Own CUDA C through CuPy: ``gemv.cu`` (m ≤ 16) and ``gemm_mma.cu`` (bf16/fp16)."""

    name = "cupy"
    DTYPES = ("bf16", "fp16")

    def _dtype_reason(self, dtype: str) -> str:
        return f"own CUDA C kernels are bf16/fp16 only, not {dtype}"

    def _supports(self, op: Op) -> str | None:
        if op.m <= GEMV_MAX_M:
            return self.device.unsupported(op.dtype, "gemv")
        if op.k % 8:
            return f"gemm_mma.cu needs K % 8 == 0, got K={op.k}"
        return self.device.unsupported(op.dtype, "mma.sync")

    def prepare(self, op: Op, rng: np.random.Generator) -> PreparedGemm:
        self._refuse(op)
        dev = self.device
        cm = dev.kernels.models
        m, n, k = op.m, op.n, op.k
        if m <= GEMV_MAX_M:
            return gemv_prepared(dev, op, rng, cm.gemv_plan(m, n, k, op.dtype, dev.sm_count))
        launch = cm.gemm_launch(m, n, k, op.dtype)
        bufs = CupyBuffers(
            dev, {"x": (m, k), "w": (n, k), "y": (m, n)}, op.dtype, f"op {op.name!r} ({self.name})"
        )
        x, w, y = bufs["x"], bufs["w"], bufs["y"]
        args = (x, w, y, np.int32(m), np.int32(n), np.int32(k))

        def run() -> None:
            dev.launch(launch.entry, launch.grid, launch.block, args)

        return PreparedGemm(
            dev,
            op,
            rng,
            bufs,
            run,
            launch.entry,
            note=f"{launch.entry} grid {launch.grid}, mma.sync m16n8k16, 128×128×32 tiles",
        )


def gemv_prepared(
    dev: CudaDevice,
    op: Op,
    rng: np.random.Generator,
    plan: Any,
    ldx: int | None = None,
    ldw: int | None = None,
) -> PreparedGemm:
    """A :class:`PreparedGemm` running ``gemv.cu`` by ``plan`` (``cuda_models.gemv_plan``).

    ``ldx``/``ldw`` > K pad the rows (x [m, ldx], W [n, ldw], the op reads the first K).
    """
    m, n, k = op.m, op.n, op.k
    ldx, ldw = ldx or k, ldw or k
    bufs = CupyBuffers(
        dev,
        {"xs": (m, ldx), "ws_": (n, ldw), "y": (m, n)},
        op.dtype,
        f"op {op.name!r} (cupy gemv)",
        extra_bytes=plan.workspace_bytes,
    )
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
        args = (
            xs,
            wsb,
            work,
            np.int32(m),
            np.int32(n),
            np.int32(k),
            np.int32(ldx),
            np.int32(ldw),
            np.int32(plan.k_chunk),
        )
        red_args = (work, y, np.int32(m), np.int32(n), np.int32(plan.splits))

    def run() -> None:
        dev.launch(main.entry, main.grid, main.block, args)
        if red is not None:
            dev.launch(red.entry, red.grid, red.block, red_args)

    name = main.entry + (f" + {red.entry}" if red is not None else "")
    note = (
        f"{main.entry} grid {main.grid}"
        + (f", split-K {plan.splits}×{plan.k_chunk} + {red.entry}" if red else "")
        + (f", padded rows ldx={ldx} ldw={ldw}" if (ldx, ldw) != (k, k) else "")
    )
    return PreparedGemm(
        dev,
        op,
        rng,
        bufs,
        run,
        name,
        kernels=2 if red is not None else 1,
        note=note,
        extra=[work] if work is not None else [],
    )


class NumbaKernels(_GemmImpl):
    """``kernels/numba_cuda.py`` registry kernels: GEMV (m ≤ 16) and tiled GEMM, fp32/fp16."""

    name = "numba"
    DTYPES = ("fp32", "fp16")

    def _dtype_reason(self, dtype: str) -> str:
        return f"the Numba kernels are fp32/fp16 only (numba has no {dtype} arithmetic here)"

    def _supports(self, op: Op) -> str | None:
        return numba_cuda_reason()

    def prepare(self, op: Op, rng: np.random.Generator) -> PreparedGemm:
        """Buffers through CuPy on ``cuda:N``; the Numba views, the kernel and every launch
        inside ``numba.cuda.gpus[N]`` (numba-cuda's current context is device 0 otherwise,
        and the kernel would read another GPU's memory)."""
        self._refuse(op)
        cuda = _numba_cuda()
        nk = kernels_module("numba_cuda")
        dev = self.device
        key = f"{'gemv' if op.m <= GEMV_MAX_M else 'gemm_tiled'}_{op.dtype}"
        spec = nk.KERNELS[key]
        shape = {"M": op.m, "N": op.n, "K": op.k}
        bufs = CupyBuffers(
            dev,
            {"x": (op.m, op.k), "w": (op.n, op.k), "y": (op.m, op.n)},
            op.dtype,
            f"op {op.name!r} ({self.name})",
        )
        gpu = cuda.gpus[int(dev.info.index)]
        with gpu:
            views = {"x": cuda.as_cuda_array(bufs["x"]), "w": cuda.as_cuda_array(bufs["w"])}
            out = cuda.as_cuda_array(bufs["y"])
            grid, block = spec.launch(shape, dev.sm_count)
            kern = spec.kernel_for(shape, dev.sm_count)[grid, block]
        args = spec.call_args(views, out)

        def run() -> None:
            dev.last_kernel = f"numba {key}"
            with gpu:
                kern(*args)

        return PreparedGemm(
            dev,
            op,
            rng,
            bufs,
            run,
            f"numba {key}",
            note=f"numba {key} grid {grid} block {block}",
            extra=[views, out],
        )


def _numba_cuda() -> Any:
    """``numba.cuda`` (a function so that tests can stand in a fake with several GPUs)."""
    from numba import cuda

    return cuda


class CublasGemm(_GemmImpl):
    """cuBLAS GEMM/GEMV (``cupy.matmul``; bf16/tf32 through ``cublasGemmEx``)."""

    name = "cublas"
    DTYPES = CUBLAS_DTYPES

    def _dtype_reason(self, dtype: str) -> str:
        return f"no cuBLAS path for {dtype} here (fp8/int8 need cuBLASLt)"

    def _supports(self, op: Op) -> str | None:
        reason = self.device.unsupported(op.dtype, "cublas")
        if reason or op.dtype not in ("bf16", "tf32"):
            return reason
        try:
            _cublas_consts()
        except Exception as exc:  # noqa: BLE001 - ImportError when libcublas is missing
            return f"CuPy's cuBLAS binding is unavailable: {exc}"
        return None

    def prepare(self, op: Op, rng: np.random.Generator) -> PreparedGemm:
        self._refuse(op)
        dev = self.device
        bufs = CupyBuffers(
            dev,
            {"x": (op.m, op.k), "w": (op.n, op.k), "y": (op.m, op.n)},
            op.dtype,
            f"op {op.name!r} ({self.name})",
        )
        x, w, y = bufs["x"], bufs["w"], bufs["y"]
        call = "cublasGemmEx" if op.dtype in ("bf16", "tf32") else "cupy.matmul"
        return PreparedGemm(
            dev,
            op,
            rng,
            bufs,
            lambda: cublas_gemm_nt(dev, x, w, y, op.dtype),
            f"cuBLAS {op.dtype} ({call})",
            note=f"{call}, C = A·Wᵀ",
        )


class TorchGemm(_GemmImpl):
    """``torch.matmul`` on the GPU (when torch has CUDA)."""

    name = "torch"
    DTYPES = ("fp64", "fp32", "fp16", "bf16")

    def _dtype_reason(self, dtype: str) -> str:
        return f"torch.matmul has no {dtype} path here"

    def _supports(self, op: Op) -> str | None:
        return torch_cuda_reason() or self.device.unsupported(op.dtype, "cublas")

    def prepare(self, op: Op, rng: np.random.Generator) -> PreparedGemm:
        self._refuse(op)
        dev = self.device
        bufs = TorchBuffers(
            dev,
            {"x": (op.m, op.k), "w": (op.n, op.k), "y": (op.m, op.n)},
            op.dtype,
            f"op {op.name!r} ({self.name})",
        )
        x, w, y = bufs["x"], bufs["w"], bufs["y"]

        def run() -> None:
            dev.last_kernel = "torch.matmul"
            torch_gemm_nt(x, w, y)

        return PreparedGemm(
            dev, op, rng, bufs, run, f"torch.matmul {op.dtype}", note="torch.matmul(x, w.t())"
        )


# --------------------------------------------------------------------------- registry


def cuda_implementations(device: CudaDevice) -> tuple[OpImpl, ...]:
    """Every op implementation of ``device``; ``supports(op)`` says per op why one cannot run.
    Every one (the GEMMs and ``cupy-ref``) times ops estimated under 20 µs as N back-to-back
    calls per event pair (:class:`~roofprof.devices.cuda.batching.SmallOpBatching`)."""
    from roofprof.devices.cuda.batching import SmallOpBatching

    kinds = (CupyKernels, NumbaKernels, CublasGemm, TorchGemm, CupyReference)
    return tuple(SmallOpBatching(kind(device), device) for kind in kinds)


# --------------------------------------------------------------------------- GEMM probes


def gemm_probe_setup(device: CudaDevice, dtype: str, backend: str) -> Callable[..., ProbeRun]:
    """``setup(size=n)`` of the ``gemm-<dtype>[-torch]`` probes: an n×n×n GEMM (C = A·Wᵀ)
    through cuBLAS (``backend="cublas"``) or ``torch.matmul`` (``"torch"``)."""

    def setup(*, size: int) -> ProbeRun:
        n = int(size)
        op = Op(
            f"gemm-probe-{n}",
            "gemm",
            "prefill",
            n,
            n,
            n,
            dtype,
            2.0 * n**3,
            3.0 * n * n * ITEMSIZE[dtype],
            fn="linear",
        )
        rng = np.random.default_rng(n)
        impl = CublasGemm(device) if backend == "cublas" else TorchGemm(device)
        prep = impl.prepare(op, rng)
        for name in ("x", "w"):
            prep.bufs.fill_random(name, int(rng.integers(1, 2**31 - 1)))

        def run(reps: int) -> None:
            for _ in range(int(reps)):
                prep.run()

        return ProbeRun(
            run=run,
            flops_per_rep=2.0 * n**3,
            bytes_per_rep=3.0 * n * n * ITEMSIZE[dtype],
            check=prep.check,
            working_set_bytes=3 * n * n * ITEMSIZE[dtype],
            release=prep.release,
            params={"n": n, "backend": backend},
        )

    return setup


# ---------------------------------------------------------------- fp8 GEMM probe (torch._scaled_mm)


def torch_fp8_gemm_reason(device: CudaDevice) -> str | None:
    """Why the ``gemm-fp8-torch`` probe (``torch._scaled_mm``, e4m3) cannot run here (None: it
    can): torch without CUDA, a torch without ``_scaled_mm``/``float8_e4m3fn``, or a GPU
    before sm_89. Never raises."""
    reason = torch_cuda_reason()
    if reason:
        return reason
    import torch

    missing = [n for n in ("_scaled_mm", "float8_e4m3fn") if not hasattr(torch, n)]
    if missing:
        return (
            f"torch {torch.__version__} has no {' or '.join(missing)} (fp8 GEMMs need torch >= 2.1)"
        )
    if tuple(device.cc) < (8, 9):
        return (
            f"fp8 (e4m3) GEMMs need compute capability 8.9 or newer (sm_89+); this GPU is "
            f"sm_{device.cc[0]}{device.cc[1]}"
        )
    return None


def torch_fp8_gemm_setup(device: CudaDevice) -> Callable[..., ProbeRun]:
    """``setup(size=n)`` of ``gemm-fp8-torch``: ``torch._scaled_mm`` of n×n e4m3 A and Wᵀ (W
    row-major, so Wᵀ is the column-major operand cuBLASLt wants) with per-tensor float32
    scales 1.0, bf16 out: the GEMM that reaches Hopper's native fp8 tensor path.

    The inputs are multiples of 1/2 in [-4, 4], exact in e4m3, so the check compares a
    sampled block with the float64 product at bf16 output tolerance.
    """

    def setup(*, size: int) -> ProbeRun:
        import torch

        n = int(size)
        dev = f"cuda:{device.info.index}"
        rng = np.random.default_rng(n)
        device.require(2 * n * n + 2 * n * n + 8 * n * n, f"the fp8 GEMM probe (n={n})")

        def operand() -> tuple[np.ndarray, Any]:
            host = (rng.integers(-8, 9, size=(n, n)) / 2.0).astype(np.float32)
            return host, torch.from_numpy(host).to(dev).to(torch.float8_e4m3fn)

        a_host, a = operand()
        w_host, w = operand()
        one = torch.ones((), dtype=torch.float32, device=dev)
        out: list[Any] = []

        def call() -> Any:
            device.last_kernel = "torch._scaled_mm (fp8 e4m3)"
            y = torch._scaled_mm(a, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            # torch 2.1-2.4: (out, amax) (pytorch#106844); one tensor from 2.5 (#128683)
            return y[0] if isinstance(y, tuple) else y

        def run(reps: int) -> None:
            for _ in range(int(reps)):
                call()

        def check() -> CheckResult:
            y = call()
            device.checked("torch._scaled_mm (fp8 e4m3)")
            got_all = np.asarray(y.float().cpu().numpy(), dtype=np.float64)
            rows, cols = sample_indices(n, SAMPLE_ROWS, rng), sample_indices(n, SAMPLE_COLS, rng)
            ref = a_host[rows].astype(np.float64) @ w_host[cols].astype(np.float64).T
            return compare(
                got_all[np.ix_(rows, cols)],
                ref,
                check_tolerance("bf16", n),
                "torch._scaled_mm e4m3 (inputs exact in e4m3, scales 1.0, bf16 out) "
                "vs float64 numpy "
                f"on a {len(rows)}×{len(cols)} sampled block",
            )

        def release() -> None:
            out.clear()
            device.release_memory()

        return ProbeRun(
            run=run,
            flops_per_rep=2.0 * n**3,
            bytes_per_rep=2.0 * n * n + 2.0 * n * n,
            check=check,
            working_set_bytes=4 * n * n,
            release=release,
            params={
                "n": n,
                "backend": "torch._scaled_mm",
                "scales": "per-tensor 1.0",
                "out_dtype": "bf16",
            },
        )

    return setup
