import json

import pytest

from roofprof.cli import main


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_schema(capsys):
    code, out, _ = run(
        capsys,
        "predict",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--format",
        "json",
        "--convention",
        "rule-of-thumb",
    )
    assert code == 0
    d = json.loads(out)
    for key in (
        "model",
        "gpu",
        "dtype",
        "batch",
        "prompt_tokens",
        "context_tokens",
        "estimator",
        "ridge_flops_per_byte",
        "prefill",
        "decode",
        "ops",
    ):
        assert key in d
    assert set(d["prefill"]) >= {"seconds", "flops", "bytes", "attention_flops", "bound"}
    assert set(d["decode"]) >= {
        "seconds_per_token",
        "tokens_per_second",
        "flops",
        "bytes",
        "weight_bytes",
        "kv_cache_bytes",
        "bound",
    }
    op = d["ops"][0]
    assert set(op) >= {
        "name",
        "phase",
        "m",
        "n",
        "k",
        "flops",
        "bytes",
        "intensity",
        "seconds",
        "bound",
    }
    assert d["estimator"] == "spec" and d["gpu"] == "h100-sxm"
    assert d["prefill"]["seconds"] == pytest.approx(
        sum(o["seconds"] for o in d["ops"] if o["phase"] == "prefill")
    )


def test_table_and_csv(capsys):
    code, out, _ = run(capsys, "predict", "--gpu", "h200", "--batch", "1,64", "--format", "json")
    sweep = {p["batch"]: p for p in json.loads(out)["sweep"]}
    code, out, _ = run(capsys, "predict", "--gpu", "h200", "--batch", "1,64")
    assert code == 0 and "tokens/s" in out and "h200" in out
    for p in sweep.values():  # each batch's tokens/s, as the table formats it, is in the table
        assert f"{p['decode']['tokens_per_second']:,.0f}" in out
    code, out, _ = run(capsys, "predict", "--gpu", "h200", "--format", "csv")
    assert code == 0 and out.splitlines()[0].startswith("model,gpu,estimator")
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(out)))
    code, js, _ = run(capsys, "predict", "--gpu", "h200", "--format", "json")
    ops = json.loads(js)["ops"]
    assert len(rows) == len(ops) and all(r["gpu"] == "h200" for r in rows)
    for row, op in zip(rows, ops, strict=True):  # the CSV holds the same per-op numbers
        assert float(row["seconds"]) == pytest.approx(op["seconds"])


def test_plot(tmp_path, capsys):
    png = tmp_path / "r.png"
    code, _, err = run(capsys, "predict", "--gpu", "a100-sxm-80gb", "--plot", str(png))
    assert code == 0 and png.read_bytes()[:4] == b"\x89PNG"
    assert f"roofline plot written to {png}" in err
    import struct

    width, height = struct.unpack(">II", png.read_bytes()[16:24])  # IHDR: a real chart
    assert width >= 400 and height >= 300


