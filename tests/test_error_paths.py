"""Every error branch of ``cli/``, ``results.py`` and ``roofline.py`` driven once.

Each case names the branch it drives and checks the message a user gets (or, for the
exit-code plumbing, the code). CLI cases run in-process and must refuse before any work
(``stop_work`` fails the test if a measurement, a prediction sweep or a self-test starts).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from fuzz_support import assert_outcome, run_cli

import roofprof.results as results
from roofprof.errors import ConfigError
from roofprof.roofline import Ceiling, Roofline


@pytest.fixture
def stop_work(monkeypatch):
    """Refusals must come before any measurement or prediction."""
    import roofprof.job
    import roofprof.prediction.rollup
    import roofprof.profiling.measured
    import roofprof.profiling.profiler
    import roofprof.roofline.probes
    import roofprof.selftest
    import roofprof.validation.model_run

    def fail(*a, **k):
        pytest.fail("work started before the input was checked")

    for module, name in (
        (roofprof.profiling.profiler, "Profiler"),
        (roofprof.profiling.measured, "Profiler"),
        (roofprof.job, "run"),
        (roofprof.validation.model_run, "validate"),
        (roofprof.roofline.probes, "measure_roofline"),
        (roofprof.prediction.rollup, "sweep"),
        (roofprof.selftest, "run_selftest"),
    ):
        monkeypatch.setattr(module, name, fail)


# --------------------------------------------------------------------------- cli verbs


@pytest.mark.parametrize(
    "argv,message",
    [
        (
            ["predict", "--gpu", "h100", "--convention", "metric"],
            "unknown counting convention 'metric'; valid choices: engine, rule-of-thumb",
        ),
        (
            ["predict", "--gpu", "h100", "--attention", "flash"],
            "unknown attention counting 'flash'; valid choices: fused, unfused",
        ),
        (
            ["predict", "--tp", "2"],
            "--tp/--pp/--collectives need --gpu (its interconnect and memory)",
        ),
        (
            ["predict", "--gpu", "h100", "--sequence-parallel"],
            "--sequence-parallel needs --tp 2 or more",
        ),
        (
            ["predict", "--gpu", "h100", "--engine", "vllm"],
            "--engine applies to --estimator calibrated only",
        ),
        (
            ["predict", "--estimator", "calibrated"],
            "the calibrated estimator needs --gpu (or --roofline roofline.json)",
        ),
        (
            ["predict", "--estimator", "empirical"],
            "the empirical estimator needs --roofline roofline.json",
        ),
        (
            ["predict", "--gpu", "h100", "--estimator", "oracle"],
            "unknown estimator 'oracle'; valid choices: spec, empirical, measured, calibrated",
        ),
        (
            ["profile", "--device", "cpu", "--phase", "middle"],
            "unknown phase 'middle'; valid choices: prefill, decode, both",
        ),
        (["validate", "--device", "cpu", "--format", "csv"], "--format csv needs --published"),
        (
            ["validate", "--device", "cpu", "--estimators", "spec,oracle"],
            "unknown estimator 'oracle'; valid choices: spec, empirical, measured",
        ),
        (["validate", "--published", "--engine", "tgi"], "unknown engine 'tgi'"),
        (["selftest", "--skip", "roofline,warp"], "unknown section(s) in --skip: warp; valid:"),
    ],
)
def test_cli_refusals_name_the_problem(argv, message, stop_work, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # selftest's default --out folder
    rc, out, err = run_cli(argv)
    assert_outcome(argv, rc, out, err)
    assert rc == 2 and err.startswith("roofprof: error: ") and message in err, err


def test_a_layout_that_does_not_fit_names_the_smallest_tp_that_does(stop_work):
    rc, out, err = run_cli(["predict", "--gpu", "h100", "--model", "llama-3.1-70b", "--tp", "1"])
    assert rc == 2, err
    # 70e9 bf16 weights are 141 GB: two 80 GB H100s are the least that hold them
    assert "llama-3.1-70b at TP 1 PP 1" in err and "the smallest TP that fits is 2" in err
    assert "--ignore-memory predicts anyway" in err


def test_profile_counters_refuses_a_sweep_before_running_ncu(stop_work, monkeypatch):
    import roofprof.counters

    monkeypatch.setattr(roofprof.counters, "find_ncu", lambda *a, **k: "/usr/bin/ncu")
    rc, out, err = run_cli(["profile", "--device", "cpu", "--counters", "--batch", "1,2"])
    assert rc == 2 and "--counters profiles one batch and context at a time" in err, err


def test_selftest_exits_1_when_a_target_fails(monkeypatch, tmp_path):
    import roofprof.selftest

    def fake(out, **kwargs):
        return {
            "targets": [
                {
                    "status": "FAIL",
                    "description": "HBM read >= 85 % of spec",
                    "value": 0.5,
                    "threshold": 0.85,
                    "passed": False,
                }
            ],
            "elapsed_s": 1.0,
        }

    monkeypatch.setattr(roofprof.selftest, "run_selftest", fake)
    rc, out, err = run_cli(["selftest", "--out", str(tmp_path / "st")])
    assert rc == 1, err
    assert "FAIL  HBM read >= 85 % of spec  (0.5 vs 0.85)" in out


# --------------------------------------------------------------------------- exit-code plumbing


@pytest.fixture
def command():
    """Register a hidden command that runs ``body``; removed again afterwards."""
    from roofprof.cli import _register_commands, app

    _register_commands()
    names = []

    def make(body):
        name = f"_t{len(names)}"
        names.append(name)
        app.command(name, hidden=True)(body)
        return name

    yield make
    app.registered_commands = [c for c in app.registered_commands if c.name not in names]


@pytest.mark.parametrize(
    "exc,code,message",
    [
        ("exit3", 3, ""),
        ("abort", 130, "roofprof: aborted"),
        ("interrupt", 130, "roofprof: interrupted; results already written were kept whole"),
        ("config", 2, "roofprof: error: bad value"),
    ],
)
def test_exit_codes_of_the_ways_a_command_can_end(command, exc, code, message):
    import typer

    def body():
        raise {
            "exit3": typer.Exit(3),
            "abort": typer.Abort(),
            "interrupt": KeyboardInterrupt(),
            "config": ConfigError("bad value"),
        }[exc]

    rc, out, err = run_cli([command(body)])
    assert rc == code and err.strip() == message


@pytest.mark.parametrize(
    "exc,code,message",
    [
        ("exit4", 4, ""),
        ("interrupt", 130, "roofprof: interrupted; results already written were kept whole"),
    ],
)
def test_an_exit_or_ctrl_c_while_typer_builds_the_command_is_still_one_line(
    monkeypatch, exc, code, message
):
    """Ctrl-C (or an Exit) before typer's own main runs, while it builds the click command."""
    import typer
    import typer.main

    def building(app):
        raise {"exit4": typer.Exit(4), "interrupt": KeyboardInterrupt()}[exc]

    monkeypatch.setattr(typer.main, "get_command", building)
    rc, out, err = run_cli(["specs"])
    assert rc == code and err.strip() == message


