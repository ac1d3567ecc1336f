"""The model a user names, found: a Hub id, a local model folder or a GGUF file.

:func:`locate` turns what ``--model`` was given into a :class:`Located`: the config
(a Hugging Face ``config.json``, or one made from a GGUF header), where it came from, and
the stored tensors when they are known (safetensors headers, a GGUF tensor table) or their
total (``model.safetensors.index.json``). :func:`roofprof.specs.load_model` is its one
caller: every verb that takes ``--model`` gets the same resolution.

* ``org/name`` or ``org/name@revision``: :mod:`roofprof.checkpoints.hub`;
* a folder with ``config.json`` (and optionally ``*.safetensors`` or the index): offline;
* a ``.gguf`` file: :mod:`roofprof.checkpoints.gguf_file`.

>>> locate("llama-3.1-8b") is None  # a shipped id: not located here
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roofprof.errors import ConfigError

__all__ = ["Located", "locate"]


@dataclass(frozen=True)
class Located:
    """A model found on the Hub, in a folder or in a GGUF file.

    Attributes:
        config: the Hugging Face-style config (a GGUF header's, translated).
        label: the model's id in outputs (the Hub id, the folder's or file's name).
        source: where it was found, in words (with the Hub commit).
        tensors: the stored tensors (None: not known).
        tensors_source: where ``tensors`` (or ``index_total``) come from, in words.
        index_total: ``total_size`` of ``model.safetensors.index.json`` (bytes), if read.
        generation: ``generation_config.json`` when the model has one.
        gguf_mix: a GGUF file's quantization mix (``Q4_K_M``), else None.
    """

    config: Mapping[str, Any]
    label: str
    source: str
    tensors: tuple[Any, ...] | None = None
    tensors_source: str = ""
    index_total: int | None = None
    generation: Mapping[str, Any] | None = None
    gguf_mix: str | None = None


def locate(text: str) -> Located | None:
    """The model ``text`` names when it is a folder, a ``.gguf`` file or a Hub id; None
    otherwise (a shipped id or a ``config.json`` path: :func:`~roofprof.specs.load_model`
    reads those itself).

    Raises:
        ConfigError: a folder without ``config.json``, an unreadable file, or any Hub
            failure (gated, missing, offline cache miss, no network), in one line.
        DeviceUnavailableError: ``gguf`` or ``huggingface_hub`` is not installed.
    """
    path = Path(text)
    try:
        is_dir, is_file = path.is_dir(), path.is_file()
    except (OSError, ValueError):
        is_dir = is_file = False
    if is_dir:
        return _folder(path)
    if is_file and path.suffix.lower() == ".gguf":
        from roofprof.checkpoints.gguf_file import read_gguf

        config, tensors, mix = read_gguf(path)
        return Located(
            config,
            path.stem,
            f"GGUF file {path}",
            tensors,
            f"GGUF tensor table ({mix})",
            gguf_mix=mix,
        )
    if is_file:
        return None
    from roofprof.checkpoints.hub import fetch_hub_files, parse_hub_id

    parsed = parse_hub_id(text)
    if parsed is None:
        return None
    files = fetch_hub_files(*parsed)
    from roofprof.checkpoints.tensors import tensors_of_header

    tensors = (
        tuple(t for h in files.headers for t in tensors_of_header(h, text))
        if files.headers
        else None
    )
    index = _json(files.index) if files.index else None
    return Located(
        _json(files.config),
        files.repo_id,
        f"hf://{files.repo_id}@{files.commit}",
        tensors,
        f"safetensors headers ({len(files.headers)} files)"
        if files.headers
        else ("model.safetensors.index.json total_size" if index else ""),
        _total(index, text),
        _json(files.generation_config) if files.generation_config else None,
    )


def _folder(path: Path) -> Located:
    """A local model folder: ``config.json``, the safetensors headers or the index."""
    from roofprof.checkpoints.tensors import read_safetensors_headers

    config = path / "config.json"
    if not config.is_file():
        raise ConfigError(f"model folder {path} has no config.json")
    shards = sorted(path.glob("*.safetensors"))
    index_path = path / "model.safetensors.index.json"
    index = _json(index_path) if index_path.is_file() else None
    generation = path / "generation_config.json"
    tensors = read_safetensors_headers(shards) if shards else None
    where = (
        f"safetensors headers ({len(shards)} files)"
        if shards
        else ("model.safetensors.index.json total_size" if index else "")
    )
    name = path.resolve().name or "model"
    return Located(
        _json(config),
        name,
        f"folder {path}",
        tensors,
        where,
        _total(index, str(index_path)),
        _json(generation) if generation.is_file() else None,
    )


def _json(path: Path) -> Any:
    from roofprof.results import loads_json, read_text

    value = loads_json(read_text(path, what="model file", max_bytes=64 * 2**20), str(path))
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: must be a JSON object")
    return value


def _total(index: Mapping[str, Any] | None, label: str) -> int | None:
    if index is None:
        return None
    total = (index.get("metadata") or {}).get("total_size")
    if total is None:
        return None
    if isinstance(total, bool) or not isinstance(total, (int, float)) or total <= 0:
        raise ConfigError(f"{label}: metadata.total_size must be a positive number of bytes")
    return int(total)
