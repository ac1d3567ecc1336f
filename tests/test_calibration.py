"""The calibrated estimator: fitted on the published corpus, judged leave-one-out."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import roofprof
from roofprof.cli import main
from roofprof.errors import UnknownNameError
from roofprof.prediction import calibration
from roofprof.prediction.calibration import (
    ENGINES,
    calibrated_estimator,
    fit_profiles,
    leave_one_out,
    write_calibration,
)
from roofprof.published import cases, validate_published


def test_profiles_are_few_and_physical():
    profiles = fit_profiles()
    assert set(profiles) == set(ENGINES)
    for p in profiles.values():
        assert 0.05 <= p.memory_fraction <= 1.0 and 0.05 <= p.compute_fraction <= 1.0
        assert p.decode_step_s >= 0 and p.prefill_step_s >= 0 and p.launch_s >= 0
        if p.cuda_graphs:
            assert p.launch_s == 0.0
        else:
            assert p.decode_step_s == 0.0
    assert profiles["ideal"].memory_fraction == 1.0 and profiles["ideal"].decode_step_s == 0.0


def test_leave_one_out_never_sees_the_row():
    cs, _ = cases()
    loo = leave_one_out()
    full = fit_profiles()
    d06 = next(c for c in cs if c.row.id == "D06")
    without = fit_profiles(exclude_row="D06")
    assert without["gpt-fast"] != full["gpt-fast"]  # D06 moved the gpt-fast fit
    from roofprof.prediction.calibration import _predict, _prepare

    assert loo[d06.label] == pytest.approx(_predict(_prepare(d06), without["gpt-fast"]))


def test_calibrated_beats_spec_and_empirical_on_decode():
    v = validate_published(phase="decode")
    med = {(s["estimator"]): s["median_abs_residual"] for s in v.summary if s["group"] == "all"}
    assert med["calibrated"] < med["empirical"] < med["spec"]
    assert med["calibrated"] <= 0.12  # issue target: batch-1 decode, leave-one-out


def test_validate_published_is_fast_and_complete():
    started = time.perf_counter()
    v = validate_published()
    assert time.perf_counter() - started < 10
    assert {r["phase"] for r in v.rows} == {"decode", "prefill", "offline", "batched"}
    assert any(s.row_id == "D09" for s in v.skipped)
    d01 = next(r for r in v.rows if r["case"] == "D01:decode")
    assert d01["cite"].startswith("D01 · S5 pytorch-labs/gpt-fast@32971d3")
    assert 0.6 < d01["mbu_datasheet"] < 0.8  # gpt-fast: 1397 GB/s of 2039 (S5) -> 0.69


def test_calibrated_estimator_in_predict():
    est = calibrated_estimator("a100", engine="gpt-fast")
    p = roofprof.predict("llama-3.1-8b", gpu="a100", estimator=est, prompt_tokens=5)
    spec = roofprof.predict("llama-3.1-8b", gpu="a100", prompt_tokens=5)
    assert p.decode.seconds > spec.decode.seconds
    d = p.to_dict()
    assert (
        d["estimator"] == "calibrated"
        and d["estimator_inputs"]["engine_profile"]["engine"] == "gpt-fast"
    )
    with pytest.raises(UnknownNameError, match="llama.cpp"):
        calibrated_estimator("a100", engine="tgi")


def test_calibrate_writes_fit_and_loo_residuals(tmp_path):
    payload = write_calibration(tmp_path / "calibration.json")
    data = json.loads((tmp_path / "calibration.json").read_text())
    assert data["profiles"] == json.loads(json.dumps(payload["profiles"]))
    r = data["fit_residuals"][0]
    assert {"fit_residual_in_sample", "leave_one_out_residual"} <= set(r)
    assert "Fitting" in data["procedure"]
    calibration.load_calibration.cache_clear()


def test_shipped_calibration_is_current():
    shipped = calibration.load_calibration()
    fitted = {e: p.to_dict() for e, p in fit_profiles().items()}
    assert shipped["profiles"] == json.loads(json.dumps(fitted))


def test_cli_validate_published(capsys, tmp_path):
    assert (
        main(
            [
                "validate",
                "--published",
                "--estimator",
                "spec,calibrated",
                "--format",
                "json",
                "--gpu",
                "a100",
                "--phase",
                "decode",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["rows"] and all(
        r["gpu"] == "a100-sxm-80gb" and r["phase"] == "decode" for r in out["rows"]
    )
    assert (
        main(["validate", "--published", "--format", "csv", "--plot", str(tmp_path / "p.png")]) == 0
    )
    assert capsys.readouterr().out.startswith("row,case,cite")
    assert (tmp_path / "p.png").stat().st_size > 1000
    assert main(["validate", "--published", "--engine", "tgi"]) == 2
    assert "valid choices" in capsys.readouterr().err


def test_cli_roofline_published(capsys, tmp_path):
    assert (
        main(
            [
                "roofline",
                "--published",
                "h100",
                "-o",
                str(tmp_path),
                "--no-plots",
                "--format",
                "json",
            ]
        )
        == 0
    )
    from roofprof.roofline import load_roofline

    roof = load_roofline(tmp_path / "roofline.json")
    assert "T1-02" in roof.memory_ceiling().note
    # the ceilings are the published rows' numbers (the BabelStream triad, the mamf-finder bf16)
    rows = json.loads(
        (
            Path(__file__).resolve().parents[1] / "data" / "published" / "microbenchmarks.json"
        ).read_text()
    )
    rows = {r["id"]: r for r in (rows["rows"] if isinstance(rows, dict) else rows)}
    assert (
        roof.memory_bandwidth("dram")
        == rows["T1-02"]["ceiling"]
        == rows["T1-02"]["values"]["triad"]
    )
    assert (
        roof.compute_peak("bf16") == rows["T1-22"]["ceiling"]
        and "T1-22" in roof.compute_ceiling("bf16").note
    )
    assert main(["roofline", "--published", "t4", "-o", str(tmp_path)]) == 2
    assert "GPUs with published ceilings" in capsys.readouterr().err


def test_cli_predict_calibrated_contract(capsys):
    rc = main(
        [
            "predict",
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h100-sxm",
            "--dtype",
            "fp8",
            "--weights",
            "fp8",
            "--kv-dtype",
            "fp8",
            "--batch",
            "1",
            "--prompt",
            "128",
            "--context",
            "128",
            "--estimator",
            "calibrated",
            "--engine",
            "trt-llm",
            "--format",
            "json",
        ]
    )
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and d["prefill"]["seconds"] > 0 and d["decode"]["seconds_per_token"] > 0
    assert (d["dtype"], d["weights"], d["kv_dtype"]) == ("fp8", "fp8", "fp8")
    assert d["estimator_inputs"]["calibration"]["generated_by"] == "roofprof calibrate"


def test_run_report_section():
    from roofprof.report.html import _published_section

    html = _published_section()
    assert "Against published GPU measurements" in html and "calibrated" in html and "<img" in html
