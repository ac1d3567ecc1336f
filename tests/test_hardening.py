"""One targeted test per kind of defect found by hardening (the property tests cover the rest).

Every bad input or unwritable output: exit 2, one ``roofprof: error:`` line, no traceback,
and (for output paths) before any measurement. Every JSON printed: strict. Names from
input: printed literally, never as rich markup.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from fuzz_support import assert_outcome, run_cli, strict_json
from no_click import BLOCK_CLICK

from roofprof.errors import ConfigError, RoofprofError

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
CONFIG = json.loads((REPO / "data" / "models" / "llama-3.2-1b.json").read_text())


def _exit2(argv) -> str:
    rc, out, err = run_cli([str(a) for a in argv])
    assert_outcome(argv, rc, out, err)
    assert rc == 2, (argv, rc, err)
    return err


@pytest.fixture
def stop_measuring(monkeypatch):
    """Any measurement fails the test: output paths must be refused before it."""
    import roofprof.job
    import roofprof.profiling.measured
    import roofprof.profiling.profiler
    import roofprof.roofline.probes
    import roofprof.validation.model_run

    def fail(*a, **k):
        pytest.fail("measured before checking the output path")

    for module, name in (
        (roofprof.profiling.profiler, "Profiler"),
        (roofprof.profiling.measured, "Profiler"),
        (roofprof.job, "run"),
        (roofprof.validation.model_run, "validate"),
        (roofprof.roofline.probes, "measure_roofline"),
    ):
        monkeypatch.setattr(module, name, fail)


# --------------------------------------------------------------------------- kind 2: reading files


def _bad_paths(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "binary.json").write_bytes(b"\x00\x01\x02\xff" * 10)
    (tmp_path / "utf16.json").write_bytes(json.dumps(CONFIG).encode("utf-16"))
    (tmp_path / "latin1.json").write_bytes('{"x": "caf\xe9"}'.encode("latin-1"))
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "bigint.json").write_text(
        json.dumps({**CONFIG, "hidden_size": 1}).replace(
            '"hidden_size": 1', '"hidden_size": ' + "7" * 5000
        )
    )
    return {
        "directory": tmp_path / "dir",
        "symlink loop": tmp_path / "loop",
        "under a file": tmp_path / "file" / "x.json",
        "binary": tmp_path / "binary.json",
        "utf-16": tmp_path / "utf16.json",
        "latin-1": tmp_path / "latin1.json",
        "deep nesting": tmp_path / "deep.json",
        "5000-digit integer": tmp_path / "bigint.json",
        "name too long": tmp_path / ("n" * 300 + ".json"),
        "missing": tmp_path / "none.json",
    }


@pytest.mark.parametrize(
    "kind",
    [
        "directory",
        "symlink loop",
        "under a file",
        "binary",
        "utf-16",
        "latin-1",
        "deep nesting",
        "5000-digit integer",
        "name too long",
        "missing",
    ],
)
def test_unreadable_inputs_exit_2_in_one_line(tmp_path, kind):
    path = _bad_paths(tmp_path)[kind]
    _exit2(["predict", "--model", path, "--gpu", "h100"])
    _exit2(["predict", "--roofline", path])
    _exit2(["counters", "import", path])


def test_unreadable_file_is_one_line(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    p = tmp_path / "locked.json"
    p.write_text("{}")
    p.chmod(0)
    assert "Permission denied" in _exit2(["predict", "--roofline", p])


def test_nul_in_a_path_is_one_line(tmp_path):
    _exit2(["predict", "--model", "a\x00b.json", "--gpu", "h100"])
    _exit2(["predict", "--roofline", "a\x00b.json"])
    _exit2(["counters", "import", "a\x00b.csv"])


def test_reader_errors_name_the_file(tmp_path):
    from roofprof.results import read_json

    with pytest.raises(ConfigError, match="Is a directory"):
        read_json(tmp_path)
    (tmp_path / "d.json").write_text("[" * 1000 + "]" * 1000)
    with pytest.raises(ConfigError, match="nested deeper"):
        read_json(tmp_path / "d.json")
    (tmp_path / "i.json").write_text("[" + "1" * 5000 + "]")
    with pytest.raises(ConfigError, match="digits"):
        read_json(tmp_path / "i.json")
    (tmp_path / "ok.json").write_text('{"s": "[[[[ not nesting", "n": [1, 2]}')
    assert read_json(tmp_path / "ok.json") == {"s": "[[[[ not nesting", "n": [1, 2]}


# ----------------------------------------------------------------------- kind 3: numbers in configs


@pytest.mark.parametrize(
    "field,value,needle",
    [
        ("hidden_size", float("nan"), "hidden_size"),
        ("hidden_size", float("inf"), "hidden_size"),
        ("num_hidden_layers", 1e308, "num_hidden_layers"),
        ("vocab_size", 10**400, "integer of 401 digits"),
        ("vocab_size", 2**40, "vocab_size"),
        ("num_attention_heads", True, "num_attention_heads"),
        ("intermediate_size", "8192", "intermediate_size"),
        ("tie_word_embeddings", "false", "tie_word_embeddings"),
        ("rope_theta", float("nan"), "rope_theta"),
        ("rope_theta", "abc", "rope_theta"),
        ("rms_norm_eps", -1.0, "rms_norm_eps"),
        ("max_position_embeddings", 1.5, "max_position_embeddings"),
        ("rope_scaling", [1, 2], "rope_scaling"),
        ("model_type", 5, "model_type"),
        ("architectures", 5, "architectures"),
    ],
)
def test_config_numbers_and_types_are_range_checked(tmp_path, field, value, needle):
    from roofprof.specs import load_model

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CONFIG, field: value}))
    with pytest.raises(ConfigError, match=needle) as info:
        load_model(str(path))
    assert "\n" not in str(info.value)


def test_absurd_but_finite_sizes_are_refused(tmp_path):
    from roofprof.specs import load_model

    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                **CONFIG,
                "hidden_size": 2**20,
                "intermediate_size": 2**30,
                "num_hidden_layers": 10_000,
                "num_attention_heads": 2**10,
                "num_key_value_heads": 2**10,
                "head_dim": None,
            }
        )
    )
    with pytest.raises(ConfigError, match="parameters"):
        load_model(str(path))


def test_a_valid_config_still_loads_as_before(tmp_path):
    from roofprof.specs import load_model

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CONFIG, "max_position_embeddings": 0, "rope_theta": 0}))
    spec = load_model(str(path))
    assert spec.max_position_embeddings == 2**31 - 1 and spec.rope_theta == 10000.0
    assert spec.param_count() == load_model("llama-3.2-1b").param_count()


# --------------------------------------------------------------------------- kind 4: counter files


def _raw(
    units: str | None, row: str, header_metrics: str = '"gpu__time_duration.sum","dram__bytes.sum"'
) -> str:
    lines = [f'"ID","Process ID","Kernel Name","CC",{header_metrics}']
    if units is not None:
        lines.append(f'"","","","",{units}')
    lines.append(row)
    return "\n".join(lines)


@pytest.mark.parametrize(
    "units,needle",
    [
        ('"byte","byte"', "time metric in 'byte'"),
        ('"%","byte"', "time metric in '%'"),
        ('"furlong","byte"', "time metric in 'furlong'"),
        ('"nsecond","msecond"', "byte metric in 'msecond'"),
    ],
)
def test_a_unit_that_does_not_fit_the_metric_is_refused(units, needle):
    from roofprof.counters import NotNcuOutputError, parse_ncu_csv

    with pytest.raises(NotNcuOutputError, match=needle):
        parse_ncu_csv(_raw(units, '"0","1","k","9.0","1500","2048"'))


def test_a_missing_units_row_is_warned_and_read_in_base_units():
    from roofprof.counters import CounterWarning, parse_ncu_csv

    with pytest.warns(CounterWarning, match="units row missing"):
        (k,) = parse_ncu_csv(_raw(None, '"0","1","k","9.0","1500","2048"'))
    assert k.time_s == pytest.approx(1500e-9) and k.dram_bytes == 2048


@pytest.mark.parametrize(
    "row,needle",
    [
        ('"0","1","k","9.0","-5","2048"', "finite number >= 0"),
        ('"0","1","k","9.0","inf","2048"', "finite number >= 0"),
        ('"0","1","k","9.0","1500","-inf"', "finite number >= 0"),
        ('"²","1","k","9.0","1500","2048"', "kernel ID"),
        ('"-3","1","k","9.0","1500","2048"', "kernel ID"),
    ],
)
def test_impossible_counts_and_ids_are_refused(row, needle):
    from roofprof.counters import NotNcuOutputError, parse_ncu_csv

    with pytest.raises(NotNcuOutputError, match=needle):
        parse_ncu_csv(_raw('"nsecond","byte"', row))


def test_a_file_cut_after_its_header_is_refused(tmp_path):
    text = (FIXTURES / "ncu_details_A100_leleucas_dropout.csv").read_text(encoding="utf-8-sig")
    cut = tmp_path / "cut.csv"
    cut.write_text(text.splitlines()[0] + "\n")
    assert "no kernel rows" in _exit2(["counters", "import", cut])


def test_a_page_without_metric_columns_is_refused(tmp_path):
    page = tmp_path / "nometrics.csv"
    page.write_text(
        '"ID","Process ID","Kernel Name"\n' + "".join(f'"{i}","1","k{i}"\n' for i in range(42))
    )
    assert "no metric columns" in _exit2(["counters", "import", page])


def test_real_fixtures_still_parse_without_unit_complaints():
    from roofprof.counters import read_ncu_csv

    for path in sorted(FIXTURES.glob("ncu_*.csv")):
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)
            warnings.filterwarnings("ignore", message=".*n/a.*")
            records = read_ncu_csv(path)
        assert records and all(r.time_s is None or r.time_s > 0 for r in records)


# --------------------------------------------------------------------------- kind 5: output paths


def test_profile_out_that_is_a_folder_exits_2_before_measuring(tmp_path, stop_measuring):
    assert "is a folder" in _exit2(["profile", "--device", "cpu", "--out", tmp_path])


def test_validate_out_under_a_file_exits_2_before_measuring(tmp_path, stop_measuring):
    (tmp_path / "f").write_text("x")
    assert "is a file" in _exit2(
        ["validate", "--device", "cpu", "--out", tmp_path / "f" / "v.json"]
    )


def test_roofline_json_being_a_folder_exits_2_before_measuring(tmp_path, stop_measuring):
    (tmp_path / "roofline.json").mkdir()
    assert "roofline.json" in _exit2(["roofline", "--device", "cpu", "--quick", "--out", tmp_path])
    (tmp_path / "roofline.json").rmdir()
    (tmp_path / "roofline.png").mkdir()
    assert "roofline.png" in _exit2(["roofline", "--device", "cpu", "--quick", "--out", tmp_path])


@pytest.mark.parametrize(
    "plot,needle",
    [("chart.xyz", "unsupported extension"), ("", "is a folder"), ("f/chart.png", "is a file")],
)
def test_predict_plot_paths_are_checked_first(tmp_path, plot, needle):
    (tmp_path / "f").write_text("x")
    assert needle in _exit2(["predict", "--gpu", "h100", "--plot", tmp_path / plot])


def test_counters_import_plot_path_is_checked_before_reading(tmp_path):
    csv = FIXTURES / "ncu_details_A100_leleucas_dropout.csv"
    assert "unsupported extension" in _exit2(
        ["counters", "import", csv, "--plot", tmp_path / "a.txt"]
    )


def test_a_failing_write_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    from roofprof.results import write_json_atomic

    (tmp_path / "target.json").mkdir()
    with pytest.raises(ConfigError, match="cannot write"):
        write_json_atomic(tmp_path / "target.json", {"a": 1})

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(ConfigError, match="No space left"):
        write_json_atomic(tmp_path / "r.json", {"a": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target.json"]


def test_a_failing_write_in_the_cli_exits_2(tmp_path, monkeypatch):
    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    assert "No space left" in _exit2(["predict", "--gpu", "h100", "--plot", tmp_path / "p.png"])


# --------------------------------------------------------------------------- kind 6: strict JSON


@pytest.mark.parametrize(
    "argv",
    [
        ["predict", "--gpu", "h100", "--convention", "rule-of-thumb", "--format", "json"],
        ["predict", "--gpu", "h100", "--batch", "1,8", "--context", "0,100", "--format", "json"],
        ["specs", "--format", "json"],
        [
            "counters",
            "import",
            str(FIXTURES / "ncu_raw_GENERATED_from_details_RTX5070.csv"),
            "--format",
            "json",
        ],
    ],
)
def test_every_json_printed_is_strict(argv):
    rc, out, err = run_cli(argv)
    assert rc == 0, err
    assert_outcome(argv, rc, out, err)
    strict_json(out)


def test_result_files_are_strict_json(tmp_path):
    from roofprof.results import write_json_atomic
    from roofprof.units import dumps_strict

    path = write_json_atomic(tmp_path / "r.json", {"x": float("inf"), "y": [float("nan"), 1.0]})
    assert strict_json(path.read_text()) == {"x": None, "y": [None, 1.0]}
    assert dumps_strict({"p": Path("a"), "o": object()}, indent=None).startswith(
        '{"p": "a", "o": "<'
    )


# --------------------------------------------------------------------------- kind 7: markup


def test_names_from_input_print_literally(capsys):
    from roofprof.counters import parse_ncu_csv
    from roofprof.report import print_counters

    text = _raw('"nsecond","byte"', '"0","1","k[/]x[link=https://e]y","9.0","1500","2048"')
    print_counters(parse_ncu_csv(text), None, title="t[/]")
    shown = capsys.readouterr().out
    assert "k[/]x[link=https://e]y" in shown and "t[/]" in shown


def test_a_model_id_with_markup_prints_in_the_table(tmp_path):
    path = tmp_path / "m[bold]x[link=https:]y.json"
    path.write_text(json.dumps(CONFIG))
    rc, out, err = run_cli(["predict", "--model", str(path), "--gpu", "h100"])
    assert rc == 0, err
    assert "m[bold]x[link=https:]y" in out


# --------------------------------------------------------------------------- kind 8: roofline files


def _roofline(tmp_path, change=None, complete=True) -> Path:
    from roofprof.roofline import Roofline
    from roofprof.specs import load_gpu

    doc = {"complete": complete, "roofline": Roofline.from_spec(load_gpu("h100")).to_dict()}
    if change:
        doc["roofline"]["ceilings"][0].update(change)
    path = tmp_path / "roofline.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    "change,needle",
    [
        ({"dtype": 5}, "'dtype' must be a string"),
        ({"value": True}, "'value' must be a number"),
        ({"value": "1e12"}, "'value' must be a number"),
        ({"value": float("nan")}, "positive finite"),
        ({"clock_mhz": -1}, "clock_mhz"),
        ({"source": "guess"}, "source"),
    ],
)
def test_roofline_fields_are_type_checked(tmp_path, change, needle):
    from roofprof.roofline import load_roofline

    with pytest.raises(ConfigError, match=needle) as info:
        load_roofline(_roofline(tmp_path, change))
    assert "\n" not in str(info.value)
    _exit2(["predict", "--roofline", _roofline(tmp_path, change)])


def test_interrupted_and_implausible_rooflines_are_warned(tmp_path):
    from roofprof.roofline import RooflineWarning, load_roofline

    with pytest.warns(RooflineWarning, match="interrupted"):
        load_roofline(_roofline(tmp_path, complete=False))
    with pytest.warns(RooflineWarning, match="plausible"):
        load_roofline(_roofline(tmp_path, {"value": 1e25}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_roofline(_roofline(tmp_path))  # a sound file: no warning


def test_roofline_warning_is_one_line_in_the_cli(tmp_path):
    """Outside pytest's warning capture (a real run), each warning is one stderr line."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "roofprof",
            "predict",
            "--roofline",
            str(_roofline(tmp_path, complete=False)),
            "--format",
            "json",
        ],
        text=True,
        capture_output=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    strict_json(proc.stdout)
    lines = proc.stderr.strip().splitlines()
    assert lines and all(line.startswith("roofprof: warning: ") for line in lines), lines


