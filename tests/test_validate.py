"""roofprof validate: a real (tiny) Llama forward pass, layer scaling, faults, residuals, CLI."""

import importlib.util
import json
import warnings

import pytest
from conftest import flat_times, tiny_spec, write_config

from roofprof.api import validate
from roofprof.cli import main
from roofprof.errors import ConfigError, DeviceUnavailableError
from roofprof.models import ops
from roofprof.prediction.rollup import MeasuredEstimator
from roofprof.specs import load_model
from roofprof.validation.records import memory_plan
from roofprof.workload import Scenario

torch = pytest.importorskip("torch")
HAS_HF = importlib.util.find_spec("transformers") is not None
pytestmark = pytest.mark.usefixtures("isolated_cache")


@pytest.fixture
def tiny(tmp_path):
    """Three layers, with llama3 RoPE scaling."""
    return str(
        write_config(
            tmp_path,
            num_hidden_layers=3,
            rope_scaling={
                "factor": 8.0,
                "high_freq_factor": 4.0,
                "low_freq_factor": 1.0,
                "original_max_position_embeddings": 128,
                "rope_type": "llama3",
            },
        )
    )


@pytest.mark.parametrize(
    "backend",
    ["torch", pytest.param("hf", marks=pytest.mark.skipif(not HAS_HF, reason="no transformers"))],
)
@pytest.mark.parametrize("attention", ["fused", "unfused"])
def test_real_run_times_prefill_and_decode(tiny, backend, attention, monkeypatch):
    import roofprof.validation.model_run as validation

    class QuietMachine:  # fake the machine's load, not the model: no repetition is dropped
        share, available = 0.0, True

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(validation, "Contention", QuietMachine)
    r = validate(
        tiny,
        device="cpu",
        backend=backend,
        attention=attention,
        prompt_tokens=12,
        decode_steps=3,
        warmup_steps=1,
        prefill_repeats=2,
    )
    real = r.real
    assert real.prefill_s > 0 and real.decode_s > 0
    assert (
        len(r.prefill_samples_s) == 2 and len(r.decode_samples_s) == 4
    )  # 2 repetitions × ceil(3 / 2) steps
    assert real.context_tokens == 12 + 1 + 1 and real.num_layers == 3 and real.scaled_from is None
    assert r.dtype == "fp32" and r.clock == "perf_counter"
    assert (backend == "hf") == ("transformers" in r.backend)
    assert r.counting.attention == attention
    rm = json.loads(json.dumps(r.to_dict()))["real_model"]
    assert rm["backend"] == backend and rm["name"] == r.backend
    assert rm["chosen_by"] == f"asked: --backend {backend}"
    assert rm["attention"] == ("sdpa" if attention == "fused" else "eager")
    assert rm["differs"] and ("own implementation" in rm["differs"][0]) == (backend == "torch")
    assert json.loads(json.dumps(r.to_dict()))["real"]["decode_s"] == real.decode_s


def test_plain_torch_matches_transformers_numerically():
    if not HAS_HF:
        pytest.skip("no transformers")
    from roofprof.models.llama_torch import KVCache, TorchLlama
    from roofprof.validation.real_model import build_hf_model

    spec = tiny_spec()
    hf = build_hf_model(spec, "fp32", "cpu", "fused")
    plain = TorchLlama(spec, rope_theta=10000.0, eps=1e-6, init=False)
    with torch.no_grad():  # copy HF's weights into the plain model
        for i, layer in enumerate(hf.model.layers):
            mine = plain.layers[i]
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                getattr(mine, name).weight.copy_(getattr(layer.self_attn, name).weight)
            for name in ("gate_proj", "up_proj", "down_proj"):
                getattr(mine, name).weight.copy_(getattr(layer.mlp, name).weight)
        plain.embed.weight.copy_(hf.model.embed_tokens.weight)
    ids = torch.tensor([[1, 5, 9, 2, 7]])
    with torch.inference_mode():
        ref = hf(input_ids=ids).logits[:, -1:]
        cache = KVCache()
        mine = plain(ids, cache)
        assert torch.allclose(mine, ref, atol=1e-5, rtol=1e-4)
        for attention in ("unfused",):
            plain.attention = attention
            assert torch.allclose(plain(ids, KVCache()), ref, atol=1e-5, rtol=1e-4)


