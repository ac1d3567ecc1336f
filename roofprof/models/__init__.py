"""Model families: which op lists roofprof can build, and which configs each one reads.

A family is a module with ``accepts(config) -> bool`` (does this Hugging Face
``config.json`` describe it?) and ``ops(scenario) -> Workload`` (the ops of one pass).
:data:`FAMILIES` lists them; :func:`family_of` picks the family of a config and refuses
a config no family reads (a Mixtral ``config.json`` is not a dense Llama), and
:func:`ops` builds the workload of a :class:`~roofprof.workload.Scenario` through the
family its model belongs to (``ModelSpec.family``).

A new family (say Mixtral) is one module here (ops with their ``fn``/``group`` tags), one
entry in :data:`FAMILIES` and the torch functions its ops are timed with.

>>> from roofprof.workload import Scenario
>>> w = ops(Scenario.of("llama-3.1-8b", "decode", context_tokens=0, dtype="bf16", convention="seed"))
>>> round(w.weight_bytes / 1e9, 2)
16.06
>>> family_of({"model_type": "mixtral", "architectures": ["MixtralForCausalLM"]})
Traceback (most recent call last):
...
roofprof.errors.UnknownNameError: unknown model family 'mixtral (MixtralForCausalLM)'; valid choices: llama
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from roofprof.errors import UnknownNameError
from roofprof.models import llama

if TYPE_CHECKING:
    from roofprof.workload import Scenario, Workload

__all__ = ["FAMILIES", "family_of", "ops"]

#: Family name -> module with ``accepts(config)`` and ``ops(scenario)``.
FAMILIES: Mapping[str, ModuleType] = {"llama": llama}


def family_of(config: Mapping[str, Any]) -> str:
    """The family name of an HF config, by its ``model_type`` (else ``architectures``).

    A config that names neither (a hand-written one with only the sizes) is read as a
    Llama, as before.

    Raises:
        UnknownNameError: the config names a model type no family reads (the message
            names it and lists the supported families).
    """
    model_type = config.get("model_type")
    architectures = [str(a) for a in config.get("architectures") or ()]
    if model_type is None and not architectures:
        return "llama"
    for name, family in FAMILIES.items():
        if family.accepts(config):
            return name
    label = str(model_type or architectures[0])
    if model_type is not None and architectures:
        label += f" ({', '.join(architectures)})"
    raise UnknownNameError("model family", label, FAMILIES)


def ops(scenario: Scenario) -> Workload:
    """The ops of one pass of ``scenario`` (prefill, or one decode step).

    Raises:
        UnknownNameError: the model's family has no op list here.
    """
    family = scenario.model.family
    if family not in FAMILIES:
        raise UnknownNameError("model family", family, FAMILIES)
    return FAMILIES[family].ops(scenario)
