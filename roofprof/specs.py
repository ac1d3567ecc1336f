"""Cited hardware specs and model configs.

``GpuSpec`` rows come from ``data/gpus.json`` (datasheet values, dense, each row with its
sources; :mod:`roofprof.gpu_specs`); ``ModelSpec`` comes from a Hugging Face-style Llama
``config.json``, either a shipped one (``data/models/<id>.json``) or any path the user gives
(:mod:`roofprof.model_specs`). This module is the public face of both.

>>> gpu = load_gpu("H100")
>>> gpu.id, gpu.memory_bytes_per_s
('h100-sxm', 3350000000000.0)
>>> load_model("llama-3.1-8b").param_count()
8030261248
"""

from __future__ import annotations

from roofprof.gpu_specs import (
    BYTES_PER_ELEMENT,
    DTYPES,
    GpuSpec,
    gpu_collective_figures,
    gpu_interconnect_defaults,
    gpu_sources,
    list_gpus,
    load_gpu,
    match_gpu,
)
from roofprof.model_specs import GemmaFeatures, ModelSpec, ignored_fields, list_models, load_model

__all__ = [
    "BYTES_PER_ELEMENT",
    "DTYPES",
    "GemmaFeatures",
    "GpuSpec",
    "ModelSpec",
    "gpu_collective_figures",
    "gpu_interconnect_defaults",
    "gpu_sources",
    "ignored_fields",
    "list_gpus",
    "list_models",
    "load_gpu",
    "load_model",
    "match_gpu",
]
