"""Test configuration.

The numba-cuda simulator must be enabled before numba is first imported, so that every
`numba.cuda` kernel runs on the CPU here (CI has no GPU). Tests that need a real GPU are
marked ``gpu`` and skipped unless one is present (``roofprof selftest`` runs them). Tests
marked ``slow`` run only with ``--runslow`` (CI passes it; the fast default is for day-to-day
work).
"""

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _real_gpu_present() -> bool:
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" and not os.environ.get("ROOFPROF_GPU_TESTS"):
        return False
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def pytest_addoption(parser):
    parser.addoption(
        "--runslow", action="store_true", default=False, help="also run the tests marked slow"
    )


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--runslow"):
        slow = pytest.mark.skip(reason="slow: run with --runslow")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(slow)
    if _real_gpu_present():
        return
    skip = pytest.mark.skip(reason="needs a real NVIDIA GPU (run `roofprof selftest` on one)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def repo_root() -> Path:
    return REPO


# --------------------------------------------------------------------------- shared fixtures

#: A tiny Llama config (HF config.json fields): 2 layers, 4 heads of 16, GQA 2 KV heads.
TINY_CFG = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 100,
    "tie_word_embeddings": True,
    "max_position_embeddings": 256,
    "rope_theta": 10000.0,
}


def tiny_spec(**changes):
    """The tiny model as a ModelSpec (keywords, no positional literal)."""
    from roofprof.specs import ModelSpec

    fields = dict(
        id="tiny",
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        vocab_size=100,
        tie_word_embeddings=True,
        max_position_embeddings=256,
    )
    return ModelSpec(**{**fields, **changes})


def check_every_torch_op(spec, scenarios, **torch_ops_kwargs) -> list[str]:
    """Prepare, run and check every distinct op shape of ``scenarios`` with TorchOps (each must be
    supported and pass its correctness check); return the names of the ops checked."""
    import numpy as np

    from roofprof.models import ops
    from roofprof.profiling.torch_ops import TorchOps

    impl = TorchOps(spec, **torch_ops_kwargs)
    seen, checked = set(), []
    for scenario in scenarios:
        for op in ops(scenario).ops:
            if op.shape_key in seen:
                continue
            seen.add(op.shape_key)
            assert impl.supports(op) is None, (scenario.phase, op.name)
            prepared = impl.prepare(op, np.random.default_rng(0))
            prepared.run()
            result = prepared.check()
            assert result.ok, (scenario.phase, op.name, result)
            prepared.release()
            checked.append(op.name)
    return checked


def flat_times(config, seconds: float, prompt_tokens: int = 8, context_tokens: int = 10) -> dict:
    """Every op shape of ``config``'s prefill and decode (at those lengths) costing ``seconds``
    per call, as a measured estimator's table."""
    from roofprof.models import ops
    from roofprof.prediction.rollup import OpTime
    from roofprof.workload import Scenario

    times = {}
    for phase in ("prefill", "decode"):
        scenario = Scenario.of(
            config, phase, prompt_tokens=prompt_tokens, context_tokens=context_tokens, dtype="fp32"
        )
        for o in ops(scenario).ops:
            times[o.shape_key] = OpTime(seconds, "lit")
    return times


def write_config(folder: Path, name: str = "tiny.json", **changes) -> Path:
    """:data:`TINY_CFG` (with ``changes``) written as a config file; returns its path."""
    import json

    path = folder / name
    path.write_text(json.dumps({**TINY_CFG, **changes}))
    return path


@pytest.fixture
def tiny_model():
    """The tiny ModelSpec."""
    return tiny_spec()


@pytest.fixture
def tiny_config(tmp_path) -> Path:
    """Path of the tiny model's config.json."""
    return write_config(tmp_path)


@pytest.fixture(autouse=True, scope="session")
def _session_cache(tmp_path_factory):
    """Keep the tests out of the user's ~/.cache/roofprof (one cache folder per session)."""
    import os

    old = os.environ.get("ROOFPROF_CACHE")
    os.environ["ROOFPROF_CACHE"] = str(tmp_path_factory.mktemp("roofprof-cache"))
    yield
    if old is None:
        os.environ.pop("ROOFPROF_CACHE", None)
    else:
        os.environ["ROOFPROF_CACHE"] = old


@pytest.fixture
def isolated_cache(tmp_path, monkeypatch) -> Path:
    """A fresh measurement/roofline cache folder ($ROOFPROF_CACHE) for one test."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("ROOFPROF_CACHE", str(folder))
    return folder
