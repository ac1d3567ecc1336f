"""roofprof profile: correctness first, every op measured, placement, faults, cache, CLI (tiny
model)."""

import json
import warnings

import numpy as np
import pytest
from conftest import tiny_spec

import roofprof
from roofprof.api import profile
from roofprof.cache import MeasurementCache, RooflineChoice
from roofprof.cli import main
from roofprof.devices.base import CheckResult
from roofprof.models import ops
from roofprof.profiling.engine import Measurement
from roofprof.profiling.function import measure
from roofprof.profiling.measured import measured_estimator
from roofprof.profiling.profiler import Profiler, ProfileSettings
from roofprof.profiling.torch_ops import SUPPORTED_FNS, TorchOps
from roofprof.roofline import Ceiling, Roofline
from roofprof.workload import Counting, Scenario

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("isolated_cache")

TINY = tiny_spec()
NONE = RooflineChoice("none")
ROOF = Roofline(
    "literal",
    (
        Ceiling("fp32 peak", "compute", 1e11, dtype="fp32", source="measured"),
        Ceiling("DRAM", "memory", 1e10, level="dram", source="measured"),
    ),
)


def llama_ops(model, phase, **kw):
    convention = kw.pop("convention", "engine")
    return ops(Scenario.of(model, phase, convention=convention, **kw))


@pytest.fixture
def quiet(monkeypatch):
    """No other process uses the CPUs (the meter is faked: these tests are about caching)."""
    _fake_contention(monkeypatch, [0.0])


@pytest.fixture
def roofline_file(tmp_path):
    path = tmp_path / "roofline.json"
    path.write_text(json.dumps({"roofline": ROOF.to_dict()}))
    return path


