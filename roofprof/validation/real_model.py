"""The real model a validation runs: transformers' class of the family, or roofprof's plain torch.

:func:`build_hf_model` (random weights from the spec's config, ``backend="hf"``),
:func:`build_torch_model` (:mod:`roofprof.models.llama_torch` and its kin,
``backend="torch"``), :func:`auto_backend` (hf when transformers is installed and knows
the family) and :class:`Runner` (prefill and one decode step with a KV cache, either way);
:func:`describe_real_model` gives the :class:`RealModel` record a validation reports: which
model ran, why it was chosen, and what it differs in from the counted op list.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import warnings as _warnings
from dataclasses import dataclass
from typing import Any

from roofprof.specs import ModelSpec

__all__ = [
    "BACKENDS",
    "HF_INSTALL",
    "RealModel",
    "Runner",
    "auto_backend",
    "build_hf_model",
    "build_torch_model",
    "describe_real_model",
    "has_transformers",
    "torch_module",
    "scaled_model",
]

BACKENDS = ("auto", "hf", "torch")
#: how to get the real model users run (transformers comes with the ``torch`` extra)
HF_INSTALL = "pip install 'roofprof[torch]'"

#: what transformers' forward does beyond the counted op list (measured by
#: ``benchmarks/bench_hf_accuracy.py``; BENCHMARKS.md)
HF_DIFFERS = (
    "transformers' own forward: a RoPE cos/sin table built per forward pass, its mask "
    "helpers, DynamicCache concatenation and module hooks run as well as the counted ops "
    "(framework work the op list does not cost separately)",
)
TORCH_DIFFERS = (
    "roofprof's own plain-torch form of the family (the same torch calls the profile "
    "times): the predictor is held against its own implementation, not the model users "
    f"run; {HF_INSTALL} validates against transformers' class",
)


@dataclass(frozen=True)
class RealModel:
    """Which real model a validation ran, why, and what it differs in from the counted form.

    Attributes:
        backend: ``hf`` (transformers) or ``torch`` (roofprof's plain torch).
        name: the library, version and class (``transformers 5.24.0 LlamaForCausalLM``).
        attention: the attention path it ran (``sdpa`` or ``eager``).
        chosen_by: why this backend ran (``--backend hf`` asked, or what ``auto`` found).
        differs: what it does that the counted op list does not (one sentence each).

    >>> RealModel("hf", "transformers 5.24.0 LlamaForCausalLM", "sdpa", "auto", ()).describe()
    'transformers 5.24.0 LlamaForCausalLM (attention sdpa; auto)'
    """

    backend: str
    name: str
    attention: str
    chosen_by: str
    differs: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line: the model, its attention path and why it ran."""
        return f"{self.name} (attention {self.attention}; {self.chosen_by})"

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "differs": list(self.differs)}


def scaled_model(spec: ModelSpec, layers: int) -> ModelSpec:
    if layers == spec.num_layers:
        return spec
    return dataclasses.replace(
        spec, num_layers=layers, id=f"{spec.id} ({layers} of {spec.num_layers} layers)"
    )


def has_transformers() -> bool:
    return importlib.util.find_spec("transformers") is not None


def torch_module(spec: ModelSpec):
    """The torch module of ``spec``'s family (:class:`roofprof.models.families.TorchSide`).

    Raises:
        ConfigError: the family has no torch side (predicted only).
    """
    import importlib

    from roofprof.models import require_measurable
    from roofprof.models.families import torch_side

    require_measurable(spec, "validate")
    side = torch_side(spec.family)
    assert side is not None  # require_measurable refused the others
    return side, importlib.import_module(side.module)


def auto_backend(spec: ModelSpec) -> str:
    """``--backend auto``: transformers when installed, unless the family's torch module sets
    ``AUTO_BACKEND = "torch"`` (its HF class runs another form than the one counted)."""
    _, module = torch_module(spec)
    return "hf" if getattr(module, "AUTO_BACKEND", "hf") == "hf" and has_transformers() else "torch"


