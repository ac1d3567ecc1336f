"""Usage errors on an install without the ``click`` distribution (the README's `pip install .`).

typer vendors its own click; roofprof must never need the real one. Each test runs the CLI
in a subprocess whose import system refuses ``click``, and checks one line on stderr with
exit code 2 (or the help/version with exit code 0), and no traceback.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from no_click import BLOCK_CLICK

_NO_CLICK = (
    """
import sys

"""
    + BLOCK_CLICK
    + """if sys.argv[1:] == ["--import-click"]:
    import click  # noqa: F401 - must fail
from roofprof.cli import main
sys.exit(main(sys.argv[1:]))
"""
)


#: Every command line the tests run, started together (each start costs about a second).
CASES = {
    "guard": ("--import-click",),
    "typo verb": ("predcit",),
    "unknown verb": ("nosuchverb",),
    "unknown option": ("predict", "--no-such-option"),
    "option typo": ("predict", "--modle", "llama-3.1-8b"),
    "missing value": ("predict", "--model"),
    "bad format": ("predict", "--gpu", "h100", "--format", "xml"),
    "bad doctor format": ("doctor", "-f", "yaml"),
    "group typo": ("counters", "impot"),
    "version": ("--version",),
    "bare": (),
    "help": ("--help",),
    "verb help": ("predict", "--help"),
    "bare group": ("counters",),
}


@pytest.fixture(scope="module")
def runs() -> dict[str, subprocess.CompletedProcess]:
    """Each of :data:`CASES` run as ``roofprof *args`` in a fresh interpreter without click."""
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-c", _NO_CLICK, *args],
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for name, args in CASES.items()
    }
    done = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        done[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return done


def _one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "ModuleNotFoundError" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("roofprof: error: ")
    return lines[0]


def test_the_guard_really_hides_click(runs):
    proc = runs["guard"]
    assert proc.returncode == 1 and "No module named 'click'" in proc.stderr


def test_unknown_verb_names_the_closest(runs):
    line = _one_line_error(runs["typo verb"])
    assert "no such command 'predcit'" in line and "did you mean 'predict'" in line


def test_unknown_verb_without_a_close_one_lists_the_verbs(runs):
    line = _one_line_error(runs["unknown verb"])
    assert "'nosuchverb'" in line and "predict" in line and "roofline" in line


def test_unknown_option(runs):
    line = _one_line_error(runs["unknown option"])
    assert "no such option '--no-such-option'" in line and "roofprof predict --help" in line
    line = _one_line_error(runs["option typo"])
    assert "did you mean '--model'" in line


def test_missing_value(runs):
    line = _one_line_error(runs["missing value"])
    assert "'--model'" in line and "needs a value" in line


@pytest.mark.parametrize(
    "case, value, choices",
    [
        ("bad format", "'xml'", ("table", "json", "csv")),
        ("bad doctor format", "'yaml'", ("table", "json")),
    ],
)
def test_bad_choice_value_lists_the_choices(runs, case, value, choices):
    line = _one_line_error(runs[case])
    assert value in line and "--format" in line and "valid choices" in line
    assert all(c in line for c in choices)


def test_unknown_subcommand_of_a_group(runs):
    line = _one_line_error(runs["group typo"])
    assert "did you mean 'import'" in line


def test_version_prints_and_exits_0(runs):
    from roofprof import __version__

    proc = runs["version"]
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"roofprof {__version__}" and not proc.stderr


def test_bare_roofprof_prints_help_and_exits_0(runs):
    proc = runs["bare"]
    assert proc.returncode == 0, proc.stderr
    assert "Usage" in proc.stdout and "predict" in proc.stdout and "doctor" in proc.stdout


@pytest.mark.parametrize("case", ["help", "verb help", "bare group"])
def test_help_exits_0(runs, case):
    proc = runs[case]
    assert proc.returncode == 0, proc.stderr
    assert "Usage" in proc.stdout and "Traceback" not in proc.stderr


def test_installed_typer_is_in_the_pinned_range():
    """pyproject pins the typer range whose vendored click these tests cover."""
    from importlib import metadata

    requirements = pytest.importorskip("packaging.requirements")
    pins = [requirements.Requirement(r) for r in metadata.requires("roofprof") or ()]
    typer_pin = next(r for r in pins if r.name == "typer")
    assert typer_pin.specifier.contains(metadata.version("typer")), typer_pin
    assert not typer_pin.specifier.contains("0.25.1")  # older typer needs the click distribution


def test_ctrl_c_in_a_command_exits_130_with_one_line(capsys):
    from roofprof.cli import app, main

    @app.command("_interrupted", hidden=True)
    def _interrupted():
        raise KeyboardInterrupt

    try:
        assert main(["_interrupted"]) == 130
    finally:
        app.registered_commands = [c for c in app.registered_commands if c.name != "_interrupted"]
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["roofprof: interrupted; results already written were kept whole"]
