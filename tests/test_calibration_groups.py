"""The calibrated fractions per GPU generation and tensor path: bounds, the prior towards the
engine's fraction, leave-one-out that never sees its row, and the per-group report."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from roofprof.prediction import calibration, fraction_groups
from roofprof.prediction.calibration import (
    SINGLE_FRACTION,
    calibrated_estimator,
    fit_profiles,
    leave_one_out,
)
from roofprof.prediction.fraction_groups import (
    compute_group,
    generation_of,
    shared_tensor_path,
    shrunk_fraction,
)
from roofprof.prediction.loo_groups import compare_groups, group_summary
from roofprof.published import cases
from roofprof.published.cases import base_roofline

GRID = np.round(np.arange(0.05, 1.0 + 1e-9, 0.0025), 4)


def _sq(target: float, rows: int = 1) -> np.ndarray:
    """Squared relative residuals of ``rows`` compute-bound rows that want fraction ``target``."""
    return rows * (target / GRID - 1) ** 2


def test_group_fraction_is_bounded_to_the_grid():
    assert shrunk_fraction(GRID, _sq(1.6, rows=50), pool=0.9) == 1.0  # never above 1
    assert shrunk_fraction(GRID, _sq(0.01, rows=50), pool=0.1) == 0.05  # never at or below 0
    assert shrunk_fraction(GRID, np.zeros_like(GRID), pool=0.6125) == 0.6125  # no data: the pool


def test_one_row_is_shrunk_towards_the_pool_many_rows_are_not():
    one = shrunk_fraction(GRID, _sq(0.3), pool=0.6)
    many = shrunk_fraction(GRID, _sq(0.3, rows=40), pool=0.6)
    assert 0.3 < one < 0.6 and 0.3 <= many < one
    assert abs(many - 0.3) < 0.02 < abs(one - 0.3)


def _planted(preps, label: str, factor: float, copies: int):
    """The corpus plus ``copies`` of row ``label`` with its figure scaled by ``factor`` (new
    row ids, so each is one more row of the same group)."""
    src = next(p for p in preps if p.label == label)
    extra = [
        dataclasses.replace(
            src, row=f"X{i}", label=f"X{i}:decode", published_s=src.published_s * factor
        )
        for i in range(copies)
    ]
    return [p for p in preps if p.label != label] + extra


def test_a_planted_small_group_is_shrunk_towards_the_engine_fraction(monkeypatch):
    preps = calibration._prepared_corpus()
    # D28 is llama.cpp's only Hopper decode row: plant it twice as slow (a low fraction)
    small = _planted(preps, "D28:decode", 2.0, copies=1)
    large = _planted(preps, "D28:decode", 2.0, copies=12)
    shrunk = fit_profiles(small)["llama.cpp"]
    crowd = fit_profiles(large)["llama.cpp"]
    monkeypatch.setattr(fraction_groups, "PRIOR_SCALE", 1e6)  # no prior: the row alone
    free = fit_profiles(small)["llama.cpp"]
    pool, g = shrunk.memory_fraction, "hopper"
    assert free.memory_fractions[g] < shrunk.memory_fractions[g] < pool
    assert crowd.memory_fractions[g] < shrunk.memory_fractions[g]  # more rows, less shrinkage
    for prof in (shrunk, crowd, free):
        for v in (*prof.memory_fractions.values(), *prof.compute_fractions.values()):
            assert 0.05 <= v <= 1.0


def test_leave_one_out_never_sees_its_own_row(monkeypatch):
    cs, _ = cases()
    target = next(c for c in cs if c.label == "D22:prefill")
    moved = [
        dataclasses.replace(c, published_s=c.published_s * 3) if c.row.id == "D22" else c
        for c in cs
    ]
    seen: list[tuple[str | None, dict]] = []
    real_fit = calibration.fit_profiles

    def spy(preps=None, *, exclude_row=None, options=None):
        out = real_fit(preps, exclude_row=exclude_row, options=options or calibration.FitOptions())
        seen.append((exclude_row, out))
        return out

    monkeypatch.setattr(calibration, "fit_profiles", spy)
    before, after = leave_one_out(cs), leave_one_out(moved)
    # the row's own figure, tripled, does not move its own leave-one-out prediction
    assert after[target.label] == pytest.approx(before[target.label], rel=1e-12)
    fitted_rows = {c.row.id for c in cs if c.phase != "batched"}
    assert {r for r, _ in seen if r is not None} == fitted_rows
    for row, profiles in seen:
        if row is None:
            continue
        for prof in profiles.values():
            labels = [x for v in (*prof.rows.values(), *prof.group_rows.values()) for x in v]
            assert not any(x.startswith(f"{row}:") for x in labels), (row, prof.engine)
    # the in-sample fit does see it
    monkeypatch.undo()
    full = fit_profiles(tuple(calibration._prepare(c) for c in moved))
    ref = fit_profiles(tuple(calibration._prepare(c) for c in cs))
    assert full["llama.cpp"] != ref["llama.cpp"]


def test_per_group_report_shape():
    cs, _ = cases()
    before, after = leave_one_out(options=SINGLE_FRACTION), leave_one_out()
    gb, ga = group_summary(before, cs), group_summary(after, cs)
    assert sum(g.n for g in ga) == len(cs) == sum(g.n for g in gb)
    labels = [x for g in ga for x in g.cases]
    assert sorted(labels) == sorted(c.label for c in cs)  # every case in exactly one group
    rows = compare_groups(gb, ga)
    assert len(rows) == len(ga) == len(gb)
    for r in rows:
        assert set(r) == {
            "engine",
            "generation",
            "phase",
            "n",
            "median_before",
            "max_before",
            "worst_before",
            "median_after",
            "max_after",
            "worst_after",
        }
        assert (
            0 <= r["median_after"] <= r["max_after"] and 0 <= r["median_before"] <= r["max_before"]
        )
    keys = {(r["engine"], r["generation"], r["phase"]) for r in rows}
    assert ("trt-llm", "hopper", "prefill") in keys and ("llama.cpp", "ampere", "decode") in keys


def test_groups_and_tensor_path():
    assert generation_of("a100-pcie-80gb") == "ampere" and generation_of("no-such-gpu") == "unknown"
    assert compute_group("h100-sxm", "fp8") == "hopper/tensor-fp8"
    shared, _ = base_roofline("a100-pcie-80gb")
    own, _ = base_roofline("a100-pcie-80gb", shared_path=False)
    assert own.compute_ceiling("fp16").source == "spec"  # the datasheet's 312 TFLOP/s
    assert shared.compute_peak("fp16") == shared.compute_peak("bf16") == own.compute_peak("bf16")
    assert "same tensor path" in shared.compute_ceiling("fp16").name
    a100 = base_roofline("a100-sxm-80gb", shared_path=False)[0]  # both measured: both kept
    assert shared_tensor_path(a100).compute_peak("fp16") == a100.compute_peak("fp16")


def test_the_estimator_uses_the_gpus_group():
    profiles = fit_profiles()
    cpp = profiles["llama.cpp"]
    est = calibrated_estimator("a100-pcie-80gb", engine="llama.cpp")
    assert est.fractions("fp16") == (
        cpp.memory_fractions["ampere"],
        cpp.compute_fractions["ampere/tensor-16"],
    )
    assert est.describe()["gpu_generation"] == "ampere"
    b200 = calibrated_estimator("b200", engine="llama.cpp")  # no llama.cpp rows on Blackwell
    assert b200.fractions("fp16") == (cpp.memory_fraction, cpp.compute_fraction)


def test_prefill_cost_per_kernel_for_graph_engines():
    trt = fit_profiles()["trt-llm"]
    assert trt.prefill_launch_s > 0 and trt.prefill_step_s == 0
    assert fit_profiles(options=SINGLE_FRACTION)["trt-llm"].prefill_launch_s == 0
    cs, _ = cases()
    before, after = leave_one_out(options=SINGLE_FRACTION), leave_one_out()
    for label in ("P03:prefill", "P09:prefill"):  # TP-4 70B prefill: 80 layers, never fitted
        c = next(c for c in cs if c.label == label)
        assert abs(after[label] / c.published_s - 1) < abs(before[label] / c.published_s - 1)