@pytest.mark.parametrize(
    "args, needle",
    [
        (("--gpu", "h1000"), "h100-sxm"),
        (("--gpu", "h100", "--model", "llama-9b"), "llama-3.1-8b"),
        (("--gpu", "h100", "--batch", "0"), "--batch"),
        (("--gpu", "h100", "--prompt", "-5"), "--prompt"),
        (("--gpu", "h100", "--dtype", "fp7"), "bf16"),
        (("--gpu", "a100", "--dtype", "fp8"), "fp8"),
        (("--gpu", "h100", "--format", "xml"), "json"),
        ((), "--gpu"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, args, needle):
    code, out, err = run(capsys, "predict", *args)
    assert code == 2
    assert needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_context_beyond_model_maximum_warns_once(capsys):
    """The warning is printed once: as a table line in table format (no second stderr
    line), as one ``roofprof: warning:`` stderr line next to the JSON's warnings."""
    text = "200001 tokens exceed llama-3.1-8b's max_position_embeddings (131072)"
    code, out, err = run(capsys, "predict", "--gpu", "h100", "--prompt", "200000", "--batch", "1,8")
    assert code == 0
    assert (out + err).count(text) == 1 and text not in err
    code, out, err = run(
        capsys, "predict", "--gpu", "h100", "--prompt", "200000", "--format", "json"
    )
    assert code == 0
    assert [w for w in json.loads(out)["warnings"] if text in w]
    assert err.count(text) == 1 and err.startswith("roofprof: warning: " + text)


def test_published_ceilings_note_is_printed_once(capsys):
    note = "empirical: no --roofline given; using the published ceilings of h100"
    code, out, err = run(capsys, "predict", "--gpu", "h100", "--estimator", "empirical")
    assert code == 0 and (out + err).count(note) == 1
    code, out, err = run(
        capsys, "predict", "--gpu", "h100", "--estimator", "empirical", "--format", "json"
    )
    assert (
        code == 0 and err.count(note) == 1 and any(note in w for w in json.loads(out)["warnings"])
    )


def test_specs(capsys):
    code, out, _ = run(capsys, "specs", "--format", "json")
    d = json.loads(out)
    assert (
        code == 0 and len(d["gpus"]) >= 15 and any(m["id"] == "llama-3.1-8b" for m in d["models"])
    )
    h100 = next(g for g in d["gpus"] if g["id"] == "h100-sxm")
    assert h100["ridge_bf16_flops_per_byte"] == pytest.approx(
        h100["peak_flops_per_s"]["bf16"] / h100["memory_bytes_per_s"]
    )
    m8b = next(m for m in d["models"] if m["id"] == "llama-3.1-8b")
    assert m8b["params"] == 8030261248 and m8b["kv_bytes_per_token_bf16"] == 131072


def test_fail_and_exit_codes_propagate():
    from roofprof.cli import app, fail

    @app.command("_boom", hidden=True)
    def _boom():
        fail("boom")

    try:
        assert main(["_boom"]) == 2
    finally:
        app.registered_commands = [c for c in app.registered_commands if c.name != "_boom"]


def test_result_files_get_the_usual_mode(tmp_path):
    import os

    from roofprof.results import write_json_atomic

    old = os.umask(0o022)
    try:
        p = write_json_atomic(tmp_path / "x.json", {"a": 1})
    finally:
        os.umask(old)
    assert os.stat(p).st_mode & 0o777 == 0o644


@pytest.mark.parametrize(
    ("cli", "loose"),
    [
        (["--model", "llama-3.1-8b", "--gpu", "h100-sxm"], {"gpu": "h100-sxm"}),
        (
            ["--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "4", "--pp", "2"],
            {"gpu": "h100-sxm", "parallel": {"tp": 4, "pp": 2}},
        ),
        (
            ["--model", "mixtral-8x7b", "--gpu", "a100", "--routing", "zipf:1.1"],
            {"gpu": "a100", "routing": "zipf:1.1"},
        ),
    ],
)
def test_library_and_cli_give_the_same_json(cli, loose, capsys):
    import roofprof
    from roofprof.workload import Parallel

    if "parallel" in loose:
        loose = {**loose, "parallel": Parallel(**loose["parallel"])}
    code, text, _ = run(capsys, "predict", *cli, "--prompt", "512", "-f", "json")
    assert code == 0
    out = json.loads(text)
    gpu = loose.pop("gpu")
    from_python = roofprof.predict(cli[1], gpu, prompt_tokens=512, **loose)
    assert json.loads(json.dumps(from_python.to_dict())) == out
    assert "counting_config" in out
    if "parallel" in loose:
        assert out["memory"]["fits"] is True
        assert out["parallel"] == {"tp": 4, "pp": 2, "sequence_parallel": False, "gpus": 8}
        assert out["pipeline"]["decode"]["stages"] == 2
    else:
        assert "memory" not in out and "parallel" not in out


def test_the_library_refuses_a_layout_that_does_not_fit_as_the_cli_does(capsys):
    import roofprof
    from roofprof.errors import ConfigError
    from roofprof.workload import Parallel

    with pytest.raises(ConfigError, match="the smallest TP that fits is 2") as caught:
        roofprof.predict("llama-3.1-70b", "h100-sxm", prompt_tokens=2048, parallel=Parallel())
    code = main(["predict", "-m", "llama-3.1-70b", "-g", "h100-sxm", "-p", "2048", "--tp", "1"])
    assert code == 2
    assert str(caught.value) in capsys.readouterr().err
    ignored = roofprof.predict(
        "llama-3.1-70b", "h100-sxm", prompt_tokens=2048, parallel=Parallel(), ignore_memory=True
    )
    assert ignored.memory is not None and not ignored.memory.fits
