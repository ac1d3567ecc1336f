"""Probes → a measured roofline: working-set sweeps, peak compute, best GEMM, intensity sweep.

:func:`measure_roofline` runs a device's probe catalogue (``device.probes()``, see
:class:`~roofprof.devices.base.Probe`) under a :class:`RooflinePlan` and returns a
:class:`RooflineResult`: the measured :class:`~roofprof.roofline.Roofline`, every raw
sweep point with its samples and telemetry, the plateaus the memory ceilings came from,
the comparison with the datasheet where the device matches one, and provenance.

How each ceiling is obtained (the method is device-agnostic; kernels come from the device):

* **Bandwidth per level** (``bandwidth`` probes, e.g. read-only and STREAM triad): the
  working set is swept from a few KiB to several times the last-level cache; each point's
  bandwidth is taken from its fastest call. Points are grouped into plateaus — by the
  device's cache sizes when known (level *i* spans ``[max(2·size[i-1], size[i]/8),
  size[i]/2]``, DRAM from ``8·LLC``), otherwise by segmentation — and each level's ceiling is
  the median of its plateau.
* **Peak compute per dtype** (``compute`` probes): FMAs with enough independent
  accumulators (SIMD lanes × elements) on L1-resident data.
* **Attainable GEMM** (``gemm`` probes): the best library GEMM rate over a few sizes.
* **Diagnostics** (``Probe.diagnostic``): compute probes whose rate is recorded (a detail of
  ``kind="diagnostic"``, labelled) but never becomes the dtype's ceiling, e.g. ``mma.sync``
  fp8/tf32/int8 on Hopper, below the native tensor path the library GEMMs reach.
* **Intensity sweep** (``intensity`` probes, mixbench-style): ``k`` FMAs per element
  loaded and stored, with a cache flush before each timed call; its curve traces the
  roofline from the memory slope to the compute roof. No ceiling is taken from it.

Every probe is checked against a numpy reference before it is timed. A probe that fails
(its check disagrees — :class:`ProbeCheckError` —, its kernel does not compile, or a CUDA
error) is skipped and recorded (``warnings``, its ``probes`` record under ``"failed"``,
``RooflineResult.failed_probes``); the run continues and fails with
:class:`RooflineFailed` (exit 2, naming what failed) only when no memory or no compute
ceiling remains. A sweep that would not fit in free memory is refused before anything is
allocated. Ctrl-C raises :class:`RooflineInterrupted` carrying the partial result (what
finished, ``complete=False``); ``should_stop``/``deadline_s`` stop the run between steps
and return the partial result the same way, without an exception.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from roofprof.devices.base import Device
from roofprof.errors import ConfigError
from roofprof.roofline.datasheet import spec_comparison
from roofprof.roofline.plan import PLANS, MiB, RooflinePlan, replace_plan
from roofprof.roofline.plateaus import DRAM_FACTOR, Plateau, find_plateaus, level_windows
from roofprof.roofline.result import (
    SCHEMA,
    RooflineFailed,
    RooflineInterrupted,
    RooflineResult,
    load_result,
)
from roofprof.roofline.runner import PROBE_FAILURES, ProbeCheckError, Progress, RooflineRunner

# The plan, the plateaus, the datasheet comparison, the result record and the measuring loop
# live in their own modules; this face re-exports them so `from roofprof.roofline.probes import
# RooflinePlan` keeps working.
# re-exports them so `from roofprof.roofline.probes import RooflinePlan` keeps working.
__all__ = [
    "DRAM_FACTOR",
    "PLANS",
    "PROBE_FAILURES",
    "SCHEMA",
    "Plateau",
    "ProbeCheckError",
    "Progress",
    "RooflineFailed",
    "RooflineInterrupted",
    "RooflinePlan",
    "RooflineResult",
    "find_plateaus",
    "level_windows",
    "load_result",
    "measure_roofline",
    "replace_plan",
    "spec_comparison",
]


def measure_roofline(
    device: Device,
    quick: bool = False,
    progress: Progress | None = None,
    *,
    plan: RooflinePlan | str | None = None,
    checkpoint: Callable[[RooflineResult], Any] | None = None,
    probes: Sequence[str] | None = None,
    should_stop: Callable[[], bool] | None = None,
    deadline_s: float | None = None,
) -> RooflineResult:
    """Measure the roofline of ``device``.

    Args:
        device: a :class:`~roofprof.devices.base.Device`.
        quick: use the ``quick`` plan (ignored when ``plan`` is given).
        progress: called as ``progress(done, total, label)`` after each step.
        plan: a :class:`RooflinePlan` or a plan name (``full``, ``quick``, ``test``).
        checkpoint: called with the partial result after each probe finishes (the CLI
            writes it, so an interrupted run keeps what finished).
        probes: names of catalogue probes to run (default: all).
        should_stop: polled after each step; when it returns True the run stops and the
            partial result is returned (``complete=False``, ``interrupted_during`` = the step).
        deadline_s: seconds from now after which the run stops the same way.

    Returns:
        The :class:`RooflineResult` (partial when stopped).

    Raises:
        ConfigError: the plan would not fit in free memory (checked before allocating).
        RooflineFailed: probes failed (wrong result, compile error, CUDA error) and no memory
            or no compute ceiling remains; names each failed probe. A probe that fails while
            others give its kind of ceiling is skipped and recorded instead.
        RooflineInterrupted: Ctrl-C; carries the partial result.

    Example (tiny plan)::

        from roofprof.devices import select
        r = measure_roofline(select("cpu"), plan="test")
        r.roofline.memory_bandwidth("dram")
    """
    info = device.info
    if plan is None:
        plan = "quick" if quick else "full"
    if isinstance(plan, str):
        plan = device.roofline_plan(plan)
    catalogue = tuple(device.probes())
    if probes is not None:
        unknown = sorted(set(probes) - {p.name for p in catalogue})
        if unknown:
            raise ConfigError(
                f"unknown probe(s) {', '.join(unknown)}; "
                f"valid: {', '.join(p.name for p in catalogue)}"
            )
        catalogue = tuple(p for p in catalogue if p.name in set(probes))
    catalogue = tuple(
        p for p in catalogue if p.kind != "intensity" or p.dtype in plan.intensity_dtypes
    )

    need = plan.memory_needed_bytes(info, catalogue)
    free = device.free_memory_bytes()
    total_need = sum(need.values())
    if total_need > 0.8 * free:
        parts = ", ".join(f"{k} {v / MiB:.0f} MiB" for k, v in need.items())
        raise ConfigError(
            f"the {plan.name} roofline plan needs {total_need / MiB:.0f} MiB ({parts}) but only "
            f"{free / MiB:.0f} MiB of {info.label} memory is free (at most 80% is used); "
            "free some memory or use --quick"
        )

    stops: list[Callable[[], bool]] = [should_stop] if should_stop is not None else []
    if deadline_s is not None:
        end = time.perf_counter() + float(deadline_s)
        stops.append(lambda: time.perf_counter() > end)
    run = RooflineRunner(
        device,
        plan,
        catalogue,
        progress,
        checkpoint,
        stop=(lambda: any(f() for f in stops)) if stops else None,
    )
    return run.execute()
