"""The host's own noise in a validation: drift of a reference kernel, the noise band, the flag."""

import json

import pytest
from conftest import flat_times, write_config

from roofprof.validation.host_noise import (
    HostCheck,
    HostNoise,
    HostProbe,
    noise_band,
    within_noise,
)


class FakeClock:
    """Each call to the work advances time by the next scripted duration."""

    def __init__(self, durations):
        self.t, self.durations = 0.0, list(durations)

    def __call__(self):
        return self.t

    def work(self):
        self.t += self.durations.pop(0)


def test_probe_medians_drift_and_load_with_a_fake_clock():
    # check 1: warm-up then 1, 1, 9 ms (median 1 ms); check 2 under load: 1.5 ms each
    clock = FakeClock([5e-3, 1e-3, 1e-3, 9e-3, 5e-3, 1.5e-3, 1.5e-3, 1.5e-3])
    loads = iter([0.25, 3.5])
    times = iter(["05:00:00", "05:01:00"])
    probe = HostProbe(
        clock.work, clock=clock, repeats=3, load=lambda: next(loads), now=lambda: next(times)
    )
    a = probe.check("before the real run")
    b = probe.check("after the profile")
    assert a.seconds == pytest.approx(1e-3) and b.seconds == pytest.approx(1.5e-3)
    noise = probe.noise()
    assert noise.drift == pytest.approx(0.5)
    text = noise.describe()
    assert "host drift 50.0%" in text and "load 3.50" in text and "05:01:00" in text
    assert json.loads(json.dumps(noise.to_dict()))["checks"][1]["load_avg"] == 3.5


def test_probe_records_the_share_other_processes_used():
    class Busy:
        share = 0.0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.share = 0.4
            return False

    clock = FakeClock([1e-3] * 4)
    c = HostProbe(clock.work, clock=clock, repeats=3, share=Busy, load=lambda: None).check("x")
    assert c.other_cpu_share == 0.4 and c.load_avg is None


def test_band_and_flag():
    assert HostNoise((HostCheck("a", "t", 1.0),)).drift == 0.0
    assert noise_band(0.02, 0.10) == 0.10 and noise_band(0.12, 0.10) == 0.12
    assert within_noise(0.099, 0.10) and not within_noise(-0.101, 0.10)
    assert not within_noise(float("nan"), 0.5)


@pytest.mark.usefixtures("isolated_cache")
def test_validate_flags_residuals_within_the_host_drift(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    import roofprof.validation.model_run as validation
    from roofprof.api import validate
    from roofprof.prediction.rollup import MeasuredEstimator

    class QuietMachine:
        share, available = 0.0, True

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    class SwingingHost(HostProbe):
        """The reference kernel takes 1 ms, then 10 ms, then 1 ms: a drift of 900 %."""

        def __init__(self, **kw):
            self.durations = iter([1e-3, 1e-2, 1e-3])
            super().__init__(lambda: None, load=lambda: 1.0, **kw)

        def check(self, label):
            c = HostCheck(label, "05:00:00", next(self.durations), 1.0)
            self.checks.append(c)
            return c

    monkeypatch.setattr(validation, "Contention", QuietMachine)
    monkeypatch.setattr(validation, "HostProbe", SwingingHost)
    monkeypatch.setattr(validation, "with_framework_overhead", lambda e, *a: dict(e))
    tiny = str(write_config(tmp_path, num_hidden_layers=2))
    times = flat_times(tiny, 1e-4)
    r = validate(
        tiny,
        device="cpu",
        backend="torch",
        prompt_tokens=8,
        decode_steps=2,
        warmup_steps=1,
        estimators={"measured": MeasuredEstimator(times)},
    )
    assert r.host_noise is not None and [c.label for c in r.host_noise.checks] == [
        "before the real run",
        "after the real run",
        "after the profile",
    ]
    assert r.host_noise.drift == pytest.approx(9.0)
    row = next(x for x in r.comparison() if x["estimator"] == "measured")
    assert row["decode_noise_band"] == pytest.approx(9.0)
    assert row["decode_within_noise"] == (abs(row["decode_residual"]) <= 9.0)
    assert any("host drift 900.0%" in w for w in r.warnings)
    if row["decode_within_noise"]:
        assert any("decode residual" in w and "host's own noise" in w for w in r.warnings)
    d = json.loads(json.dumps(r.to_dict()))
    assert d["host_noise"]["drift"] == pytest.approx(9.0)
    assert "decode_within_noise" in d["comparison"][0]


def test_a_cached_measurement_says_when_and_under_what_load(tmp_path, monkeypatch):
    import roofprof.cache as cache_mod
    from roofprof.cache import MeasurementCache
    from roofprof.prediction.rollup import MeasuredEstimator, OpTime
    from roofprof.profiling.engine import Measurement
    from roofprof.workload import Op

    monkeypatch.setattr(cache_mod, "_load_avg", lambda: 2.75)  # a fake load
    monkeypatch.setattr(MeasurementCache, "now", staticmethod(lambda: "2026-12-03T05:10:00Z"))
    op = Op("q_proj", "gemm", "decode", 1, 64, 64, "fp32", 8192.0, 16896.0, fn="linear")
    cache = MeasurementCache("fp", folder=tmp_path)
    cache.put(op, Measurement("torch", "ok", telemetry={"other_cpu_share": 0.2}))
    got = MeasurementCache("fp", folder=tmp_path).get(op, "torch")
    assert got is not None and got.telemetry["cached"] is True
    assert got.telemetry["measured_at"] == "2026-12-03T05:10:00Z"
    assert got.telemetry["load_avg"] == 2.75
    # the estimator states it once for all reused shapes, kept up to date
    op2 = Op("o_proj", "gemm", "decode", 1, 32, 64, "fp32", 4096.0, 8448.0, fn="linear")

    def cached(at, share, load):
        return OpTime(
            1e-5, "torch", cached=True, measured_at=at, other_cpu_share=share, load_avg=load
        )

    est = MeasuredEstimator(
        {
            op.shape_key: cached("2026-12-03T05:10:00Z", 0.2, 2.75),
            op2.shape_key: cached("2026-12-03T05:14:00Z", 0.05, 0.5),
        }
    )
    est.estimate(op)
    est.estimate(op2)
    est.estimate(op)
    reuse = [w for w in est.warnings if "reused from the measurement cache" in w]
    assert len(reuse) == 1
    assert reuse[0].startswith(
        "2 op shapes reused from the measurement cache, measured "
        "2026-12-03 05:10:00 to 05:14:00 UTC"
    )
    assert "up to 20% of the CPUs" in reuse[0] and "load average up to 2.75" in reuse[0]
    # fresh measurements say nothing, and their records keep their old form
    assert MeasuredEstimator({op.shape_key: OpTime(1e-5, "torch")}).warnings == []
    assert "measured_at" not in OpTime(1e-5, "torch").to_dict()