# --------------------------------------------------------------------------- kind 9: options


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["profile", "--budget", "-1"], "--budget"),
        (["profile", "--budget", "nan"], "--budget"),
        (["profile", "--budget", "inf"], "--budget"),
        (["validate", "--max-layers", "0"], "--max-layers"),
        (["validate", "--max-layers", "-1"], "--max-layers"),
        (["predict", "--gpu", "h100", "--prompt", "0"], "--prompt"),
        (["predict", "--gpu", "h100", "--batch", "1e308"], "--batch"),
        (["predict", "--gpu", "h100", "--batch", "9" * 5000], "--batch"),
        (["predict", "--gpu", "h100", "--context", "99999999999"], "--context"),
    ],
)
def test_meaningless_option_values_exit_2_before_work(stop_measuring, argv, needle):
    assert needle in _exit2(argv)


# --------------------------------------------------------------------------- no click installed

_NO_CLICK = (
    """
import json, sys

"""
    + BLOCK_CLICK
    + """import contextlib, io
from roofprof.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    results.append([rc, err.getvalue()])
print(json.dumps(results))
"""
)


def test_bad_paths_and_failing_outputs_without_click(tmp_path):
    """The same one-line exit 2 with no ``click`` distribution importable (README install)."""
    paths = _bad_paths(tmp_path)
    cases = [["predict", "--model", str(p), "--gpu", "h100"] for p in paths.values()]
    cases += [
        ["counters", "import", str(paths["binary"])],
        ["predict", "--gpu", "h100", "--plot", str(tmp_path / "x.xyz")],
        ["predict", "--gpu", "h100", "--plot", str(tmp_path)],
        ["validate", "--max-layers", "0"],
        ["profile", "--budget", "nan"],
        ["predict", "--gpu", "h100", "--batch", "nan"],
        ["predict", "--prompt", "x"],
    ]
    proc = subprocess.run(
        [sys.executable, "-c", _NO_CLICK, json.dumps(cases)],
        text=True,
        capture_output=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for argv, (rc, err) in zip(cases, json.loads(proc.stdout.splitlines()[-1]), strict=True):
        assert_outcome(argv, rc, "", err)
        assert rc == 2, (argv, err)


def test_roofprof_error_is_the_base_of_every_refusal():
    from roofprof.counters import NotNcuOutputError

    assert issubclass(NotNcuOutputError, RoofprofError) and issubclass(ConfigError, RoofprofError)


# --------------------------------------------------------------------------- kind 10: large inputs


def test_large_csv_imports_report_progress(monkeypatch):
    import roofprof.counters.parse as parse

    monkeypatch.setattr(parse, "PROGRESS_EVERY", 2)
    text = (FIXTURES / "ncu_details_A100_leleucas_dropout.csv").read_text(encoding="utf-8-sig")
    calls = []
    records = parse.parse_ncu_csv(text, progress=lambda done, total: calls.append((done, total)))
    assert records and len(calls) > 5
    assert calls[-1][0] == calls[-1][1] == len(text.splitlines())
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
