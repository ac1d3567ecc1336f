"""Moved to :mod:`roofprof.models.llama_torch`; this name stays until every importer is ported."""

from roofprof.models.llama_torch import *  # noqa: F403
from roofprof.models.llama_torch import attention_sdpa  # noqa: F401 - devices/cuda_impls imports it here
