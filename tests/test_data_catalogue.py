"""Checks on the cited data catalogue: data/gpus.json and data/models/*.json.

These tests read the JSON files directly (no roofprof import), so they guard the data
itself: schema, units, uniqueness of ids and aliases, that every cited source exists,
a few spot values from /work/shared/reference, and the Llama parameter arithmetic.
"""

import json
import math
import re
from pathlib import Path

import pytest

DATA = Path(__file__).parents[1] / "data"
GPUS_PATH = DATA / "gpus.json"
MODELS_DIR = DATA / "models"

DTYPES = {"fp64", "fp64_tensor", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4"}
#: NVIDIA architectures, and AMD CDNA (analytic only: no device backend measures an AMD GPU).
ARCHITECTURES = {"volta", "turing", "ampere", "ada", "hopper", "blackwell", "cdna3", "cdna4"}
AMD_IDS = {"mi300x", "mi325x", "mi355x"}
CONFIDENCE = {"high", "medium", "low"}
EXPECTED_IDS = {
    "h100-sxm",
    "h100-pcie",
    "h100-nvl",
    "h200",
    "gh200",
    "b200",
    "a100-sxm-80gb",
    "a100-sxm-40gb",
    "a100-pcie-80gb",
    "l40s",
    "l4",
    "a10",
    "a10g",
    "rtx-4090",
    "rtx-6000-ada",
    "v100-sxm2-32gb",
    "t4",
    "h200-nvl",
    "h20",
    "l20",
    "rtx-5090",
    "rtx-pro-6000-blackwell",
    "b300",
    "gb200",
    *AMD_IDS,
}
REQUIRED = {
    "id": str,
    "name": str,
    "aliases": list,
    "architecture": str,
    "compute_capability": str,
    "sm_count": int,
    "vector_clock_mhz": (int, float),
    "tensor_clock_mhz": (int, float),
    "memory_type": str,
    "memory_bytes": (int, float),
    "memory_bytes_per_s": (int, float),
    "l2_bytes": (int, float),
    "nvlink_bytes_per_s": (int, float, type(None)),
    "interconnect": dict,
    "tdp_w": (int, float, type(None)),
    "peak_flops_per_s": dict,
    "alternatives": dict,
    "confidence": str,
    "notes": list,
    "sources": list,
    "field_sources": dict,
}
# Sane ranges in SI units: a value outside these is almost surely a unit slip (TB/s vs B/s).
RANGES = {
    "memory_bytes": (4e9, 1e12),
    "memory_bytes_per_s": (1e11, 1e13),
    "l2_bytes": (1e6, 1e9),
    "nvlink_bytes_per_s": (1e10, 1e13),
    "tdp_w": (10, 2000),
    "vector_clock_mhz": (500, 3500),
    "tensor_clock_mhz": (500, 3500),
}
FLOPS_RANGE = (1e11, 2e16)  # B300 dense FP4 is 1.35e16
MODEL_IDS = ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-3.2-1b", "llama-3.2-3b"]
#: Configs the published-measurement rows need (checked in tests/test_published.py).
PUBLISHED_MODEL_IDS = [
    "llama-2-7b",
    "llama-2-13b",
    "llama-2-70b",
    "llama-3-8b",
    "llama-3-70b",
    "llama-3.3-70b",
]
#: Configs of the other dense families (checked in tests/test_families.py).
FAMILY_MODEL_IDS = [
    "qwen2.5-0.5b",
    "qwen2.5-7b",
    "mistral-7b-v0.3",
    "qwen3-8b",
    "gemma-2-9b",
    "gemma-3-12b",
    "phi-3-mini",
]
#: Configs of the mixture-of-experts families (checked in tests/test_families_moe.py).
MOE_MODEL_IDS = ["qwen3-30b-a3b", "mixtral-8x7b", "deepseek-v3", "gpt-oss-20b", "gpt-oss-120b"]


def _load(path: Path):
    with path.open(encoding="utf-8") as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def catalogue() -> dict:
    return _load(GPUS_PATH)


@pytest.fixture(scope="module")
def gpus(catalogue) -> dict:
    return {g["id"]: g for g in catalogue["gpus"]}


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_value(field: str, value) -> None:
    """Assert one scalar field (base or alternative) is in its sane SI range."""
    if field in RANGES and value is not None:
        lo, hi = RANGES[field]
        assert _is_number(value) and lo <= value <= hi, (field, value)


def _check_peaks(peaks: dict) -> None:
    assert set(peaks) <= DTYPES, set(peaks) - DTYPES
    for dtype, rate in peaks.items():
        assert _is_number(rate) and FLOPS_RANGE[0] <= rate <= FLOPS_RANGE[1], (dtype, rate)


def test_top_level(catalogue):
    assert catalogue["schema_version"] == 1
    assert "Dense" in catalogue["conventions"] and "halved" in catalogue["conventions"]
    assert set(catalogue) == {
        "schema_version",
        "conventions",
        "sources",
        "gpus",
        "collective_defaults",
        "collectives",
    }
    for key, src in catalogue["sources"].items():
        assert re.fullmatch(r"S\d+[a-z]?", key), key
        assert set(src) == {"title", "url"}, key
        assert isinstance(src["title"], str) and src["title"], key
        assert src["url"] is None or src["url"].startswith("https://"), key
    keys = set(catalogue["sources"])
    assert {f"S{i}" for i in range(1, 18)} <= keys
    assert {f"S18{c}" for c in "abcdefgh"} <= keys


def test_ids(catalogue):
    ids = [g["id"] for g in catalogue["gpus"]]
    assert len(ids) == len(set(ids))
    assert set(ids) == EXPECTED_IDS
    for gid in ids:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", gid), gid


def test_required_fields_and_types(gpus):
    for gid, g in gpus.items():
        assert set(g) == set(REQUIRED), (gid, set(g) ^ set(REQUIRED))
        for field, kind in REQUIRED.items():
            assert isinstance(g[field], kind) and not isinstance(g[field], bool), (gid, field)
        assert g["architecture"] in ARCHITECTURES, gid
        assert g["confidence"] in CONFIDENCE, gid
        assert re.fullmatch(r"\d+\.\d", g["compute_capability"]), gid
        # sm_count: SMs, or compute units on an AMD GPU (304 on an MI300X)
        assert 10 <= g["sm_count"] <= (400 if gid in AMD_IDS else 200), gid
        assert g["notes"] and all(isinstance(n, str) and n for n in g["notes"]), gid
        assert g["aliases"] and all(isinstance(a, str) and a for a in g["aliases"]), gid


def test_units_are_si(gpus):
    for gid, g in gpus.items():
        for field in RANGES:
            _check_value(field, g[field])
        peaks = g["peak_flops_per_s"]
        assert {"fp32", "fp16"} <= set(peaks), gid
        _check_peaks(peaks)
        assert g["l2_bytes"] < g["memory_bytes"], gid


def test_missing_values_are_explained(gpus):
    for gid, g in gpus.items():
        text = " ".join(g["notes"]).lower()
        if g["tdp_w"] is None:
            assert "not published" in text, gid
        if g["nvlink_bytes_per_s"] is None:
            assert g["architecture"] in {"ada", "ampere", "turing"} or "no nvlink" in text, gid


def test_unsupported_dtypes_are_omitted(gpus):
    for gid in ("a100-sxm-80gb", "a100-sxm-40gb", "a100-pcie-80gb", "a10", "a10g"):
        assert "fp8" not in gpus[gid]["peak_flops_per_s"], gid
    for gid in ("v100-sxm2-32gb", "t4"):
        assert not {"bf16", "tf32", "fp8", "fp64_tensor"} & set(gpus[gid]["peak_flops_per_s"])
    assert "int8" not in gpus["v100-sxm2-32gb"]["peak_flops_per_s"]
    for gid, g in gpus.items():
        if g["architecture"] in {"ada", "turing", "volta"} or gid in {"a10", "a10g"}:
            assert "fp64_tensor" not in g["peak_flops_per_s"], gid


def test_aliases_unique_across_gpus(gpus):
    owner: dict[str, str] = {}
    for gid, g in gpus.items():
        for name in [gid, *g["aliases"]]:
            key = name.casefold()
            assert owner.get(key, gid) == gid, f"alias {name!r} maps to {owner.get(key)} and {gid}"
            owner[key] = gid
    # also unique once spaces, hyphens and underscores are ignored
    loose: dict[str, str] = {}
    for key, gid in owner.items():
        k = re.sub(r"[\s_-]+", "", key)
        assert loose.get(k, gid) == gid, (key, loose.get(k), gid)
        loose[k] = gid


@pytest.mark.parametrize(
    ("nvml_name", "gid"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-sxm-40gb"),
        ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H100 NVL", "h100-nvl"),
        ("NVIDIA GH200 480GB", "gh200"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA A10", "a10"),
        ("NVIDIA A10G", "a10g"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"),
        ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"),
        ("Tesla T4", "t4"),
        ("H100", "h100-sxm"),
        ("A100", "a100-sxm-80gb"),
        ("A100-80GB", "a100-sxm-80gb"),
        ("4090", "rtx-4090"),
    ],
)
def test_nvml_names_resolve(gpus, nvml_name, gid):
    assert nvml_name in gpus[gid]["aliases"]


def test_nvml_names_match_fixtures(gpus):
    """The Product Name strings of real nvidia-smi output (tests/fixtures) are aliases verbatim."""
    files = sorted((Path(__file__).resolve().parent / "fixtures").glob("nvidia-smi-q_*.txt"))
    assert len(files) == 2
    every_alias = {a for g in gpus.values() for a in g["aliases"]}
    for path in files:
        for name in re.findall(r"Product Name\s*:\s*(.+)", path.read_text()):
            assert name.strip() in every_alias, (path.name, name)


def test_sources_cited_exist(catalogue, gpus):
    keys = set(catalogue["sources"])
    cited = set()
    for gid, g in gpus.items():
        assert g["sources"], gid
        assert len(g["sources"]) == len(set(g["sources"])), gid
        assert set(g["sources"]) <= keys, (gid, set(g["sources"]) - keys)
        for field, src in g["field_sources"].items():
            assert field in REQUIRED or field == "peak_flops_per_s", (gid, field)
            assert src in keys and src in g["sources"], (gid, field, src)
        cited |= set(g["sources"])
    assert keys == cited, keys - cited  # no orphan source entries


def test_alternatives_are_well_formed(gpus):
    allowed = set(REQUIRED) - {
        "id",
        "name",
        "aliases",
        "alternatives",
        "notes",
        "sources",
        "field_sources",
        "confidence",
    }
    for gid, g in gpus.items():
        alt = g["alternatives"]
        assert set(alt) <= allowed, (gid, set(alt) - allowed)
        for field, value in alt.items():
            if field == "peak_flops_per_s":
                _check_peaks(value)
                assert set(value) <= set(g["peak_flops_per_s"]), gid
            else:
                assert type(value) is type(g[field]) or g[field] is None, (gid, field)
                _check_value(field, value)
                assert value != g[field], (gid, field)


def test_disputed_values_have_alternatives(gpus):
    for gid in ("l40s", "l4", "rtx-6000-ada"):
        alt = gpus[gid]["alternatives"]["peak_flops_per_s"]
        base = gpus[gid]["peak_flops_per_s"]
        for dtype in ("bf16", "fp16", "tf32"):
            assert alt[dtype] == pytest.approx(base[dtype] / 2), (gid, dtype)
        assert "disputed" in " ".join(gpus[gid]["notes"]).lower(), gid
    r4090 = gpus["rtx-4090"]
    assert r4090["alternatives"]["peak_flops_per_s"] == {"fp16": 330.3e12, "fp8": 660.6e12}
    gh = gpus["gh200"]["alternatives"]
    assert gh["memory_bytes"] == 144e9 and gh["memory_bytes_per_s"] == 4.9e12


def test_derived_values_are_noted(gpus):
    """FP64 on Ada / GA10x / Turing is derived (SMs x rate x clock) and must say so."""
    for gid in ("l40s", "l4", "a10", "a10g", "rtx-4090", "rtx-6000-ada", "t4"):
        g = gpus[gid]
        assert "derived" in " ".join(g["notes"]).lower(), gid
        fp64 = g["peak_flops_per_s"]["fp64"]
        derived = g["sm_count"] * 4 * g["vector_clock_mhz"] * 1e6
        assert fp64 == pytest.approx(derived, rel=0.03), gid


def _ridge(g: dict, dtype: str = "bf16") -> float:
    return g["peak_flops_per_s"][dtype] / g["memory_bytes_per_s"]


def test_spot_values(gpus):
    h100 = gpus["h100-sxm"]
    assert h100["peak_flops_per_s"]["bf16"] == 989.4e12
    assert h100["memory_bytes_per_s"] == 3.35e12
    assert h100["memory_bytes"] == 80e9 and h100["l2_bytes"] == 50e6
    assert (h100["vector_clock_mhz"], h100["tensor_clock_mhz"]) == (1980, 1830)
    assert _ridge(h100) == pytest.approx(295.3, abs=0.5)
    assert _ridge(gpus["h200"]) == pytest.approx(206, abs=1)
    assert gpus["h200"]["l2_bytes"] == 60 * 2**20
    a100 = gpus["a100-sxm-80gb"]
    assert a100["memory_bytes_per_s"] == 2.039e12
    assert _ridge(a100) == pytest.approx(153, abs=0.5)
    assert gpus["a100-sxm-40gb"]["memory_bytes_per_s"] == 1.555e12
    b200 = gpus["b200"]
    assert b200["alternatives"]["peak_flops_per_s"]["fp64"] == 40e12
    assert b200["alternatives"]["peak_flops_per_s"]["fp32"] == 80e12
    assert b200["alternatives"]["memory_bytes"] == 192e9
    assert b200["alternatives"]["memory_bytes_per_s"] == 8e12
    assert b200["memory_bytes_per_s"] == 7.7e12 and b200["memory_bytes"] == 180e9


def test_hopper_tensor_peaks_match_tensor_clock(gpus):
    """H100 SXM: 132 SMs x 4096 FLOP/clk/SM x 1830 MHz = 989.4 TFLOP/s (reference Table 3)."""
    g = gpus["h100-sxm"]
    assert g["sm_count"] * 4096 * g["tensor_clock_mhz"] * 1e6 == pytest.approx(989.4e12, rel=1e-3)
    assert g["sm_count"] * 256 * g["vector_clock_mhz"] * 1e6 == pytest.approx(66.9e12, rel=1e-3)


@pytest.mark.parametrize(
    ("gid", "dtype", "peak", "bandwidth", "ridge"),
    [
        # datasheet dense peak (FLOP/s), DRAM bandwidth (B/s), ridge point (FLOP/byte)
        ("h200-nvl", "bf16", 1671e12 / 2, 4.8e12, 174.0),  # 1,671 with sparsity
        ("h20", "bf16", 148e12, 4.0e12, 37.0),
        ("l20", "fp8", 237.4e12, 864e9, 274.8),
        ("rtx-5090", "bf16", 419e12 / 2, 1792e9, 116.9),  # FP32 accumulate, 419 sparse
        ("rtx-5090", "fp4", 3352e12 / 2, 1792e9, 935.3),
        ("rtx-pro-6000-blackwell", "fp4", 4000e12 / 2, 1792e9, 1116.1),  # 4,000 AI TOPS sparse
        ("b300", "bf16", 36e15 / 8 / 2, 7.7e12, 292.2),  # HGX B300: 36 PF sparse for 8 GPUs
        ("b300", "fp4", 108e15 / 8, 7.7e12, 1753.2),  # 108 PF dense for 8 GPUs
        ("gb200", "bf16", 10e15 / 2 / 2, 8e12, 312.5),  # superchip: 10 PF sparse for 2 GPUs
        ("gb200", "fp4", 40e15 / 2 / 2, 8e12, 1250.0),
        ("mi300x", "bf16", 2614.9e12 / 2, 5.3e12, 246.7),  # 2,614.9 with structured sparsity
        ("mi300x", "fp8", 2614.9e12, 5.3e12, 493.4),
        ("mi325x", "bf16", 1307.4e12, 6e12, 217.9),
        ("mi355x", "bf16", 2516.6e12, 8e12, 314.6),
        ("mi355x", "fp4", 20.1e15 / 2, 8e12, 1256.3),  # 20.1 PF FP4 with sparsity
    ],
)
def test_new_gpus_peaks_and_ridges_are_the_datasheets(gpus, gid, dtype, peak, bandwidth, ridge):
    g = gpus[gid]
    assert g["peak_flops_per_s"][dtype] == pytest.approx(peak, rel=2e-3), (gid, dtype)
    assert g["memory_bytes_per_s"] == bandwidth
    assert _ridge(g, dtype) == pytest.approx(ridge, rel=2e-3)


def test_h100_over_a100_is_3x_compute_and_1_6x_bandwidth(gpus):
    h100, a100 = gpus["h100-sxm"], gpus["a100-sxm-80gb"]
    assert h100["peak_flops_per_s"]["bf16"] / a100["peak_flops_per_s"]["bf16"] == pytest.approx(
        3.17, abs=0.01
    )
    assert h100["memory_bytes_per_s"] / a100["memory_bytes_per_s"] == pytest.approx(1.64, abs=0.01)


def test_new_gpu_peaks_match_units_times_clock(gpus):
    """Peak = SMs (CUs) x FLOP/clk per SM (CU) x clock, as each architecture's rates give it."""

    def rate(gid, dtype, per_clk, clock="tensor_clock_mhz"):
        g = gpus[gid]
        return g["sm_count"] * per_clk * g[clock] * 1e6 / g["peak_flops_per_s"][dtype]

    # CDNA 3: 304 CUs x 2100 MHz; FP16 2048, FP8 4096, FP32 256 FLOP/clk/CU
    for gid in ("mi300x", "mi325x"):
        assert rate(gid, "bf16", 2048) == pytest.approx(1, rel=1e-3)
        assert rate(gid, "fp8", 4096) == pytest.approx(1, rel=1e-3)
        assert rate(gid, "fp32", 256, "vector_clock_mhz") == pytest.approx(1, rel=1e-3)
    # CDNA 4: 256 CUs x 2400 MHz; FP16 4096, FP8 8192, MXFP4 16384
    assert rate("mi355x", "bf16", 4096) == pytest.approx(1, rel=1e-3)
    assert rate("mi355x", "fp8", 8192) == pytest.approx(1, rel=1e-3)
    assert rate("mi355x", "fp4", 16384) == pytest.approx(1, rel=1e-3)
    # GeForce Blackwell: 170 SMs x 2407 MHz; BF16 with FP32 accumulate 512, FP4 4096
    assert rate("rtx-5090", "bf16", 512) == pytest.approx(1, rel=1e-3)
    assert rate("rtx-5090", "fp4", 4096) == pytest.approx(1, rel=1e-3)
    assert rate("rtx-5090", "fp32", 256, "vector_clock_mhz") == pytest.approx(1, rel=1e-3)
    # Hopper NVL clocks: H200 NVL computes as the H100 NVL
    for dtype in ("fp32", "bf16", "fp8"):
        assert (
            gpus["h200-nvl"]["peak_flops_per_s"][dtype]
            == gpus["h100-nvl"]["peak_flops_per_s"][dtype]
        )
    # Blackwell data centre: the implied tensor clocks reproduce the dense peaks
    assert rate("b300", "fp8", 16384) == pytest.approx(1, rel=2e-3)
    assert rate("gb200", "bf16", 8192) == pytest.approx(1, rel=2e-3)


def test_new_gpus_store_dense_not_sparse(gpus):
    """No sparse figure stored as dense: each dense peak is half its datasheet's sparse figure."""
    sparse = {  # datasheet "with sparsity" figures (FLOP/s), per GPU
        ("h200-nvl", "fp8"): 3341e12,
        ("rtx-5090", "int8"): 1676e12,
        ("mi300x", "int8"): 5229.8e12,
        ("mi325x", "fp8"): 5229.8e12,
        ("b300", "fp8"): 72e15 / 8,
        ("gb200", "fp8"): 20e15 / 2,
    }
    for (gid, dtype), value in sparse.items():
        assert gpus[gid]["peak_flops_per_s"][dtype] == pytest.approx(value / 2, rel=2e-3), gid
    # ...and each row's notes say which sparse figures were halved
    for gid in ("h200-nvl", "rtx-5090", "b300", "gb200", "mi300x", "mi325x", "mi355x"):
        assert "spars" in " ".join(gpus[gid]["notes"]).lower(), gid  # sparse / sparsity


def test_amd_rows_say_no_device_backend_measures_them(gpus):
    for gid in AMD_IDS:
        g = gpus[gid]
        assert g["architecture"].startswith("cdna"), gid
        assert "no amd device backend" in g["notes"][0].lower(), gid
        assert g["interconnect"]["xgmi_bytes_per_s_per_direction"] == 448e9, gid
        assert g["nvlink_bytes_per_s"] is None, gid
    # what a prediction must refuse: dtypes the datasheets do not publish
    assert "tf32" not in gpus["mi355x"]["peak_flops_per_s"]
    assert "int8" not in gpus["b300"]["peak_flops_per_s"]


# ----------------------------------------------------------------------------- models


@pytest.fixture(scope="module")
def models() -> dict:
    return {p.stem: _load(p) for p in sorted(MODELS_DIR.glob("*.json"))}


def _head_dim(cfg: dict) -> int:
    return cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])


def _param_count(cfg: dict) -> int:
    """Parameters of a Llama checkpoint from its config: embeddings, layers, norm, lm_head."""
    h, inter, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = _head_dim(cfg)
    q = h * cfg["num_attention_heads"] * hd
    kv = 2 * h * cfg["num_key_value_heads"] * hd
    o = cfg["num_attention_heads"] * hd * h
    mlp = 3 * h * inter
    norms = 2 * h
    layer = q + kv + o + mlp + norms
    embed = vocab * h
    lm_head = 0 if cfg["tie_word_embeddings"] else vocab * h
    return embed + cfg["num_hidden_layers"] * layer + h + lm_head


def test_model_files_present(models):
    assert sorted(models) == sorted(
        MODEL_IDS + PUBLISHED_MODEL_IDS + FAMILY_MODEL_IDS + MOE_MODEL_IDS
    )


@pytest.mark.parametrize("mid", MODEL_IDS)
def test_model_config_shape(models, mid):
    cfg = models[mid]
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert cfg["model_type"] == "llama"
    assert cfg["_name_or_path"].startswith("meta-llama/Llama-3.")
    assert cfg["_name_or_path"].lower().endswith(mid.removeprefix("llama-"))
    for key in (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "vocab_size",
        "max_position_embeddings",
    ):
        assert isinstance(cfg[key], int) and cfg[key] > 0, key
    assert cfg["num_attention_heads"] % cfg["num_key_value_heads"] == 0
    assert cfg["vocab_size"] == 128256 and cfg["max_position_embeddings"] == 131072
    assert cfg["rope_theta"] == 500000.0 and cfg["rms_norm_eps"] == 1e-05
    assert cfg["hidden_act"] == "silu" and cfg["torch_dtype"] == "bfloat16"
    assert cfg["attention_bias"] is False and cfg["mlp_bias"] is False
    assert (cfg["bos_token_id"], cfg["eos_token_id"]) == (128000, 128001)
    rs = cfg["rope_scaling"]
    assert rs["rope_type"] == "llama3"
    assert (rs["low_freq_factor"], rs["high_freq_factor"]) == (1.0, 4.0)
    assert rs["original_max_position_embeddings"] == 8192
    assert rs["factor"] == (8.0 if mid.startswith("llama-3.1") else 32.0)
    assert cfg["tie_word_embeddings"] is mid.startswith("llama-3.2")


def test_llama_3_1_8b_parameter_count(models):
    cfg = models["llama-3.1-8b"]
    assert _param_count(cfg) == 8_030_261_248
    # 16.06 GB of bf16 weights and 131,072 KV-cache bytes per token (reference/models.md)
    assert _param_count(cfg) * 2 == pytest.approx(16.06e9, abs=0.01e9)
    assert 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * _head_dim(cfg) * 2 == 131072


def test_head_dims(models):
    assert "head_dim" not in models["llama-3.1-70b"]
    assert _head_dim(models["llama-3.1-70b"]) == 128
    assert models["llama-3.2-1b"]["head_dim"] == 64
    for mid in ("llama-3.1-8b", "llama-3.1-405b", "llama-3.2-3b"):
        assert models[mid]["head_dim"] == 128
    assert models["llama-3.1-405b"]["num_key_value_heads"] == 8


def test_llama_3_2_1b_ties_embeddings(models):
    cfg = models["llama-3.2-1b"]
    assert cfg["tie_word_embeddings"] is True
    untied = dict(cfg, tie_word_embeddings=False)
    assert _param_count(untied) - _param_count(cfg) == cfg["vocab_size"] * cfg["hidden_size"]
