"""Predicting prefill and decode times: estimators, the roll-up, memory fit, layouts.

Modules: :mod:`~roofprof.prediction.rollup` (``predict``, ``sweep``),
:mod:`~roofprof.prediction.estimators`, :mod:`~roofprof.prediction.records`,
:mod:`~roofprof.prediction.choice`, :mod:`~roofprof.prediction.memory_fit`,
:mod:`~roofprof.prediction.layout`, :mod:`~roofprof.prediction.collectives`,
:mod:`~roofprof.prediction.serving`, :mod:`~roofprof.prediction.calibration`,
:mod:`~roofprof.prediction.kernel_paths`.
"""

__all__: list[str] = []
