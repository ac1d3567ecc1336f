"""Roll-up arithmetic of the four estimators, with literal records (no device, no timing)."""

import math

import pytest
from conftest import tiny_spec

from roofprof import predict
from roofprof.models import llama_ops
from roofprof.prediction import rollup
from roofprof.prediction.rollup import (
    MeasuredEstimator,
    OpTime,
    RealRun,
    RooflineEstimator,
    compare,
    decode_turning_point,
    phase_sweep,
    residual,
)
from roofprof.roofline import Ceiling, Roofline
from roofprof.workload import Op

TINY = tiny_spec()
ROOF = Roofline(
    "literal",
    (
        Ceiling("fp32", "compute", 1e11, dtype="fp32", source="measured"),
        Ceiling("dram", "memory", 1e10, level="dram", source="measured"),
    ),
)


def op(name="q_proj", m=1, n=64, k=64, count=2, kind="gemm", flops=8192.0, bytes_=16896.0):
    return Op(name, kind, "decode", m, n, k, "fp32", flops, bytes_, count=count)


def table_for(workload, seconds=1e-3, kernels=1):
    return {o.shape_key: OpTime(seconds, "lit", kernels) for o in workload.ops}


def test_measured_sum_is_per_call_time_times_count():
    w = llama_ops(TINY, "decode", context_tokens=8, dtype="fp32")
    wp = llama_ops(TINY, "prefill", prompt_tokens=8, dtype="fp32")
    table = {
        **table_for(wp, 5e-3),
        **table_for(w, 1e-3),
    }  # lm_head/final_norm: same shape in both phases
    est = MeasuredEstimator(table, launch_s=0.0)
    p = predict(TINY, estimator=est, prompt_tokens=8, context_tokens=8, dtype="fp32")
    expected = sum(o.count for o in w.ops) * 1e-3
    assert p.prefill.seconds == pytest.approx(
        sum(o.count * table[o.shape_key].seconds for o in wp.ops)
    )
    assert not p.warnings
    assert p.decode.seconds == pytest.approx(expected)
    assert p.estimator == "measured"
    d = p.to_dict()
    assert d["decode"]["seconds_per_token"] == pytest.approx(expected)
    assert d["estimator_inputs"]["launch_overhead_counted"] is True
    assert len(d["estimator_inputs"]["measured_ops"]) == len(table)


def test_identical_shapes_share_one_measurement():
    a, b = op("q_proj"), op("o_proj")  # same GEMM shape, different names
    assert a.shape_key == b.shape_key
    est = MeasuredEstimator({a.shape_key: OpTime(2e-6, "lit")})
    assert est.estimate(b).seconds == 2e-6


def test_launch_overhead_is_a_floor_per_kernel():
    o = op()
    slow = MeasuredEstimator({o.shape_key: OpTime(50e-6, "lit", kernels=6)}, launch_s=5e-6)
    assert slow.estimate(o).seconds == 50e-6  # 6 × 5 µs = 30 µs < 50 µs: measured time stands
    fast = MeasuredEstimator({o.shape_key: OpTime(10e-6, "lit", kernels=6)}, launch_s=5e-6)
    e = fast.estimate(o)
    assert e.seconds == pytest.approx(30e-6) and e.bound == "launch"
    assert fast.with_launch(False).estimate(o).seconds == 10e-6
    assert fast.with_launch(False).name == "measured-no-launch"


def test_bound_from_classifier_and_phase_bound():
    o = op()
    est = MeasuredEstimator({o.shape_key: OpTime(1e-6, "lit")}, classify=lambda _: "memory")
    assert est.estimate(o).bound == "memory"


def test_unmeasured_op_falls_back_to_empirical_with_warning():
    o = op()
    fallback = RooflineEstimator(ROOF, name="empirical")
    est = MeasuredEstimator({}, fallback=fallback)
    with pytest.warns(UserWarning, match="not measured"):
        e = est.estimate(o)
    assert e.seconds == pytest.approx(max(o.flops / 1e11, o.bytes / 1e10))
    assert "empirical" in e.note
    assert est.warnings and "q_proj" in est.warnings[0]
    # the warning reaches the prediction
    with pytest.warns(UserWarning):
        p = predict(
            TINY, estimator=MeasuredEstimator({}, fallback=fallback), prompt_tokens=4, dtype="fp32"
        )
    assert any("not measured" in w for w in p.warnings)


def test_measure_callback_runs_once_per_shape():
    calls = []

    def measure(o):
        calls.append(o.shape_key)
        return OpTime(1e-6, "cb"), ""

    est = MeasuredEstimator(measure=measure)
    first = est.estimate(op("q_proj"))
    second = est.estimate(op("o_proj"))  # same shape: the callback's time is reused
    assert calls == [op("q_proj").shape_key]
    assert first == second and first.seconds == 1e-6  # seconds per call, as measured
    est.estimate(op("k_proj", n=128))  # a new shape is measured
    assert len(calls) == 2 and calls[1] == op("k_proj", n=128).shape_key


def test_measure_callback_failure_is_reported():
    est = MeasuredEstimator(measure=lambda o: (None, "kernel failed its check"))
    with pytest.warns(UserWarning, match="failed its check"):
        e = est.estimate(op())
    assert e.seconds == 0.0 and e.bound == "unmeasured"