def test_a_bug_is_a_traceback_not_an_exit_2(command):
    """Only usage errors become one line: a real bug must stay visible."""

    def body():
        raise ZeroDivisionError("bug")

    with pytest.raises(ZeroDivisionError):
        run_cli([command(body)])


def test_a_missing_optional_verb_module_is_skipped_and_a_missing_dependency_surfaces(monkeypatch):
    import importlib

    import roofprof.cli as cli

    real = importlib.import_module

    def missing(name, missing_name):
        def imp(qualified, *a, **k):
            if qualified == name:
                raise ModuleNotFoundError(f"No module named {missing_name!r}", name=missing_name)
            return real(qualified, *a, **k)

        return imp

    monkeypatch.setattr(
        importlib, "import_module", missing("roofprof.cli.trace", "roofprof.cli.trace")
    )
    cli._register_commands()  # the verb's own module absent (a trimmed install): skipped
    monkeypatch.setattr(importlib, "import_module", missing("roofprof.cli.trace", "yaml"))
    with pytest.raises(ModuleNotFoundError, match="yaml"):
        cli._register_commands()


# --------------------------------------------------------------------------- cli/_options.py


def test_option_checkers_refuse_non_integers_and_unknown_attention():
    from roofprof.cli._options import check_int, counting

    with pytest.raises(ConfigError, match=r"--steps must be an integer, got 1\.5"):
        check_int(1.5, "--steps", 1, 10)
    with pytest.raises(ConfigError, match=r"--steps must be an integer, got True"):
        check_int(True, "--steps", 1, 10)
    with pytest.raises(
        ConfigError, match="unknown attention 'flash'; valid choices: fused, unfused"
    ):
        counting("flash")
    assert counting("unfused").attention == "unfused"


