"""The real model's framework overhead: counted by the measured estimator, measured by a probe."""

import pytest

from roofprof.errors import ConfigError
from roofprof.models import ops
from roofprof.prediction.estimators import MeasuredEstimator, OpTime
from roofprof.prediction.framework import FrameworkOverhead, overhead_ops
from roofprof.prediction.rollup import estimate_phase, predict
from roofprof.specs import load_model
from roofprof.validation.framework_overhead import (
    PROBE_LAYERS,
    measure_framework_overhead,
    overhead_from_times,
    tiny_model,
)
from roofprof.workload import Scenario

FW = FrameworkOverhead(
    {"prefill": 3e-4, "decode": 2e-4}, {"prefill": 1e-3, "decode": 4e-4}, "transformers X"
)


def _flat(seconds=1e-4):
    """A measured estimator giving every op ``seconds`` per call."""

    class Table(dict):
        def __contains__(self, key):
            return True

        def __getitem__(self, key):
            return OpTime(seconds, "torch")

    est = MeasuredEstimator()
    est.times = Table()
    return est


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_framework_overhead_is_added_to_each_pass(phase):
    w = ops(Scenario.of("llama-3.2-1b", phase, prompt_tokens=64, dtype="fp32"))
    bare = estimate_phase(w, _flat())
    counted = estimate_phase(w, _flat().with_framework(FW))
    extra = counted.seconds - bare.seconds
    assert extra == pytest.approx(16 * FW.layer_s[phase] + FW.pass_s[phase])
    names = [o.op.name for o in counted.ops[-2:]]
    assert names == ["framework_layer", "framework_pass"]
    layer, once = counted.ops[-2:]
    assert layer.op.count == 16 and layer.op.scope == "layer" and once.op.scope == "model"
    assert layer.op.flops == 0 and layer.op.bytes == 0 and layer.estimate.bound == "framework"
    # per-layer time includes it, the workload's counts do not change
    assert counted.layer_seconds - bare.layer_seconds == pytest.approx(FW.layer_s[phase])
    assert counted.flops == bare.flops and counted.bytes == bare.bytes


def test_no_launch_variant_and_plain_estimators_leave_it_out():
    est = _flat().with_framework(FW)
    assert est.framework is FW and est.with_launch(False).framework is None
    assert est.describe()["framework_overhead"]["model"] == "transformers X"
    w = ops(Scenario.of("llama-3.2-1b", "decode", context_tokens=8, dtype="fp32"))
    assert "framework_layer" not in [o.op.name for o in estimate_phase(w, _flat()).ops]
    p = predict(Scenario.of("llama-3.2-1b", "decode", prompt_tokens=8, dtype="fp32"), est)
    assert any(o.op.name == "framework_pass" for o in p.prefill.ops)


def test_overhead_record_refuses_negative_times():
    with pytest.raises(ValueError, match=">= 0"):
        FrameworkOverhead({"prefill": -1e-6}, {}, "m")
    assert overhead_ops(
        ops(Scenario.of("llama-3.2-1b", "prefill", prompt_tokens=4, dtype="fp32")), FW
    )[0].seconds == pytest.approx(16 * 3e-4)


def test_overhead_from_times_subtracts_the_op_list():
    lo, hi = PROBE_LAYERS
    # real: 1 ms per pass + 0.5 ms per layer; ops: 0.2 ms per layer -> 0.3 ms/layer overhead
    real = {n: 1e-3 + n * 5e-4 for n in (lo, hi)}
    op_list = {n: n * 2e-4 for n in (lo, hi)}
    per_layer, per_pass = overhead_from_times(real, op_list)
    assert per_layer == pytest.approx(3e-4) and per_pass == pytest.approx(1e-3)
    # an op list slower than the real passes (noise) clamps at 0, never negative
    assert overhead_from_times({lo: 1e-3, hi: 1e-3}, {lo: 2e-3, hi: 4e-3}) == (0.0, 0.0)


def test_probe_takes_the_fastest_repetition_against_a_fake_clock():
    lo, hi = PROBE_LAYERS
    calls = []

    def timer(phase, repetition):
        calls.append((phase, repetition))
        noise = 5e-3 if repetition == 1 else 0.0  # one slow repetition: ignored
        base = 2e-4 if phase == "prefill" else 1e-4
        return {
            "real": {n: 1e-3 + noise + n * (base + 1e-4) for n in (lo, hi)},
            "ops": {n: n * 1e-4 for n in (lo, hi)},
        }

    fw = measure_framework_overhead(load_model("llama-3.2-1b"), "hf", repeats=3, timer=timer)
    assert len(calls) == 6
    assert fw.layer_s["prefill"] == pytest.approx(2e-4) and fw.layer_s["decode"] == pytest.approx(
        1e-4
    )
    assert fw.pass_s["prefill"] == pytest.approx(1e-3)
    assert len(fw.samples["decode"]) == 3 and "1 and 5 layers" in fw.method