def test_residuals_and_compare_rows():
    assert residual(1.2, 1.0) == pytest.approx(0.2)
    assert math.isnan(residual(1.0, 0.0))
    w = llama_ops(TINY, "decode", context_tokens=8, dtype="fp32")
    wp = llama_ops(TINY, "prefill", prompt_tokens=8, dtype="fp32")
    est = MeasuredEstimator({**table_for(w, 1e-3), **table_for(wp, 2e-3)})
    p = predict(TINY, estimator=est, prompt_tokens=8, context_tokens=8, dtype="fp32")
    real = RealRun(
        "tiny",
        1,
        8,
        8,
        prefill_s=p.prefill.seconds / 1.25,
        decode_s=p.decode.seconds * 2,
        num_layers=2,
    )
    rows = compare({"measured": p}, real)
    assert [r["estimator"] for r in rows] == ["measured", "real"]
    assert rows[0]["ttft_residual"] == pytest.approx(0.25)
    assert rows[0]["decode_residual"] == pytest.approx(-0.5)
    assert rows[1]["tokens_per_second"] == pytest.approx(1 / real.decode_s)
    assert math.isnan(compare({"m": p}, None)[0]["decode_residual"])


def test_real_run_record():
    r = RealRun("m", 4, 128, 132, 1.0, 0.5, 16, scaled_from=32)
    d = r.to_dict()
    assert d["tokens_per_second"] == 8.0 and d["scaled_from"] == 32


def test_decode_sweep_turns_compute_bound():
    est = RooflineEstimator(ROOF, name="empirical")
    # ridge 10 FLOP/B: the decode GEMMs of a 1B model cross it between batch 1 and 512
    from roofprof.workload import Scenario

    s = Scenario.of("llama-3.2-1b", "decode", prompt_tokens=8, dtype="fp32")
    phases = phase_sweep(s, est, batches=(1, 512), contexts=(8,))
    assert [p.workload.batch for p in phases] == [1, 512]
    assert phases[0].bound == "memory" and phases[1].bound == "compute"
    preds = [
        predict(
            "llama-3.2-1b", roofline=ROOF, batch=b, prompt_tokens=8, context_tokens=8, dtype="fp32"
        )
        for b in (1, 512)
    ]
    assert decode_turning_point(preds) == {"batch": 512, "previous_batch": 1}
    assert decode_turning_point(preds[:1]) is None


def test_host_issue_time_is_a_floor_too():
    o = op()
    est = MeasuredEstimator(
        {o.shape_key: OpTime(4e-6, "lit", kernels=1, host_s=9e-6)}, launch_s=5e-6
    )
    e = est.estimate(o)
    assert e.seconds == 9e-6 and e.bound == "launch"
    assert est.with_launch(False).estimate(o).seconds == 4e-6


def test_predict_and_sweeps_take_a_scenario():
    from roofprof import sweep
    from roofprof.workload import Scenario

    s = Scenario.of(TINY, "decode", batch=2, prompt_tokens=8, context_tokens=16, dtype="fp32")
    est = RooflineEstimator(ROOF, name="empirical")
    loose = predict(TINY, estimator=est, batch=2, prompt_tokens=8, context_tokens=16, dtype="fp32")
    assert rollup.predict(s, est).to_dict() == loose.to_dict()
    grid = sweep(TINY, estimator=est, batches=(1, 4), prompt_tokens=8, dtype="fp32")
    assert [p.decode.workload.batch for p in grid] == [1, 4]
    assert [
        p.decode.workload.context_tokens
        for p in rollup.sweep([s, s.replace(context_tokens=32)], est)
    ] == [16, 32]
    grid = phase_sweep(s, est, batches=(1, 2), contexts=(None, 64))
    assert [(p.workload.batch, p.workload.context_tokens) for p in grid] == [
        (1, 8),
        (1, 64),
        (2, 8),
        (2, 64),
    ]


def test_a_contended_measurement_is_used_and_said_plainly():
    w = llama_ops(TINY, "decode", context_tokens=8, dtype="fp32")
    op = w.ops[2]
    est = MeasuredEstimator({op.shape_key: OpTime(1e-3, "torch", contended=True)})
    with pytest.warns(UserWarning, match="contended"):
        assert est.estimate(op).seconds == 1e-3
    est.estimate(op)  # said once per shape
    assert len(est.warnings) == 1 and "--remeasure" in est.warnings[0]
    assert OpTime(1e-3, "torch", contended=True).to_dict()["contended"] is True
    assert "contended" not in OpTime(1e-3, "torch").to_dict()


def test_many_contended_measurements_make_one_warning_naming_them():
    w = llama_ops(TINY, "decode", context_tokens=8, dtype="fp32")
    ops = [op for op in w.ops if op.kind == "gemm"]
    est = MeasuredEstimator({op.shape_key: OpTime(1e-3, "torch", contended=True) for op in ops})
    with pytest.warns(UserWarning, match="contended"):
        for op in ops:
            est.estimate(op)
    distinct = len({op.shape_key for op in ops})
    assert len(est.warnings) == 1  # one line, however many shapes
    assert est.warnings[0].startswith(f"{distinct} op shapes measured while other processes")
    assert "--remeasure" in est.warnings[0]
    assert est.with_launch(False).warnings is est.warnings  # the copies share it
