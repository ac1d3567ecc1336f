"""µs ops timed as N calls per CUDA-event pair on every GPU implementation and in selftest.

``cudaEventElapsedTime`` resolves about 0.5 µs; one call per event pair puts a 2 µs op
up to 25 % off. The GEMM implementations already batched small ops; these tests cover the
ones that did not: ``torch-eager`` (the roll-up's reference), ``cupy-ref`` and selftest's
benchmark. The clock is the quantised event clock of tests/test_cuda_device.py (fake the
clock, not the kernel); the batching, the engine and selftest's timing are the real code.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
from fakegpu import fake_device
from test_cuda_device import QuantisedEventClock, TwoMicrosecondGemv, gemm_op

from roofprof.devices.base import CheckResult
from roofprof.devices.cuda.batching import BatchedPrepared, SmallOpBatching


class RotatingTwoMicrosecondOp:
    """Shaped like torch-eager's PreparedTorchOp: ``calls`` are equivalent calls over
    rotated weight copies (here 3), each 2 µs of simulated GPU time."""

    name = "sim-torch"

    def __init__(self, state, before_call=None):
        self.state, self.prepared, self.before_call = state, 0, before_call
        self.used: list[int] = []

    def supports(self, op):
        return None

    def prepare(self, op, rng):
        self.prepared += 1
        outer = self

        def call(i):
            def run():
                outer.used.append(i)
                outer.state["t"] += 2e-6

            return run

        return types.SimpleNamespace(
            op=op,
            calls=[call(i) for i in range(3)],
            run=call(0),
            check=lambda: CheckResult(True, 0.0, 0.0, 1e-3, "sim"),
            release=lambda: None,
            synchronize=lambda: None,
            kernels=1,
            note="torch-like",
            before_call=self.before_call,
        )


def _time(impl, state):
    from roofprof.profiling.engine import check_then_time

    return check_then_time(
        impl,
        gemm_op(1, 1024, 4096, "bf16"),  # ~2.5 µs on the H100 datasheet row
        np.random.default_rng(0),
        clock=QuantisedEventClock(state),
        budget_s=2e-3,
        warmup_s=0.0,
        max_repeats=50,
    )


def test_a_torch_like_op_is_batched_over_its_own_weight_copies():
    dev = fake_device(l2=50 << 20)
    state = {"t": 0.0}
    inner = RotatingTwoMicrosecondOp(state)
    m = _time(SmallOpBatching(inner, dev), state)
    assert m.status == "ok", m.note
    assert max(abs(t / 2e-6 - 1) for t in (m.timing.min_s, m.timing.median_s)) < 0.10
    assert inner.prepared == 1  # its own rotation, no extra copies of the weights
    assert set(inner.used) == {0, 1, 2}


def test_the_unbatched_torch_like_op_is_off_by_the_timer_resolution():
    state = {"t": 0.0}
    m = _time(RotatingTwoMicrosecondOp(state), state)
    assert max(abs(t / 2e-6 - 1) for t in (m.timing.min_s, m.timing.median_s)) >= 0.10


def test_an_op_that_needs_a_step_before_each_call_is_not_batched():
    dev = fake_device(l2=50 << 20)
    inner = RotatingTwoMicrosecondOp({"t": 0.0}, before_call=lambda: None)
    prepared = SmallOpBatching(inner, dev).prepare(gemm_op(1, 1024, 4096), np.random.default_rng(0))
    assert not isinstance(prepared, BatchedPrepared)


def test_cupy_ref_is_batched_like_the_gemms():
    dev = fake_device(l2=50 << 20)
    impls = {i.name: i for i in dev.implementations()}
    assert isinstance(impls["cupy-ref"], SmallOpBatching)


def test_the_profiler_batches_torch_eager_on_a_gpu():
    pytest.importorskip("torch")
    from roofprof.profiling.profiler import Profiler
    from roofprof.specs import load_model

    dev = fake_device(l2=50 << 20)
    stub = types.SimpleNamespace(device=dev, model=load_model("llama-3.2-1b"))
    impls = {i.name: i for i in Profiler._implementations(stub, None)}  # type: ignore[arg-type]
    eager = impls["torch-eager"]
    assert isinstance(eager, SmallOpBatching) and stub.reference_impl == "torch-eager"
    assert type(eager.inner).__name__ == "TorchOps" and eager.inner.device == "cuda:0"


def test_selftest_times_a_batched_small_op_per_call():
    from roofprof.selftest import sections

    dev = fake_device(l2=50 << 20)
    state = {"t": 0.0}
    op = gemm_op(1, 1024, 4096, "bf16")
    m = sections._measure(  # noqa: SLF001 - the function under test
        dev,
        SmallOpBatching(TwoMicrosecondGemv(state), dev),
        op,
        np.random.default_rng(0),
        QuantisedEventClock(state),
    )
    assert m.status == "ok", m.note
    assert max(abs(t / 2e-6 - 1) for t in (m.timing.min_s, m.timing.median_s)) < 0.10
