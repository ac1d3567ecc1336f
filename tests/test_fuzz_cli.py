"""Property tests over ``roofprof`` command lines, run in-process (no subprocess per example).

Any argv built from the real verbs and options (read from the typer app itself) and from
adversarial values (NaN, ±inf, 1e308, 500 digits, ``"false"``, markup, odd paths) must end
in exit 0 with strict finite JSON, or exit 2 with one line and no traceback. The verbs
that measure are stopped at their first measurement (``Reached``): reaching it means every
option and output path was accepted before any work, which is the contract.

Long run: ``ROOFPROF_FUZZ=long pytest tests/test_fuzz_cli.py`` (see tests/fuzz_support.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fuzz_support import assert_outcome, examples, run_cli, time_bound
from hypothesis import given
from hypothesis import strategies as st

pytestmark = time_bound()  # CI bound per property test; none for long runs

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"


class Reached(Exception):
    """A measuring verb got past its checks to the measurement (stubbed out here)."""


def _stop(*args, **kwargs):
    raise Reached()


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """A working folder with odd paths, and every measurement entry point stubbed out."""
    root = tmp_path_factory.mktemp("argv")
    (root / "afile").write_text("x")
    (root / "adir").mkdir()
    (root / "adir" / "roofline.json").mkdir(parents=True)
    (root / "loop").symlink_to(root / "loop")
    (root / "utf16.json").write_bytes('{"a": 1}'.encode("utf-16"))
    (root / "deep.json").write_text("[" * 5000 + "]" * 5000)
    (root / "bigint.json").write_text('{"hidden_size": ' + "9" * 5000 + "}")
    from roofprof.roofline import Roofline
    from roofprof.specs import load_gpu

    (root / "roofline.json").write_text(json.dumps(Roofline.from_spec(load_gpu("h100")).to_dict()))
    cfg = json.loads((REPO / "data" / "models" / "llama-3.2-1b.json").read_text())
    (root / "config.json").write_text(json.dumps(cfg))
    with pytest.MonkeyPatch.context() as mp:
        import roofprof.counters
        import roofprof.distributed.ranks
        import roofprof.job
        import roofprof.prediction.calibration
        import roofprof.profiling.measured
        import roofprof.profiling.profiler
        import roofprof.roofline.probes
        import roofprof.selftest
        import roofprof.validation.model_run

        mp.chdir(root)
        for module, name in (
            (roofprof.profiling.profiler, "Profiler"),
            (roofprof.profiling.measured, "Profiler"),
            (roofprof.profiling.measured, "measured_estimator"),
            (roofprof.validation.model_run, "validate"),
            (roofprof.job, "run"),
            (roofprof.roofline.probes, "measure_roofline"),
            (roofprof.selftest, "run_selftest"),
            (roofprof.counters, "collect"),
            (roofprof.counters, "find_ncu"),
            (roofprof.prediction.calibration, "write_calibration"),  # writes data/ or any --out
            (roofprof.distributed.ranks, "launch"),  # the multi-rank verbs
            (roofprof.distributed.ranks, "run_in_group"),
        ):
            mp.setattr(module, name, _stop)
        yield root


def _params():
    """``{verb path: [(option strings, is_flag)]}`` read from the typer app."""
    import typer.main

    from roofprof.cli import _register_commands, app

    _register_commands()
    group = typer.main.get_command(app)
    verbs = {}

    def walk(cmd, path):
        sub = getattr(cmd, "commands", None)
        if sub:
            for name, c in sub.items():
                walk(c, (*path, name))
            return
        verbs[path] = [
            (tuple(p.opts), bool(getattr(p, "is_flag", False)))
            for p in cmd.params
            if p.opts and p.opts[0].startswith("-")
        ]

    walk(group, ())
    return verbs


VERBS = _params()
#: Verbs whose first run is slow (device enumeration) and which take no risky input.
_SLOW = {("doctor",)}

NUMBERS = [
    "0",
    "1",
    "-1",
    "2",
    "8",
    "64",
    "1,8",
    "1,,8",
    ",",
    " 1",
    "1.5",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "+inf",
    "1e308",
    "-1e308",
    "1e400",
    "1" + "0" * 500,
    "9" * 30,
    "65537",
    "16777217",
    "true",
    "false",
    "0x10",
    "1_000",
    "²",
]
WORDS = [
    "",
    "json",
    "table",
    "csv",
    "xml",
    "auto",
    "cpu",
    "cuda:0",
    "cuda:99",
    "tpu",
    "h100",
    "a100",
    "llama-3.2-1b",
    "llama-3.1-8b",
    "mixtral",
    "bf16",
    "fp8",
    "fp32",
    "int4",
    "spec",
    "empirical",
    "measured",
    "rule-of-thumb",
    "engine",
    "fused",
    "unfused",
    "prefill",
    "decode",
    "both",
    "quick",
    "[/]",
    "[link=https://x]y",
    "[bold]",
    "\u202e",
    "é" * 3,
    "-",
    "--",
    "-1e3",
]
PATHS = [
    "afile",
    "adir",
    "adir/roofline.json",
    "afile/sub.json",
    "missing.json",
    "loop",
    "utf16.json",
    "deep.json",
    "bigint.json",
    "roofline.json",
    "config.json",
    "out.json",
    "out.png",
    "out.xyz",
    "newdir/out.json",
    "a" * 300,
    "/dev/null",
    str(FIXTURES / "ncu_details_A100_leleucas_dropout.csv"),
    str(FIXTURES / "ncu_raw_GENERATED_from_details_RTX5070.csv"),
]
VALUES = st.one_of(
    st.sampled_from(NUMBERS),
    st.sampled_from(WORDS),
    st.sampled_from(PATHS),
    st.text(min_size=0, max_size=12),
)


@st.composite
def argvs(draw):
    verbs = sorted(v for v in VERBS if v not in _SLOW)
    verb = draw(st.sampled_from(verbs))
    argv = list(verb)
    options = VERBS[verb]
    if verb == ("counters", "import"):
        argv.append(draw(st.sampled_from(PATHS)))
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(st.integers(0, 9))
        if kind == 0:  # a stray token
            argv.append(draw(st.one_of(st.sampled_from(WORDS), st.text(max_size=8))))
        elif options:
            opts, flag = draw(st.sampled_from(options))
            opt = draw(st.sampled_from(opts))
            if flag:
                argv.append(opt)
            elif opt.startswith("--") and draw(st.booleans()):
                argv.append(f"{opt}={draw(VALUES)}")
            else:
                argv += [opt, draw(VALUES)]
    if draw(st.booleans()):
        argv += ["--format", "json"]
    return argv


def _check(argv):
    try:
        rc, out, err = run_cli(argv)
    except Reached:
        return
    assert_outcome(argv, rc, out, err)


@examples(150)
@given(argv=argvs())
def test_any_argv_exits_0_with_strict_json_or_2_with_one_line(sandbox, argv):
    _check(argv)


@examples(60)
@given(verb=st.sampled_from(sorted(VERBS)), junk=st.lists(st.text(max_size=10), max_size=3))
def test_unknown_tokens_never_trace(sandbox, verb, junk):
    if verb in _SLOW and not junk:
        return
    _check([*verb, *junk])


#: One option of each number kind of each verb with each adversarial number.
_NUMERIC = [
    (verb, opt)
    for verb, params in VERBS.items()
    if verb not in _SLOW
    for opts, flag in params
    if not flag
    for opt in opts[:1]
    if opt
    in (
        "--batch",
        "--prompt",
        "--context",
        "--budget",
        "--max-layers",
        "--steps",
        "--repeats",
        "--threads",
        "--launch-count",
        "--timeout",
        "--batch-sweep",
        "--context-sweep",
    )
]


@pytest.mark.parametrize(
    "verb,opt", _NUMERIC, ids=lambda x: " ".join(x) if isinstance(x, tuple) else x
)
def test_numeric_options_refuse_meaningless_values(sandbox, verb, opt):
    """NaN, ±inf, 1e308, 500 digits, 0 and -1 are refused with one line (exit 2) before work."""
    extra = ["--gpu", "h100"] if verb == ("predict",) else []
    if verb == ("counters", "import"):
        return
    if verb == ("counters", "collect"):
        extra = ["--", "true"]
    for value in ("nan", "inf", "-inf", "1e308", "1" + "0" * 500, "-1", "true"):
        argv = (
            [*verb, opt, value, *extra]
            if verb != ("counters", "collect")
            else [*verb, opt, value, *extra]
        )
        rc, out, err = run_cli(argv)
        assert_outcome(argv, rc, out, err)
        assert rc == 2, (argv, rc, err)
