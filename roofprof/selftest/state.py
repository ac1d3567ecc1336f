"""The running state of ``roofprof selftest``: the results being built, section records, writing."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roofprof.selftest.markdown import markdown_report
from roofprof.selftest.plan import BenchCase
from roofprof.selftest.targets import clock_scaled, evaluate_targets

__all__ = ["Progress", "RunState", "SectionResult", "SectionTimeout", "write_results"]

Progress = Callable[[str], Any]
"""Called with one-line status messages."""


class SectionTimeout(Exception):
    """Raised to stop a section at its deadline (caught by the section, never escapes).

    A plain exception: the roofline section stops :func:`roofprof.roofline.probes.measure_roofline`
    with its ``deadline_s`` argument (the partial result comes back, ``complete=False``), so
    no fake Ctrl-C is needed.
    """


@dataclass(frozen=True)
class SectionResult:
    """How one section ended: ``status`` (ok, timeout, error, skipped, ...), seconds, a note."""

    status: str
    elapsed_s: float
    note: str

    def to_dict(self) -> dict[str, Any]:
        """The ``selftest.json`` form: ``{"status", "elapsed_s", "note"}``."""
        return {"status": self.status, "elapsed_s": self.elapsed_s, "note": self.note}


@dataclass
class RunState:
    """What one run is building: the results dict (``selftest.json``), clock and options."""

    out: Path
    budget_s: float
    quick: bool
    progress: Progress
    roofline_plan: Any = None
    bench_cases: Sequence[BenchCase] | None = None
    t0: float = field(default_factory=time.perf_counter)
    results: dict[str, Any] = field(default_factory=dict)

    def elapsed(self) -> float:
        """Seconds since the run started."""
        return time.perf_counter() - self.t0


def write_results(st: RunState, complete: bool) -> None:
    """Write ``selftest.json`` and ``selftest.md`` whole, targets re-evaluated from the results."""
    from roofprof.results import provenance, write_json_atomic, write_text_atomic

    res = st.results
    res["complete"] = complete
    res["elapsed_s"] = st.elapsed()
    res["targets"] = [t.to_dict() for t in evaluate_targets(res)]
    res["clock_scaled"] = clock_scaled(
        (res.get("roofline") or {}).get("ceilings") or [], res.get("spec")
    )
    res["provenance"] = provenance(
        device=res.get("device"),
        gpu=res.get("gpu", {}).get("facts"),
        budget_s=st.budget_s,
        quick=st.quick,
    )
    write_json_atomic(st.out / "selftest.json", res)
    write_text_atomic(st.out / "selftest.md", markdown_report(res))
