"""Which estimator a prediction uses: the one decision behind ``roofprof predict --estimator``
and ``roofprof.predict``.

:class:`EstimatorChoice` is what a user asked for (a name, a datasheet GPU, a measured
roofline, an engine profile, a device to measure on); :func:`choose_estimator` turns it into
an :class:`~roofprof.prediction.estimators.Estimator`, and :func:`collective_model` picks the model
that prices a layout's communication. The defaults: ``spec`` with a GPU, ``empirical`` with a
roofline alone; ``empirical`` with a GPU and no roofline uses the GPU's published ceilings.

>>> from roofprof.workload import Scenario
>>> s = Scenario.of("llama-3.1-8b", "decode", prompt_tokens=128)
>>> choose_estimator(EstimatorChoice(gpu="h100-sxm"), s).name
'spec'
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from roofprof.errors import ConfigError
from roofprof.roofline import Roofline
from roofprof.specs import GpuSpec, load_gpu

if TYPE_CHECKING:
    from roofprof.prediction.estimators import Estimator
    from roofprof.workload import Scenario

__all__ = ["ESTIMATORS", "EstimatorChoice", "choose_estimator", "collective_model"]

#: The estimators a prediction can use (``real`` is a timed model run: ``roofprof validate``).
ESTIMATORS = ("spec", "empirical", "measured", "calibrated")


@dataclass(frozen=True)
class EstimatorChoice:
    """What a user asked of the estimator.

    Attributes:
        name: one of :data:`ESTIMATORS`; None: ``spec`` with ``gpu``, ``empirical`` with
            only ``roofline``.
        gpu: a datasheet GPU (id, alias or spec) of ``data/gpus.json``.
        roofline: a measured roofline, or the path of a ``roofline.json``.
        engine: the engine profile of the ``calibrated`` estimator (``ideal``: none).
        device: where the ``measured`` estimator measures (``auto | cpu | cuda:N``).
        remeasure: with ``measured``, ignore cached per-op measurements.
    """

    name: str | None = None
    gpu: str | GpuSpec | None = None
    roofline: Roofline | str | os.PathLike | None = None
    engine: str = "ideal"
    device: str = "auto"
    remeasure: bool = False

    @property
    def resolved_name(self) -> str:
        """The estimator's name once the defaults apply."""
        if self.name is not None:
            return self.name
        return "empirical" if self.roofline is not None and self.gpu is None else "spec"

    def gpu_spec(self) -> GpuSpec | None:
        """The datasheet GPU (None when none was named).

        Raises:
            UnknownNameError: an unknown GPU id (the message lists the ids).
        """
        if self.gpu is None or isinstance(self.gpu, GpuSpec):
            return self.gpu
        return load_gpu(self.gpu)


def _roofline(value: Roofline | str | os.PathLike) -> Roofline:
    if isinstance(value, Roofline):
        return value
    from roofprof.roofline import load_roofline

    return load_roofline(value)