def describe_real_model(
    spec: ModelSpec, asked: str, chosen: str, name: str, attention_ran: str, attention: str
) -> RealModel:
    """The :class:`RealModel` record of a validation of ``spec`` (``asked``: the ``backend``
    setting, ``chosen``: what ran, ``name``: its library and class, ``attention_ran``: the
    path it took, ``attention``: the counting's ``fused``/``unfused``).

    Raises:
        ConfigError: the family has no torch side.

    >>> from roofprof.specs import load_model
    >>> r = describe_real_model(load_model("llama-3.2-1b"), "torch", "torch", "plain", "sdpa",
    ...                         "fused")
    >>> r.chosen_by, len(r.differs)
    ('asked: --backend torch', 1)
    """
    _, module = torch_module(spec)
    if asked != "auto":
        why = f"asked: --backend {asked}"
    elif chosen == "hf":
        why = "auto: transformers is installed"
    elif not has_transformers():
        why = f"auto: transformers is not installed ({HF_INSTALL} adds it)"
    else:
        why = "auto: the family's transformers class runs another form than the one counted"
    differs = list(HF_DIFFERS if chosen == "hf" else TORCH_DIFFERS)
    note = getattr(module, "BACKEND_NOTES", {}).get(chosen)
    if note:
        differs.append(note)
    wanted = "sdpa" if attention == "fused" else "eager"
    if attention_ran != wanted:
        differs.append(
            f"it ran {attention_ran} attention where the counting is {attention} "
            "(its class has no other path)"
        )
    return RealModel(chosen, name, attention_ran, why, tuple(differs))


def build_hf_model(spec: ModelSpec, dtype: str, device: str, attention: str):
    """The family's transformers model (``LlamaForCausalLM``, ``Qwen2ForCausalLM``, ...) with random
    weights (built on meta, then allocated). A model class without SDPA support (Gemma 2, for
    its soft-capped scores) runs eager attention whatever ``attention`` says."""
    import torch
    import transformers

    from roofprof.models.llama_torch import fill_weights_, torch_dtype

    side, module = torch_module(spec)
    config_class, model_class = (
        getattr(transformers, side.hf_config_class),
        getattr(transformers, side.hf_class),
    )
    with _warnings.catch_warnings():
        _warnings.simplefilter("ignore")
        config = config_class(**module.hf_config(spec))
        fused = attention == "fused" and getattr(model_class, "_supports_sdpa", True)
        config._attn_implementation = "sdpa" if fused else "eager"
        with torch.device("meta"):
            model = model_class(config)
    model = model.to(torch_dtype(dtype))
    model.to_empty(device=device)
    fill_weights_(model)
    with torch.no_grad():
        for (
            name,
            buf,
        ) in model.named_buffers():  # bias buffers (DeepSeek's score correction) start at 0
            if name.endswith("_bias") and buf.is_floating_point():
                buf.zero_()
    if spec.tie_word_embeddings:
        model.tie_weights()
    _restore_buffers(model, config, device)
    return model.eval()


def _restore_buffers(model, config, device: str) -> None:
    """Rebuild what ``to_empty`` emptied besides the weights: RoPE tables (any module with an
    ``*inv_freq`` buffer is built again from the config) and Gemma's embedding scale."""
    import torch

    for parent in model.modules():
        for child_name, child in list(parent.named_children()):
            if any(name.endswith("inv_freq") for name, _ in child.named_buffers(recurse=False)):
                setattr(
                    parent,
                    child_name,
                    type(child)(config=getattr(child, "config", config)).to(device),
                )
            elif hasattr(child, "scalar_embed_scale") and isinstance(
                getattr(child, "embed_scale", None), torch.Tensor
            ):
                with torch.no_grad():
                    child.embed_scale.fill_(child.scalar_embed_scale)


def build_torch_model(spec: ModelSpec, dtype: str, device: str, attention: str):
    """The family's plain-torch model (:mod:`roofprof.models.llama_torch` and its kin), random
    weights."""
    from roofprof.models.llama_torch import torch_dtype

    _, module = torch_module(spec)
    return module.build(spec, torch_dtype(dtype), device, attention).eval()


class Runner:
    """Calls a model the same way whatever the backend: prefill → cache, decode step(cache)."""

    def __init__(self, model, backend: str):
        import inspect

        self.model, self.backend = model, backend
        if backend == "hf":
            params = inspect.signature(model.forward).parameters
            self.cache_kw = "cache" if "cache" in params else "past_key_values"
            self.keep_kw = (
                "logits_to_keep"
                if "logits_to_keep" in params
                else "num_logits_to_keep"
                if "num_logits_to_keep" in params
                else None
            )

    def prefill(self, ids):
        if self.backend == "torch":
            _, module = torch_module(self.model.spec)
            cache = module.new_cache(self.model.spec)
            return self.model(ids, cache), cache
        kw = {"use_cache": True}
        if self.keep_kw:
            kw[self.keep_kw] = 1
        out = self.model(input_ids=ids, **kw)
        cache = out.get("cache") if "cache" in out else out.get("past_key_values")
        return out.logits, cache

    def step(self, ids, cache):
        if self.backend == "torch":
            return self.model(ids, cache)
        kw = {"use_cache": True, self.cache_kw: cache}
        if self.keep_kw:
            kw[self.keep_kw] = 1
        return self.model(input_ids=ids, **kw).logits
