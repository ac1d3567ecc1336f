"""The published-measurement corpus (data/published/) loads, cites its sources and builds
rooflines."""

from __future__ import annotations

import json

import pytest

from roofprof import published
from roofprof._resources import data_root
from roofprof.errors import ConfigError
from roofprof.specs import list_models, load_gpu, load_model

PUBLISHED_MODELS = [
    "llama-2-7b",
    "llama-2-13b",
    "llama-2-70b",
    "llama-3-8b",
    "llama-3-70b",
    "llama-3.3-70b",
]


def test_every_row_loads_and_names_its_source():
    rows = published.load_end_to_end()
    sources = published.published_sources()
    assert len(rows) >= 50
    assert len({r.id for r in rows}) == len(rows)
    for r in rows:
        assert r.source in sources and r.quote, r.id
        s = sources[r.source]
        assert ("repo" in s and "commit" in s and "path" in s) or "url" in s
        assert r.cite().startswith(f"{r.id} · {r.source}")
        for f in r.figures:
            assert f["derived"] in (True, False)
            if f["derived"]:
                assert f.get("derived_from"), (r.id, f)
    for c in published.load_microbenchmarks():
        assert c.source in sources and c.quote, c.id


def test_modelled_rows_name_known_models_and_gpus():
    rows = [r for r in published.load_end_to_end() if r.skip is None]
    assert len(rows) >= 20
    for r in rows:
        assert r.model_id in list_models(), r.id
        load_gpu(r.gpu_id)
        assert r.tp == 1 or r.tp == r.gpu_count  # tensor-parallel rows: one replica over the GPUs


def test_skipped_rows_say_why():
    skipped = {r.id: r.skip for r in published.load_end_to_end() if r.skip}
    assert "GPT-J" in skipped["D09"]
    assert "D11" not in skipped  # tensor parallelism is modelled
    assert "D14" not in skipped  # the qwen2 family is modelled
    assert "OpenOrca" in skipped["B14"]


def test_derived_values_are_marked():
    d01 = next(r for r in published.load_end_to_end() if r.id == "D01")
    assert not d01.is_derived("tokens_per_s_per_user") and d01.is_derived("tpot_s")
    assert d01.figure("tpot_s") == pytest.approx(1 / 104.9)


@pytest.mark.parametrize("mid", PUBLISHED_MODELS)
def test_published_model_configs(mid):
    cfg = json.loads((data_root() / "models" / f"{mid}.json").read_text())
    assert cfg["_roofprof_source"].startswith("https://huggingface.co/meta-llama/")
    m = load_model(mid)
    assert m.num_heads % m.num_kv_heads == 0


@pytest.mark.parametrize(
    "mid, params",
    [
        ("llama-2-7b", 6_738_415_616),
        ("llama-2-13b", 13_015_864_320),
        ("llama-2-70b", 68_976_648_192),
        ("llama-3-8b", 8_030_261_248),
        ("llama-3-70b", 70_553_706_496),
        ("llama-3.3-70b", 70_553_706_496),
    ],
)
def test_parameter_counts(mid, params):
    # the parameter counts the checkpoints report; llama-2-7b x 2 bytes = 13.48 GB, as gpt-fast's
    # 1397.31 GB/s / 104.9 tok/s implies (S5)
    assert load_model(mid).param_count() == params


def test_published_roofline_cites_rows():
    roof = published.published_roofline("h100-sxm")
    mem = roof.memory_ceiling()
    assert mem.value == 2.97e12 and "T1-02" in mem.note and mem.source == "measured"
    assert roof.compute_ceiling("bf16").value == pytest.approx(794.5e12)
    assert roof.compute_ceiling("fp8").value == pytest.approx(1402.6e12)
    assert roof.compute_ceiling("fp32").source == "spec"  # no published fp32: datasheet, noted


def test_published_roofline_unknown_gpu_names_the_ones_that_have_them():
    with pytest.raises(ConfigError, match="h100-sxm"):
        published.published_roofline("v100")


def test_missing_field_names_file_and_row(tmp_path):
    src = data_root() / "published"
    for name in ("end_to_end.json", "microbenchmarks.json"):
        (tmp_path / name).write_text((src / name).read_text())
    data = json.loads((tmp_path / "end_to_end.json").read_text())
    del data["rows"][3]["engine"]
    (tmp_path / "end_to_end.json").write_text(json.dumps(data))
    with pytest.raises(
        ConfigError, match=r"end_to_end.json: row D03-tp4 misses required field\(s\) engine"
    ):
        published.load_end_to_end(str(tmp_path))
