"""A numpy-backed fake GPU for CPU tests of roofprof's CUDA host code (not a test module).

``fake_cupy()`` returns a module-like namespace with the CuPy calls roofprof uses, backed
by numpy (device arrays are numpy arrays; events read ``time.perf_counter``);
``fake_nvml()`` an NVML with one GPU; ``FakeKernels`` executes the CUDA C entry points the
host launches with numpy replays (``gemv``/``gemm_mma`` as matrix products, the probes
through the replays in ``kernels/cuda_models.py``), optionally with a deliberate bug.

It proves the host side (launch arguments, buffers, poisoning, checks, accounting,
refusals, result files) without a GPU; it proves nothing about the kernels themselves.
"""

from __future__ import annotations

import time
import types

import numpy as np

from roofprof.devices.cuda import bf16_bits, bf16_to_f32
from roofprof.devices.cuda import probes as cpb


class FakeCudaError(RuntimeError):
    """Stands for cupy_backends' CUDARuntimeError."""


class _Event:
    def __init__(self, block=False, disable_timing=False, interprocess=False):
        self.t = None

    def record(self, stream=None):
        self.t = time.perf_counter()

    def synchronize(self):
        pass


class _Device:
    def __init__(self, index=0, cc="90", pci_bus_id="0000:1B:00.0"):
        self.id = index
        self.compute_capability = cc
        self.pci_bus_id = pci_bus_id

    def use(self):
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


class _Pool:
    def __init__(self):
        self.freed = 0

    def total_bytes(self):
        return 0

    def used_bytes(self):
        return 0

    def free_all_blocks(self):
        self.freed += 1


class _RandomState:
    def __init__(self, seed):
        self._r = np.random.RandomState(seed % (2**32))

    def random_sample(self, size=None, dtype=float):
        return self._r.random_sample(size).astype(dtype)

    def uniform(self, low=0.0, high=1.0, size=None, dtype=float):
        return self._r.uniform(low, high, size).astype(dtype)


def fake_cupy(
    *,
    name_cc: str = "90",
    sm: int = 4,
    l2: int = 1 << 20,
    free: int = 8 << 30,
    total: int = 16 << 30,
    clock_khz: int | None = 1_980_000,
    device_count: int = 1,
    pci_bus_ids: tuple[str, ...] = (),
    nvrtc: tuple[int, int] | None = (12, 9),
):
    """A CuPy stand-in: numpy arrays as device arrays, perf_counter events, fixed attributes.

    ``pci_bus_ids[i]`` is the PCI bus id of device ``i`` (default ``0000:1B:00.0`` for all);
    ``nvrtc`` what ``cupy.cuda.nvrtc.getVersion()`` returns (None: it raises, as when CuPy
    cannot load libnvrtc)."""
    cp = types.SimpleNamespace()
    for n in (
        "empty",
        "full",
        "zeros",
        "asarray",
        "count_nonzero",
        "isfinite",
        "matmul",
        "exp",
        "sqrt",
        "concatenate",
        "take",
        "triu",
        "array_equal",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "int64",
        "inf",
    ):
        setattr(cp, n, getattr(np, n))
    cp.__version__ = "fake"
    cp.asnumpy = lambda a: np.array(a)
    cp.random = types.SimpleNamespace(RandomState=_RandomState)
    attrs = {
        "cudaDevAttrMultiProcessorCount": (16, sm),
        "cudaDevAttrL2CacheSize": (38, l2),
        "cudaDevAttrClockRate": (13, clock_khz),
        "cudaDevAttrMemoryClockRate": (36, 2_619_000),
        "cudaDevAttrGlobalMemoryBusWidth": (37, 5120),
        "cudaDevAttrMaxSharedMemoryPerMultiprocessor": (81, 233472),
    }
    values = {code: v for code, v in attrs.values()}

    def get_attr(code, index):
        v = values.get(code)
        if v is None:
            raise FakeCudaError("cudaErrorInvalidValue")
        return v

    state = {"free": free, "sync_error": None, "memsets": 0, "memcpys": 0}

    def sync():
        if state["sync_error"]:
            raise FakeCudaError(state["sync_error"])

    runtime = types.SimpleNamespace(
        CUDARuntimeError=FakeCudaError,
        getDeviceCount=lambda: device_count,
        deviceGetAttribute=get_attr,
        memGetInfo=lambda: (state["free"], total),
        getDeviceProperties=lambda i: {"name": b"Fake GPU"},
        runtimeGetVersion=lambda: 12090,
        driverGetVersion=lambda: 12090,
        deviceSynchronize=sync,
        memsetAsync=lambda ptr, v, n, s: state.__setitem__("memsets", state["memsets"] + 1),
        memcpyAsync=lambda d, s, n, kind, st: state.__setitem__("memcpys", state["memcpys"] + 1),
        **{k: code for k, (code, _) in attrs.items()},
    )
    pool = _Pool()

    def elapsed(a, b):
        if state["sync_error"]:
            raise FakeCudaError(state["sync_error"])
        return (b.t - a.t) * 1000.0

    def nvrtc_get_version():
        if nvrtc is None:
            raise FakeCudaError("CuPy failed to load libnvrtc.so")
        return tuple(nvrtc)

    cp.cuda = types.SimpleNamespace(
        runtime=runtime,
        Event=_Event,
        get_elapsed_time=elapsed,
        nvrtc=types.SimpleNamespace(getVersion=nvrtc_get_version),
        Device=lambda i=0: _Device(i, name_cc, *pci_bus_ids[i : i + 1]),
        get_current_stream=lambda: types.SimpleNamespace(ptr=0),
        driver=types.SimpleNamespace(),
    )
    cp.get_default_memory_pool = lambda: pool
    cp.state = state
    return cp


