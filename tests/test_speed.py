"""The main job's speed changes keep what they measure: shared inputs, sampled checks, grouped
sweeps.

Speed itself is a benchmark (``benchmarks/bench_run_speed.py``, BENCHMARKS.md), never a timed test:
these tests check the mechanisms (what is drawn once, what is flushed, how many calls are
made, which roofline is reused) with fake clocks and tiny shapes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
import types

import numpy as np
import pytest

from roofprof.cache import RooflineChoice
from roofprof.devices.cpu import CpuDevice
from roofprof.devices.pool import InputPool, cold_copies, stays_warm, tiled_normal
from roofprof.profiling.engine import check_then_time_group
from roofprof.timing import Case, interleave
from roofprof.workload import Op


class FakeClock:
    """Every timed call takes ``seconds`` (fake the clock, not the kernel)."""

    name = "fake"

    def __init__(self, seconds: float):
        self.seconds, self.stops = seconds, 0

    def start(self):
        pass

    def stop(self):
        self.stops += 1
        return self.seconds


def _gemm(name="w", m=4, n=96, k=64, phase="decode"):
    return Op(
        name,
        "gemm",
        phase,
        m,
        n,
        k,
        "fp32",
        2.0 * m * n * k,
        4.0 * (m * k + n * k + m * n),
        weight_bytes=4.0 * n * k,
        fn="linear",
    )


# --------------------------------------------------------------------------- inputs


def test_tiled_normal_has_no_periodic_rows_and_normal_statistics():
    x = tiled_normal((512, 2048), np.float32, seed=3)  # 1 M values: the block wraps once
    assert not any(np.array_equal(x[i], x[i + 1]) for i in range(511))
    assert abs(float(x.mean())) < 0.01 and abs(float(x.std()) - 1.0) < 0.01
    assert tiled_normal((8,), np.float64, seed=1, std=0.5).std() < 1.0


def test_op_inputs_skip_numpys_huge_page_advice_and_leave_the_default_as_it_was():
    from roofprof.devices.pool import small_pages

    switch = getattr(getattr(np, "_core", None), "multiarray", None)
    switch = getattr(switch, "_set_madvise_hugepage", None)
    if switch is None:
        pytest.skip("this numpy has no huge-page switch")
    before = switch(True)
    try:
        with small_pages():
            assert switch(False) is False  # off inside (reading it means setting it: set it back)
        assert switch(True) is True  # restored
        tiled_normal((64, 64), np.float32)
        assert switch(True) is True
    finally:
        switch(before)


def test_pool_shares_by_key_and_evicts_least_recently_used():
    pool = InputPool(max_bytes=3 * 800)
    made = []

    def make(tag):
        made.append(tag)
        return np.zeros(100)  # 800 bytes

    a = pool.get("a", lambda: make("a"))
    assert pool.get("a", lambda: make("again")) is a
    pool.get("b", lambda: make("b"))
    pool.get("c", lambda: make("c"))
    pool.get("a", lambda: make("a2"))  # a is now the most recent
    pool.get("d", lambda: make("d"))  # evicts b, the least recent
    assert made == ["a", "b", "c", "d"] and pool.bytes == 2400
    pool.get("b", lambda: make("b2"))
    assert made[-1] == "b2"
    big = pool.get("huge", lambda: np.zeros(1000))  # larger than the pool: made, not kept
    assert big.nbytes == 8000 and pool.bytes <= pool.max_bytes


def test_pool_never_evicts_a_buffer_an_op_still_holds():
    pool = InputPool(max_bytes=2 * 800)
    held = [pool.get(k, lambda: np.zeros(100)) for k in "abc"]  # three live ops' weights
    assert pool.bytes == 2400 and sorted(pool._items) == ["a", "b", "c"]
    again = pool.get("a", lambda: np.ones(100))
    assert again is held[0]  # still shared, never drawn twice while in use
    del held, again
    pool.get("d", lambda: np.zeros(100))  # now the unheld ones go, least recent first
    assert pool.bytes <= 1600 and "d" in pool._items


def test_cold_copies_exceed_twice_the_cache_and_leave_tiny_weights_warm():
    llc = 32 << 20
    for w in (2 << 20, 8 << 20, 64 << 20, 100 << 20):
        copies = cold_copies(w, llc, max_copies=64)
        assert (copies - 1) * w >= 2 * llc and (copies - 2) * w < 2 * llc
    assert cold_copies(1 << 30, llc) == 1  # four caches or more: evicts itself
    assert cold_copies(8192, llc) == 1 and stays_warm(8192, llc)
    # small weights rotate over 2 x LLC of copies too (capped by 4 x LLC of memory, not a count)
    for w in (64 << 10, 512 << 10, 2 << 20):
        copies = cold_copies(w, llc)
        assert (copies - 1) * w >= 2 * llc and copies * w <= 4 * llc + w
    assert cold_copies(32 << 10, llc) == 1  # under 1/512 of the cache: a few microseconds' read


def test_numpy_and_numba_share_one_weight_and_check_sampled_columns():
    dev = CpuDevice()
    numpy_impl, numba_impl = dev.implementations()
    op = _gemm(n=700, k=300)
    p1 = numpy_impl.prepare(op, np.random.default_rng(0))
    p2 = numba_impl.prepare(op, np.random.default_rng(1))
    assert p1.w is p2.w and p1.a is p2.a  # drawn once for both implementations
    bigger = numpy_impl.prepare(_gemm(m=64, n=700, k=300), np.random.default_rng(2))
    assert bigger.w is p1.w  # and across batch sizes
    for p in (p1, p2, bigger):
        check = p.check()
        assert check.ok and "256 columns" in check.note
    p1.kernel = lambda a, w, out: (
        np.matmul(a, w.T, out=out),
        out.__setitem__((slice(None), slice(None)), out * 1.01),
    )
    assert not p1.check().ok  # a kernel off by 1 % everywhere fails
    dev.release_buffers()
    assert dev.inputs.bytes == 0


def test_torch_numpy_and_numba_time_one_weight_buffer_on_the_cpu():
    pytest.importorskip("torch")
    from roofprof.profiling.torch_ops import TorchOps
    from roofprof.specs import ModelSpec

    dev = CpuDevice()
    torch_impl = TorchOps.for_device(ModelSpec("t", 64, 128, 1, 4, 2, 16, 100, False, 256), dev)
    assert torch_impl.inputs is dev.inputs
    numpy_impl, numba_impl = dev.implementations()
    rng = np.random.default_rng(0)
    first_torch = torch_impl.prepare(_gemm(n=700, k=300), rng)
    then_numpy = numpy_impl.prepare(_gemm(n=700, k=300), rng)
    assert np.shares_memory(then_numpy.w, first_torch.buffers[1][0].numpy())  # a view, not a copy
    first_numba = numba_impl.prepare(_gemm(n=500, k=300), rng)
    then_torch = torch_impl.prepare(_gemm(m=8, n=500, k=300), rng)
    assert np.shares_memory(then_torch.buffers[1][0].numpy(), first_numba.w)  # either order
    assert all(p.check().ok for p in (first_torch, then_numpy, first_numba, then_torch))
    dev.release_buffers()
    assert dev.inputs.bytes == 0


def test_torch_gemm_check_never_converts_the_whole_weight(monkeypatch):
    torch = pytest.importorskip("torch")
    from roofprof.profiling.torch_ops import TorchOps
    from roofprof.specs import ModelSpec

    spec = ModelSpec("t", 64, 128, 1, 4, 2, 16, 100, False, 256)
    impl = TorchOps(spec, cache_bytes=1 << 30)
    op = _gemm(m=3, n=3000, k=64)
    prepared = impl.prepare(op, np.random.default_rng(0))
    converted = []
    real = impl._np
    monkeypatch.setattr(impl, "_np", lambda t: (converted.append(t.numel()), real(t))[1])
    assert prepared.check().ok
    assert max(converted) <= 256 * 64  # sampled columns of the weight, not 3000 × 64
    again = impl.prepare(_gemm(m=9, n=3000, k=64), np.random.default_rng(1))
    assert again.buffers[1][0] is prepared.buffers[1][0]  # the weight is shared across batch sizes
    assert isinstance(again.buffers[1][0], torch.Tensor)


def test_torch_embedding_table_and_lm_head_weight_are_one_buffer_drawn_fast(monkeypatch):
    torch = pytest.importorskip("torch")
    from roofprof.models import llama_ops
    from roofprof.profiling.torch_ops import TorchOps
    from roofprof.specs import ModelSpec

    spec = ModelSpec(
        "t", 64, 128, 1, 4, 2, 16, 20000, False, 256
    )  # 20000 × 64: over a million values
    impl = TorchOps(spec, cache_bytes=1 << 30)
    drawn = []
    real_randn = torch.randn
    monkeypatch.setattr(torch, "randn", lambda *a, **k: (drawn.append(a), real_randn(*a, **k))[1])
    ops = {o.name: o for o in llama_ops(spec, "prefill", prompt_tokens=4, dtype="fp32").ops}
    emb = impl.prepare(ops["embedding"], np.random.default_rng(0))
    head = impl.prepare(ops["lm_head"], np.random.default_rng(1))
    assert emb.buffers[0] is head.buffers[1][0]  # one 20000 × 64 buffer for both
    assert emb.check().ok and head.check().ok
    assert (20000, 64) not in drawn  # tiled from the one random chunk, not drawn value by value


# --------------------------------------------------------------------------- timing


def test_a_checked_case_gets_no_extra_untimed_call():
    calls = []
    for warm in (False, True):
        calls.clear()
        interleave(
            [Case([lambda: calls.append(1)], warm=warm)],
            clock=FakeClock(0.001),
            rounds=3,
            budget_s=0.003,
            warmup_s=0.0,
        )
        assert len(calls) == (1 + 1 + 3 if not warm else 1 + 3)  # first call, estimate, samples


class SpreadClock(FakeClock):
    """Timed calls take ``seconds`` in turn (the first is the estimate)."""

    def __init__(self, *seconds: float):
        super().__init__(seconds[0])
        self.each = seconds

    def stop(self):
        self.stops += 1
        return self.each[(self.stops - 1) % len(self.each)]


def test_long_calls_stop_at_three_clean_samples_or_two_that_agree():
    n_calls = []
    [t] = interleave(
        [Case([lambda: n_calls.append(1)], warm=True)],
        clock=SpreadClock(0.5, 0.55),
        rounds=5,
        budget_s=0.15,
        warmup_s=0.0,
    )
    assert (
        t.n == 3 and len(n_calls) == 1 + 2
    )  # the estimate (kept as the first sample), then rounds 1-2
    assert t.samples_s[0] == t.estimate_s
    n_calls.clear()  # 0.5 s then 0.505 s: within LONG_CALL_AGREE, the third call is saved
    [agreeing] = interleave(
        [Case([lambda: n_calls.append(1)], warm=True)],
        clock=SpreadClock(0.5, 0.505),
        rounds=5,
        budget_s=0.15,
        warmup_s=0.0,
    )
    assert agreeing.n == 2 and len(n_calls) == 1 + 1 and agreeing.median_s == pytest.approx(0.5025)
    n_calls.clear()  # the sweeps' shapes beyond the validated point: two samples of a long call
    [two] = interleave(
        [Case([lambda: n_calls.append(1)], warm=True)],
        clock=SpreadClock(0.5, 0.55),
        rounds=5,
        budget_s=0.05,
        warmup_s=0.0,
        long_samples=2,
    )
    assert two.n == 2 and len(n_calls) == 1 + 1
    short = interleave(
        [Case([lambda: None], warm=True)],
        clock=FakeClock(0.01),
        rounds=5,
        budget_s=0.05,
        warmup_s=0.0,
    )[0]
    assert short.n == 5
    shares = iter([0.9, 0.9, 0.0, 0.0, 0.0])  # busy rounds do not count towards the three
    [busy] = interleave(
        [Case([lambda: None], warm=True)],
        clock=FakeClock(0.5),
        rounds=5,
        budget_s=0.15,
        warmup_s=0.0,
        judge_round=lambda run: (run(), next(shares))[1],
    )
    assert (
        busy.n == 2 and busy.rounds_kept == 3
    )  # the estimate's round was busy: two clean ones agree


def test_a_long_probe_call_gets_three_samples_a_short_one_its_minimum():
    from roofprof.timing import benchmark

    assert (
        benchmark(
            lambda: None,
            clock=SpreadClock(0.2, 0.2, 0.22),
            budget_s=0.2,
            warmup_s=0.0,
            min_repeats=5,
            few_for_long=True,
        ).n
        == 3
    )
    assert (
        benchmark(
            lambda: None,
            clock=FakeClock(0.2),
            budget_s=0.2,
            warmup_s=0.0,
            min_repeats=5,
            few_for_long=True,
        ).n
        == 2
    )  # two that agree
    assert (
        benchmark(lambda: None, clock=FakeClock(0.2), budget_s=0.2, warmup_s=0.0, min_repeats=5).n
        == 5
    )
    assert (
        benchmark(
            lambda: None,
            clock=FakeClock(0.05),
            budget_s=0.2,
            warmup_s=0.0,
            min_repeats=5,
            few_for_long=True,
        ).n
        == 5
    )


def test_group_measurement_writes_the_cache_once(isolated_cache):
    from roofprof.profiling.profiler import Profiler, ProfileSettings
    from roofprof.specs import ModelSpec

    spec = ModelSpec("t", 64, 128, 1, 4, 2, 16, 100, False, 256)
    prof = Profiler(
        "cpu",
        ProfileSettings(impls=("numpy",), roofline=RooflineChoice("none"), budget_s=0.002),
        model=spec,
    )
    writes = []
    real = prof.cache.save
    prof.cache.save = lambda: (writes.append(1), real())[1]
    prof.prefetch([_gemm(m=b) for b in (1, 8, 64)] + [_gemm(m=8)], "sweep")
    assert len(prof._measured) == 3 and len(writes) == 1
    data = json.loads(next(isolated_cache.glob("measurements-*.json")).read_text())
    assert len(data) == 3
    prof.release_buffers()


def _numpy_then_numba():
    """A profiler of a one-layer model measuring numpy (preferred), then numba."""
    from roofprof.profiling.profiler import Profiler, ProfileSettings
    from roofprof.specs import ModelSpec

    settings = ProfileSettings(
        impls=("numpy", "numba"), prefer=("numpy",), roofline=RooflineChoice("none"), budget_s=0.002
    )
    return Profiler("cpu", settings, model=ModelSpec("t", 64, 128, 1, 4, 2, 16, 100, False, 256))


def test_prefetch_measures_in_one_group_per_preferred_implementation(monkeypatch):
    import roofprof.profiling.profiler as profiling

    prof = _numpy_then_numba()
    groups = []
    real = check_then_time_group
    monkeypatch.setattr(
        profiling,
        "check_then_time_group",
        lambda impl, ops, *a, **k: (groups.append((impl.name, len(ops))), real(impl, ops, *a, **k))[
            1
        ],
    )
    prof.prefetch([_gemm(m=b) for b in (1, 2, 3)])
    assert groups == [("numpy", 3)]
    est_time, _ = prof.op_time(_gemm(m=2))
    assert est_time is not None and groups == [("numpy", 3)]  # already measured: no new group


def test_a_runtime_switch_pauses_after_the_checks_and_only_for_what_they_left(monkeypatch):
    import roofprof.profiling.engine as measurement
    import roofprof.profiling.profiler as profiling

    prof = _numpy_then_numba()
    events, pauses = [], []

    class Clock(FakeClock):
        def start(self):
            events.append("timed")

    real = check_then_time_group

    def group(impl, ops, *a, **k):
        k["clock"] = Clock(0.001)
        k["on_check"] = lambda i, op: events.append("check")
        return real(impl, ops, *a, **k)

    monkeypatch.setattr(profiling, "check_then_time_group", group)
    monkeypatch.setattr(
        measurement,
        "time",
        types.SimpleNamespace(
            perf_counter=time.perf_counter,
            sleep=lambda s: (events.append("pause"), pauses.append(s)),
        ),
    )
    prof.prefetch([_gemm(m=b) for b in (1, 2)])  # numpy first: no runtime ran before it
    assert pauses == [] and events[:2] == ["check", "check"] and set(events[2:]) == {"timed"}
    events.clear()
    prof._measure_group(prof.impls[1], [_gemm(m=b) for b in (1, 2)], "decode")  # numpy -> numba
    assert events[:3] == ["check", "check", "pause"] and set(events[3:]) == {"timed"}
    assert (
        len(pauses) == 1 and 0.0 <= pauses[0] < prof.settings.switch_idle_s
    )  # the checks took the rest
    prof._measure_group(
        prof.impls[0], [_gemm(m=b) for b in (1, 2)], "decode"
    )  # measured already: no pause
    assert len(pauses) == 1
    prof.release_buffers()


# --------------------------------------------------------------------------- roofline reuse


def test_cached_roofline_is_reused_only_while_fresh_and_complete(isolated_cache, tmp_path):
    from roofprof.cache import cached_roofline, roofline_cache_path
    from roofprof.roofline import Ceiling, Roofline
    from roofprof.roofline.probes import RooflineResult

    dev = CpuDevice()
    assert cached_roofline(dev, 3600) is None
    rl = Roofline(
        "cpu",
        (
            Ceiling("dram", "memory", 1e10, level="dram", source="measured"),
            Ceiling("fp32", "compute", 1e11, dtype="fp32", source="measured"),
        ),
    )
    path = roofline_cache_path(dev)
    plan = dev.roofline_plan("quick")
    RooflineResult(rl, dev.info, plan=plan.to_dict()).write(path)
    got = cached_roofline(dev, 3600)
    assert got is not None and got[0].roofline.memory_bandwidth() == 1e10 and 0 <= got[1] < 60
    other = dataclasses.replace(plan, dram_point_budget_s=plan.dram_point_budget_s / 2)
    RooflineResult(rl, dev.info, plan=other.to_dict()).write(path)
    assert cached_roofline(dev, 3600) is None  # measured with another plan: measure afresh
    RooflineResult(rl, dev.info, plan=plan.to_dict()).write(path)
    assert cached_roofline(dev, 0) is None  # --fresh-roofline
    old = time.time() - 7200
    os.utime(path, (old, old))
    assert cached_roofline(dev, 3600) is None  # too old
    RooflineResult(rl, dev.info, complete=False).write(path)
    assert cached_roofline(dev, 3600) is None  # an interrupted measurement is never reused
    path.write_text("{not json")
    assert cached_roofline(dev, 3600) is None


def test_a_job_measures_afresh_when_the_cached_roofline_used_another_plan(
    isolated_cache, monkeypatch
):
    from roofprof import cache
    from roofprof.roofline import Ceiling, Roofline
    from roofprof.roofline.probes import RooflineResult

    dev = CpuDevice()
    rl = Roofline("cpu", (Ceiling("dram", "memory", 1e10, level="dram", source="measured"),))
    plan = dev.roofline_plan("quick")
    older = dataclasses.replace(plan, dram_point_budget_s=plan.dram_point_budget_s / 2)
    RooflineResult(rl, dev.info, plan=older.to_dict()).write(cache.roofline_cache_path(dev))
    fresh_rl = Roofline("cpu", (Ceiling("dram", "memory", 2e10, level="dram", source="measured"),))
    measured = []

    def measure_now(device, quick, progress=None):
        measured.append(quick)
        result = RooflineResult(fresh_rl, dev.info, plan=plan.to_dict())
        return fresh_rl, "measured (quick probes)", result

    monkeypatch.setattr(cache, "_measure_now", measure_now)
    chosen = cache.choose_roofline(cache.RooflineChoice(), dev)
    assert measured == [True] and chosen.roofline is fresh_rl
    RooflineResult(rl, dev.info, plan=plan.to_dict()).write(cache.roofline_cache_path(dev))
    chosen = cache.choose_roofline(cache.RooflineChoice(), dev)
    assert measured == [True] and chosen.source.startswith("cached quick measurement")


def test_a_measured_prediction_measures_only_the_minimal_roofline_and_reuses_it(
    isolated_cache, monkeypatch
):
    from roofprof.cache import minimal_roofline_cache_path, resolve_roofline, roofline_cache_path
    from roofprof.roofline import Ceiling, Roofline
    from roofprof.roofline.probes import RooflineResult

    dev = CpuDevice()
    test_plan = dev.roofline_plan("test")
    monkeypatch.setattr(
        dev, "roofline_plan", lambda name="full": test_plan
    )  # tiny sizes, same code path
    roof, source = resolve_roofline("auto", dev, minimal_dtypes=("fp32",))
    assert "minimal probes: read, gemm-fp32" in source
    assert roof.dtypes == ("fp32",) and roof.memory_bandwidth() > 0 and roof.ridge("fp32") > 0
    assert minimal_roofline_cache_path(dev).exists() and not roofline_cache_path(dev).exists()
    again, source = resolve_roofline("auto", dev, minimal_dtypes=("fp32",))
    assert source.startswith("cached minimal") and again.ridge("fp32") == roof.ridge("fp32")
    # a dtype the cached one lacks is measured, one the device has no probe for is not waited for
    _, source = resolve_roofline("auto", dev, minimal_dtypes=("fp64",))
    assert "gemm-fp64" in source
    assert resolve_roofline("auto", dev, minimal_dtypes=("bf16",))[1].startswith("cached minimal")
    cached = json.loads(minimal_roofline_cache_path(dev).read_text())
    cached["plan"]["dram_point_budget_s"] = 2 * test_plan.dram_point_budget_s + 1.0
    minimal_roofline_cache_path(dev).write_text(json.dumps(cached))
    _, source = resolve_roofline("auto", dev, minimal_dtypes=("bf16",))
    assert "minimal probes: read;" in source  # cached with another plan: measured afresh
    minimal_roofline_cache_path(dev).unlink()
    bf16, source = resolve_roofline("auto", dev, minimal_dtypes=("bf16",))
    assert "minimal probes: read;" in source and bf16.dtypes == () and bf16.memory_bandwidth() > 0
    # a cached quick roofline (the whole one) is preferred to any minimal one
    rl = Roofline(
        "cpu",
        (
            Ceiling("dram", "memory", 1e10, level="dram", source="measured"),
            Ceiling("fp32", "compute", 1e11, dtype="fp32", source="measured"),
        ),
    )
    RooflineResult(rl, dev.info, plan=test_plan.to_dict()).write(roofline_cache_path(dev))
    quick, source = resolve_roofline("auto", dev, minimal_dtypes=("fp32",))
    assert source.startswith("cached quick") and quick.ridge("fp32") == 10.0


def test_measured_ridge_is_nan_without_a_ceiling_for_the_dtype_and_the_table_says_so():
    import io
    import math

    from rich.console import Console

    from roofprof import predict
    from roofprof.prediction.rollup import MeasuredEstimator, OpTime, RooflineEstimator
    from roofprof.report import print_predictions
    from roofprof.roofline import Ceiling, Roofline

    rl = Roofline(
        "cpu",
        (
            Ceiling("dram", "memory", 1e10, level="dram", source="measured"),
            Ceiling("fp32", "compute", 1e11, dtype="fp32", source="measured"),
        ),
    )
    est = MeasuredEstimator(
        launch_s=0.0,
        fallback=RooflineEstimator(rl, name="empirical"),
        measure=lambda op: (OpTime(1e-3, "torch"), ""),
    )
    assert est.ridge("fp32") == 10.0 and math.isnan(est.ridge("bf16"))
    pred = predict("llama-3.2-1b", estimator=est, dtype="bf16", prompt_tokens=4)
    out = io.StringIO()
    print_predictions([pred], console=Console(file=out, width=200))
    assert "ridge n/a (no bf16 compute ceiling)" in out.getvalue()


# --------------------------------------------------------------------------- traps


def test_nothing_imported_by_the_cli_starts_numbas_threads_before_the_runtime_is_chosen():
    """The trap of the profile: numba's ``omp`` layer started early made a real prefill 2.5×
    slower."""
    pytest.importorskip("numba")
    code = (
        "import roofprof.cli, roofprof.job, roofprof.profiling.profiler\n"
        "import roofprof.devices.cpu as c\n"
        "print(c.single_openmp_runtime())\n"
        "dev = c.CpuDevice()\n"
        "import numpy as np\n"
        "from roofprof._resources import kernels_module\n"
        "k = kernels_module('cpu'); a = np.ones((4, 8), np.float32)\n"
        "o = np.empty((4, 4), np.float32)\n"
        "k.gemm_nt(a, a, o)\n"
        "import numba; print(numba.threading_layer())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["workqueue", "selected", "workqueue"]


def test_numba_kernels_cache_their_compilation_in_a_writable_folder():
    pytest.importorskip("numba")
    from roofprof._resources import kernels_module

    k = kernels_module("cpu")
    cache = k.gemm_nt._cache
    assert cache is not None and type(cache).__name__ == "FunctionCache"
    folder = cache._cache_path
    os.makedirs(folder, exist_ok=True)
    assert os.access(folder, os.W_OK)


def test_the_script_exits_promptly_with_every_byte_written_and_the_exit_code_kept(tmp_path):
    """``console_main`` ends with ``os._exit`` after the command: output flushed, code kept."""
    env = {**os.environ, "ROOFPROF_CACHE": str(tmp_path)}
    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "roofprof",
            "predict",
            "--gpu",
            "h100-sxm",
            "--model",
            "llama-3.1-8b",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert (
        ok.returncode == 0 and json.loads(ok.stdout)["decode"]["seconds_per_token"] > 0
    )  # whole JSON
    bad = subprocess.run(
        [sys.executable, "-m", "roofprof", "predict", "--model", "nope"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert (
        bad.returncode == 2 and bad.stderr.count("\n") == 1 and "unknown model 'nope'" in bad.stderr
    )


def test_setting_the_cpu_up_chooses_numbas_runtime_before_its_threads_start():
    """A plan (the device set up, its identity read) must not start numba's OpenMP pool."""
    pytest.importorskip("numba")
    code = (
        "from roofprof.job import RunPlan\n"
        "RunPlan.of('llama-3.2-1b', device='cpu')\n"
        "from roofprof.devices.cpu import single_openmp_runtime\n"
        "print(single_openmp_runtime())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] in ("already workqueue", "workqueue selected")
