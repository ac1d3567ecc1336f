"""roofprof run end to end on a tiny model: every step, the files, a readable self-contained
report."""

import base64
import json
import re

import pytest

from roofprof.api import run
from roofprof.cli import main
from roofprof.errors import ConfigError
from roofprof.job import STEPS, RunPlan
from roofprof.job import run as run_plan
from roofprof.roofline import Ceiling, Roofline

pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("isolated_cache")

ROOF = Roofline(
    "literal",
    (
        Ceiling("fp32 peak", "compute", 1e11, dtype="fp32", source="measured"),
        Ceiling("DRAM", "memory", 1e10, level="dram", source="measured"),
        Ceiling("L2", "memory", 5e10, level="l2", source="measured"),
    ),
)


@pytest.fixture
def tiny(tiny_config):
    return str(tiny_config)


@pytest.fixture
def roofline_file(tmp_path):
    path = tmp_path / "roofline.json"
    path.write_text(json.dumps({"roofline": ROOF.to_dict()}))
    return path


def test_a_plan_takes_the_model_the_device_declares_and_checks_its_steps(tmp_path):
    import dataclasses

    from roofprof.devices.cpu import CpuDevice

    cpu = CpuDevice()
    plan = RunPlan.of(device=cpu, out=tmp_path, prompt_tokens=64)
    assert (plan.scenario.model.id, plan.scenario.dtype) == ("llama-3.2-1b", "fp32")
    assert plan.device is cpu and plan.steps == STEPS and plan.sweep_contexts == (64, 256, 2048)
    # the validated decode context: the prompt and the real run's timed steps after it
    # (no untimed steps, 8 timed in 3 prefills: the median one is the second of three)
    assert plan.scenario.context_tokens == 65

    class BigDevice(CpuDevice):
        @property
        def info(self):
            return dataclasses.replace(
                super().info, default_model="llama-3.1-8b", default_dtype="bf16"
            )

    plan = RunPlan.of(device=BigDevice(), validate=False)
    assert (plan.scenario.model.id, plan.scenario.dtype) == ("llama-3.1-8b", "bf16")
    assert "validation" not in plan.steps
    with pytest.raises(ConfigError, match="valid choices: doctor, roofline"):
        dataclasses.replace(plan, steps=("roofline", "profiel"))
    with pytest.raises(ConfigError, match="needs the profile step"):
        dataclasses.replace(plan, steps=("roofline", "predictions", "report"))


def test_run_end_to_end(tiny, roofline_file, tmp_path):
    steps, progress = [], []
    out = tmp_path / "report"
    plan = RunPlan.of(
        tiny,
        device="cpu",
        out=out,
        prompt_tokens=8,
        batches=(1, 4),
        contexts=(8, 32),
        roofline=roofline_file,
        budget_s=0.001,
        decode_steps=2,
        impls=["torch"],
        backend="torch",
    )
    r = run_plan(
        plan, progress=lambda label, done, total: progress.append(label), step=steps.append
    )
    assert r.plan is plan and r.validation.scenario == plan.scenario  # the plan, kept
    assert steps == ["doctor", "roofline", "profile", "predictions", "validation", "report"]
    assert progress  # every step reports progress
    assert set(r.profiles) == {"prefill", "decode"}
    assert set(r.predictions) == {"empirical", "measured", "measured-no-launch"}
    assert "spec" in r.unavailable  # no datasheet for a CPU
    rows = {row["estimator"]: row for row in r.validation.comparison()}
    assert set(rows) == {"empirical", "measured", "measured-no-launch", "real"}
    real_s = r.validation.real.decode_s
    assert min(r.validation.decode_samples_s) <= real_s <= max(r.validation.decode_samples_s)
    assert rows["real"]["decode_step_s"] == real_s
    for label in ("empirical", "measured"):
        predicted_s = r.validation.predictions[label].decode.seconds  # the prediction itself
        assert predicted_s > 0 and rows[label]["decode_step_s"] == predicted_s
        assert rows[label]["decode_residual"] == pytest.approx(predicted_s / real_s - 1)
        assert (rows[label]["decode_residual"] > 0) == (predicted_s > real_s)
    # the predictions step counts the validated class's framework overhead, as the
    # validation does: one measurement, the same in both
    fw = r.validation.framework_overhead
    assert fw is not None and fw.model == "plain torch"
    for phase in ("prefill", "decode"):
        counted = getattr(r.predictions["measured"], phase).ops
        framework = [o for o in counted if o.op.kind == "framework"]
        assert [o.op.name for o in framework] == ["framework_layer", "framework_pass"]
        layers = plan.scenario.model.num_layers
        assert sum(o.seconds for o in framework) == pytest.approx(fw.seconds(phase, layers))
        bare = getattr(r.predictions["measured-no-launch"], phase).ops
        assert not [o for o in bare if o.op.kind == "framework"]
    assert [p.workload.batch for p in r.batch_sweep["measured"]] == [1, 4]
    assert [p.workload.context_tokens for p in r.context_sweep["measured"]] == [8, 32]
    for name in (
        "index.html",
        "report.json",
        "measured_ops.csv",
        "predicted_ops.csv",
        "comparison.csv",
        "sweeps.csv",
        "profile-prefill.json",
        "profile-decode.json",
        "roofline.png",
        "breakdown.png",
        "estimators.png",
        "sweeps.png",
    ):
        assert (out / name).stat().st_size > 0, name
    payload = json.loads(
        (out / "report.json").read_text(),  # strict JSON (no NaN)
        parse_constant=lambda c: pytest.fail(f"{c} in report.json"),
    )
    assert payload["validation"]["real"]["decode_s"] == pytest.approx(real_s)
    assert set(payload["step_seconds"]) == set(steps)
    html = (out / "index.html").read_text()
    assert "Estimators against the real run" in html and "Roofline with every op" in html
    assert (
        "Measured ops: decode" in html and "Clocks and throttling" in html and "Provenance" in html
    )
    # self-contained: charts inline, nothing fetched from elsewhere
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", html)
    assert len(images) >= 4 and all(base64.b64decode(i)[:4] == b"\x89PNG" for i in images)
    assert not re.search(r"(src|href)=['\"]https?://", html)


