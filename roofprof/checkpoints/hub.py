"""A model on the Hugging Face Hub (``org/name``, ``org/name@revision``): its small files.

Only ``config.json``, ``generation_config.json``, ``model.safetensors.index.json`` and the
safetensors headers are read, through ``huggingface_hub`` (its cache, ``HF_HUB_OFFLINE``,
``HF_TOKEN`` or the saved token, ``HF_ENDPOINT``); the weights never are. The headers
(HTTP range requests, ``get_safetensors_metadata``) are kept beside roofprof's other files
(``$ROOFPROF_CACHE/safetensors/``) per commit, so an offline run reads them too. Every
failure is one line saying which and how to fix it.

>>> parse_hub_id("Qwen/Qwen2.5-7B-Instruct-AWQ@main")
('Qwen/Qwen2.5-7B-Instruct-AWQ', 'main')
>>> parse_hub_id("./my-model") is None
True
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roofprof.errors import ConfigError, DeviceUnavailableError

__all__ = ["HUB_MISSING", "HubFiles", "fetch_hub_files", "parse_hub_id"]

HUB_MISSING = "naming a Hub model needs huggingface_hub: pip install huggingface_hub"
_ID = re.compile(r"^([A-Za-z0-9][\w.-]{0,95})/([\w][\w.-]{0,95})(?:@([\w./-]{1,200}))?$")


def parse_hub_id(text: str) -> tuple[str, str | None] | None:
    """``(repo_id, revision)`` of ``org/name[@revision]``; None for anything else."""
    m = _ID.match(text)
    if m is None or ".." in text or text.endswith((".json", ".gguf")):
        return None
    return f"{m.group(1)}/{m.group(2)}", m.group(3)


@dataclass(frozen=True)
class HubFiles:
    """Local paths of a Hub model's small files (None: the repo has none) and the commit."""

    repo_id: str
    commit: str
    config: Path
    generation_config: Path | None
    index: Path | None
    headers: tuple[dict[str, Any], ...] | None  # parsed safetensors headers, one per file


def fetch_hub_files(repo_id: str, revision: str | None = None) -> HubFiles:
    """Download (or find in the cache) ``repo_id``'s config files and safetensors headers.

    Raises:
        ConfigError: a gated repo, no such repo or revision, no ``config.json``, no
            network, or a file missing from the cache offline: one line each, with the fix.
        DeviceUnavailableError: huggingface_hub is not installed.
    """
    try:
        import huggingface_hub as hf
        from huggingface_hub import constants, errors
    except ImportError:
        raise DeviceUnavailableError(HUB_MISSING) from None
    # the client's retry notices are warnings of its HTTP logger (it resets its own level):
    # the one line raised below says it all
    http_logger = logging.getLogger("huggingface_hub.utils._http")
    http_logger.addFilter(_errors_only)
    try:
        return _fetch(hf, constants, errors, repo_id, revision)
    finally:
        http_logger.removeFilter(_errors_only)


def _errors_only(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.ERROR


def _fetch(hf: Any, constants: Any, errors: Any, repo_id: str, revision: str | None) -> HubFiles:
    name = repo_id + (f"@{revision}" if revision else "")
    url = f"{constants.ENDPOINT}/{repo_id}"
    try:
        config = Path(hf.hf_hub_download(repo_id, "config.json", revision=revision))
    except errors.GatedRepoError:
        raise ConfigError(
            f"{name} is gated on the Hub: accept its licence at {url}, then log in "
            "(hf auth login) or set HF_TOKEN"
        ) from None
    except errors.RepositoryNotFoundError:
        raise ConfigError(
            f"no model {repo_id!r} on the Hub at {constants.ENDPOINT} (check the id; a "
            "private repo needs hf auth login or HF_TOKEN)"
        ) from None
    except errors.RevisionNotFoundError:
        raise ConfigError(f"{repo_id} has no revision {revision!r} (see {url}/tree/main)") from None
    except errors.LocalEntryNotFoundError:
        if constants.HF_HUB_OFFLINE:
            raise ConfigError(
                f"{name} is not in the Hugging Face cache and HF_HUB_OFFLINE is set: unset "
                f"it, or fetch it once online (hf download {repo_id} config.json)"
            ) from None
        raise ConfigError(
            f"cannot reach the Hub at {constants.ENDPOINT} and {name} is not cached: "
            "check the network (or HF_ENDPOINT), or fetch it where the Hub is reachable"
        ) from None
    except errors.EntryNotFoundError:
        raise ConfigError(f"{name} has no config.json: not a transformers model") from None
    except (errors.HfHubHTTPError, OSError) as e:
        raise ConfigError(f"the Hub refused {name}: {str(e).splitlines()[0]}") from None
    commit = config.parent.name
    optional = {}
    for file in ("generation_config.json", "model.safetensors.index.json"):
        try:
            optional[file] = Path(hf.hf_hub_download(repo_id, file, revision=commit))
        except (errors.EntryNotFoundError, errors.HfHubHTTPError, OSError):
            optional[file] = None
    return HubFiles(
        repo_id,
        commit,
        config,
        optional["generation_config.json"],
        optional["model.safetensors.index.json"],
        _headers(hf, repo_id, commit, constants.HF_HUB_OFFLINE),
    )


def _headers(
    hf: Any, repo_id: str, commit: str, offline: bool
) -> tuple[dict[str, Any], ...] | None:
    """The repo's parsed safetensors headers at ``commit``: from roofprof's copy, else from
    the Hub (range requests, kept for next time); None offline without a copy or on error."""
    from roofprof._resources import cache_root
    from roofprof.results import write_json_atomic

    path = cache_root() / "safetensors" / repo_id.replace("/", "--") / f"{commit}.json"
    if path.is_file():
        try:
            return tuple(json.loads(path.read_text())["files"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
    if offline:
        return None
    from huggingface_hub.utils import (
        are_progress_bars_disabled,
        disable_progress_bars,
        enable_progress_bars,
    )

    quiet = are_progress_bars_disabled()
    disable_progress_bars()  # one bar per shard otherwise
    try:
        meta = hf.get_safetensors_metadata(repo_id, revision=commit)
    except Exception:  # not a safetensors repo, no network, an old hub: the index suffices
        return None
    finally:
        if not quiet:
            enable_progress_bars()
    headers = [
        {
            name: {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": list(t.data_offsets)}
            for name, t in file.tensors.items()
        }
        for file in meta.files_metadata.values()
    ]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, {"repo": repo_id, "commit": commit, "files": headers})
    except (OSError, ConfigError):
        pass
    return tuple(headers)
