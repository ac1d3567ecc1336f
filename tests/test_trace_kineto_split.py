"""The live tracer's host/device split of torch's ``_KinetoEvent`` records follows torch's
own rule (a CPU event is an op only when ``linked_correlation_id() == 0``), checked with
event objects shaped like torch 2.11's (no ``activity_type()``) and with the real CPU
profiler."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from roofprof.tracing.kernels import HostEvent, TorchKernelProfiler, join_kernels

torch = pytest.importorskip("torch")


class _Event:
    """The ``_KinetoEvent`` methods the split reads, as torch 2.11 has them (no
    ``activity_type``)."""

    def __init__(self, name, device, corr, linked, start, end, thread=1):
        self._v = (name, device, corr, linked, start, end, thread)

    def name(self):
        return self._v[0]

    def device_type(self):
        return self._v[1]

    def correlation_id(self):
        return self._v[2]

    def linked_correlation_id(self):
        return self._v[3]

    def start_ns(self):
        return self._v[4]

    def end_ns(self):
        return self._v[5]

    def start_thread_id(self):
        return self._v[6]

    def is_user_annotation(self):
        return False


def _events_2_11():
    cpu, cuda = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA
    return [
        _Event("roofprof#0", cpu, 1, 0, 0, 100),
        _Event("aten::mm", cpu, 2, 0, 10, 90),
        _Event("roofprof#1", cpu, 3, 0, 200, 300),
        _Event("aten::add", cpu, 4, 0, 210, 290),
        # CUPTI's correlation id 2 collides with aten::mm's id; it links to aten::mm
        _Event("cudaLaunchKernel", cpu, 2, 2, 220, 230),
        _Event("gemm", cuda, 2, 2, 400, 450),
    ]


def test_runtime_launches_are_not_host_ops_without_activity_type():
    from roofprof.tracing.kernels import split_kineto

    events = _events_2_11()
    assert not hasattr(events[0], "activity_type")
    host, kernels = split_kineto(events, torch.autograd.DeviceType.CPU)
    assert [h.name for h in host] == ["roofprof#0", "aten::mm", "roofprof#1", "aten::add"]
    assert [k.name for k in kernels] == ["gemm"]
    joined = join_kernels(host, kernels)
    assert joined.call_s == {0: pytest.approx(50e-9)}


def test_the_live_profiler_joins_the_kernel_to_its_op_on_torch_2_11_events():
    """The tracer's own profiler object, fed torch 2.11-shaped events: the kernel joins the
    call of ``aten::mm`` (its link), not the call the colliding launch event lies in."""
    prof = object.__new__(TorchKernelProfiler)
    results = SimpleNamespace(events=_events_2_11)
    prof._torch, prof._prof = (
        torch,
        SimpleNamespace(profiler=SimpleNamespace(kineto_results=results)),
    )
    host, kernels = prof.events()
    assert "cudaLaunchKernel" not in {h.name for h in host}
    # call 0 (roofprof#0) holds aten::mm; the launch itself lies in call 1
    assert join_kernels(host, kernels).call_s == {0: pytest.approx(50e-9)}


def test_real_cpu_profiler_events_split():
    from roofprof.tracing.kernels import split_kineto

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with torch.profiler.record_function("roofprof#0"):
            _ = torch.randn(16, 16) @ torch.randn(16, 16)
    host, kernels = split_kineto(
        prof.profiler.kineto_results.events(), torch.autograd.DeviceType.CPU
    )
    names = {h.name for h in host}
    assert {"roofprof#0", "aten::mm"} <= names and not kernels
    assert all(isinstance(h, HostEvent) and h.end_ns >= h.start_ns for h in host)
