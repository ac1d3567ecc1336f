"""A GGUF file (llama.cpp, Ollama) as a model config and a tensor table.

The header is read with the ``gguf`` package (llama.cpp's ``gguf-py``; the ``gguf`` extra):
``general.architecture`` and its ``<arch>.*`` keys give the sizes, the tensor table gives
each tensor's quantization type (Q4_K, Q8_0, F16...) and its exact bytes. The tensor data
is memory-mapped by the reader, never read.

Example: ``config, tensors, kind = read_gguf("model.gguf")``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from roofprof.errors import ConfigError, DeviceUnavailableError

__all__ = ["ARCHITECTURES", "GGUF_MISSING", "read_gguf"]

#: GGUF architectures read, with the Hugging Face ``model_type`` each becomes.
ARCHITECTURES = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3"}
GGUF_MISSING = "reading a GGUF file needs the gguf package: pip install 'roofprof[gguf]'"


def read_gguf(path: str | Path) -> tuple[dict[str, Any], tuple[Any, ...], str]:
    """``(config, tensors, file type)`` of the GGUF file at ``path``: a Hugging Face-style
    config dict, the :class:`~roofprof.checkpoints.tensors.Tensor` table and the file's
    quantization mix (``Q4_K_M``; ``mixed`` when the header does not say).

    Raises:
        DeviceUnavailableError: the ``gguf`` package is not installed (names the extra).
        ConfigError: not a GGUF file, or one missing a size key (named).
        UnknownNameError: an architecture roofprof does not read (names the ones it does).
    """
    try:
        import gguf
    except ImportError:
        raise DeviceUnavailableError(GGUF_MISSING) from None
    from roofprof.checkpoints.tensors import Tensor
    from roofprof.errors import UnknownNameError

    try:
        reader = gguf.GGUFReader(str(path), "r")
    except (ValueError, OSError, IndexError, KeyError) as e:
        raise ConfigError(f"{path}: not a readable GGUF file ({e})") from None

    def value(key: str, default: Any = None) -> Any:
        field = reader.fields.get(key)
        return default if field is None else field.contents()

    arch = str(value("general.architecture", ""))
    if arch not in ARCHITECTURES:
        raise UnknownNameError("GGUF architecture", arch, ARCHITECTURES)
    tensors = tuple(
        Tensor(t.name, t.tensor_type.name, tuple(int(d) for d in t.shape), int(t.n_bytes))
        for t in reader.tensors
    )
    names = {t.name: t for t in tensors}
    for key in ("embedding_length", "block_count", "feed_forward_length", "attention.head_count"):
        if value(f"{arch}.{key}") is None:
            raise ConfigError(f"{path}: GGUF key '{arch}.{key}' missing")
    heads = int(value(f"{arch}.attention.head_count"))
    hidden = int(value(f"{arch}.embedding_length"))
    vocab = value(f"{arch}.vocab_size")
    if vocab is None:
        tokens = value("tokenizer.ggml.tokens")
        embd = names.get("token_embd.weight")
        vocab = len(tokens) if tokens else (max(embd.shape) if embd else None)
    if vocab is None:
        raise ConfigError(f"{path}: GGUF file gives no vocabulary size")
    config: dict[str, Any] = {
        "model_type": ARCHITECTURES[arch],
        "_name_or_path": str(value("general.name") or Path(path).stem),
        "hidden_size": hidden,
        "intermediate_size": int(value(f"{arch}.feed_forward_length")),
        "num_hidden_layers": int(value(f"{arch}.block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(value(f"{arch}.attention.head_count_kv", heads)),
        "head_dim": int(value(f"{arch}.attention.key_length", hidden // heads)),
        "vocab_size": int(vocab),
        "max_position_embeddings": int(value(f"{arch}.context_length", 0)),
        "rope_theta": float(value(f"{arch}.rope.freq_base", 10000.0)),
        "rms_norm_eps": float(value(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)),
        "tie_word_embeddings": "output.weight" not in names,
    }
    kind = value("general.file_type")
    try:
        mix = (
            gguf.LlamaFileType(int(kind)).name.removeprefix("MOSTLY_")
            if kind is not None
            else "mixed"
        )
    except ValueError:
        mix = "mixed"
    return config, tensors, mix