def test_model_too_large_is_scaled_by_layers_and_says_so():
    m = load_model("llama-3.1-8b")
    plan = memory_plan(m, "bf16", batch=1, prompt_tokens=128, total_tokens=140, available_bytes=6e9)
    assert plan.scaled and 1 <= plan.num_layers < 32
    assert "scaled from 32 to" in plan.describe() and "GB" in plan.describe()


def test_model_that_cannot_fit_even_scaled_is_refused():
    m = load_model("llama-3.1-8b")
    with pytest.raises(ConfigError, match=r"needs .* GB .* available"):
        memory_plan(m, "bf16", batch=1, prompt_tokens=128, total_tokens=140, available_bytes=1e9)


def test_max_layers_scales_and_predictions_follow(tiny):
    times = flat_times(tiny, 1e-4)
    est = MeasuredEstimator(times)
    r = validate(
        tiny,
        device="cpu",
        backend="torch",
        max_layers=2,
        prompt_tokens=8,
        decode_steps=2,
        warmup_steps=1,
        estimators={"measured": est},
    )
    assert r.model.num_layers == 2 and r.real.scaled_from == 3 and r.memory.scaled
    assert any("scaled from 3 to 2" in w for w in r.warnings)
    p = r.predictions["measured"]
    assert p.decode.workload.model.num_layers == 2  # predicted for the model that ran
    assert p.decode.workload.context_tokens == r.real.context_tokens
    # every op call whose shape is in the table costs 1e-4 s: the step is known without the
    # code's sums (the attention shape of the real context is not in the table)
    calls = sum(
        o.count
        for o in ops(
            Scenario.of(
                r.model,
                "decode",
                prompt_tokens=8,
                context_tokens=r.real.context_tokens,
                dtype="fp32",
            )
        ).ops
        if o.shape_key in times
    )
    # the framework overhead of the model class that ran is counted beside the ops
    framework = sum(o.seconds for o in p.decode.ops if o.op.kind == "framework")
    assert [o.op.name for o in p.decode.ops if o.op.kind == "framework"] == [
        "framework_layer",
        "framework_pass",
    ]
    assert any("framework overhead of plain torch counted by measured" in w for w in r.warnings)
    fw = r.to_dict()["framework_overhead"]
    assert fw["model"] == "plain torch" and set(fw["layer_s"]) == {"prefill", "decode"}
    assert p.decode.seconds == pytest.approx(calls * 1e-4 + framework, rel=1e-9)
    # the real step is the median of the samples kept, so it lies within them
    assert min(r.decode_samples_s) <= r.real.decode_s <= max(r.decode_samples_s)
    rows = {row["estimator"]: row for row in r.comparison()}
    assert rows["measured"]["decode_residual"] == pytest.approx(
        (calls * 1e-4 + framework) / r.real.decode_s - 1
    )
    assert (rows["measured"]["decode_residual"] > 0) == (calls * 1e-4 > r.real.decode_s)
    # the real run's first-touched pages, counted per pass and stated beside the profile's
    # fresh-page assumption
    assert r.real.prefill_page_faults is not None and r.real.prefill_page_faults >= 0
    assert r.to_dict()["real"]["decode_page_faults"] == r.real.decode_page_faults
    assert any("first-touched" in w and "minor page faults" in w for w in r.warnings)
    assert any("µs per fresh page, measured now" in w for w in r.warnings)
    # the JSON carries the prediction op by op, the framework entries among them
    names = [o["name"] for o in r.to_dict()["predictions"]["measured"]["ops"]]
    assert "q_proj" in names and "framework_layer" in names