def test_tiny_model_keeps_the_family_and_refuses_experts():
    t = tiny_model(load_model("gemma-2-9b"), 5)
    assert t.family == "gemma2" and t.num_layers == 5 and t.hidden_size == 64
    assert t.gemma is not None
    with pytest.raises(ConfigError, match="dense models only"):
        tiny_model(load_model("mixtral-8x7b"), 1)


def test_probe_on_a_real_tiny_model():
    pytest.importorskip("torch")
    fw = measure_framework_overhead(load_model("llama-3.2-1b"), "torch", repeats=1, calls=2)
    assert fw.model == "plain torch" and set(fw.layer_s) == {"prefill", "decode"}
    assert all(v >= 0 for v in (*fw.layer_s.values(), *fw.pass_s.values()))


@pytest.mark.parametrize("asynchronous", [False, True])
def test_predict_measured_counts_it_on_a_cpu_only(monkeypatch, asynchronous, isolated_cache):
    import roofprof.profiling.measured as measured
    import roofprof.validation.framework_overhead as probe
    from roofprof.prediction.choice import EstimatorChoice, choose_estimator

    asked = []
    monkeypatch.setattr(
        measured,
        "measured_estimator",
        lambda **kw: MeasuredEstimator(inputs={"device": {"asynchronous": asynchronous}}),
    )
    monkeypatch.setattr(
        probe, "measure_framework_overhead", lambda spec, backend, **kw: asked.append(backend) or FW
    )
    s = Scenario.of("llama-3.2-1b", "decode", prompt_tokens=8, dtype="fp32")
    est = choose_estimator(EstimatorChoice(name="measured", device="cpu"), s)
    assert (est.framework is FW) == (not asynchronous)
    assert len(asked) == (0 if asynchronous else 1)
    # a second prediction reuses the class's overhead from the cache, and says so
    again = choose_estimator(EstimatorChoice(name="measured", device="cpu"), s)
    assert len(asked) == (0 if asynchronous else 1)
    if not asynchronous:
        assert again.framework == FW
        assert any("reused from the cache (measured 20" in w for w in again.warnings)
        # --remeasure measures it again
        choose_estimator(EstimatorChoice(name="measured", device="cpu", remeasure=True), s)
        assert len(asked) == 2


def test_the_overhead_cache_is_keyed_by_what_the_measurement_depends_on(tmp_path):
    from roofprof.validation.framework_overhead import (
        cached_framework_overhead,
        framework_cache_path,
    )

    calls = []

    def measure(spec, backend, **kw):
        calls.append((spec.id, backend, kw["attention"]))
        return FW

    llama = load_model("llama-3.2-1b")
    fw, when = cached_framework_overhead(llama, "hf", folder=tmp_path, measure=measure)
    assert (fw, when, len(calls)) == (FW, None, 1)
    fw, when = cached_framework_overhead(llama, "hf", folder=tmp_path, measure=measure)
    assert fw == FW and when and when.endswith("Z") and len(calls) == 1
    # another class, attention path or family is another entry
    for args in ((llama, "torch", "fused"), (llama, "hf", "unfused")):
        cached_framework_overhead(
            args[0], args[1], attention=args[2], folder=tmp_path, measure=measure
        )
    gemma = load_model("gemma-2-9b")
    cached_framework_overhead(gemma, "hf", folder=tmp_path, measure=measure)
    assert len(calls) == 4
    # an unreadable entry is measured again and rewritten whole
    path = framework_cache_path(gemma, "hf", folder=tmp_path)
    path.write_text("{not json")
    cached_framework_overhead(gemma, "hf", folder=tmp_path, measure=measure)
    assert len(calls) == 5 and '"layer_s"' in path.read_text()


def test_predict_measured_says_when_the_probe_does_not_cover_the_model(monkeypatch):
    import roofprof.profiling.measured as measured
    from roofprof.prediction.choice import EstimatorChoice, choose_estimator

    monkeypatch.setattr(
        measured,
        "measured_estimator",
        lambda **kw: MeasuredEstimator(inputs={"device": {"asynchronous": False}}),
    )
    s = Scenario.of("mixtral-8x7b", "decode", prompt_tokens=8, dtype="fp32")
    est = choose_estimator(EstimatorChoice(name="measured", device="cpu"), s)
    assert est.framework is None
    assert any("framework overhead not counted" in w and "dense" in w for w in est.warnings)
