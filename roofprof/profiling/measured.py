"""The estimators a device supports once it is profiled, and the ``measured`` one for ``predict``.

:func:`estimators_for` (``spec``, ``empirical``, ``measured`` and ``measured-no-launch``
over a :class:`~roofprof.profiling.profiler.Profiler`) and :func:`measured_estimator`
(per-op times of this device, profiled on demand).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from roofprof.cache import RooflineChoice, spec_roofline
from roofprof.errors import UnknownNameError
from roofprof.prediction.estimators import Estimator, MeasuredEstimator, RooflineEstimator
from roofprof.profiling.profiler import DEFAULT_PREFER, Profiler, ProfileSettings
from roofprof.roofline import Roofline
from roofprof.specs import DTYPES, ModelSpec, load_model

if TYPE_CHECKING:
    import os

    from roofprof.devices.base import Device

__all__ = ["estimators_for", "measured_estimator"]

Progress = Callable[[str, int, int], None]


def estimators_for(
    device: Device,
    profiler: Profiler | None,
    *,
    wanted: Sequence[str] = ("spec", "empirical", "measured"),
    roofline_source: str | None = None,
) -> tuple[dict[str, Estimator], dict[str, str]]:
    """The estimators this device supports: label → estimator, and label → why not.

    ``spec`` needs a datasheet row (``device.info.spec_id``); ``empirical`` the
    profiler's roofline (labelled ``roofline_source`` when given); ``measured`` comes with
    ``measured-no-launch`` (same measurements, no launch-overhead model). Without a
    profiler only ``spec`` is possible.
    """
    ests: dict[str, Estimator] = {}
    missing: dict[str, str] = {}
    info = device.info
    if "spec" in wanted:
        spec = spec_roofline(device)
        if spec is not None:
            ests["spec"] = RooflineEstimator(
                spec, name="spec", source=f"data/gpus.json:{info.spec_id}"
            )
        else:
            missing["spec"] = f"no datasheet row in data/gpus.json for {info.name}"
    if "empirical" in wanted:
        if profiler is not None and profiler.roofline is not None:
            ests["empirical"] = RooflineEstimator(
                profiler.roofline,
                name="empirical",
                source=roofline_source or profiler.roofline_source,
            )
        else:
            missing["empirical"] = "no measured roofline"
    if "measured" in wanted and profiler is not None:
        est = profiler.estimator()
        ests["measured"] = est
        ests["measured-no-launch"] = est.with_launch(False)
    return ests, missing


def measured_estimator(
    model: str | ModelSpec,
    device: Device | str = "auto",
    dtype: str = "fp32",
    roofline: Roofline | str | os.PathLike | None = None,
    *,
    include_launch: bool = True,
    threads: int | None = None,
    budget_s: float = 0.15,
    use_cache: bool = True,
    impls: Sequence[str] | None = None,
    prefer: Sequence[str] = DEFAULT_PREFER,
    progress: Progress | None = None,
) -> MeasuredEstimator:
    """The ``measured`` estimator for ``predict``: per-op times of this device, profiled on demand.

    ``budget_s`` (timed seconds per shape) is ``run``'s. Ops with a cached measurement (same
    device, threads, libraries) reuse it unless it was
    contended (then it is measured again); ``use_cache=False`` measures everything afresh
    (``--remeasure``). The others are measured when the prediction asks for them.
    ``roofline`` (a path, a Roofline, or None: the cached quick one, else the minimal one of
    ``dtype``, cached or measured now: :func:`roofprof.cache.minimal_roofline`) classifies
    bounds and covers ops no implementation measures. The ops carry their own dtype.

    Raises:
        RoofprofError: unknown model, device unavailable, unreadable roofline.
    """
    if dtype not in DTYPES:
        raise UnknownNameError("dtype", dtype, DTYPES)
    spec = model if isinstance(model, ModelSpec) else load_model(model)
    prof = Profiler(
        device,
        ProfileSettings(
            impls=tuple(impls) if impls else None,
            prefer=tuple(prefer),
            budget_s=budget_s,
            threads=threads,
            roofline=RooflineChoice(
                roofline if roofline is not None else "auto", minimal_dtypes=(dtype,)
            ),
            use_cache=use_cache,
        ),
        model=spec,
        progress=progress,
    )
    roofline_file = (
        str(roofline) if roofline is not None and not isinstance(roofline, Roofline) else None
    )
    return prof.estimator(include_launch=include_launch, inputs={"roofline_file": roofline_file})