def choose_estimator(choice: EstimatorChoice, scenario: Scenario) -> Estimator:
    """The estimator ``choice`` names, for ``scenario`` (``measured`` profiles its ops).

    Raises:
        ConfigError: a choice that lacks what it needs (``spec`` without a GPU, ``empirical``
            without a roofline or a GPU with published ceilings, ``--engine`` without
            ``calibrated``), an unknown estimator, ``measured`` for a quantized checkpoint
            without ``weights`` (its kernels are dense); UnknownNameError: an unknown GPU or
            engine.
    """
    from roofprof.prediction.estimators import RooflineEstimator

    name = choice.resolved_name
    if name not in ESTIMATORS:
        raise ConfigError(f"unknown estimator {name!r}; valid choices: {', '.join(ESTIMATORS)}")
    if choice.engine != "ideal" and name != "calibrated":
        raise ConfigError("--engine applies to --estimator calibrated only")
    gpu = choice.gpu_spec()
    if name == "calibrated":
        from roofprof.prediction.calibration import calibrated_estimator

        if gpu is None and choice.roofline is None:
            raise ConfigError("the calibrated estimator needs --gpu (or --roofline roofline.json)")
        measured = _roofline(choice.roofline) if choice.roofline is not None else None
        return calibrated_estimator(
            gpu.id if gpu is not None else None, engine=choice.engine, roofline=measured
        )
    if name == "spec":
        if gpu is None:
            raise ConfigError("the spec estimator needs --gpu (see `roofprof specs` for the ids)")
        return RooflineEstimator.for_gpu(gpu)
    if name == "empirical":
        if choice.roofline is not None:
            return RooflineEstimator(
                _roofline(choice.roofline), name="empirical", source="measured roofline"
            )
        if gpu is None:
            raise ConfigError(
                "the empirical estimator needs --roofline roofline.json (from `roofprof "
                "roofline`), or --gpu ID of a GPU with published ceilings"
            )
        from roofprof.published import published_roofline

        note = (
            f"empirical: no --roofline given; using the published ceilings of {gpu.id} "
            f"(`roofprof roofline --published {gpu.id}`)"
        )
        warnings.warn(note, stacklevel=2)  # printed once: in the table, else on stderr
        return RooflineEstimator(
            published_roofline(gpu.id),
            name="empirical",
            source="published ceilings",
            warnings=(note,),
        )
    if gpu is not None and not gpu.measurable:
        raise ConfigError(
            f"{gpu.id} is analytic only: no device backend of roofprof measures an "
            f"{gpu.vendor.upper()} GPU; use --estimator spec (its datasheet)"
        )
    stored = scenario.model.stored
    if scenario.weights is None and stored is not None and stored.quantized:
        raise ConfigError(
            f"the measured estimator times dense kernels at {scenario.dtype}, but "
            f"{scenario.model.id} stores {stored.format} weights ({stored.mean_bits:.2f} bits "
            "per parameter); choose --estimator spec, empirical or calibrated to predict the "
            f"checkpoint, or --weights {scenario.dtype} to measure it as a dense model"
        )
    from roofprof.profiling.measured import measured_estimator

    est = measured_estimator(
        model=scenario.model,
        device=choice.device,
        dtype=scenario.dtype,
        roofline=choice.roofline,
        use_cache=not choice.remeasure,
    )
    device = est.inputs.get("device") or {}
    if isinstance(device, dict) and device.get("asynchronous") is False:
        return _with_framework(est, scenario, use_cache=not choice.remeasure)
    return est


def _with_framework(est: Any, scenario: Scenario, *, use_cache: bool = True) -> Any:
    """``est`` counting the framework overhead of the model class ``validate`` would run for
    ``scenario``'s model (on a device that runs kernels on the calling thread: a CPU):
    :func:`~roofprof.validation.framework_overhead.count_framework_overhead`."""
    from roofprof.validation.framework_overhead import count_framework_overhead

    return count_framework_overhead(
        est,
        scenario.model,
        "auto",
        attention=scenario.counting.attention,
        use_cache=use_cache,
    )


def collective_model(
    gpu: GpuSpec, *, table: Any = None, estimator: str = "spec", engine: str = "ideal"
) -> Any:
    """The :class:`~roofprof.prediction.collectives.CollectiveModel` of ``gpu``'s interconnect.

    ``table`` is a measured collectives table
    (:func:`roofprof.prediction.collectives.load_collectives`)
    that replaces the α-β priors where it has the size; the calibrated estimator with an
    engine that launches through CUDA graphs takes the graphs' per-call latency.

    >>> from roofprof.specs import load_gpu
    >>> collective_model(load_gpu("h100-sxm")).source != ""
    True
    """
    from roofprof.prediction.calibration import CUDA_GRAPHS
    from roofprof.prediction.collectives import CollectiveModel

    graphs = estimator == "calibrated" and engine != "ideal" and CUDA_GRAPHS.get(engine, False)
    return CollectiveModel.for_gpu(gpu, table=table, graphs=bool(graphs))
