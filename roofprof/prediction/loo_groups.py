"""Leave-one-out residuals of the calibrated estimator summarised per group: engine × GPU
generation × phase, and a before/after comparison of two fits.

The residual of a case is predicted / published − 1. :func:`group_summary` takes the
predictions of :func:`roofprof.prediction.calibration.leave_one_out` (every fitted row
predicted by a fit without it; batched rows, never fitted, by the fit on the whole corpus)
and returns one record per group with its size and median / worst |residual|.

>>> from types import SimpleNamespace as C
>>> case = C(label="D01:decode", engine="gpt-fast", gpu="a100", phase="decode", published_s=1.0)
>>> rows = group_summary({"D01:decode": 1.1}, [case])
>>> rows[0].engine, rows[0].generation, rows[0].n, round(rows[0].median_abs, 2)
('gpt-fast', 'ampere', 1, 0.1)
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from roofprof.prediction.fraction_groups import generation_of

__all__ = ["GroupResidual", "compare_groups", "group_summary"]


@dataclass(frozen=True)
class GroupResidual:
    """One group's leave-one-out |residual|s (fractions, 0.1 = 10 %)."""

    engine: str
    generation: str
    phase: str
    n: int
    median_abs: float
    max_abs: float
    worst_case: str
    cases: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cases"] = list(self.cases)
        return d


def group_summary(predicted: Mapping[str, float], case_list: Iterable[Any]) -> list[GroupResidual]:
    """Per (engine, generation, phase) group of ``case_list`` (objects with ``label``,
    ``engine``, ``gpu``, ``phase``, ``published_s``), the |residual|s of ``predicted``
    (case label -> seconds). Cases without a prediction are left out. Sorted by group."""
    by: dict[tuple[str, str, str], list[tuple[str, float]]] = {}
    for c in case_list:
        if c.label not in predicted:
            continue
        key = (c.engine, generation_of(c.gpu), c.phase)
        by.setdefault(key, []).append((c.label, abs(predicted[c.label] / c.published_s - 1)))
    out = []
    for (engine, gen, phase), members in sorted(by.items()):
        vals = [v for _, v in members]
        worst = max(members, key=lambda m: m[1])[0]
        out.append(
            GroupResidual(
                engine,
                gen,
                phase,
                len(vals),
                statistics.median(vals),
                max(vals),
                worst,
                tuple(label for label, _ in members),
            )
        )
    return out


def compare_groups(
    before: Sequence[GroupResidual], after: Sequence[GroupResidual]
) -> list[dict[str, Any]]:
    """One record per group present in either: ``n``, ``median_before``, ``max_before``,
    ``median_after``, ``max_after`` (None where a fit has no prediction for the group)."""
    b = {(g.engine, g.generation, g.phase): g for g in before}
    a = {(g.engine, g.generation, g.phase): g for g in after}
    out = []
    for key in sorted(set(b) | set(a)):
        gb, ga = b.get(key), a.get(key)
        some = ga or gb
        out.append(
            {
                "engine": key[0],
                "generation": key[1],
                "phase": key[2],
                "n": some.n if some else 0,
                "median_before": gb.median_abs if gb else None,
                "max_before": gb.max_abs if gb else None,
                "worst_before": gb.worst_case if gb else None,
                "median_after": ga.median_abs if ga else None,
                "max_after": ga.max_abs if ga else None,
                "worst_after": ga.worst_case if ga else None,
            }
        )
    return out
