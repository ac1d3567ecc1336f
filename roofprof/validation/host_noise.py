"""The host's own noise during a validation: its drift between profile and real run, and the
band a residual must leave to say more than the machine's mood.

On a shared machine a profile measured at one moment predicts a real run measured a minute
later; if the machine slowed down in between, a residual can be the machine's drift and not
the predictor's error. :class:`HostProbe` times one fixed reference kernel (a matmul of a
fixed size, the same every time) at named moments of a validation: before the real run,
after it, after the predictions (the profile). :class:`HostNoise` holds those checks: the
**drift** is the reference's slowest over its fastest time minus 1, with the moment, the
load average and the share of the CPUs other processes used at each. :func:`noise_band`
combines the drift with the real run's own spread (interquartile range over median) into
the band a residual within which says nothing: ``max(drift, spread)``.

>>> checks = (HostCheck("before the real run", "05:10:00", 1.0e-3, 0.5),
...           HostCheck("after the profile", "05:11:00", 1.2e-3, 2.0))
>>> noise = HostNoise(checks)
>>> round(noise.drift, 3), round(noise_band(0.05, noise.drift), 3), within_noise(-0.1, 0.2)
(0.2, 0.2, True)
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "HostCheck",
    "HostNoise",
    "HostProbe",
    "mark_within_noise",
    "noise_band",
    "noise_lines",
    "within_noise",
]


@dataclass(frozen=True)
class HostCheck:
    """One timing of the reference kernel.

    Attributes:
        label: the moment (``before the real run``, ``after the real run``, ``after the
            profile``).
        at: when, UTC (``HH:MM:SS``).
        seconds: median time of the reference kernel then.
        load_avg: the host's 1-minute load average then (None where the OS has none).
        other_cpu_share: the share of the CPUs other processes used meanwhile (0..1; None:
            not measured).
    """

    label: str
    at: str
    seconds: float
    load_avg: float | None = None
    other_cpu_share: float | None = None


@dataclass(frozen=True)
class HostNoise:
    """The reference kernel's checks through one validation, and the drift between them."""

    checks: tuple[HostCheck, ...]

    @property
    def drift(self) -> float:
        """Slowest over fastest reference time, minus 1 (0 with fewer than two checks)."""
        times = [c.seconds for c in self.checks if c.seconds > 0]
        if len(times) < 2:
            return 0.0
        return max(times) / min(times) - 1.0

    def describe(self) -> str:
        """One line: the drift and the checks' moments, times and loads."""
        parts = []
        for c in self.checks:
            load = f", load {c.load_avg:.2f}" if c.load_avg is not None else ""
            parts.append(f"{c.label} {c.at} UTC {c.seconds * 1e3:.2f} ms{load}")
        return f"host drift {self.drift:.1%} (reference matmul: " + "; ".join(parts) + ")"

    def to_dict(self) -> dict[str, Any]:
        return {"drift": self.drift, "checks": [asdict(c) for c in self.checks]}


def noise_band(real_spread: float, drift: float) -> float:
    """The relative band a residual must leave to be more than noise: the larger of the real
    run's own spread (IQR / median) and the host's drift (NaN inputs count as 0).

    >>> noise_band(0.03, 0.08), noise_band(float("nan"), 0.02)
    (0.08, 0.02)
    """
    values = [x for x in (real_spread, drift) if x == x]
    return max(values, default=0.0)


def within_noise(residual: float, band: float) -> bool:
    """True when ``|residual| <= band`` (a NaN residual is never within it).

    >>> within_noise(0.04, 0.05), within_noise(-0.2, 0.05), within_noise(float("nan"), 1.0)
    (True, False, False)
    """
    return residual == residual and abs(residual) <= band