class NVMLError(Exception):
    """Stands for pynvml.NVMLError."""


def fake_nvml(
    name: str = "NVIDIA H100 80GB HBM3",
    fail_init: bool = False,
    gpus: tuple[tuple[str, str], ...] | None = None,
):
    """An NVML with one GPU named ``name`` (``fail_init``: nvmlInit raises NVMLError), or the
    GPUs ``gpus`` given as ``(name, NVML PCI bus id)`` pairs in NVML index order.

    ``nv.calls`` counts ``nvmlInit``/``nvmlShutdown``."""
    gpus = tuple(gpus) if gpus is not None else ((name, "00000000:1B:00.0"),)
    nv = types.SimpleNamespace(
        NVMLError=NVMLError, NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2, calls={"init": 0, "shutdown": 0}
    )

    def init():
        nv.calls["init"] += 1
        if fail_init:
            raise NVMLError("Driver Not Loaded")

    def shutdown():
        nv.calls["shutdown"] += 1

    nv.nvmlInit = init
    nv.nvmlShutdown = shutdown
    nv.nvmlDeviceGetCount = lambda: len(gpus)
    nv.nvmlDeviceGetHandleByIndex = lambda i: ("h", i)
    nv.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=gpus[h[1]][1].encode())
    nv.nvmlDeviceGetName = lambda h: gpus[h[1]][0]
    nv.nvmlSystemGetDriverVersion = lambda: "580.00"
    nv.nvmlDeviceGetEnforcedPowerLimit = lambda h: 700_000
    nv.nvmlDeviceGetMaxClockInfo = lambda h, which: 1980 if which == 1 else 2619
    nv.nvmlDeviceGetClockInfo = lambda h, which: 1755 if which == 1 else 2619
    nv.nvmlDeviceGetPowerUsage = lambda h: 300_000
    nv.nvmlDeviceGetTemperature = lambda h, s: 40
    nv.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=90)
    nv.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0
    return nv


# --------------------------------------------------------------------------- kernels


def _f(a, dt):
    return bf16_to_f32(a).astype(np.float64) if dt == "bf16" else np.asarray(a, dtype=np.float64)


def _store(out, values, dt):
    if dt == "bf16":
        out[...] = bf16_bits(values.astype(np.float32))
    else:
        out[...] = values.astype(out.dtype)


