"""The GPU path of ``roofprof.trace`` without a GPU: a fake profiler emits host ranges and
kernel intervals (fake events and clock, never fake kernels), the tracer joins them to
its calls exactly; replays go through the device's own clock. One real-GPU test."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools

import pytest

torch = pytest.importorskip("torch")

import roofprof  # noqa: E402
from roofprof.roofline import Ceiling, Roofline  # noqa: E402
from roofprof.tracing.kernels import HostEvent, KernelEvent, join_kernels, union_s  # noqa: E402

ROOFLINE = Roofline(
    "fake gpu",
    (
        Ceiling("fp32 peak", "compute", 1e12, dtype="fp32", source="measured"),
        Ceiling("DRAM", "memory", 1e11, level="dram", source="measured"),
    ),
)


class FakeProfiler:
    """Host ranges on a fake ns clock; every call range gets an inner aten op whose kernels
    the script below decides: ``aten::mm`` two overlapping kernels, others one; plus one
    kernel of no op (a fused kernel) per window stretch, and one kernel launched outside
    the window, which must not count."""

    def __init__(self):
        self.clock = itertools.count(1000, 10)
        self.ids = itertools.count(1)
        self.host: list[HostEvent] = []
        self.kernels: list[KernelEvent] = []
        self.gpu_t = 10_000_000
        self.entered = self.exited = False

    def __enter__(self):
        self.entered = True
        return self

    def __exit__(self, *exc):
        self.exited = True
        # a kernel launched before the window (warm-up): not counted
        self.kernels.append(KernelEvent("warmup_kernel", 1, 2, 0, launched_ns=5))

    @contextlib.contextmanager
    def range(self, name):
        start, rid = next(self.clock), next(self.ids)
        if name.startswith("roofprof#"):
            op_id, op_start = next(self.ids), next(self.clock)
            yield
            op_end = next(self.clock)
            self.host.append(HostEvent(op_id, "aten::inner", op_start, op_end, thread=7))
            self._kernels(op_id, name)
        else:
            yield
            if name == "roofprof.window":  # a fused kernel nobody's op launched, in the window
                t = next(self.clock)
                self.kernels.append(
                    KernelEvent("triton_fused", self.gpu_t, self.gpu_t + 3000, 0, launched_ns=t)
                )
                self.gpu_t += 5000
            if name == "roofprof.tracer":  # the tracer's own kernels: not counted
                self.kernels.append(KernelEvent("tracer_kernel", 0, 50, 0, launched_ns=start + 1))
        self.host.append(HostEvent(rid, name, start, next(self.clock), thread=7))

    def _kernels(self, op_id, name):
        n = int(name.split("#")[1])
        t = self.gpu_t
        # every call: a 2000 ns kernel and an overlapping 1000 ns tail (union 2500 ns)
        self.kernels.append(KernelEvent(f"k{n}", t, t + 2000, op_id))
        self.kernels.append(KernelEvent(f"k{n}_tail", t + 1500, t + 2500, op_id))
        self.gpu_t += 4000

    def events(self):
        return list(self.host), list(self.kernels)


class AsyncCpu:
    """The CPU device declaring itself asynchronous (what a GPU declares), for the seam."""

    def __init__(self):
        from roofprof.devices import select

        self._cpu = select("cpu")
        self.info = dataclasses.replace(self._cpu.info, asynchronous=True)
        self.clocks = 0
        self.syncs = 0

    def synchronize(self):
        self.syncs += 1

    def clock(self):
        self.clocks += 1
        return self._cpu.clock()

    def __getattr__(self, name):
        return getattr(self._cpu, name)


def test_union_and_join_rules():
    assert union_s([(0, 10), (2, 4), (20, 25)]) == pytest.approx(15e-9)
    host = [
        HostEvent(1, "roofprof.window", 0, 1000),
        HostEvent(2, "roofprof#4", 10, 100),
        HostEvent(3, "aten::addmm", 20, 90),
        HostEvent(9, "aten::outside", 2000, 2100),
        HostEvent(10, "roofprof.tracer", 500, 600),
    ]
    kernels = [
        KernelEvent("gemm", 0, 100, 3),
        KernelEvent("gemm", 50, 150, 3),  # union 150
        KernelEvent("by_range", 200, 210, 2),  # launched by the range itself
        KernelEvent("late", 0, 10, 9),  # its op is outside the window
        KernelEvent("tracer", 0, 10, 0, launched_ns=550),  # the tracer's own
        KernelEvent("nccl", 0, 40, 0, launched_ns=300),  # no op, in the window
        KernelEvent("bw_fused", 0, 30, 11),
    ]  # an op on autograd's thread, in the window
    host.append(HostEvent(11, "aten::other_thread_op", 400, 450, thread=99))
    j = join_kernels(host, kernels)
    assert j.call_s == {4: pytest.approx(160e-9)} and j.kernels == 3
    assert [(r.name, r.count, r.time_s) for r in j.unattributed] == [
        ("nccl", 1, pytest.approx(40e-9)),
        ("bw_fused", 1, pytest.approx(30e-9)),
    ]


def test_tracer_joins_fake_profiler_kernels_to_each_call():
    prof, dev = FakeProfiler(), AsyncCpu()
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    with roofprof.trace(
        device=dev,
        roofline=ROOFLINE,
        warmup=1,
        replay=True,
        replay_budget_s=0.001,
        kernel_profiler=prof,
    ) as t:
        for _ in range(3):
            torch.mm(a, b).relu()
            t.step()
    assert prof.entered and prof.exited
    r = t.result
    mm = next(o for o in r.ops if o.op == "aten::mm")
    relu = next(o for o in r.ops if o.op == "aten::relu")
    assert mm.count == 2 and relu.count == 2  # steps 1 and 2
    assert mm.time_s == pytest.approx(2 * 2500e-9) and mm.time_per_call_s == pytest.approx(2500e-9)
    assert mm.flops == 2 * 8 * 16 * 4 and mm.replay_s is not None  # replayed on the device's clock
    assert dev.clocks >= 1 and dev.syncs >= 2  # window edges synchronise
    fused = next(o for o in r.ops if o.op == "kernel::triton_fused")
    assert fused.flags == ("kernel-only",) and fused.kind == "kernel" and fused.flops is None
    assert fused.count == 1 and fused.time_s == pytest.approx(
        3000e-9
    )  # one window stretch (steps 1-2)
    assert not [o for o in r.ops if "warmup_kernel" in o.op or "tracer_kernel" in o.op]
    s = r.summary
    assert s.op_time_s == pytest.approx(4 * 2500e-9 + 3000e-9)
    assert s.coverage == pytest.approx(4 * 2500e-9 / s.op_time_s)  # the fused kernel has no cost
    assert ("(no op)", "-") in {(m.module, m.phase) for m in r.modules}
    assert "kernel-only" in r.table()


def test_profiler_ranges_are_not_recorded_as_ops():
    prof = FakeProfiler()
    with roofprof.trace(
        device=AsyncCpu(), roofline="none", replay=False, kernel_profiler=prof
    ) as t:
        with torch.profiler.record_function("user range"):
            torch.randn(4).exp()
    assert not [o for o in t.result.ops if o.op.startswith("profiler::")]
    import warnings

    with (
        warnings.catch_warnings()
    ):  # torch's own profiler on a CPU-only torch: no kernels, no crash
        warnings.simplefilter("ignore")
        with roofprof.trace(device=AsyncCpu(), roofline="none", replay=False, warmup=1) as t:
            for _ in range(2):
                torch.randn(4).exp()
                t.step()
    ops = {o.op: o for o in t.result.ops}
    assert set(ops) == {"aten::randn", "aten::exp"} and all(o.count == 1 for o in ops.values())


def test_torch_kernel_profiler_reads_host_ranges_from_kineto():
    import warnings

    from roofprof.tracing.kernels import TorchKernelProfiler

    with warnings.catch_warnings():  # a CPU-only torch warns that it disables CUDA activity
        warnings.simplefilter("ignore")
        prof = TorchKernelProfiler()
        with prof:
            with prof.range("roofprof.window"), prof.range("roofprof#0"):
                torch.randn(8, 8) @ torch.randn(8, 8)
    host, kernels = prof.events()
    names = [h.name for h in host]
    assert names[:2] == ["roofprof.window", "roofprof#0"] and "aten::mm" in names and kernels == []
    call = host[1]
    mm = next(h for h in host if h.name == "aten::mm")
    assert call.start_ns <= mm.start_ns <= mm.end_ns <= call.end_ns and mm.thread == call.thread


@pytest.mark.gpu
def test_real_gpu_trace_joins_kernels():
    dev = "cuda:0"
    a, b = torch.randn(1024, 1024, device=dev), torch.randn(1024, 1024, device=dev)
    with (
        torch.no_grad(),
        roofprof.trace(device=dev, roofline="spec", warmup=1, replay_budget_s=0.01) as t,
    ):
        for _ in range(3):
            (a @ b).relu()
            t.step()
    r = t.result
    mm = next(o for o in r.ops if o.op == "aten::mm")
    assert mm.count == 2 and mm.time_per_call_s > 0 and mm.replay_s and mm.replay_s > 0
    assert mm.flops == 2 * 1024**3 and mm.percent_of_roof is not None
    assert 0 < r.summary.op_time_s <= r.summary.wall_s