def test_missing_torch_names_the_extra(tiny, monkeypatch):
    real_find = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "torch" else real_find(name, *a),
    )
    with pytest.raises(DeviceUnavailableError, match=r"roofprof\[torch\]"):
        validate(tiny, device="cpu")


def test_missing_transformers_for_hf_backend(tiny, monkeypatch):
    real_find = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "transformers" else real_find(name, *a),
    )
    with pytest.raises(DeviceUnavailableError, match=r"roofprof\[torch\]"):
        validate(tiny, device="cpu", backend="hf")
    r = validate(
        tiny,
        device="cpu",
        backend="auto",
        prompt_tokens=4,
        decode_steps=1,
        warmup_steps=0,
        prefill_repeats=1,
    )
    assert "plain torch" in r.backend
    assert r.real_model is not None and r.real_model.backend == "torch"
    assert "transformers is not installed" in r.real_model.chosen_by
    assert "roofprof[torch]" in r.real_model.chosen_by


@pytest.mark.skipif(not HAS_HF, reason="no transformers")
def test_auto_runs_transformers_when_installed_and_says_why(tiny):
    r = validate(
        tiny, device="cpu", prompt_tokens=4, decode_steps=1, warmup_steps=0, prefill_repeats=1
    )
    assert r.real_model is not None and r.real_model.backend == "hf"
    assert r.real_model.chosen_by == "auto: transformers is installed"
    assert "LlamaForCausalLM" in r.real_model.name and "RoPE" in r.real_model.differs[0]


def test_real_model_record_names_why_and_what_differs(monkeypatch):
    import roofprof.validation.real_model as rm

    monkeypatch.setattr(rm, "has_transformers", lambda: True)
    # auto on a family whose transformers class runs another form: its own note joins
    r = rm.describe_real_model(load_model("deepseek-v3"), "auto", "torch", "plain", "sdpa", "fused")
    assert r.chosen_by.startswith("auto: the family's transformers class runs another form")
    assert len(r.differs) == 2 and "MLA" in r.differs[1]
    # an attention path other than the counted one is said
    r = rm.describe_real_model(load_model("gemma-2-9b"), "hf", "hf", "hf", "eager", "fused")
    assert r.chosen_by == "asked: --backend hf" and "RoPE" in r.differs[0]
    assert any("ran eager attention where the counting is fused" in d for d in r.differs)
    r = rm.describe_real_model(load_model("llama-3.2-1b"), "auto", "hf", "hf", "sdpa", "fused")
    assert r.chosen_by == "auto: transformers is installed" and len(r.differs) == 1
    monkeypatch.setattr(rm, "has_transformers", lambda: False)
    r = rm.describe_real_model(load_model("llama-3.2-1b"), "auto", "torch", "t", "eager", "unfused")
    assert "roofprof[torch]" in r.chosen_by and len(r.differs) == 1
    assert r.to_dict()["differs"] == list(r.differs)


def test_torch_extra_brings_transformers():
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert any(req.startswith("transformers") for req in extras["torch"])