class FakeKernels:
    """Executes launched CUDA C entry points with numpy; ``bug`` plants one mistake.

    bugs: ``gemv_tail`` (the scalar tail of K is skipped), ``gemm_edge`` (the last output
    column is not stored), ``read_wrong`` (the read probe folds one pass less),
    ``fma_never`` (the FMA probes never write), ``splitk_reduce`` (the reduce drops a split),
    ``delay_short`` (``probe_delay_ns`` reports half the time asked).
    """

    def __init__(self, bug: str | None = None):
        self.bug = bug
        self.launches: list[str] = []
        self.reads: list[tuple[str, int, int]] = []  # (entry, bytes of src read per pass, passes)
        self.delays: list[int] = []  # ns of each probe_delay_ns

    def __call__(self, entry, grid, block, args, shared_mem=0):
        self.launches.append(entry)
        threads = int(np.prod(grid) * np.prod(block))
        if entry.startswith("gemv_splitk_reduce_"):
            ws, y, m, n, splits = args
            dt = entry.rsplit("_", 1)[1]
            parts = ws.reshape(int(splits), int(m), int(n))
            if self.bug == "splitk_reduce":
                parts = parts[:-1]
            _store(y, parts.sum(axis=0).astype(np.float64), dt)
        elif entry.startswith("gemv_"):
            dt = entry.split("_")[-2]
            if entry.startswith("gemv_splitk_"):
                x, w, ws, m, n, k, ldx, ldw, chunk = args
            else:
                x, w, y, m, n, k, ldx, ldw = args
            m, n, k = int(m), int(n), int(k)
            kk = k - (k % 8) if self.bug == "gemv_tail" else k
            xs, wsv = _f(x, dt)[:m, :kk], _f(w, dt)[:n, :kk]
            if entry.startswith("gemv_splitk_"):
                chunk = int(chunk)
                splits = -(-k // chunk)
                part = ws.reshape(splits, m, n)
                for s in range(splits):
                    lo, hi = s * chunk, min(kk, (s + 1) * chunk)
                    part[s] = (xs[:, lo:hi] @ wsv[:, lo:hi].T).astype(np.float32)
            else:
                _store(y, xs @ wsv.T, dt)
        elif entry.startswith("gemm_mma_"):
            _, _, dt, out = entry.split("_")
            a, b, c, m, n, k = args
            res = _f(a, dt) @ _f(b, dt).T
            if self.bug == "gemm_edge":
                res = res[:, :-1]
                c = c[:, :-1]
            _store(c, res, dt if out != "f32" else "fp32")
        elif entry in ("probe_read_u4", "probe_read_l1_u4"):
            src, n_vec, passes, flag, out = args
            self.reads.append((entry, int(n_vec) * 16, int(passes)))
            if int(flag) == cpb.NEVER:
                return  # timing and flush launches: no thread's fold is 0xFFFFFFFF in practice
            p = int(passes) - (1 if self.bug == "read_wrong" else 0)
            folds = cpb.read_probe_folds(src.reshape(-1, 4)[: int(n_vec)], threads, max(p, 0))
            out[folds == flag] = flag
        elif entry == "probe_copy_u4":
            src, dst, n_vec = args
            dst.reshape(-1, 4)[: int(n_vec)] = src.reshape(-1, 4)[: int(n_vec)]
        elif entry == "probe_smem_u4":
            iters, seed, flag, out = args
            if int(flag) != cpb.NEVER:
                folds = cpb.smem_probe_fold(np.arange(threads) % block[0], int(seed), int(iters))
                out[folds == flag] = flag
        elif entry.startswith("probe_fma_"):
            iters, seed, flag, out = args
            if int(flag) != cpb.NEVER and self.bug != "fma_never" and int(iters) <= 4:
                dt = entry[len("probe_fma_") :]
                for t in (0, threads - 1):
                    fold = cpb.fma_probe_fold(dt, int(seed), t, int(iters), contracted_init=False)
                    if fold == int(flag):
                        out[t] = flag
        elif entry.startswith("probe_mma_"):
            iters, seed, flag, out = args
            if int(flag) == 0:
                out[:threads] = 0
        elif entry == "probe_intensity_fp32":
            src, n_vec, nfma, flag, out = args
            if int(flag) != cpb.NEVER:
                folds = cpb.intensity_probe_folds(
                    src.reshape(-1, 4)[: int(n_vec)], threads, int(nfma)
                )
                out[folds == flag] = flag
        elif entry == "probe_empty":
            pass
        elif entry == "probe_delay_ns":
            ns, out = args
            self.delays.append(int(ns))
            out[0] = int(ns) // 2 if self.bug == "delay_short" else int(ns) + 1500
        else:
            raise KeyError(entry)


def fake_device(
    *, cc: str = "90", name: str = "NVIDIA H100 80GB HBM3", bug: str | None = None, **kw
):
    """A ``CudaDevice`` on the fake CuPy/NVML whose launches run :class:`FakeKernels`."""
    from roofprof.devices.cuda import CudaDevice

    cp = fake_cupy(name_cc=cc, **kw)
    dev = CudaDevice(0, cupy=cp, nvml=fake_nvml(name))
    kernels = FakeKernels(bug)

    def launch(entry, grid, block, args, shared_mem=0):
        dev.last_kernel = entry
        kernels(entry, grid, block, args, shared_mem)

    def memset_async(array, value, what="cudaMemsetAsync"):
        dev.last_kernel = (
            what  # the bytes are not written: a 64 MiB fill per timed call is slow in numpy
        )
        cp.state["memsets"] += 1
        kernels.launches.append(f"memset {int(array.nbytes)}")

    def memcpy_d2d(dst, src, nbytes):
        dev.last_kernel = "cudaMemcpyAsync D2D"
        dst.view(np.uint8)[:nbytes] = src.view(np.uint8)[:nbytes]
        cp.state["memcpys"] += 1

    dev.launch = launch
    dev.memset_async = memset_async
    dev.memcpy_d2d = memcpy_d2d
    dev.fake_kernels = kernels
    return dev


# --------------------------------------------------------------------------- torch (fp8 GEMM probe)


class _FakeTensor:
    """A numpy array standing for a CUDA torch tensor: the calls the fp8 GEMM probe makes."""

    def __init__(self, a, dtype="float32"):
        self.a, self.dtype = np.asarray(a), dtype

    def to(self, where):
        if str(where).startswith("cuda"):
            return self  # a device
        if where == "float8_e4m3fn":
            # e4m3 has 3 mantissa bits: the probe's inputs (halves in [-4, 4]) are exact
            assert np.all(np.abs(self.a) <= 448)
        return _FakeTensor(self.a, where)

    def t(self):
        return _FakeTensor(self.a.T, self.dtype)

    def float(self):
        return _FakeTensor(self.a.astype(np.float32))

    def cpu(self):
        return self

    def numpy(self):
        return self.a


def fake_torch(
    *,
    scaled_mm: bool = True,
    cuda: bool = True,
    version: str = "2.11.0+cu130",
    scaled_mm_amax: bool = False,
):
    """A torch with CUDA (``cuda``) and ``_scaled_mm`` (``scaled_mm``): enough for
    ``gemm-fp8-torch``. ``t.scaled_mm_calls`` counts the GEMMs, with their dtypes and scales.

    ``scaled_mm_amax``: ``_scaled_mm`` returns ``(out, amax)`` as torch 2.1-2.4 do
    (native_functions.yaml ``_scaled_mm(...) -> (Tensor, Tensor)``, pytorch#106844; the
    tuple went in pytorch#128683 for 2.5), amax a float32 0-d tensor."""
    t = types.SimpleNamespace(
        __version__=version,
        float32="float32",
        bfloat16="bfloat16",
        float8_e4m3fn="float8_e4m3fn",
        scaled_mm_calls=[],
    )
    t.version = types.SimpleNamespace(cuda="13.0" if cuda else None)
    t.cuda = types.SimpleNamespace(is_available=lambda: cuda, is_initialized=lambda: False)
    t.from_numpy = lambda a: _FakeTensor(a)
    t.ones = lambda shape, dtype=None, device=None: _FakeTensor(
        np.ones(shape, dtype=np.float32), dtype
    )
    if scaled_mm:

        def _scaled_mm(a, b, *, scale_a, scale_b, out_dtype):
            t.scaled_mm_calls.append(
                (a.dtype, b.dtype, float(scale_a.a), float(scale_b.a), out_dtype)
            )
            prod = (
                (a.a.astype(np.float64) @ b.a.astype(np.float64))
                * float(scale_a.a)
                * float(scale_b.a)
            )
            out = _FakeTensor(bf16_to_f32(bf16_bits(prod.astype(np.float32))), out_dtype)
            if scaled_mm_amax:
                return out, _FakeTensor(np.float32(np.abs(prod).max()), "float32")
            return out

        t._scaled_mm = _scaled_mm
    return t


# --------------------------------------------------------------------- numba-cuda with several GPUs


def fake_numba_cuda(gpus: int = 2):
    """A ``numba.cuda`` with ``gpus`` devices: ``gpus[i]`` is a context manager that makes
    device ``i`` current (device 0 outside any, as in numba-cuda); ``as_cuda_array`` and
    every kernel launch record the device current at that moment in ``cuda.log``."""
    cuda = types.SimpleNamespace(current=[0], log=[])

    class _Ctx:
        def __init__(self, i):
            self.id = i

        def __enter__(self):
            cuda.current.append(self.id)

        def __exit__(self, *exc):
            cuda.current.pop()

    cuda.gpus = [_Ctx(i) for i in range(gpus)]

    def as_cuda_array(a):
        cuda.log.append(("as_cuda_array", cuda.current[-1]))
        return a

    cuda.as_cuda_array = as_cuda_array
    return cuda


def fake_numba_kernels(cuda):
    """A ``kernels/numba_cuda`` registry whose kernels record the device they launch on."""

    class _Kernel:
        def __getitem__(self, config):
            def launch(*args):
                cuda.log.append(("launch", cuda.current[-1]))

            return launch

    class _Spec:
        def launch(self, shape, sm_count):
            return (1,), (32,)

        def kernel_for(self, shape, sm_count):
            cuda.log.append(("compile", cuda.current[-1]))
            return _Kernel()

        def call_args(self, views, out):
            return (views["x"], views["w"], out)

    return types.SimpleNamespace(
        KERNELS={f"{k}_{d}": _Spec() for k in ("gemv", "gemm_tiled") for d in ("fp32", "fp16")}
    )
