"""`roofprof roofline` and `roofprof doctor` end to end (tiny test plan), and their refusals."""

from __future__ import annotations

import json

import pytest

import roofprof.devices as devices
import roofprof.devices.cuda as cuda_backend
import roofprof.roofline.probes as probes
from roofprof.cli import main
from roofprof.roofline import load_roofline
from roofprof.specs import load_model


def test_roofline_quick_end_to_end(tmp_path, capsys):
    out = tmp_path / "rl"
    code = main(
        [
            "roofline",
            "--device",
            "cpu",
            "--quick",
            "--plan",
            "test",
            "--out",
            str(out),
            "--format",
            "json",
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["complete"] and summary["device"]["kind"] == "cpu"
    assert {c["kind"] for c in summary["ceilings"]} == {"compute", "memory"}
    assert "cpu requested" in captured.err
    roof = load_roofline(out / "roofline.json")
    assert roof.memory_bandwidth("dram") > 0 and roof.compute_peak("fp64") > 0
    data = json.loads((out / "roofline.json").read_text())
    assert data["complete"] and data["provenance"]["command"]
    assert data["spec_comparison"]["available"] is False
    for png in ("roofline.png", "staircase.png", "intensity_sweep.png"):
        assert (out / png).stat().st_size > 1000, png
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temp files left


def test_roofline_table_output(tmp_path, capsys):
    """The table shows the numbers roofline.json holds: each ceiling's best and median on its
    own row, and the fp64 ridge as the best fp64 peak over the best DRAM bandwidth."""
    import re

    from roofprof.units import si

    code = main(
        ["roofline", "--device", "cpu", "--plan", "test", "--out", str(tmp_path), "--no-plots"]
    )
    assert code == 0
    text = capsys.readouterr().out
    data = json.loads((tmp_path / "roofline.json").read_text())
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if line.count("│") > 3}
    assert data["ceilings"] and set(rows) == {c["name"] for c in data["ceilings"]}
    for c in data["ceilings"]:
        unit = "FLOP/s" if c["kind"] == "compute" else "B/s"
        cells = [cell.strip() for cell in rows[c["name"]].split("│")]
        assert cells[4] == si(c["value"], unit) and cells[5] == si(c["median_value"], unit), cells
    peak = max(
        c["value"] for c in data["ceilings"] if c["kind"] == "compute" and c["dtype"] == "fp64"
    )
    dram = max(
        c["value"] for c in data["ceilings"] if c["kind"] == "memory" and c["level"] == "dram"
    )
    ridge = re.search(r"ridge fp64: ([0-9.]+) FLOP/byte", text)
    assert ridge and float(ridge.group(1)) == pytest.approx(peak / dram, rel=0.01)
    assert not (tmp_path / "staircase.png").exists()


def test_predict_uses_the_measured_roofline(tmp_path, capsys):
    assert (
        main(
            [
                "roofline",
                "--device",
                "cpu",
                "--plan",
                "test",
                "--out",
                str(tmp_path),
                "--no-plots",
                "--format",
                "json",
            ]
        )
        == 0
    )
    capsys.readouterr()
    code = main(
        [
            "predict",
            "--roofline",
            str(tmp_path / "roofline.json"),
            "--dtype",
            "fp32",
            "--format",
            "json",
            "--model",
            "llama-3.1-8b",
            "--prompt",
            "16",
        ]
    )
    assert code == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["estimator"] == "empirical"
    # the prediction is the measured roofline's: one decode step reads every fp32 weight
    # (the embedding table is only gathered), so it takes at least the weight bytes over
    # this roofline's DRAM bandwidth
    roof = load_roofline(tmp_path / "roofline.json")
    m = load_model("llama-3.1-8b")
    weights_bytes = 4 * (m.param_count() - m.vocab_size * m.hidden_size)
    step_s = payload["decode"]["seconds_per_token"]
    assert payload["decode"]["bytes"] >= weights_bytes
    assert step_s >= 0.99 * weights_bytes / roof.memory_bandwidth("dram")


def test_unwritable_out_exits_2_before_measuring(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(probes, "measure_roofline", lambda *a, **k: pytest.fail("measured anyway"))
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    code = main(["roofline", "--device", "cpu", "--quick", "--out", str(blocker / "sub")])
    assert code == 2
    assert "cannot write to output folder" in capsys.readouterr().err


@pytest.mark.parametrize("device", ["tpu", "cuda:7"])
def test_unknown_device_exits_2_listing_devices(tmp_path, monkeypatch, capsys, device):
    monkeypatch.setattr(
        cuda_backend,
        "enumerate",
        lambda: [devices.DeviceStatus("cuda:0", "NVIDIA H100 80GB HBM3", True)],
    )
    monkeypatch.setattr(probes, "measure_roofline", lambda *a, **k: pytest.fail("measured anyway"))
    code = main(["roofline", "--device", device, "--out", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err
    assert f"unknown device '{device}'" in err and "cpu" in err and "cuda:0" in err


def test_cuda_without_gpu_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(
        cuda_backend,
        "enumerate",
        lambda: [
            devices.DeviceStatus("cuda", "-", False, "no NVIDIA driver (NVML library not found)")
        ],
    )
    assert main(["roofline", "--device", "cuda:0", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "not available" in err and "auto, cpu" in err


def test_bad_format_exits_2(tmp_path, capsys):
    assert main(["roofline", "--format", "xml", "--out", str(tmp_path)]) == 2
    assert "valid choices" in capsys.readouterr().err


def test_ctrl_c_keeps_what_finished(tmp_path, monkeypatch, capsys):
    from tests.test_probes import SimDevice

    real = probes.measure_roofline

    def interrupted(device, quick=False, progress=None, *, plan=None, checkpoint=None, probes=None):
        sim = SimDevice(interrupt_at="triad")
        return real(sim, plan="test", progress=progress, checkpoint=checkpoint)

    monkeypatch.setattr(probes, "measure_roofline", interrupted)
    code = main(["roofline", "--device", "cpu", "--quick", "--out", str(tmp_path)])
    assert code == 130
    err = capsys.readouterr().err
    assert "interrupted during triad" in err and "marked incomplete" in err
    data = json.loads((tmp_path / "roofline.json").read_text())
    assert data["complete"] is False and data["interrupted_during"] == "triad"
    assert any(c["probe"] == "read" for c in data["ceilings"])


def test_doctor_reports_every_component(capsys):
    assert main(["doctor", "--format", "json"]) == 0
    rows = {r["component"]: r for r in json.loads(capsys.readouterr().out)["components"]}
    assert {"cpu", "nvml", "nvcc", "ncu", "torch", "cupy", "numba-cuda", "auto device"} <= set(rows)
    assert rows["cpu"]["ok"]
    for r in rows.values():
        assert r["detail"]  # missing things say why
    assert main(["doctor"]) == 0
    assert "roofprof doctor" in capsys.readouterr().out