def test_cli_run(capsys, tiny, roofline_file, tmp_path):
    out = tmp_path / "r"
    code = main(
        [
            "run",
            "--model",
            tiny,
            "--device",
            "cpu",
            "--out",
            str(out),
            "--prompt",
            "8",
            "--batch-sweep",
            "1,2",
            "--context-sweep",
            "8,16",
            "--roofline",
            str(roofline_file),
            "--budget",
            "0.001",
            "--steps",
            "2",
            "--impl",
            "torch",
            "--backend",
            "torch",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "step: validation" in captured.err  # progress on stderr
    assert f"report: {out / 'index.html'}" in " ".join(captured.out.split())
    payload = json.loads((out / "report.json").read_text())
    # the sweeps asked for on the command line are the ones run
    assert [r["batch"] for r in payload["batch_sweep"]["measured"]] == [1, 2]
    assert [r["context_tokens"] for r in payload["context_sweep"]["measured"]] == [8, 16]
    real_s = payload["validation"]["real"]["decode_s"]
    rows = {r["estimator"]: r for r in payload["comparison"]}
    assert rows["real"]["decode_step_s"] == real_s and rows["real"][
        "tokens_per_second"
    ] == pytest.approx(1 / real_s)
    # the summary table prints the numbers of report.json, one row per estimator
    from roofprof.units import si

    lines = {
        line.split("│")[1].strip(): line
        for line in captured.out.splitlines()
        if line.count("│") > 3
    }
    assert set(lines) == set(rows)
    for name, row in rows.items():
        cells = [c.strip() for c in lines[name].split("│")]
        assert (
            cells[4] == si(row["decode_step_s"], "s")
            and cells[6] == f"{row['tokens_per_second']:,.2f}"
        ), cells


def test_cli_run_bad_input(capsys, tiny):
    assert main(["run", "--model", tiny, "--batch-sweep", "0"]) == 2
    capsys.readouterr()
    # refused before any progress is drawn: the error is the whole output, one line
    for args in (["--model", "llama-9"], ["--device", "cdua"]):
        assert main(["run", *args]) == 2
        out = capsys.readouterr()
        assert out.out == "" and len(out.err.strip().splitlines()) == 1, out
        assert "valid choices" in out.err
    assert main(["run", "--model", "llama-9"]) == 2
    assert "llama-3" in capsys.readouterr().err


@pytest.mark.slow
def test_run_with_quick_roofline_and_all_implementations(tiny, tmp_path):
    r = run(
        tiny,
        device="cpu",
        out=tmp_path / "full",
        prompt_tokens=8,
        batches=(1, 2),
        contexts=(8,),
        budget_s=0.002,
        decode_steps=2,
    )
    assert r.roofline is not None and (tmp_path / "full" / "roofline.json").exists()
    names = {m.impl for o in r.profiles["decode"].ops for m in o.measurements}
    assert {"numpy", "numba", "torch"} <= names