def mark_within_noise(rows: list[dict[str, Any]], bands: dict[str, float]) -> list[dict[str, Any]]:
    """Comparison rows (:func:`~roofprof.prediction.rollup.compare`), each estimator's given
    the noise band of each phase (``prefill_noise_band``, ``decode_noise_band``: ``bands``'
    ``prefill`` and ``decode``) and whether its residual lies within it
    (``ttft_within_noise``, ``decode_within_noise``); the ``real`` row is left as it is.

    >>> rows = [{"estimator": "measured", "ttft_residual": 0.04, "decode_residual": -0.2},
    ...         {"estimator": "real", "ttft_residual": 0.0, "decode_residual": 0.0}]
    >>> row = mark_within_noise(rows, {"prefill": 0.05, "decode": 0.05})[0]
    >>> row["ttft_within_noise"], row["decode_within_noise"]
    (True, False)
    """
    for row in rows:
        if row["estimator"] == "real":
            continue
        row["prefill_noise_band"], row["decode_noise_band"] = bands["prefill"], bands["decode"]
        row["ttft_within_noise"] = within_noise(row["ttft_residual"], bands["prefill"])
        row["decode_within_noise"] = within_noise(row["decode_residual"], bands["decode"])
    return rows


def noise_lines(rows: list[dict[str, Any]], what: str) -> list[str]:
    """One line per residual within its noise band (it says nothing about the estimator), for
    rows marked by :func:`mark_within_noise`; ``what`` names what the band is made of."""
    lines = []
    for row in rows:
        for phase, key in (("prefill", "ttft"), ("decode", "decode")):
            if row.get(f"{key}_within_noise"):
                lines.append(
                    f"{row['estimator']}: the {phase} residual {row[f'{key}_residual']:+.1%} "
                    f"is within the host's own noise (±{row[f'{phase}_noise_band']:.1%}: {what})"
                )
    return lines


class HostProbe:
    """Times the reference kernel at named moments (:meth:`check`) and collects them.

    Args:
        work: the reference kernel (default: a 256×256 fp32 torch matmul, repeated to a few
            milliseconds); tests pass a fake.
        clock: the timer (default ``time.perf_counter``: the drift is what a wall-clock
            timing of the real run sees).
        repeats: timings per check (their median is kept).
        load: the load average (default ``os.getloadavg()[0]``).
        share: the share of the CPUs other processes use during a check (default: not
            measured); a context-manager factory with a ``share`` attribute after exit, such
            as :class:`roofprof.telemetry.Contention`.
        now: the UTC time as ``HH:MM:SS``.
    """

    def __init__(
        self,
        work: Callable[[], Any] | None = None,
        *,
        clock: Callable[[], float] = time.perf_counter,
        repeats: int = 5,
        load: Callable[[], float | None] | None = None,
        share: Callable[[], Any] | None = None,
        now: Callable[[], str] | None = None,
    ):
        self.work = work or _reference_matmul()
        self.clock, self.repeats = clock, repeats
        self.load = load or _load_avg
        self.share = share
        self.now = now or (lambda: time.strftime("%H:%M:%S", time.gmtime()))
        self.checks: list[HostCheck] = []

    def check(self, label: str) -> HostCheck:
        """Time the reference ``repeats`` times now; keep and return the check."""
        meter = self.share() if self.share else None
        samples = []
        if meter is not None:
            meter.__enter__()
        try:
            self.work()  # warm
            for _ in range(self.repeats):
                t0 = self.clock()
                self.work()
                samples.append(self.clock() - t0)
        finally:
            if meter is not None:
                meter.__exit__(None, None, None)
        share = getattr(meter, "share", None) if meter is not None else None
        c = HostCheck(label, self.now(), statistics.median(samples), self.load(), share)
        self.checks.append(c)
        return c

    def noise(self) -> HostNoise:
        return HostNoise(tuple(self.checks))


def _load_avg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _reference_matmul() -> Callable[[], Any]:
    import torch

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(256, 256, generator=gen)
    b = torch.randn(256, 256, generator=gen)

    def work():
        for _ in range(8):
            torch.mm(a, b)

    return work
