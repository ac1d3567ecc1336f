"""gpt-oss is measurable: plain-torch model = transformers' GptOssForCausalLM, checked op
preparers, CLI."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import check_every_torch_op  # noqa: E402

from roofprof.cli import main  # noqa: E402
from roofprof.models import MEASURABLE, ops  # noqa: E402
from roofprof.models import gpt_oss_torch as g  # noqa: E402
from roofprof.specs import load_model  # noqa: E402
from roofprof.workload import Counting, Scenario  # noqa: E402

HAS_HF = importlib.util.find_spec("transformers") is not None


def _tiny():
    """gpt-oss-20b shrunk: 3 layers (sliding, full, sliding), window 6, 4 experts of 32, top-2."""
    m = load_model("gpt-oss-20b")
    return dataclasses.replace(
        m,
        num_layers=3,
        hidden_size=64,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        vocab_size=128,
        sliding_window=6,
        max_position_embeddings=4096,
        moe=dataclasses.replace(m.moe, experts=4, experts_per_token=2, expert_intermediate_size=32),
        pattern=dataclasses.replace(m.pattern, sliding_layers=2),
    )


def _tiny_config(tmp_path) -> str:
    """The same tiny gpt-oss as a config.json (published field names, YaRN RoPE)."""
    cfg = {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "attention_bias": True,
        "hidden_act": "silu",
        "hidden_size": 64,
        "intermediate_size": 32,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 128,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "experts_per_token": 2,
        "sliding_window": 6,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 150000,
        "rope_scaling": {
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "factor": 32.0,
            "original_max_position_embeddings": 4096,
            "rope_type": "yarn",
            "truncate": False,
        },
        "swiglu_limit": 7.0,
        "tie_word_embeddings": False,
    }
    path = tmp_path / "gpt-oss-tiny.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def test_gpt_oss_is_measurable_and_the_layer_pattern_is_the_published_one():
    assert "gpt_oss" in MEASURABLE
    m = load_model("gpt-oss-20b")
    assert g.layer_types(m) == ["sliding_attention", "full_attention"] * 12
    assert g.hf_config(m)["sliding_window"] == 128
    odd = dataclasses.replace(
        _tiny(), num_layers=4, pattern=dataclasses.replace(_tiny().pattern, sliding_layers=1)
    )
    assert g.layer_types(odd).count("sliding_attention") == 1


@pytest.mark.parametrize("attention", ["fused", "unfused"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_every_op_has_a_checked_torch_implementation(attention, dtype):
    spec = _tiny()
    checked = check_every_torch_op(
        spec,
        [
            Scenario(spec, phase, 1, 8, ctx, dtype, Counting(attention=attention))
            for phase, ctx in (("prefill", None), ("decode", 9))
        ],  # prompt 8 > window 6
        cache_bytes=1 << 16,
    )
    assert "lm_head" in checked


def _broken_rope(q, k, cos, sin):
    return q.contiguous(), k.contiguous()


#: (function of gpt_oss_torch, a wrong stand-in, the op it must fail, the counting)
BROKEN = [
    ("gpt_oss_rms_norm", lambda x, w, eps=1e-5: x * w, "attn_norm", "fused"),
    ("apply_rope_halves", _broken_rope, "rope", "fused"),
    (
        "attention_sinks",
        lambda q, k, v, mask, sinks, scale=None: g.attention_pv(
            torch.softmax(g.attention_scores(q, k, mask, scale), -1), v
        ),
        "attention",
        "fused",
    ),
    ("sink_softmax", lambda s, sinks: torch.softmax(s, -1), "attn_softmax", "unfused"),
    (
        "attention_pv",
        lambda p, v: torch.zeros(p.shape[0], p.shape[2], p.shape[1] * v.shape[-1], dtype=v.dtype),
        "attn_pv",
        "unfused",
    ),
    (
        "route_topk_softmax",
        lambda logits, k: torch.topk(torch.softmax(logits, -1), k, dim=-1),
        "route",
        "fused",
    ),
    ("expert_proj", lambda x, w, b: x @ w, "expert_down_proj", "fused"),
    (
        "clamped_swiglu",
        lambda gu: (gu[..., 1::2] + 1) * gu[..., ::2] * torch.sigmoid(1.702 * gu[..., ::2]),
        "expert_act",
        "fused",
    ),
]


@pytest.mark.parametrize(
    ("name", "broken", "op_name", "attention"), BROKEN, ids=[b[0] for b in BROKEN]
)
def test_each_preparer_check_fails_on_a_broken_implementation(
    monkeypatch, name, broken, op_name, attention
):
    from roofprof.profiling.torch_ops import TorchOps

    spec = _tiny()
    w = ops(Scenario(spec, "prefill", 1, 8, None, "fp32", Counting(attention=attention)))
    op = next(o for o in w.ops if o.name == op_name)
    impl = TorchOps(spec, cache_bytes=1 << 16)
    assert impl.prepare(op, np.random.default_rng(0)).check().ok
    monkeypatch.setattr(g, name, broken)
    assert not impl.prepare(op, np.random.default_rng(0)).check().ok


def test_hf_model_parameters_equal_the_spec_count():
    pytest.importorskip("transformers")
    import transformers

    spec = _tiny()
    with torch.device("meta"):
        hf = transformers.GptOssForCausalLM(transformers.GptOssConfig(**g.hf_config(spec)))
    assert sum(p.numel() for p in hf.parameters()) == spec.param_count()
    assert (
        sum(p.numel() for p in g.build(spec, torch.float32, "cpu", "fused").parameters())
        == spec.param_count()
    )


_NAMES = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "mlp_norm",
    "mlp.router.weight": "router",
    "mlp.router.bias": "router_bias",
    "mlp.experts.gate_up_proj_bias": "gate_up_bias",
    "mlp.experts.gate_up_proj": "gate_up",
    "mlp.experts.down_proj_bias": "down_bias",
    "mlp.experts.down_proj": "down",
}


def _plain_name(name: str) -> str:
    name = name.replace("model.", "", 1).replace("self_attn.", "").replace("embed_tokens", "embed")
    for hf_name, plain in _NAMES.items():
        name = name.replace(hf_name, plain)
    return (
        name[: -len(".weight")] if name.endswith("norm.weight") or name == "norm.weight" else name
    )


@pytest.mark.skipif(not HAS_HF, reason="no transformers")
def test_plain_torch_gpt_oss_computes_what_transformers_does():
    """Same weights into both: the same logits over a prompt past the window and four decode
    steps."""
    from roofprof.validation.real_model import Runner, build_hf_model, build_torch_model

    spec = _tiny()
    hf = build_hf_model(spec, "fp32", "cpu", "fused")
    assert (
        hf.config._attn_implementation == "eager" and hf.config._experts_implementation == "eager"
    )
    assert hf.config.rope_parameters["rope_type"] == "yarn"
    plain = build_torch_model(spec, "fp32", "cpu", "fused")
    gen = torch.Generator().manual_seed(0)
    params = dict(plain.named_parameters())
    with torch.no_grad():
        for name, p in hf.named_parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (0.3 if "norm" in name else 0.1))
            params.pop(_plain_name(name)).copy_(p)
    assert not params  # every plain parameter came from transformers'
    ids = torch.randint(0, 128, (1, 10), generator=gen)  # 10 tokens > window 6
    outs = []
    for net, backend in ((hf, "hf"), (plain, "torch")):
        runner = Runner(net, backend)
        with torch.inference_mode():
            logits, cache = runner.prefill(ids)
            seq = [logits[:, -1]]
            for token in (5, 17, 3, 9):
                seq.append(runner.step(torch.tensor([[token]]), cache)[:, -1])
        outs.append(torch.stack(seq))
    assert outs[0].abs().max() > 0.1  # not trivially zero
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-4, atol=1e-4)


def _cli(capsys, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_profile_predict_measured_and_validate(capsys, tmp_path, isolated_cache):
    cfg = _tiny_config(tmp_path)
    code, out, err = _cli(
        capsys,
        "profile",
        "--model",
        cfg,
        "--phase",
        "both",
        "--prompt",
        "8",
        "--roofline",
        "none",
        "--impl",
        "torch",
        "--budget",
        "0.001",
        "--format",
        "json",
    )
    assert code == 0, err
    names = {op["name"] for p in json.loads(out)["profiles"] for op in p["ops"]}
    assert {"attention", "attention_local", "expert_act", "route"} <= names
    code, out, err = _cli(
        capsys,
        "predict",
        "--model",
        cfg,
        "--estimator",
        "measured",
        "--device",
        "cpu",
        "--dtype",
        "fp32",
        "--prompt",
        "8",
        "--roofline",
        "none",
        "--format",
        "json",
    )
    assert code == 0, err
    d = json.loads(out)
    assert (
        d["estimator"] == "measured"
        and d["decode"]["seconds_per_token"] > 0
        and d["prefill"]["seconds"] > 0
    )
    for backend in ("hf", "torch") if HAS_HF else ("torch",):
        code, out, err = _cli(
            capsys,
            "validate",
            "--model",
            cfg,
            "--device",
            "cpu",
            "--backend",
            backend,
            "--prompt",
            "8",
            "--steps",
            "2",
            "--repeats",
            "1",
            "--roofline",
            "none",
            "--estimators",
            "measured",
            "--budget",
            "0.001",
            "--format",
            "json",
        )
        assert code == 0, err
        d = json.loads(out)
        assert "eager" in d["real"]["source"] and d["real"]["decode_s"] > 0
        assert (
            d["comparison"][0]["estimator"] == "measured"
            and d["comparison"][0]["decode_residual"] is not None
        )
