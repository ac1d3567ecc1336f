"""One convention across every command's op records: per-call and total FLOPs, bytes and
seconds each carry their scope in the name (``*_per_call``, ``*_total``), and the totals
equal the per-call figure times ``count`` and add up to the pass's own totals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roofprof.cli import main

TRACE = Path(__file__).parent / "fixtures" / "traces" / "h100_torch2_tracelens_bert_small.json.gz"
SCOPED = ("flops_per_call", "flops_total", "bytes_per_call", "bytes_total")
TIMES = ("seconds_per_call", "seconds_total")


def _json(capsys, *args) -> dict:
    code = main(list(args))
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def _check(rec: dict) -> None:
    for name in ("flops", "bytes", "seconds"):
        per, total = rec[f"{name}_per_call"], rec[f"{name}_total"]
        if per is None:
            assert total is None
        else:
            assert total == pytest.approx(per * rec["count"], rel=1e-9), (name, rec)


def test_predict_op_records_are_scoped_and_add_up(capsys):
    d = _json(capsys, "predict", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "-f", "json")
    for phase in ("prefill", "decode"):
        ops = [o for o in d["ops"] if o["phase"] == phase]
        assert ops and all(set(SCOPED + TIMES) <= set(o) for o in ops)
        for o in ops:
            _check(o)
        assert sum(o["flops_total"] for o in ops) == pytest.approx(d[phase]["flops"], rel=1e-9)
        assert sum(o["bytes_total"] for o in ops) == pytest.approx(d[phase]["bytes"], rel=1e-9)
    assert any(o["count"] > 1 for o in d["ops"])  # per call and total differ somewhere


def test_profile_op_records_are_scoped():
    from roofprof.models import llama_ops
    from roofprof.profiling.engine import Measurement
    from roofprof.profiling.records import OpResult
    from roofprof.specs import load_model
    from roofprof.timing import Timing

    spec = load_model("llama-3.1-8b")
    op = next(
        o for o in llama_ops(spec, "decode", context_tokens=8, dtype="fp32").ops if o.count > 1
    )
    m = Measurement("torch", "ok", timing=Timing((3e-6,)))
    rec = OpResult(op, (m,), m).to_dict()
    assert set(SCOPED + TIMES) <= set(rec)
    _check(rec)
    assert rec["flops_per_call"] == op.flops and rec["seconds_per_call"] == pytest.approx(3e-6)


def test_trace_op_and_module_records_are_scoped(capsys):
    pytest.importorskip("torch")
    d = _json(capsys, "trace", "--import", str(TRACE), "-f", "json")
    assert all(set(SCOPED + TIMES) <= set(o) for o in d["ops"])
    for o in d["ops"]:
        _check(o)
    costed = [o for o in d["ops"] if o["flops_per_call"] and o["count"] > 1]
    assert costed  # a signature called more than once: per call != total
    flops = sum(o["flops_total"] or 0 for o in d["ops"])
    assert flops == pytest.approx(d["summary"]["flops"], rel=1e-9)
    assert all({"seconds_total", "flops_total", "bytes_total"} <= set(m) for m in d["modules"])


def test_trace_csv_header_is_scoped(tmp_path):
    pytest.importorskip("torch")
    from roofprof.tracing.chrome import import_trace
    from roofprof.tracing.report import csv_text

    head = csv_text(import_trace(TRACE)).splitlines()[0].split(",")
    assert {"flops_per_call", "flops_total", "seconds_total", "seconds_per_call"} <= set(head)
    assert "flops" not in head and "time_s" not in head
