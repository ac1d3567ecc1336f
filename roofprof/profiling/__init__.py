"""Measuring: every op of a model pass checked, timed and placed on the roofline.

Modules: :mod:`~roofprof.profiling.profiler` (:class:`Profiler`, :class:`ProfileSettings`,
the ``measured`` estimator), :mod:`~roofprof.profiling.records` (``ProfileResult``),
:mod:`~roofprof.profiling.engine` (check-then-time, interleaved rounds),
:mod:`~roofprof.profiling.function` (``roofprof.measure`` of any function),
:mod:`~roofprof.profiling.torch_ops` (the torch implementation of every op).
"""

__all__: list[str] = []