def run_cli(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_validate_json_with_measured_residuals(capsys, tiny, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code, out, err = run_cli(
            capsys,
            "validate",
            "--model",
            tiny,
            "--device",
            "cpu",
            "--backend",
            "torch",
            "--prompt",
            "8",
            "--steps",
            "2",
            "--roofline",
            "none",
            "--estimators",
            "measured",
            "--budget",
            "0.001",
            "--format",
            "json",
            "--out",
            str(tmp_path / "v.json"),
        )
    assert code == 0, err
    d = json.loads(out)
    labels = [row["estimator"] for row in d["comparison"]]
    assert labels == ["measured", "measured-no-launch", "real"]
    # the CLI's predictions count the framework overhead and follow the host's drift too
    assert d["framework_overhead"]["model"] == "plain torch"
    moments = [c["label"] for c in d["host_noise"]["checks"]]
    assert moments == ["before the real run", "after the real run", "after the profile"]
    assert sum(w.startswith("host drift ") for w in d["warnings"]) == 1
    assert "decode_within_noise" in d["comparison"][0]
    assert d["comparison"][0]["decode_residual"] is not None
    assert json.loads((tmp_path / "v.json").read_text())["real"]["prefill_s"] > 0


def test_cli_validate_table_and_errors(capsys, tiny, tmp_path):
    from roofprof.units import si

    code, out, err = run_cli(
        capsys,
        "validate",
        "--model",
        tiny,
        "--device",
        "cpu",
        "--backend",
        "torch",
        "--prompt",
        "4",
        "--steps",
        "1",
        "--estimators",
        "",
        "--repeats",
        "1",
        "--out",
        str(tmp_path / "v.json"),
    )
    assert code == 0, err
    real = json.loads((tmp_path / "v.json").read_text())["real"]
    text = " ".join(out.split())  # the table's lines may wrap
    assert f"prefill {real['batch']}×4 tokens: {si(real['prefill_s'], 's')}" in text
    assert f"cached tokens: {si(real['decode_s'], 's')}" in text
    assert f"({real['batch'] / real['decode_s']:,.2f} tokens/s" in text
    assert "real model: plain torch" in text and "asked: --backend torch" in text
    assert "differs from the counted ops: roofprof's own plain-torch form" in text
    code, out, err = run_cli(
        capsys, "validate", "--model", "llama-3.1-405b", "--device", "cpu", "--estimators", ""
    )
    assert code == 2 and "cannot fit" in err and "GB" in err and len(err.strip().splitlines()) == 1
    code, out, err = run_cli(capsys, "validate", "--model", tiny, "--estimators", "oracle")
    assert code == 2 and "spec, empirical, measured" in err


@pytest.mark.gpu
def test_real_run_on_a_gpu_with_cuda_events(tiny):
    r = validate(tiny, device="cuda:0", prompt_tokens=16, decode_steps=3)
    assert r.dtype == "bf16" and r.real.decode_s > 0 and r.real.prefill_s > 0
    assert "perf_counter" not in r.clock  # CUDA events


def test_a_short_warm_up_prefill_runs_the_prompt_head_only(tiny, monkeypatch):
    import roofprof.validation.model_run as validation

    seen = []
    real = validation.Runner.prefill
    monkeypatch.setattr(
        validation.Runner,
        "prefill",
        lambda self, ids: (seen.append(ids.shape[1]), real(self, ids))[1],
    )
    r = validate(
        tiny,
        device="cpu",
        backend="torch",
        prompt_tokens=12,
        decode_steps=2,
        warmup_steps=1,
        prefill_repeats=2,
        warmup_tokens=4,
    )
    assert (
        seen[0] == 4
        and seen[1:] == [12] * (len(seen) - 1)
        and len(r.prefill_samples_s) == len(seen) - 1
    )
    assert r.real.context_tokens == validation.validation_context(12, 1, 2, 2)
    with pytest.raises(ConfigError, match="warm-up tokens must be at least 1"):
        validate(tiny, device="cpu", backend="torch", warmup_tokens=0)


def test_without_per_repetition_warm_up_steps_the_decode_path_still_warms_once(tiny, monkeypatch):
    import roofprof.validation.model_run as validation

    steps = []
    real = validation.Runner.step
    monkeypatch.setattr(
        validation.Runner,
        "step",
        lambda self, ids, cache: (steps.append(1), real(self, ids, cache))[1],
    )
    r = validate(
        tiny,
        device="cpu",
        backend="torch",
        prompt_tokens=12,
        decode_steps=4,
        warmup_steps=0,
        prefill_repeats=2,
        warmup_tokens=4,
    )
    # the warm-up's one step, then every step timed (a busy machine may add repetitions)
    assert len(r.decode_samples_s) >= 4 and len(steps) == 1 + len(r.decode_samples_s)
    assert r.real.context_tokens == validation.validation_context(12, 0, 4, 2) == 13