# --------------------------------------------------------------------------- results.py


def test_library_versions_leave_out_what_is_not_installed(monkeypatch):
    from importlib import metadata

    def version(name):
        if name == "torch":
            raise metadata.PackageNotFoundError(name)
        return "1.2.3"

    monkeypatch.setattr(results.metadata, "version", version)
    v = results.library_versions()
    assert "torch" not in v and v["numpy"] == "1.2.3" and len(v) == len(results._LIBRARIES) - 1


def test_output_folder_under_a_file_or_with_a_nul_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="cannot write to output folder .*Not a directory"):
        results.check_writable_dir(tmp_path / "file" / "out")
    with pytest.raises(ConfigError, match="cannot write to output folder .*null"):
        results.check_writable_dir(str(tmp_path / "a\0b"))


def test_atomic_write_under_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(
        ConfigError, match=r"cannot write .*x\.json': '.*file' is a file, not a folder"
    ):
        results.write_json_atomic(tmp_path / "file" / "x.json", {"a": 1})
    with pytest.raises(ConfigError, match=r"cannot write .*y\.json': Not a directory"):
        results.write_json_atomic(tmp_path / "file" / "sub" / "y.json", {"a": 1})


def test_an_interrupted_write_leaves_neither_file_nor_temp(tmp_path, monkeypatch):
    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(results.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        results.write_json_atomic(tmp_path / "x.json", {"a": 1})
    assert list(tmp_path.iterdir()) == []


def test_output_file_checks(tmp_path, monkeypatch):
    check = results.check_output_file
    long_name = tmp_path / ("n" * 256 + ".json")
    with pytest.raises(ConfigError, match="(?i)--out .*: file name too long"):
        check(long_name, what="--out")  # Python < 3.13: stat() says so
    with monkeypatch.context() as m:  # Python >= 3.13: is_dir()/exists() say False instead
        m.setattr(Path, "is_dir", lambda self: os.path.isdir(self))
        m.setattr(Path, "exists", lambda self: os.path.exists(self))
        with pytest.raises(ConfigError, match="--out .*: file name too long"):
            check(long_name, what="--out")
    for name in ("x\0.json", "a\0b/x.json"):
        with pytest.raises(ConfigError, match=r"--out '.*json': embedded null byte in the name"):
            check(str(tmp_path / name), what="--out")
        with pytest.raises(ConfigError, match=r"cannot write '.*json': embedded null byte"):
            results.write_json_atomic(str(tmp_path / name), {"a": 1})
    # root may write anywhere: the permission answers are faked
    monkeypatch.setattr(results.os, "access", lambda p, mode: False)
    with pytest.raises(ConfigError, match=f"folder {str(tmp_path)!r} is not writable"):
        check(tmp_path / "x.json", what="--out")
    # a read-only file in a writable folder is fine: the atomic write replaces it
    (tmp_path / "ro.json").write_text("{}")
    monkeypatch.setattr(results.os, "access", lambda p, mode: Path(p) == tmp_path)
    assert check(tmp_path / "ro.json", what="--out") == tmp_path / "ro.json"


def test_output_file_check_turns_os_errors_into_one_line(tmp_path, monkeypatch):
    def broken(self):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(Path, "is_dir", broken)
    with pytest.raises(ConfigError, match="--out .*Input/output error"):
        results.check_output_file(tmp_path / "x.json", what="--out")


def test_reading_refuses_oversized_files_and_nul_names(tmp_path):
    big = tmp_path / "big.json"
    big.write_text("x" * 100)
    with pytest.raises(ConfigError, match="roofline .*big.json' is larger than 10 bytes"):
        results.read_text(big, what="roofline", max_bytes=10)
    with pytest.raises(ConfigError, match="cannot read roofline .*null"):
        results.read_text(str(tmp_path / "a\0b"), what="roofline")


# --------------------------------------------------------------------------- roofline.py


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"kind": "io", "value": 1.0}, "kind must be one of compute, memory, got 'io'"),
        (
            {"kind": "memory", "level": "l9", "value": 1.0},
            "memory ceiling 'c': level must be one of",
        ),
        (
            {"kind": "memory", "level": "dram", "value": 0.0},
            "value must be a positive finite number, got 0.0",
        ),
        ({"kind": "compute", "dtype": "fp32", "value": float("inf")}, "got inf"),
    ],
)
def test_impossible_ceilings_are_refused(kwargs, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        Ceiling("c", **kwargs)


def test_asking_a_roofline_for_a_ceiling_it_lacks_lists_those_it_has():
    roof = Roofline(
        "box",
        (Ceiling("f", "compute", 1e12, dtype="fp32"), Ceiling("m", "memory", 1e11, level="dram")),
    )
    with pytest.raises(ConfigError, match="box has no bf16 compute ceiling; dtypes: fp32"):
        roof.compute_ceiling("bf16")
    with pytest.raises(ConfigError, match="box has no l2 bandwidth ceiling; levels: dram"):
        roof.memory_ceiling("l2")


@pytest.mark.parametrize(
    "data,message",
    [
        ([1, 2], "not a roofline: expected a JSON object"),
        ({"ceilings": []}, "not a roofline: missing 'device'"),
        ({"device": "x"}, "not a roofline: missing 'ceilings'"),
    ],
)
def test_roofline_from_dict_refuses_what_is_not_one(data, message):
    with pytest.raises(ConfigError, match=message):
        Roofline.from_dict(data)


# ----------------------------------------------------- cli/trace.py, cli/roofline.py, cli/_usage.py


@pytest.mark.parametrize(
    "body,code,message",
    [
        ("import sys\nsys.exit(3)\n", 1, "exited with status 3; nothing was written"),
        (
            "def inner():\n    return 1 / 0\ninner()\n",
            1,
            "raised an exception (the traceback below is the script's own",
        ),
    ],
)
def test_a_traced_script_that_fails_exits_1_with_its_own_story(tmp_path, body, code, message):
    pytest.importorskip("torch")
    script = tmp_path / "job.py"
    script.write_text(body)
    rc, out, err = run_cli(["trace", str(script), "--device", "cpu", "--roofline", "none"])
    assert rc == code and message in err, err
    if "1 / 0" in body:  # the script's frames, not roofprof's
        assert "ZeroDivisionError: division by zero" in err and 'job.py", line 2, in inner' in err
        assert "roofprof/cli" not in err


def test_trace_counters_on_a_gpu_without_ncu_names_what_is_missing(monkeypatch, tmp_path):
    import types

    import roofprof.devices

    gpu = types.SimpleNamespace(info=types.SimpleNamespace(asynchronous=True))
    monkeypatch.setattr(roofprof.devices, "select", lambda device: gpu)
    script = tmp_path / "job.py"
    script.write_text("")
    monkeypatch.setenv("PATH", str(tmp_path))  # no ncu anywhere
    monkeypatch.delenv("ROOFPROF_NCU", raising=False)
    rc, out, err = run_cli(["trace", str(script), "--counters"])
    assert rc == 2 and "--counters" in err and "ncu" in err and err.count("\n") == 1, err


def test_a_chart_that_cannot_be_drawn_is_skipped_with_the_reason(tmp_path, monkeypatch):
    import io
    import types

    from rich.console import Console

    import roofprof.plots.sweeps as sweeps
    from roofprof.cli.roofline import _plots

    def no_sweep(result, path):
        raise ValueError("no sweep measured")

    monkeypatch.setattr(sweeps, "plot_staircase", no_sweep)
    monkeypatch.setattr(sweeps, "plot_intensity_sweep", no_sweep)
    result = types.SimpleNamespace(
        device=types.SimpleNamespace(spec_id=None, name="box", label="cpu"),
        roofline=Roofline("box", (Ceiling("f", "compute", 1e12, dtype="fp32"),)),
    )
    buf = io.StringIO()
    assert _plots(result, tmp_path, Console(file=buf, width=200)) == []
    text = buf.getvalue()
    assert "skipped roofline.png: no DRAM ceiling measured" in text
    assert "skipped staircase.png: no sweep measured" in text and list(tmp_path.iterdir()) == []


def test_usage_error_choices_survive_unresolvable_type_hints():
    import types

    from roofprof.cli._usage import _choices

    def callback(fmt: NoSuchType) -> None:  # noqa: F821 - the point: it cannot be resolved
        pass

    exc = types.SimpleNamespace(
        param=types.SimpleNamespace(name="fmt"),
        ctx=types.SimpleNamespace(command=types.SimpleNamespace(callback=callback)),
    )
    assert _choices(exc) == ()
