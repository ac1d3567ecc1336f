"""Weight, compute and KV-cache precisions (roofprof.precision, Scenario.weights / kv_dtype)."""

from __future__ import annotations

import json

import pytest

import roofprof
from roofprof import models
from roofprof.cli import main
from roofprof.errors import ConfigError, UnknownNameError
from roofprof.precision import WEIGHT_FORMATS, check_compute, weight_bits
from roofprof.workload import Scenario


def test_every_format_cites_its_documentation_and_counts_scales():
    for f in WEIGHT_FORMATS.values():
        assert f.citation and f.derivation and f.compute_dtypes
    assert weight_bits("int4") == 4 + 32 / 128
    assert weight_bits("nvfp4") == 4 + 8 / 16
    assert weight_bits("mxfp4") == 4 + 8 / 32
    assert weight_bits("q8_0") == 34 * 8 / 32


def test_defaults_are_the_compute_dtype():
    s = Scenario.of("llama-3.1-8b", "decode", prompt_tokens=128)
    assert s.precisions() == {"dtype": "bf16", "weights": "bf16", "kv_dtype": "bf16"}
    assert models.ops(s).ops == models.ops(s.replace(weights="bf16", kv_dtype="bf16")).ops


def test_weight_only_int8_halves_weight_bytes_and_keeps_flops():
    base = Scenario.of("llama-3.1-8b", "decode", prompt_tokens=5)
    w16, w8 = models.ops(base), models.ops(base.replace(weights="int8"))
    assert w8.weight_bytes == pytest.approx(w16.weight_bytes / 2, rel=1e-3)  # norms stay bf16
    assert w8.flops == w16.flops
    assert {op.dtype for op in w8.ops} == {"bf16"}


def test_fp8_kv_cache_halves_kv_bytes():
    base = Scenario.of("llama-3.1-8b", "decode", prompt_tokens=4096)
    assert models.ops(base.replace(kv_dtype="fp8")).kv_bytes == pytest.approx(
        models.ops(base).kv_bytes / 2
    )


def test_q4_k_m_mix_is_between_q4_k_and_q6_k():
    w = models.ops(
        Scenario.of("llama-3-8b", "decode", prompt_tokens=1, weights="q4_k_m", dtype="fp16")
    )
    bits = w.weight_bytes * 8 / 8.03e9
    assert 4.5 < bits < 5.2  # llama.cpp reports 4.58 GiB = 4.90 bpw for this file (S13)


def test_bad_names_list_the_choices():
    with pytest.raises(UnknownNameError, match="q4_k_m"):
        Scenario.of("llama-3.1-8b", "decode", weights="int3")
    with pytest.raises(UnknownNameError, match="fp8"):
        Scenario.of("llama-3.1-8b", "decode", kv_dtype="int4")


def test_fp8_on_a100_names_what_it_has_and_the_weight_only_form():
    with pytest.raises(ConfigError, match=r"no fp8 compute.*bf16.*--dtype bf16 --weights fp8"):
        roofprof.predict("llama-3.1-8b", gpu="a100", dtype="fp8")
    check_compute("fp4", ["bf16", "fp8", "fp4"], "B200")


def test_fp4_on_b200_uses_the_fp4_peak():
    p = roofprof.predict(
        "llama-3.1-8b",
        gpu="b200",
        prompt_tokens=4096,
        dtype="fp4",
        weights="nvfp4",
        kv_dtype="bf16",
    )
    q = roofprof.predict(
        "llama-3.1-8b", gpu="b200", prompt_tokens=4096, dtype="fp8", kv_dtype="bf16"
    )
    assert p.prefill.seconds < q.prefill.seconds


def test_cli_predict_precisions(capsys):
    rc = main(
        [
            "predict",
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "a100",
            "--dtype",
            "bf16",
            "--weights",
            "int8",
            "--kv-dtype",
            "fp16",
            "--batch",
            "1",
            "--prompt",
            "5",
            "--format",
            "json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert (
        rc == 0
        and out["weights"] == "int8"
        and out["kv_dtype"] == "fp16"
        and out["dtype"] == "bf16"
    )
    assert main(["predict", "--gpu", "a100", "--dtype", "fp8"]) == 2
    assert "--weights fp8" in capsys.readouterr().err
    assert main(["predict", "--gpu", "a100", "--kv-dtype", "int4"]) == 2
    assert "valid choices" in capsys.readouterr().err
