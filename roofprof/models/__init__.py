"""Model families: which op lists roofprof can build, and which configs each one reads.

A family is a module with ``accepts(config) -> bool`` (does this Hugging Face
``config.json`` describe it?) and ``ops(scenario) -> Workload`` (the ops of one pass).
:data:`FAMILIES` lists them; :func:`family_of` picks the family of a config and refuses
a config no family reads (a DBRX ``config.json`` is not a dense Llama), and
:func:`ops` builds the workload of a :class:`~roofprof.workload.Scenario` through the
family its model belongs to (``ModelSpec.family``).

A new family (say Mixtral) is one module here (ops with their ``fn``/``group`` tags), one
entry in :data:`FAMILIES`, and, to be measured, a torch side: one
:data:`~roofprof.models.families.TORCH_SIDES` row naming its transformers class and the
``<family>_torch`` module with its plain-torch model and the preparers of its new op fns.

>>> from roofprof.workload import Scenario
>>> w = ops(
...     Scenario.of(
...         "llama-3.1-8b", "decode", context_tokens=0, dtype="bf16", convention="rule-of-thumb"
...     )
... )
>>> round(w.weight_bytes / 1e9, 2)
16.06
>>> family_of({"model_type": "dbrx", "architectures": ["DbrxForCausalLM"]})
Traceback (most recent call last):
...
roofprof.errors.UnknownNameError: unknown model family 'dbrx (DbrxForCausalLM)'; valid choices: ...
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from roofprof.errors import UnknownNameError
from roofprof.models import (
    deepseek_v3,
    gemma2,
    gemma3,
    gpt_oss,
    llama,
    mistral,
    mixtral,
    phi3,
    qwen2,
    qwen3,
    qwen3_moe,
)
from roofprof.models.families import TORCH_SIDES, family_of

if TYPE_CHECKING:
    from roofprof.specs import ModelSpec
    from roofprof.workload import Counting, Scenario, Workload

__all__ = [
    "FAMILIES",
    "MEASURABLE",
    "config_fields",
    "family_of",
    "llama_ops",
    "ops",
    "require_measurable",
]

#: Family name -> module with ``accepts(config)`` and ``ops(scenario)`` (its configs are
#: recognised by :data:`roofprof.models.families.CONFIGS`).
FAMILIES: Mapping[str, ModuleType] = {
    "llama": llama,
    "qwen2": qwen2,
    "mistral": mistral,
    "qwen3": qwen3,
    "gemma2": gemma2,
    "gemma3": gemma3,
    "phi3": phi3,
    "mixtral": mixtral,
    "qwen3_moe": qwen3_moe,
    "deepseek_v3": deepseek_v3,
    "gpt_oss": gpt_oss,
}


#: Families whose ops can be timed and whose real model can be run: those with a torch side
#: (:data:`roofprof.models.families.TORCH_SIDES`); the others are predicted from their op
#: lists only.
MEASURABLE = tuple(name for name in FAMILIES if name in TORCH_SIDES)


def require_measurable(model: ModelSpec, what: str) -> None:
    """Refuse to measure (``what``: "profile", "validate") a model of a family with no torch model.

    Raises:
        ConfigError: the family is not in :data:`MEASURABLE` (one line naming it).

    >>> import dataclasses
    >>> from roofprof.specs import load_model
    >>> require_measurable(load_model("qwen2.5-0.5b"), "validate")
    >>> other = dataclasses.replace(load_model("qwen2.5-0.5b"), family="other")
    >>> require_measurable(other, "validate")  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    roofprof.errors.ConfigError: validate: model qwen2.5-0.5b is of family 'other', which
    roofprof can predict but not yet measure (measured families: llama, qwen2, mistral, qwen3,
    gemma2, gemma3, phi3, mixtral, qwen3_moe, ...)
    """
    import roofprof.models.families as families

    if model.family not in families.TORCH_SIDES:
        from roofprof.errors import ConfigError

        measured = ", ".join(name for name in FAMILIES if name in families.TORCH_SIDES)
        raise ConfigError(
            f"{what}: model {model.id} is of family {model.family!r}, which roofprof can "
            f"predict but not yet measure (measured families: {measured})"
        )


def config_fields(model: ModelSpec) -> dict[str, Any]:
    """The ``counting_config`` entry of the JSON output: the family that read the config and
    the config fields it ignored (present in the file, not read by the family).

    >>> from roofprof.specs import load_model
    >>> config_fields(load_model("gemma-2-9b"))["counting_config"]["ignored_fields"][:2]
    ['attention_dropout', 'bos_token_id']
    """
    return {
        "counting_config": {"family": model.family, "ignored_fields": list(model.ignored_fields)}
    }


def ops(scenario: Scenario) -> Workload:
    """The ops of one pass of ``scenario`` (prefill, or one decode step).

    Raises:
        UnknownNameError: the model's family has no op list here.
    """
    family = scenario.model.family
    if family not in FAMILIES:
        raise UnknownNameError("model family", family, FAMILIES)
    return FAMILIES[family].ops(scenario)


def llama_ops(
    model: ModelSpec,
    phase: str,
    *,
    batch: int = 1,
    prompt_tokens: int = 0,
    context_tokens: int | None = None,
    dtype: str = "bf16",
    convention: str | Counting = "engine",
) -> Workload:
    """The ops of one pass from loose arguments: ``ops(Scenario(...))``.

    Kept for callers not yet ported to :class:`~roofprof.workload.Scenario`; new code
    builds a Scenario.

    Raises:
        ConfigError, UnknownNameError: bad phase, dtype, sizes or convention.
    """
    from roofprof.workload import Scenario, counting_of

    return ops(
        Scenario(model, phase, batch, prompt_tokens, context_tokens, dtype, counting_of(convention))
    )