@pytest.mark.parametrize("phase", ["prefill", "decode"])
@pytest.mark.parametrize("attention", ["fused", "unfused"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_torch_ops_cover_every_op_and_pass_their_checks(phase, attention, dtype):
    w = llama_ops(
        TINY,
        phase,
        batch=2,
        prompt_tokens=12,
        context_tokens=7,
        dtype=dtype,
        convention=Counting(attention=attention),
    )
    impl = TorchOps(TINY, cache_bytes=1 << 16)
    rng = np.random.default_rng(0)
    for op in w.ops:
        assert op.fn in SUPPORTED_FNS and impl.supports(op) is None
        prepared = impl.prepare(op, rng)
        check = prepared.check()
        assert check.ok, (op.name, check)
        assert prepared.run() is not None
        assert prepared.kernels >= 1
        prepared.release()


def test_gemm_weights_rotate_beyond_the_cache():
    op = llama_ops(TINY, "decode", context_tokens=4, dtype="fp32").ops[
        2
    ]  # q_proj, 16 KiB of weights
    prepared = TorchOps(TINY, cache_bytes=64 << 10).prepare(op, np.random.default_rng(0))
    assert (
        len(prepared.calls) == 9
    )  # 1 + 2 × 64 KiB / 16 KiB: the other copies hold twice the cache
    assert "rotated" in prepared.note


def test_profile_every_op_placed_on_the_roofline():
    r = profile(TINY, "decode", context_tokens=8, roofline=ROOF, budget_s=0.002, impls=["torch"])
    assert [o.op.name for o in r.ops] == [
        o.name for o in llama_ops(TINY, "decode", context_tokens=8, dtype="fp32").ops
    ]
    assert all(o.chosen is not None and o.chosen.check.ok for o in r.ops)
    q = next(o for o in r.ops if o.op.name == "q_proj")
    p = q.placement()
    assert p["attainable_flops_per_s"] == pytest.approx(ROOF.attainable(q.op.intensity, "fp32"))
    assert p["percent_of_roof"] == pytest.approx(
        100 * q.op.flops / q.seconds / p["attainable_flops_per_s"]
    )
    assert p["bound"] == "memory"
    assert r.seconds == pytest.approx(sum(o.seconds * o.op.count for o in r.ops))
    from roofprof.report import clean

    d = json.loads(json.dumps(clean(r.to_dict())))
    assert d["ops"][2]["implementations"][0]["check"]["ok"] is True
    assert d["launch_overhead_s"] > 0 and d["threads"] >= 1


def test_identical_shapes_measured_once():
    class Counting_:
        name = "count"
        calls = 0

        def supports(self, op):
            return None if op.kind == "gemm" else "gemm only"

        def prepare(self, op, rng):
            Counting_.calls += 1
            return _Prepared(ok=True)

    prof = Profiler(
        "cpu", ProfileSettings(impls=("torch",), budget_s=0.001, roofline=NONE), model=TINY
    )
    prof.impls.append(Counting_())
    w = llama_ops(TINY, "prefill", prompt_tokens=8, dtype="fp32")
    prof.profile(w)
    gemm_shapes = {o.shape_key for o in w.ops if o.kind == "gemm"}
    assert Counting_.calls == len(gemm_shapes) < sum(1 for o in w.ops if o.kind == "gemm")


class _Prepared:
    kernels = 1

    def __init__(self, ok=True, boom=False):
        self.ok, self.boom = ok, boom

    def run(self):
        if self.boom:
            raise RuntimeError("kernel crashed")

    def check(self):
        self.run()
        return CheckResult(
            self.ok, 1.0 if not self.ok else 0.0, 1.0 if not self.ok else 0.0, 1e-6, "fake"
        )

    def release(self):
        pass


class _Fake:
    def __init__(self, name, ok=True, boom=False):
        self.name, self.ok, self.boom = name, ok, boom

    def supports(self, op):
        return None

    def prepare(self, op, rng):
        return _Prepared(self.ok, self.boom)


@pytest.mark.filterwarnings(
    "ignore:.*failed its correctness check", "ignore:.*no implementation measured it"
)
def test_failed_check_is_reported_and_excluded_with_a_warning():
    prof = Profiler(
        "cpu",
        ProfileSettings(impls=("torch",), budget_s=0.001, roofline=RooflineChoice(ROOF)),
        model=TINY,
    )
    prof.impls = [_Fake("bad", ok=False), _Fake("crash", boom=True)]
    w = llama_ops(TINY, "decode", context_tokens=4, dtype="fp32")
    with pytest.warns(UserWarning, match="failed its correctness check"):
        r = prof.profile(w)
    first = r.ops[0]
    assert [m.status for m in first.measurements] == ["failed", "error"]
    assert first.chosen is None and r.seconds == 0.0
    assert any("excluded" in msg for msg in r.warnings) and any(
        "raised RuntimeError" in m for m in r.warnings
    )
    # the roll-up counts such ops from the empirical roofline, with a warning
    est = prof.estimator()
    with pytest.warns(UserWarning, match="not measured"):
        p = roofprof.predict(TINY, estimator=est, prompt_tokens=4, context_tokens=4, dtype="fp32")
    assert p.decode.seconds == pytest.approx(
        sum(ROOF.time_s(o.flops, o.bytes, "fp32") * o.count for o in w.ops)
    )
    assert any("failed" in x for x in p.warnings)


def test_prefer_and_fastest_choice():
    prof = Profiler("cpu", ProfileSettings(impls=("torch",), roofline=NONE), model=TINY)
    from roofprof.timing import Timing

    a = Measurement("numpy", "ok", timing=Timing((1e-6,)))
    b = Measurement("torch", "ok", timing=Timing((2e-6,)))
    c = Measurement("numba", "failed")
    assert prof.choose([a, b, c]).impl == "torch"
    prof.prefer = ("fastest",)
    assert prof.choose([a, b, c]).impl == "numpy"
    assert prof.choose([c]) is None


def test_measurement_cache_roundtrip(tmp_path):
    from roofprof.timing import Timing

    op = llama_ops(TINY, "decode", context_tokens=4, dtype="fp32").ops[2]
    cache = MeasurementCache("abc", folder=tmp_path)
    m = Measurement(
        "torch",
        "ok",
        "n",
        Timing((1e-6, 2e-6)),
        CheckResult(True, 0.0, 0.0, 1e-5),
        1,
        {"clock_mhz": 2600},
    )
    cache.put(op, m)
    again = MeasurementCache("abc", folder=tmp_path).get(op, "torch")
    assert again.seconds == m.seconds and again.check.ok and again.telemetry["clock_mhz"] == 2600


def test_measured_estimator_profiles_on_demand_then_uses_the_cache(roofline_file, quiet):
    est = measured_estimator(
        TINY,
        device="cpu",
        dtype="fp32",
        roofline=roofline_file,
        budget_s=0.001,
        impls=["torch"],
        include_launch=False,
    )
    p = roofprof.predict(TINY, estimator=est, prompt_tokens=4, dtype="fp32")
    assert p.estimator == "measured-no-launch" and p.decode.seconds > 0 and not p.warnings
    inputs = p.to_dict()["estimator_inputs"]
    assert inputs["roofline_file"] == str(roofline_file) and inputs["measured_ops"]
    again = measured_estimator(
        TINY,
        device="cpu",
        dtype="fp32",
        roofline=roofline_file,
        impls=["torch"],
        include_launch=False,
    )
    called = []
    inner = again.measure

    def spy(op):
        called.append(op.name)
        return inner(op)

    again.measure = spy
    p2 = roofprof.predict(TINY, estimator=again, prompt_tokens=4, dtype="fp32")
    assert called  # every shape went through the profiler ...
    assert p2.decode.seconds == pytest.approx(p.decode.seconds)  # ... which found them in the cache


def test_measure_places_a_user_function():
    a = np.ones((128, 128), dtype=np.float32)
    r = roofprof.measure(
        lambda: a @ a, flops=2 * 128**3, bytes=3 * 128 * 128 * 4, roofline=ROOF, budget_s=0.005
    )
    d = r.to_dict()
    assert r.seconds > 0 and d["intensity"] == pytest.approx(2 * 128**3 / (3 * 128 * 128 * 4))
    assert d["attainable_flops_per_s"] == pytest.approx(min(1e11, 1e10 * d["intensity"]))
    assert d["bound"] == "compute"
    with pytest.raises(roofprof.RoofprofError):
        measure(lambda: None, flops=0, bytes=0, roofline="none")


def test_package_facade_is_callable():
    assert callable(roofprof.profile) and callable(roofprof.validate)
    r = roofprof.profile(
        TINY, "decode", context_tokens=4, roofline="none", budget_s=0.001, impls=["torch"]
    )
    assert r.workload.phase == "decode"


def test_all_cpu_implementations_on_a_decode_pass():
    r = profile(TINY, "decode", context_tokens=4, roofline=ROOF, budget_s=0.002)
    names = {m.impl for o in r.ops for m in o.measurements}
    assert {"numpy", "numba", "torch"} <= names
    q = next(o for o in r.ops if o.op.name == "q_proj")
    assert all(m.ok for m in q.measurements)
    norm = next(o for o in r.ops if o.op.name == "attn_norm")
    assert {m.impl: m.status for m in norm.measurements}["numpy"] == "unsupported"


def run_cli(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_profile_json_and_sweep_table(capsys, tiny_config, roofline_file, tmp_path):
    code, out, err = run_cli(
        capsys,
        "profile",
        "--model",
        str(tiny_config),
        "--phase",
        "both",
        "--prompt",
        "8",
        "--roofline",
        str(roofline_file),
        "--impl",
        "torch",
        "--budget",
        "0.001",
        "--format",
        "json",
        "--out",
        str(tmp_path / "p.json"),
    )
    assert code == 0, err
    d = json.loads(out)
    assert [p["phase"] for p in d["profiles"]] == ["prefill", "decode"]
    op = d["profiles"][1]["ops"][2]
    assert {
        "seconds_per_call",
        "flops_per_s",
        "bytes_per_s",
        "intensity",
        "attainable_flops_per_s",
        "percent_of_roof",
        "bound",
        "implementations",
    } <= set(op)
    assert json.loads((tmp_path / "p.json").read_text())["profiles"]
    code, out, err = run_cli(
        capsys,
        "profile",
        "--model",
        str(tiny_config),
        "--batch",
        "1,4",
        "--prompt",
        "8",
        "--roofline",
        "none",
        "--impl",
        "torch",
        "--budget",
        "0.001",
    )
    assert code == 0 and "Sweep" in out and "q_proj" in out


def test_cli_predict_measured(capsys, tiny_config, roofline_file, quiet):
    # measure the shapes once with a tiny budget: the CLI then finds them in the cache
    warm = measured_estimator(
        str(tiny_config), device="cpu", dtype="fp32", roofline=roofline_file, budget_s=0.001
    )
    roofprof.predict(str(tiny_config), estimator=warm, prompt_tokens=8, dtype="fp32")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code, out, err = run_cli(
            capsys,
            "predict",
            "--model",
            str(tiny_config),
            "--estimator",
            "measured",
            "--device",
            "cpu",
            "--dtype",
            "fp32",
            "--prompt",
            "8",
            "--roofline",
            str(roofline_file),
            "--format",
            "json",
        )
    assert code == 0, err
    d = json.loads(out)
    assert d["estimator"] == "measured" and d["decode"]["seconds_per_token"] > 0
    assert d["estimator_inputs"]["measured_ops"] and d["prefill"]["seconds"] > 0


@pytest.mark.parametrize(
    "args, needle",
    [
        (("--phase", "middle"), "prefill"),
        (("--impl", "cuda-magic"), "torch"),
        (("--batch", "0"), "--batch"),
        (("--attention", "flash"), "fused"),
    ],
)
def test_cli_profile_bad_input(capsys, tiny_config, args, needle):
    code, out, err = run_cli(
        capsys, "profile", "--model", str(tiny_config), "--roofline", "none", *args
    )
    assert code == 2 and needle in err and "Traceback" not in err


def test_host_issue_time_measured_on_asynchronous_devices():
    import dataclasses

    from roofprof.devices.cpu import CpuDevice

    cpu = CpuDevice()

    class AsyncCpu:  # the CPU posing as an asynchronous device
        info = dataclasses.replace(cpu.info, kind="cuda", asynchronous=True, shared_host=False)

        def __getattr__(self, name):
            return getattr(cpu, name)

    prof = Profiler(
        AsyncCpu(), ProfileSettings(impls=("torch",), budget_s=0.001, roofline=NONE), model=TINY
    )
    prof.impls = [_Fake("fake")]
    prof._launch_s = 1e-6  # (the launch probe would need a real GPU)
    w = llama_ops(TINY, "decode", context_tokens=4, dtype="fp32")
    r = prof.profile(w)
    assert all(o.chosen.host_s > 0 for o in r.ops)
    assert all(t.host_s > 0 for t in r.op_times().values())


@pytest.mark.gpu
def test_profile_on_a_gpu_checks_and_times_every_op():
    r = profile(
        TINY,
        "decode",
        context_tokens=8,
        device="cuda:0",
        dtype="bf16",
        roofline="none",
        budget_s=0.01,
        impls=["torch"],
    )
    assert all(o.chosen is not None and o.chosen.check.ok for o in r.ops)
    assert all(o.chosen.host_s > 0 for o in r.ops)  # back-to-back issue time measured on the GPU
    assert r.launch_s > 0


def _fake_contention(monkeypatch, pattern):
    import time

    import roofprof.profiling.engine as rm

    shares = iter(pattern * 1000)

    class FakeContention:
        available = True
        wall_s = 0.01
        share = 0.0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.share = next(shares)

    monkeypatch.setattr(rm, "Contention", FakeContention)
    monkeypatch.setattr(time, "sleep", lambda s: None)


def test_busy_rounds_are_dropped_from_a_profile(monkeypatch):
    _fake_contention(monkeypatch, [0.6, 0.0])
    r = profile(TINY, "decode", context_tokens=4, roofline="none", budget_s=0.01, impls=["torch"])
    t = r.ops[2].chosen.telemetry
    # busy, clean, busy, clean, busy: 2 clean rounds of 5, so a sixth (clean) one is added
    assert t["rounds"] == 6 and t["rounds_kept"] == 3 and t["rounds_dropped_busy"] == 3
    assert r.ops[2].chosen.timing.flush.startswith("interleaved")


def test_contended_single_measurement_is_repeated(monkeypatch):
    _fake_contention(monkeypatch, [0.6, 0.0])
    prof = Profiler(
        "cpu", ProfileSettings(impls=("torch",), budget_s=0.001, roofline=NONE), model=TINY
    )
    op = llama_ops(TINY, "decode", context_tokens=4, dtype="fp32").ops[2]
    found, _ = prof.op_time(op)  # the on-demand path of the measured estimator
    t = prof._measured[(op.shape_key, "torch")].telemetry
    assert (
        found is not None
        and t["attempts"] == 2
        and t["other_cpu_share"] == 0.0
        and "contended" not in t
    )


def test_reference_implementation_preferred_even_next_to_a_device_torch_gemm():
    from roofprof.devices.cpu import CpuDevice

    cpu = CpuDevice()

    class WithTorchGemm:  # a device that brings its own GEMM-only implementation called "torch"
        info = cpu.info

        def implementations(self):
            return (_Fake("torch"),)

        def __getattr__(self, name):
            return getattr(cpu, name)

    prof = Profiler(WithTorchGemm(), ProfileSettings(budget_s=0.001, roofline=NONE), model=TINY)
    assert [i.name for i in prof.impls] == ["torch", "torch-eager"]
    assert prof.prefer == ("torch-eager",) and prof.reference_impl == "torch-eager"
    r = prof.profile(llama_ops(TINY, "decode", context_tokens=4, dtype="fp32"))
    assert all(o.chosen.impl == "torch-eager" for o in r.ops)


def test_contended_measurement_is_marked_in_the_cache_and_measured_again(
    monkeypatch, roofline_file
):
    _fake_contention(monkeypatch, [0.6])  # every try contended: kept, but marked
    est = measured_estimator(
        TINY, device="cpu", dtype="fp32", roofline=roofline_file, budget_s=0.001, impls=["torch"]
    )
    with pytest.warns(UserWarning, match="contended"):
        p = roofprof.predict(TINY, estimator=est, prompt_tokens=4, dtype="fp32")
    assert any(
        "contended" in w and "--remeasure" in w for w in p.warnings
    )  # said plainly, with the way out
    stored = json.loads(open(est.inputs["cache"]).read())
    assert stored and all("contended" in d["suspect"] for d in stored.values())
    # next use on a quiet machine: the contended entries are measured again, not reused
    _fake_contention(monkeypatch, [0.0])
    again = measured_estimator(
        TINY, device="cpu", dtype="fp32", roofline=roofline_file, budget_s=0.001, impls=["torch"]
    )
    p2 = roofprof.predict(TINY, estimator=again, prompt_tokens=4, dtype="fp32")
    assert not p2.warnings
    assert not any(
        "contended" in d.get("suspect", "")
        for d in json.loads(open(again.inputs["cache"]).read()).values()
    )


def test_clean_cached_measurements_are_reused_and_remeasure_ignores_them(
    monkeypatch, roofline_file
):
    _fake_contention(monkeypatch, [0.0])
    first = measured_estimator(
        TINY, device="cpu", dtype="fp32", roofline=roofline_file, budget_s=0.001, impls=["torch"]
    )
    roofprof.predict(TINY, estimator=first, prompt_tokens=4, dtype="fp32")
    import roofprof.profiling.profiler as rp

    timed = []
    real, real_group = rp.check_then_time, rp.check_then_time_group
    monkeypatch.setattr(
        rp, "check_then_time", lambda *a, **k: timed.append(a[1].name) or real(*a, **k)
    )
    monkeypatch.setattr(
        rp,
        "check_then_time_group",  # predict measures new shapes as one group
        lambda *a, **k: timed.extend(op.name for op in a[1]) or real_group(*a, **k),
    )
    cached = measured_estimator(
        TINY, device="cpu", dtype="fp32", roofline=roofline_file, impls=["torch"]
    )
    roofprof.predict(TINY, estimator=cached, prompt_tokens=4, dtype="fp32")
    assert timed == []  # all from the cache
    fresh = measured_estimator(
        TINY,
        device="cpu",
        dtype="fp32",
        roofline=roofline_file,
        budget_s=0.001,
        impls=["torch"],
        use_cache=False,
    )  # --remeasure
    roofprof.predict(TINY, estimator=fresh, prompt_tokens=4, dtype="fp32")
    assert {"q_proj", "o_proj"} & set(timed)  # measured again (one op per shape: q and o share one)


def test_cli_predict_remeasure_ignores_the_cache(capsys, tiny_config, roofline_file, monkeypatch):
    _fake_contention(monkeypatch, [0.0])
    import roofprof.profiling.profiler as rp

    seen = []
    real = rp.Profiler.__init__

    def spy(self, device, settings=None, **k):
        seen.append(settings.use_cache)
        real(self, device, settings, **k)

    monkeypatch.setattr(rp.Profiler, "__init__", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for extra in ((), ("--remeasure",)):
            code, out, err = run_cli(
                capsys,
                "predict",
                "--model",
                str(tiny_config),
                "--estimator",
                "measured",
                "--device",
                "cpu",
                "--dtype",
                "fp32",
                "--prompt",
                "4",
                "--roofline",
                str(roofline_file),
                "--format",
                "json",
                *extra,
            )
            assert code == 0, err
    assert seen == [True, False]
    code, out, err = run_cli(
        capsys,
        "profile",
        "--model",
        str(tiny_config),
        "--prompt",
        "4",
        "--roofline",
        "none",
        "--impl",
        "torch",
        "--budget",
        "0.001",
        "--remeasure",
        "--format",
        "json",
    )
    assert code == 0, err


def test_profile_says_when_it_rests_on_contended_measurements(monkeypatch):
    _fake_contention(monkeypatch, [0.6])  # every round busy, even the extra ones
    r = profile(TINY, "decode", context_tokens=4, roofline="none", budget_s=0.001, impls=["torch"])
    t = r.ops[2].chosen.telemetry
    assert t["contended"] and t["rounds"] == 10 and r.ops[2].chosen.contended
    assert any("other processes" in w and "--remeasure" in w for w in r.warnings)


def test_tuning_knobs_are_settings_and_threads_are_restored(monkeypatch):
    from roofprof.devices.cpu import threads
    from roofprof.profiling.engine import MeasureSettings

    _fake_contention(monkeypatch, [0.0])
    before = torch.get_num_threads()
    prof = Profiler(
        "cpu",
        ProfileSettings(
            impls=("torch",),
            roofline=NONE,
            budget_s=0.001,
            threads=1,
            measure=MeasureSettings(rounds=3, switch_idle_s=0.0),
        ),
        model=TINY,
    )
    assert prof.threads == 1 and torch.get_num_threads() == before  # set while measuring only
    r = prof.profile(Scenario.of(TINY, "decode", context_tokens=4, dtype="fp32"))
    assert r.ops[2].chosen.telemetry["rounds"] == 3 and r.threads == 1
    assert torch.get_num_threads() == before
    with threads(1) as count:
        assert count == 1 == torch.get_num_threads()
    assert torch.get_num_threads() == before
    with pytest.raises(roofprof.RoofprofError, match="at least 1"), threads(0):
        pass


def test_check_then_time_is_one_loop_for_every_caller(monkeypatch):
    from roofprof.profiling.engine import RetryBudget, check_then_time, check_then_time_group
    from roofprof.timing import PerfCounterClock

    op = llama_ops(TINY, "decode", context_tokens=4, dtype="fp32").ops[2]
    rng, clock = np.random.default_rng(0), PerfCounterClock()
    released = []

    class Tracked(_Prepared):
        def release(self):
            released.append(self)

    class Impl(_Fake):
        def prepare(self, op, rng):
            return Tracked(self.ok, self.boom)

    warned = []
    with pytest.warns(UserWarning, match="failed its correctness check"):
        bad = check_then_time(
            Impl("bad", ok=False), op, rng, clock=clock, budget_s=0.001, warn=warned.append
        )
    crash = check_then_time(
        Impl("crash", boom=True), op, rng, clock=clock, budget_s=0.001, warn=warned.append
    )
    good = check_then_time(Impl("good"), op, rng, clock=clock, budget_s=0.001)
    assert (bad.status, crash.status, good.status) == ("failed", "error", "ok")
    assert len(released) == 3 and len(warned) == 2 and good.timing.n >= 3 and good.check.ok
    _fake_contention(monkeypatch, [0.6])
    busy = check_then_time(
        Impl("good"), op, rng, clock=clock, budget_s=0.001, retries=2, retry=RetryBudget(60.0)
    )
    assert busy.telemetry["attempts"] == 3 and busy.contended and "contended" in busy.suspect
    ms = check_then_time_group(Impl("good"), [op, op], rng, clock=clock, budget_s=0.001, rounds=3)
    assert [m.timing.rounds for m in ms] == [3, 3] and len(released) == 6


class _ThreadClock:
    """A fake clock: a call takes 50 ms on two threads (every parallel region waits for a core
    another process holds) and 1 ms on one."""

    name = "fake-threads"

    def start(self):
        pass

    def stop(self):
        return 0.05 if torch.get_num_threads() > 1 else 0.001


def _two_thread_profiler(monkeypatch):
    from roofprof.profiling.engine import MeasureSettings

    prof = Profiler(
        "cpu",
        ProfileSettings(
            impls=("torch",),
            roofline=NONE,
            budget_s=0.001,
            threads=2,
            measure=MeasureSettings(rounds=3, switch_idle_s=0.0),
        ),
        model=TINY,
    )
    monkeypatch.setattr(prof.device, "clock", lambda: _ThreadClock())
    return prof


class _FakeThreadCpu(_ThreadClock):
    name = "fake-thread-cpu"  # the one-thread re-timing reads the thread's CPU time


def test_contended_multi_thread_timings_are_measured_again_on_one_thread(monkeypatch):
    import roofprof.profiling.profiler as rp

    _fake_contention(monkeypatch, [0.6])  # another process holds a core in every round
    monkeypatch.setattr(rp, "ThreadCpuClock", _FakeThreadCpu)
    prof = _two_thread_profiler(monkeypatch)
    r = prof.profile(Scenario.of(TINY, "decode", context_tokens=4000, dtype="fp32"))
    att = next(o for o in r.ops if o.op.kind == "attention")
    assert att.chosen.seconds == pytest.approx(0.001)  # not the 50 ms of the starved threads
    assert att.chosen.telemetry["threads"] == 1 and att.chosen.telemetry["threads_tried"] == 2
    assert att.chosen.contended and "timed on 1 thread (fake-thread-cpu)" in att.chosen.note
    assert att.chosen.timing.clock == "fake-thread-cpu"
    assert all(o.chosen.seconds == pytest.approx(0.001) for o in r.ops)


def test_quiet_multi_thread_timings_are_kept(monkeypatch):
    _fake_contention(monkeypatch, [0.0])
    prof = _two_thread_profiler(monkeypatch)
    r = prof.profile(Scenario.of(TINY, "decode", context_tokens=4000, dtype="fp32"))
    att = next(o for o in r.ops if o.op.kind == "attention")
    assert att.chosen.seconds == pytest.approx(0.05) and "threads" not in att.chosen.telemetry


def test_decode_attention_appends_to_its_cache_without_faulting_pages_in():
    """A decode loop's cache append reuses the memory the previous step freed: timed after
    another op's malloc_trim, the call must not fault the whole K/V into fresh pages (that
    made a 16,000-token decode attention of a 0.43 M-parameter Llama read ~8 ms for ~1 ms)."""
    resource = pytest.importorskip("resource")
    from roofprof.devices.pool import malloc_trimmer

    trim = malloc_trimmer()
    if trim is None:
        pytest.skip("no malloc_trim here")
    spec = tiny_spec(max_position_embeddings=1 << 16)
    w = ops(Scenario(spec, "decode", prompt_tokens=4000, context_tokens=4000, dtype="fp32"))
    op = next(o for o in w.ops if o.kind == "attention")
    prepared = TorchOps(spec).prepare(op, np.random.default_rng(0))
    assert prepared.check().ok and "reused buffers" in prepared.note
    kv_pages = op.kv_bytes / 4096
    assert kv_pages > 200
    faults = []
    for _ in range(3):
        trim()  # what a fresh-page op timed in the same round does
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        prepared.calls[0]()
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    assert max(faults) < kv_pages / 10, faults  # the cache's pages stay resident
    prepared.release()


def test_a_cache_that_does_not_store_keeps_its_measurements_in_memory(tmp_path):
    from roofprof.timing import Timing

    op = llama_ops(TINY, "decode", context_tokens=4, dtype="fp32").ops[2]
    m = Measurement(
        "torch", "ok", "n", Timing((1e-6, 2e-6)), CheckResult(True, 0.0, 0.0, 1e-5), 1, {}
    )
    cache = MeasurementCache("abc", folder=tmp_path, store=False)
    cache.put(op, m)
    assert cache.get(op, "torch") is not None and not cache.path.exists()
    MeasurementCache("abc", folder=tmp_path).put(op, m)
    assert cache.path.exists()
