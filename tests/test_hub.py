"""Hub ids: a real Hugging Face cache, written by ``huggingface_hub`` itself, then offline.

A small HTTP server on 127.0.0.1 answers as the Hub does (``/<repo>/resolve/<rev>/<file>``
with ``X-Repo-Commit`` and ``ETag``; errors with the Hub's ``X-Error-Code`` header), and
``HF_ENDPOINT`` points the real client at it. Each run is a fresh ``roofprof`` process with
its own ``HF_HOME``, so ``HF_ENDPOINT``, ``HF_HUB_OFFLINE`` and the cache are read as a
user's shell sets them.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from roofprof.checkpoints.hub import parse_hub_id

COMMIT = "0123456789abcdef0123456789abcdef01234567"
TINY = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1024,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": True,
    "quantization_config": {
        "bits": 4,
        "group_size": 128,
        "modules_to_not_convert": None,
        "quant_method": "awq",
        "version": "gemm",
        "zero_point": True,
    },
}
FILES = {
    "config.json": json.dumps(TINY).encode(),
    "generation_config.json": json.dumps({"max_new_tokens": 64}).encode(),
    "model.safetensors.index.json": json.dumps(
        {"metadata": {"total_size": 1_234_567}, "weight_map": {}}
    ).encode(),
}
#: repo -> the X-Error-Code the Hub answers with (None: served).
REPOS = {
    "acme/tiny-awq": None,
    "acme/tiny-st": None,
    "acme/no-config": None,
    "acme/private": None,  # served only with the token below
    "acme/gated": "GatedRepo",
    "acme/nothing": "RepoNotFound",
}


def _awq_safetensors() -> bytes:
    """A real safetensors file (the ``safetensors`` library's bytes) in AutoAWQ's layout."""
    import numpy as np
    from safetensors.numpy import save

    h, v = TINY["hidden_size"], TINY["vocab_size"]
    tensors = {"model.embed_tokens.weight": np.zeros((v, h), np.float16)}
    for i in range(TINY["num_hidden_layers"]):
        for name, k, n in [("self_attn.q_proj", h, h), ("mlp.down_proj", 512, h)]:
            pre = f"model.layers.{i}.{name}."
            tensors[pre + "qweight"] = np.zeros((k, n // 8), np.int32)
            tensors[pre + "qzeros"] = np.zeros((k // 128, n // 8), np.int32)
            tensors[pre + "scales"] = np.zeros((k // 128, n), np.float16)
    return save(tensors)


SERVED = {
    "acme/tiny-awq": FILES,
    "acme/tiny-st": {"config.json": FILES["config.json"], "model.safetensors": _awq_safetensors()},
    "acme/no-config": {"generation_config.json": FILES["generation_config.json"]},
    "acme/private": FILES,
}
TOKEN = "hf_test_token"


class _Hub(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def _answer(self, body: bool) -> None:
        parts = self.path.split("?")[0].strip("/").split("/")
        repo, rev, name = "/".join(parts[:2]), parts[3] if len(parts) > 3 else "", parts[-1]
        code = REPOS.get(repo, "RepoNotFound")
        if repo == "acme/private" and self.headers.get("authorization") != f"Bearer {TOKEN}":
            code = "RepoNotFound"  # as the Hub answers for a private repo without access
        if code is None and rev not in ("main", COMMIT):
            code = "RevisionNotFound"
        files = SERVED.get(repo, {})
        if code is None and name not in files:
            code = "EntryNotFound"
        if code is not None:
            self.send_response(
                401 if code == "RepoNotFound" else 403 if code == "GatedRepo" else 404
            )
            self.send_header("X-Error-Code", code)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = files[name]
        ranged = self.headers.get("range") if body else None
        if ranged:  # "bytes=a-b": the safetensors header is read so
            a, b = (int(x) for x in ranged.removeprefix("bytes=").split("-"))
            data = data[a : b + 1]
        self.send_response(206 if ranged else 200)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def do_HEAD(self):
        self._answer(False)

    def do_GET(self):
        self._answer(True)


@pytest.fixture(scope="module")
def hub():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _roofprof(home: Path, endpoint: str, *args: str, offline: bool = False, token: str = ""):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env |= {"HF_HOME": str(home), "HF_ENDPOINT": endpoint, "ROOFPROF_CACHE": str(home / "rp")}
    if token:
        env["HF_TOKEN"] = token
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "roofprof", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )


def _one_line_error(out) -> str:
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_parse_hub_id():
    assert parse_hub_id("acme/tiny-awq") == ("acme/tiny-awq", None)
    assert parse_hub_id("acme/tiny-awq@v1.0") == ("acme/tiny-awq", "v1.0")
    assert parse_hub_id("llama-3.1-8b") is None and parse_hub_id("a/b/c") is None
    assert parse_hub_id("dir/config.json") is None


def test_hub_id_downloads_into_the_real_cache_then_works_offline(hub, tmp_path):
    online = _roofprof(
        tmp_path, hub, "predict", "-m", "acme/tiny-awq", "-g", "h100-sxm", "-f", "json"
    )
    assert online.returncode == 0, online.stderr
    first = json.loads(online.stdout)
    # the layout huggingface_hub writes: refs/main -> commit, snapshots/<commit>/ -> blobs
    repo = tmp_path / "hub" / "models--acme--tiny-awq"
    assert (repo / "refs" / "main").read_text() == COMMIT
    snap = repo / "snapshots" / COMMIT
    assert json.loads((snap / "config.json").read_text()) == TINY
    assert (snap / "config.json").resolve().parent == (repo / "blobs").resolve()
    from huggingface_hub import hf_hub_download

    found = hf_hub_download(
        "acme/tiny-awq", "config.json", cache_dir=tmp_path / "hub", local_files_only=True
    )
    assert Path(found) == snap / "config.json"
    # offline, with the Hub unreachable: the same prediction from the cache
    offline = _roofprof(
        tmp_path,
        _closed_port(),
        "predict",
        "-m",
        "acme/tiny-awq",
        "-g",
        "h100-sxm",
        "-f",
        "json",
        offline=True,
    )
    assert offline.returncode == 0, offline.stderr
    again = json.loads(offline.stdout)
    assert again["decode"] == first["decode"] and again["model"] == "acme/tiny-awq"
    block = again["checkpoint"]
    assert block["location"] == f"hf://acme/tiny-awq@{COMMIT}"
    assert block["source"] == "model.safetensors.index.json total_size"
    assert block["format"] == "awq-int4-g128" and block["stored_bytes"] == 1_234_567


def test_revision_is_honoured(hub, tmp_path):
    out = _roofprof(tmp_path, hub, "predict", "-m", f"acme/tiny-awq@{COMMIT}", "-g", "h100-sxm")
    assert out.returncode == 0, out.stderr
    assert "from model.safetensors.index.json total_size" in out.stderr


@pytest.mark.parametrize(
    ("model", "words"),
    [
        ("acme/gated", "is gated on the Hub: accept its licence at"),
        ("acme/nothing", "no model 'acme/nothing' on the Hub"),
        ("acme/tiny-awq@v9", "has no revision 'v9'"),
        ("acme/no-config", "has no config.json: not a transformers model"),
    ],
)
def test_hub_refusals_are_one_line(hub, tmp_path, model, words):
    line = _one_line_error(_roofprof(tmp_path, hub, "predict", "-m", model, "-g", "h100-sxm"))
    assert words in line


@pytest.mark.slow  # the client retries a refused connection with back-off (about 15 s)
def test_no_network_is_one_line(tmp_path):
    down = _one_line_error(_roofprof(tmp_path, _closed_port(), "predict", "-m", "acme/x"))
    assert "cannot reach the Hub" in down and "acme/x is not cached" in down


def test_an_offline_cache_miss_is_one_line(tmp_path):
    miss = _one_line_error(
        _roofprof(tmp_path, _closed_port(), "predict", "-m", "acme/x", offline=True)
    )
    assert "not in the Hugging Face cache and HF_HUB_OFFLINE is set" in miss


def test_a_shipped_hub_id_needs_no_network(tmp_path):
    out = _roofprof(
        tmp_path,
        _closed_port(),
        "predict",
        "-m",
        "meta-llama/Llama-3.1-8B",
        "-g",
        "h100-sxm",
        "-f",
        "json",
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["model"] == "meta-llama/Llama-3.1-8B"
    assert not (tmp_path / "hub").exists()


def test_safetensors_headers_are_read_by_range_and_kept_for_offline_use(hub, tmp_path):
    args = ("predict", "-m", "acme/tiny-st", "-g", "h100-sxm", "-f", "json")
    online = _roofprof(tmp_path, hub, *args)
    assert online.returncode == 0, online.stderr
    block = json.loads(online.stdout)["checkpoint"]
    assert block["source"] == "safetensors headers (1 files)"
    assert block["per_op_bits"]["q_proj"] == pytest.approx(4 + 20 / 128)
    # the weights were never fetched: only the small files are in the Hub cache
    blobs = tmp_path / "hub" / "models--acme--tiny-st" / "blobs"
    assert sum(f.stat().st_size for f in blobs.iterdir()) == len(FILES["config.json"])
    kept = tmp_path / "rp" / "safetensors" / "acme--tiny-st" / f"{COMMIT}.json"
    assert kept.is_file()
    offline = _roofprof(tmp_path, _closed_port(), *args, offline=True)
    assert offline.returncode == 0, offline.stderr
    assert json.loads(offline.stdout)["checkpoint"] == block


def test_hf_token_opens_a_private_repo(hub, tmp_path):
    args = ("predict", "-m", "acme/private", "-g", "h100-sxm", "-f", "json")
    refused = _one_line_error(_roofprof(tmp_path, hub, *args))
    assert "a private repo needs hf auth login or HF_TOKEN" in refused
    opened = _roofprof(tmp_path, hub, *args, token=TOKEN)
    assert opened.returncode == 0, opened.stderr
    assert json.loads(opened.stdout)["model"] == "acme/private"
