"""A measured roofline as a record: :class:`RooflineResult` and its ``roofline.json``.

The record holds the measured :class:`~roofprof.roofline.Roofline`, every raw sweep point,
the plateaus, the probes' checks, the datasheet comparison and provenance;
:meth:`RooflineResult.to_dict`/:meth:`~RooflineResult.from_dict` are its JSON
(:data:`SCHEMA`), :func:`load_result` reads a file back. :class:`RooflineFailed` and
:class:`RooflineInterrupted` end a measurement short, carrying the partial record.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roofprof.devices.base import DeviceInfo
from roofprof.errors import ConfigError, RoofprofError
from roofprof.roofline import Roofline

__all__ = [
    "SCHEMA",
    "RooflineFailed",
    "RooflineInterrupted",
    "RooflineResult",
    "load_result",
]

SCHEMA = "roofprof.roofline/1"


class RooflineFailed(RoofprofError):
    """Probes failed and left the roofline with no memory or no compute ceiling.

    ``result`` is the partial :class:`RooflineResult` (its ``failed_probes`` say why each
    probe was skipped)."""

    def __init__(self, message: str, result: RooflineResult):
        super().__init__(message)
        self.result = result


class RooflineInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`~roofprof.roofline.probes.measure_roofline`; ``result`` holds what
    finished
    (``complete=False``)."""

    def __init__(self, result: RooflineResult, during: str):
        super().__init__(f"interrupted during {during}")
        self.result, self.during = result, during


@dataclass(frozen=True)
class RooflineResult:
    """A measured roofline with everything needed to trust (or re-plot) it.

    Attributes:
        roofline: the measured :class:`~roofprof.roofline.Roofline` (``source="measured"``).
        device: identity of the device measured.
        ceilings: per ceiling: name, probe, kind, level/dtype, value (SI), clock seen,
            timing statistics, noisy flag, and how it was derived.
        sweeps: raw data: ``{"bandwidth": {probe: [points]}, "intensity": {probe: {...}}}``.
        plateaus: ``{probe: [Plateau.to_dict()]}``.
        probes: catalogue entries with their correctness checks.
        spec_comparison: measured vs datasheet per ceiling, or why there is none.
        plan: the :class:`RooflinePlan` used.
        provenance: versions, command, time, host, load.
        warnings: noisy points, busy machine, unavailable telemetry, missing levels, skipped probes.
        complete: False when interrupted or stopped (``interrupted_during`` says where).
        failed_probes: ``{"probe", "kind", "error", "type"}`` per probe skipped because it failed.
    """

    roofline: Roofline
    device: DeviceInfo
    ceilings: tuple[dict[str, Any], ...] = ()
    sweeps: Mapping[str, Any] = field(default_factory=dict)
    plateaus: Mapping[str, Any] = field(default_factory=dict)
    probes: tuple[dict[str, Any], ...] = ()
    spec_comparison: Mapping[str, Any] = field(default_factory=dict)
    plan: Mapping[str, Any] = field(default_factory=dict)
    provenance: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    complete: bool = True
    interrupted_during: str | None = None
    elapsed_s: float = 0.0
    failed_probes: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The ``roofline.json`` payload; ``"roofline"`` holds ``Roofline.to_dict()``."""
        return {
            "schema": SCHEMA,
            "complete": self.complete,
            "interrupted_during": self.interrupted_during,
            "device": self.device.to_dict(),
            "roofline": self.roofline.to_dict(),
            "ceilings": list(self.ceilings),
            "spec_comparison": dict(self.spec_comparison),
            "plateaus": dict(self.plateaus),
            "sweeps": dict(self.sweeps),
            "probes": list(self.probes),
            "plan": dict(self.plan),
            "warnings": list(self.warnings),
            "elapsed_s": self.elapsed_s,
            "failed_probes": list(self.failed_probes),
            "provenance": dict(self.provenance),
        }

    def write(self, path: str | os.PathLike) -> Path:
        """Write :meth:`to_dict` as JSON, whole or not at all (temp file + rename)."""
        from roofprof.results import write_json_atomic

        return write_json_atomic(path, self.to_dict())

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RooflineResult:
        """Rebuild from :meth:`to_dict` output (for plots and comparisons)."""
        try:
            dev = dict(d["device"])
            dev.pop("label", None)
            info = DeviceInfo(**dev)
            return cls(
                roofline=Roofline.from_dict(d["roofline"]),
                device=info,
                ceilings=tuple(d.get("ceilings", ())),
                sweeps=d.get("sweeps", {}),
                plateaus=d.get("plateaus", {}),
                probes=tuple(d.get("probes", ())),
                spec_comparison=d.get("spec_comparison", {}),
                plan=d.get("plan", {}),
                provenance=d.get("provenance", {}),
                warnings=tuple(d.get("warnings", ())),
                complete=bool(d.get("complete", True)),
                interrupted_during=d.get("interrupted_during"),
                elapsed_s=float(d.get("elapsed_s", 0.0)),
                failed_probes=tuple(d.get("failed_probes", ())),
            )
        except (KeyError, TypeError) as exc:
            raise ConfigError(
                f"not a roofprof roofline result: missing or malformed {exc}"
            ) from exc


def load_result(path: str | os.PathLike) -> RooflineResult:
    """Read a ``roofline.json`` written by ``roofprof roofline``.

    Raises:
        ConfigError: missing file, not JSON, or not a roofline result.
    """
    from roofprof.results import read_json

    return RooflineResult.from_dict(read_json(path))
