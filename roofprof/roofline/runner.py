"""The measuring loop of a roofline: each probe of the catalogue checked, timed, turned into
ceilings.

A :class:`RooflineRunner` runs one :func:`~roofprof.roofline.probes.measure_roofline` call: compute
and GEMM probes first, then the bandwidth sweeps (their plateaus give the memory ceilings)
and the intensity sweeps; a probe that fails (:data:`PROBE_FAILURES`) is skipped and
recorded, and the partial :class:`~roofprof.roofline.result.RooflineResult` can be built
after any step.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from roofprof.devices.base import Device, DeviceInfo, Probe, ProbeRun
from roofprof.errors import RoofprofError
from roofprof.roofline import Ceiling, Roofline
from roofprof.roofline.datasheet import spec_comparison
from roofprof.roofline.plan import RooflinePlan
from roofprof.roofline.plateaus import Plateau, dram_resident, find_plateaus
from roofprof.roofline.plausibility import (
    RETRIES,
    MemoryReference,
    Reference,
    fragmentation_flags,
    judge,
    level_order_flags,
    replacement_note,
)
from roofprof.roofline.result import RooflineFailed, RooflineInterrupted, RooflineResult
from roofprof.roofline.timer import ProbeTimer
from roofprof.telemetry import Contention, loadavg
from roofprof.timing import Timing
from roofprof.units import fmt_bytes

__all__ = ["PROBE_FAILURES", "ProbeCheckError", "Progress", "RooflineRunner"]

_LEVEL_LABEL = {"l1": "L1", "l2": "L2", "l3": "L3", "dram": "DRAM", "smem": "shared memory"}

Progress = Callable[[int, int, str], Any]


class ProbeCheckError(RoofprofError):
    """A probe kernel disagreed with its reference: nothing it would measure can be trusted."""


#: Errors that skip one probe instead of aborting the run: any ``Exception`` (a failed
#: check, a kernel that does not compile, a refused buffer, a device's kernel error, and a
#: library that answers in a shape the probe did not expect, e.g. torch 2.4's tuple from
#: ``_scaled_mm``); the probe is recorded in ``failed_probes`` with its type and message.
#: KeyboardInterrupt and SystemExit still end the run.
PROBE_FAILURES: tuple[type[BaseException], ...] = (Exception,)


class _Stop(Exception):
    """Internal: ``should_stop``/``deadline_s`` asked the run to stop after a step."""


class RooflineRunner:
    """State of one :func:`~roofprof.roofline.probes.measure_roofline` call: runs the probe
    catalogue
    under a plan and builds the (partial, at any time) :class:`RooflineResult`."""

    def __init__(
        self,
        device: Device,
        plan: RooflinePlan,
        catalogue: tuple[Probe, ...],
        progress: Progress | None,
        checkpoint: Callable[[RooflineResult], Any] | None,
        stop: Callable[[], bool] | None = None,
    ):
        self.device, self.plan, self.catalogue = device, plan, catalogue
        self.progress, self.checkpoint, self.stop = progress, checkpoint, stop
        self.failed: list[dict[str, Any]] = []
        self.warnings: list[str] = []
        self.timer = ProbeTimer(device.clock(), device.sampler(), plan, self.warnings)
        self.ceilings: list[Ceiling] = []
        self.details: list[dict[str, Any]] = []
        self._reference: Reference | None = None  # the best DRAM reference of this run
        self.sweeps: dict[str, Any] = {"bandwidth": {}, "intensity": {}}
        self.plateaus: dict[str, Any] = {}
        self.probe_records: list[dict[str, Any]] = []
        self.done = 0
        self.total = self._count_steps()
        self.t0 = time.perf_counter()
        self.load_at_start = loadavg()
        self.contention = Contention().start()

    def _count_steps(self) -> int:
        n = 0
        for p in self.catalogue:
            if p.kind == "bandwidth":
                n += 1 if p.level else len(self.plan.working_set_sizes)
            elif p.kind == "compute":
                n += 1
            elif p.kind == "gemm":
                n += len(self.plan.gemm_sizes)
            elif p.kind == "intensity":
                n += len(self.plan.fmas_per_element(p.dtype or "fp32"))
        return n

    def _step(self, label: str) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total, label)
        if self.stop is not None and self.stop():
            raise _Stop(label)

    # -- driver ------------------------------------------------------------------------
    def execute(self) -> RooflineResult:
        current = "start"
        try:
            order = {"compute": 0, "gemm": 1, "bandwidth": 2, "intensity": 3}
            for probe in sorted(self.catalogue, key=lambda p: order.get(p.kind, 9)):
                current = probe.name
                if self.stop is not None and self.stop():
                    raise _Stop(probe.name)
                if self.progress is not None:
                    self.progress(self.done, self.total, f"{probe.name}: checking")
                try:
                    getattr(self, f"_run_{probe.kind}")(probe)
                except _Stop:
                    raise
                except PROBE_FAILURES as exc:
                    self._skip(probe, exc)
                if self.checkpoint is not None:
                    self.checkpoint(self._result(complete=False, during=None))
        except _Stop:
            return self._result(complete=False, during=current)
        except KeyboardInterrupt as exc:
            raise RooflineInterrupted(
                self._result(complete=False, during=current), current
            ) from exc
        self._require_ceilings()
        return self._result(complete=True, during=None)

    def _skip(self, probe: Probe, exc: BaseException) -> None:
        """Record a probe that failed and drop whatever it left half-done."""
        message = str(exc).strip() or type(exc).__name__
        self.failed.append(
            {"probe": probe.name, "kind": probe.kind, "type": type(exc).__name__, "error": message}
        )
        self.warnings.append(f"probe {probe.name!r} skipped: {type(exc).__name__}: {message}")
        for group in ("bandwidth", "intensity", "gemm"):
            self.sweeps.get(group, {}).pop(probe.name, None)
        self.plateaus.pop(probe.name, None)
        records = [r for r in self.probe_records if r.get("name") == probe.name]
        if records:
            records[-1]["failed"] = message
        else:
            self.probe_records.append({**probe.describe(), "failed": message})

    def _require_ceilings(self) -> None:
        """Fail when failures left no memory or no compute ceiling that the catalogue could give."""
        if not self.failed:
            return
        missing = []
        if any(p.kind == "bandwidth" for p in self.catalogue) and not any(
            c.kind == "memory" for c in self.ceilings
        ):
            missing.append("memory")
        if any(
            p.kind in ("compute", "gemm") and not p.diagnostic for p in self.catalogue
        ) and not any(c.kind == "compute" for c in self.ceilings):
            missing.append("compute")
        if missing:
            failed = "; ".join(f"{f['probe']} ({f['type']}: {f['error']})" for f in self.failed)
            raise RooflineFailed(
                f"no {' and no '.join(missing)} ceiling could be measured on "
                f"{self.device.info.label}: the probe(s) failed: {failed}",
                self._result(complete=False, during=None),
            )

    def _checked(self, probe: Probe, run: ProbeRun, where: str) -> dict[str, Any]:
        res = run.check()
        record = {**probe.describe(), "check": res.to_dict(), "checked_at": where}
        self.probe_records.append(record)
        if not res.ok:
            raise ProbeCheckError(
                f"probe {probe.name!r} failed its correctness check at {where}: relative error "
                f"{res.max_rel_error:.3g} > tolerance {res.tolerance:.3g} ({res.note}); "
                "not timing it"
            )
        return record

    # -- probe kinds -------------------------------------------------------------------
    def _run_bandwidth(self, probe: Probe) -> None:
        sizes = (
            self.plan.working_set_sizes
            if probe.level is None
            else (self.plan.working_set_sizes[-1],)
        )
        points: list[dict[str, Any]] = []
        self.sweeps["bandwidth"][probe.name] = points
        previous: tuple[int, int] | None = None  # (reps, working set) of the last size
        if (
            len(sizes) > 1
        ):  # buffers the sizes share are allocated (and first-touched) once, at the largest
            probe.setup(working_set_bytes=int(sizes[-1])).release()
        for i, ws in enumerate(sizes):
            point, previous = self._measure_point(probe, int(ws), previous, check=i == 0)
            points.append(point)
            self._step(f"{probe.name} {_fmt_bytes(point['working_set_bytes'])}")
        self._bandwidth_ceilings(probe, points)
        if probe.level is None:
            self._plausible(probe, points)

    def _measure_point(
        self, probe: Probe, ws: int, previous: tuple[int, int] | None, *, check: bool = False
    ) -> tuple[dict[str, Any], tuple[int, int]]:
        """One working set of a bandwidth sweep: set up, (checked), timed, released."""
        run = probe.setup(working_set_bytes=ws)
        if check:
            self._checked(probe, run, f"working set {run.working_set_bytes} B")
        llc = self.device.info.last_level_cache_bytes
        on_dram = dram_resident(run.working_set_bytes, llc)
        target = self.plan.target_call_s
        target = max(target, self.plan.dram_call_s) if on_dram else target
        reps = self.timer.recalibrate(run, target, previous)
        budget = self.plan.point_budget_s
        budget = max(budget, self.plan.dram_point_budget_s) if on_dram else budget
        timing, tele = self.timer.time(lambda run=run, reps=reps: run.run(reps), budget_s=budget)
        nbytes = run.bytes_per_rep * reps
        point = {
            "working_set_bytes": run.working_set_bytes,
            "reps": reps,
            "bytes_per_call": nbytes,
            "flops_per_call": run.flops_per_rep * reps,
            "best_bytes_per_s": nbytes / timing.min_s,
            "median_bytes_per_s": nbytes / timing.median_s,
            "cv": timing.cv,
            "noisy": timing.noisy,
            "clock_mhz": tele.get("sm_clock_mhz_median") or tele.get("cpu_clock_mhz_median"),
            "params": run.params,
            "timing": timing.to_dict(),
            "telemetry": _short_telemetry(tele),
        }
        run.release()
        return point, (reps, run.working_set_bytes)

    def _memory_reference(self, *, fresh: bool = False) -> Reference | None:
        """The same-run reference of the DRAM ceilings, else the datasheet. A measured one is
        measured again when asked ``fresh`` (at each re-judgement) and the best kept: the
        host's bandwidth moves, and a reference read in a slow moment must not condemn a
        ceiling read in a fast one."""
        if self._reference is not None and not fresh:
            return self._reference
        ref = self.device.memory_reference() if isinstance(self.device, MemoryReference) else None
        spec_id = self.device.info.spec_id
        if ref is None and spec_id:
            from roofprof.specs import load_gpu

            bw = load_gpu(spec_id).memory_bytes_per_s
            ref = Reference(bw, "the datasheet", f"data/gpus.json:{spec_id}")
        best = self._reference
        if ref is not None and (best is None or ref.bytes_per_s > best.bytes_per_s):
            self._reference = ref
        return self._reference

    def _plausible(self, probe: Probe, points: list[dict[str, Any]]) -> None:
        """The plausibility rule (:mod:`roofprof.roofline.plausibility`) on one sweep: levels
        against the faster ones, DRAM against the reference (re-measured, else replaced)."""
        mine = [d for d in self.details if d.get("probe") == probe.name]
        self.warnings.extend(level_order_flags({d["level"]: d["value"] for d in mine}, probe.name))
        self.warnings.extend(w for w in fragmentation_flags(points) if w not in self.warnings)
        dram = next((d for d in mine if d["level"] == "dram"), None)
        ref = self._memory_reference() if dram is not None else None
        if dram is None or ref is None:
            return
        first, tries = dram["value"], []
        first_ratio = judge(first, ref).ratio
        while not judge(dram["value"], ref).ok and len(tries) < RETRIES:
            ref = self._memory_reference(fresh=True) or ref
            for k, p in enumerate(points):
                if p.get("level") == "dram":
                    points[k], _ = self._measure_point(probe, p["working_set_bytes"], None)
            self.ceilings = [c for c in self.ceilings if c.name not in {d["name"] for d in mine}]
            self.details = [d for d in self.details if d.get("probe") != probe.name]
            self._bandwidth_ceilings(probe, points)
            mine = [d for d in self.details if d.get("probe") == probe.name]
            dram = next(d for d in mine if d["level"] == "dram")
            tries.append(dram["value"])
        ref = (self._memory_reference(fresh=True) or ref) if tries else ref
        verdict = judge(dram["value"], ref)
        dram["reference"] = {
            "name": ref.name,
            "source": ref.source,
            "bytes_per_s": ref.bytes_per_s,
            "ratio": verdict.ratio,
            "remeasured": len(tries),
            "first_value": first,
            "physical_locality": ref.physical_locality,
        }
        if verdict.ok:
            if tries:
                self.warnings.append(
                    f"DRAM {probe.name} first read {first_ratio:.2f}× {ref.name} "
                    f"({ref.source}); re-measured: {verdict.ratio:.2f}×"
                )
            return
        self.warnings.append(replacement_note(dram["name"], first, ref, tries))
        at = next(i for i, c in enumerate(self.ceilings) if c.name == dram["name"])
        self.ceilings[at] = dataclasses.replace(
            self.ceilings[at], value=ref.bytes_per_s, source="reference"
        )
        dram.update(measured_value=dram["value"], value=ref.bytes_per_s, source="reference")

    def _bandwidth_ceilings(self, probe: Probe, points: list[dict[str, Any]]) -> None:
        info = self.device.info
        if probe.level is not None:
            p = points[0]
            plats = [
                Plateau(
                    probe.level,
                    p["best_bytes_per_s"],
                    p["working_set_bytes"],
                    p["working_set_bytes"],
                    1,
                    0.0,
                    "fixed level",
                )
            ]
        else:
            plats = find_plateaus(
                [p["working_set_bytes"] for p in points],
                [p["best_bytes_per_s"] for p in points],
                info.cache_bytes or None,
            )
        self.plateaus[probe.name] = [pl.to_dict() for pl in plats]
        found = {pl.level for pl in plats}
        if probe.level is None and "dram" not in found:
            self.warnings.append(
                f"{probe.name}: no DRAM plateau (largest working set "
                f"{_fmt_bytes(max(p['working_set_bytes'] for p in points))} too small?)"
            )
        for pl in plats:
            used = [p for p in points if pl.min_bytes <= p["working_set_bytes"] <= pl.max_bytes]
            for p in used:
                p["level"] = pl.level
            clocks = [p["clock_mhz"] for p in used if p.get("clock_mhz")]
            clock = float(statistics.median(clocks)) if clocks else None
            noisy = any(p["noisy"] for p in used)
            name = f"{_LEVEL_LABEL.get(pl.level, pl.level)} {probe.name}"
            # DRAM: every point of its plateau is served by DRAM, so the fastest one is the
            # rate the memory system reaches (STREAM's and BabelStream's convention; the
            # plausibility rule re-measures one above the reference kernel). A cache level's
            # edge points mix in its neighbours: the median.
            value, how = (
                (pl.best or pl.value, "best") if pl.level == "dram" else (pl.value, "median")
            )
            note = (
                f"{how} of {pl.points} working sets "
                f"{_fmt_bytes(pl.min_bytes)}–{_fmt_bytes(pl.max_bytes)} "
                f"(best of each); {probe.accounting}"
            )
            self.ceilings.append(
                Ceiling(
                    name=name,
                    kind="memory",
                    value=value,
                    level=pl.level,
                    source="measured",
                    clock_mhz=clock,
                    note=note,
                )
            )
            self.details.append(
                {
                    "name": name,
                    "probe": probe.name,
                    "probe_kind": probe.kind,
                    "kind": "memory",
                    "level": pl.level,
                    "dtype": None,
                    "value": value,
                    "plateau_median": pl.value,
                    "unit": "bytes/s",
                    "clock_mhz": clock,
                    "source": "measured",
                    "points": pl.points,
                    "spread": pl.spread,
                    "noisy": noisy,
                    "median_value": _median_or_none([p["median_bytes_per_s"] for p in used]),
                    "method": pl.method,
                    "note": note,
                }
            )

    def _run_compute(self, probe: Probe) -> None:
        run = probe.setup()
        self._checked(probe, run, "L1-resident block")
        reps = self.timer.calibrate(run, self.plan.compute_call_s)
        timing, tele = self.timer.time(lambda: run.run(reps), budget_s=self.plan.compute_budget_s)
        flops = run.flops_per_rep * reps
        self._compute_ceiling(
            probe,
            flops / timing.min_s,
            flops / timing.median_s,
            timing,
            tele,
            f"{probe.accounting}; best of {timing.n} calls",
            {"reps": reps, **run.params},
        )
        run.release()
        self._step(probe.name)

    def _run_gemm(self, probe: Probe) -> None:
        best: tuple[float, float, Timing, dict[str, Any], int] | None = None
        tried = []
        for i, n in enumerate(self.plan.gemm_sizes):
            run = probe.setup(size=int(n))
            if i == 0:
                self._checked(probe, run, f"n={n}")
            timing, tele = self.timer.time(
                lambda run=run: run.run(1),
                budget_s=self.plan.gemm_budget_s,
                min_repeats=min(self.plan.min_repeats, 3),
                estimate_runs=1,
            )
            rate = run.flops_per_rep / timing.min_s
            tried.append(
                {
                    "n": n,
                    "best_flops_per_s": rate,
                    "median_flops_per_s": run.flops_per_rep / timing.median_s,
                    "timing": timing.to_dict(),
                }
            )
            if best is None or rate > best[0]:
                best = (rate, run.flops_per_rep / timing.median_s, timing, tele, n)
            run.release()
            self._step(f"{probe.name} n={n}")
        if best is None:
            return
        rate, med, timing, tele, n = best
        self.sweeps.setdefault("gemm", {})[probe.name] = tried
        self._compute_ceiling(
            probe,
            rate,
            med,
            timing,
            tele,
            f"best over n = {list(self.plan.gemm_sizes)} "
            f"(n={n}); {probe.accounting}; {probe.note}".rstrip("; "),
            {"n": n},
        )

    def _compute_ceiling(
        self,
        probe: Probe,
        rate: float,
        median_rate: float,
        timing: Timing,
        tele: dict[str, Any],
        note: str,
        params: dict[str, Any],
    ) -> None:
        clock = tele.get("sm_clock_mhz_median") or tele.get("cpu_clock_mhz_median")
        # GEMM (library), tensor-core mma.sync throughput, or CUDA-core/SIMD FMA chains
        kind_label = (
            "GEMM"
            if probe.kind == "gemm"
            else ("tensor mma.sync" if "mma" in probe.name else "FMA")
        )
        name = f"{probe.dtype} {kind_label} ({probe.name})"
        kind = "compute"
        if probe.diagnostic:
            # kept, labelled, but never the dtype's ceiling (not in the Roofline)
            name, kind = f"{name}: diagnostic, not the {probe.dtype} ceiling", "diagnostic"
            note = f"{note}; {probe.note}".rstrip("; ")
        else:
            self.ceilings.append(
                Ceiling(
                    name=name,
                    kind="compute",
                    value=rate,
                    dtype=probe.dtype,
                    source="measured",
                    clock_mhz=clock,
                    note=note,
                )
            )
        self.details.append(
            {
                "name": name,
                "probe": probe.name,
                "probe_kind": probe.kind,
                "kind": kind,
                "level": None,
                "dtype": probe.dtype,
                "value": rate,
                "unit": "FLOP/s",
                "clock_mhz": clock,
                "source": "measured",
                "median_value": median_rate,
                "cv": timing.cv,
                "noisy": timing.noisy,
                "params": params,
                "timing": timing.to_dict(),
                "telemetry": _short_telemetry(tele),
                "note": note,
            }
        )

    def _run_intensity(self, probe: Probe) -> None:
        dtype = probe.dtype or "fp32"
        pairs = self.plan.fmas_per_element(dtype)
        points: list[dict[str, Any]] = []
        self.sweeps["intensity"][probe.name] = {
            "dtype": dtype,
            "working_set_bytes": self.plan.intensity_working_set_bytes,
            "flush": "flush" if self.plan.flush_intensity else "none",
            "accounting": probe.accounting,
            "points": points,
        }
        flush = self.device.flush if self.plan.flush_intensity else None
        llc = self.device.info.last_level_cache_bytes
        for target, k in pairs:
            ws = self.plan.intensity_working_set(target)
            run = probe.setup(working_set_bytes=ws, fmas_per_element=k)
            self._checked(probe, run, f"k={k}")
            timing, tele = self.timer.time(
                lambda run=run: run.run(1),
                budget_s=self.plan.intensity_budget_s,
                flush=flush,
                min_repeats=min(self.plan.min_repeats, 3),
                estimate_runs=1,
            )
            flops, nbytes = run.flops_per_rep, run.bytes_per_rep
            points.append(
                {
                    "fmas_per_element": k,
                    "target_intensity": target,
                    "intensity": flops / nbytes,
                    "working_set_bytes": run.working_set_bytes,
                    "resident": "dram" if not llc or run.working_set_bytes >= 4 * llc else "cache",
                    "flops_per_call": flops,
                    "bytes_per_call": nbytes,
                    "best_flops_per_s": flops / timing.min_s,
                    "median_flops_per_s": flops / timing.median_s,
                    "best_bytes_per_s": nbytes / timing.min_s,
                    "cv": timing.cv,
                    "noisy": timing.noisy,
                    "clock_mhz": tele.get("sm_clock_mhz_median")
                    or tele.get("cpu_clock_mhz_median"),
                    "timing": timing.to_dict(),
                    "telemetry": _short_telemetry(tele),
                    "params": run.params,
                }
            )
            run.release()
            self._step(f"{probe.name} {flops / nbytes:g} FLOP/B")
        low = sorted((p for p in points if p["resident"] == "dram"), key=lambda p: p["intensity"])[
            :3
        ]
        if low:
            # The in-place update (read + write of the same line, no write-allocate) streams
            # more than the read-only / STREAM-counted ceilings: keep its own bandwidth.
            self.sweeps["intensity"][probe.name]["memory_bound_bytes_per_s"] = float(
                statistics.median(p["best_bytes_per_s"] for p in low)
            )

    # -- assembly ----------------------------------------------------------------------
    def _result(self, *, complete: bool, during: str | None) -> RooflineResult:
        from roofprof.results import provenance

        info = self.device.info
        roofline = Roofline(device=_device_label(info), ceilings=tuple(self.ceilings))
        warnings = list(self.warnings)
        noisy = [d["name"] for d in self.details if d.get("noisy")]
        if noisy:
            warnings.append(
                "timing spread (CV) above 5% in some calls of: "
                + ", ".join(noisy)
                + " (ceilings use the fastest call; medians are in the result)"
            )
        load_end = loadavg()
        share = self.contention.read(min_wall_s=0.0)
        others = 100.0 * share if share is not None else None
        if others is not None and others > 5.0:
            warnings.append(
                f"other processes used {others:.0f}% of the machine's CPU time during the "
                "measurement: "
                "the ceilings are likely low; rerun on a quiet machine"
            )
        prov = provenance(
            device=info.to_dict(),
            plan=self.plan.name,
            load_average_start=list(self.load_at_start) if self.load_at_start else None,
            load_average_end=list(load_end) if load_end else None,
            other_processes_cpu_percent=others,
        )
        return RooflineResult(
            roofline=roofline,
            device=info,
            ceilings=tuple(dict(d) for d in self.details),
            sweeps={k: (dict(v) if isinstance(v, dict) else v) for k, v in self.sweeps.items()},
            plateaus=dict(self.plateaus),
            probes=tuple(self.probe_records),
            spec_comparison=spec_comparison(info, self.details),
            plan=self.plan.to_dict(),
            provenance=prov,
            warnings=tuple(dict.fromkeys(warnings)),
            complete=complete,
            interrupted_during=during,
            elapsed_s=time.perf_counter() - self.t0,
            failed_probes=tuple(dict(f) for f in self.failed),
        )


# --------------------------------------------------------------------------- helpers


def _device_label(info: DeviceInfo) -> str:
    return f"{info.name} ({info.label}, measured)"


def _median_or_none(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v]
    return float(statistics.median(vals)) if vals else None


def _short_telemetry(tele: Mapping[str, Any]) -> dict[str, Any]:
    keep = (
        "available",
        "reason",
        "source",
        "samples",
        "sm_clock_mhz_median",
        "sm_clock_mhz_min",
        "mem_clock_mhz_median",
        "power_w_median",
        "temperature_c_max",
        "utilisation",
        "clocks_event_reasons",
        "throttled",
        "cpu_clock_mhz_median",
        "cpu_clock_mhz_min",
    )
    return {k: tele[k] for k in keep if k in tele and tele[k] not in (None, "", [], ())}


def _fmt_bytes(n: float) -> str:
    return fmt_bytes(n, compact=True)
