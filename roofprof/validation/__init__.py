"""Validating: a real model forward pass timed on this device, each estimator's residual.

Modules: :mod:`~roofprof.validation.model_run` (``validate``, ``ValidationSettings``),
:mod:`~roofprof.validation.records` (``ValidationResult``, the memory plan),
:mod:`~roofprof.validation.real_model` (the transformers or plain-torch model it runs).
"""

__all__: list[str] = []
