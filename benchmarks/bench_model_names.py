"""How long `roofprof predict` takes with a cached Hub id, against a shipped id (same run).

A Hugging Face cache is laid out as ``huggingface_hub`` documents it
(``models--org--name/blobs/<sha256>``, ``snapshots/<commit>/config.json`` → the blob,
``refs/main`` → the commit) in a temporary ``HF_HOME``; ``hf_hub_download(...,
local_files_only=True)`` must find it before anything is timed. Then, alternating, a fresh
process runs ``roofprof predict -m acme/llama-awq -g h100-sxm -f json`` with
``HF_HUB_OFFLINE=1`` and the same with the shipped ``llama-3.1-8b``; the best and median of
each, and their ratio, are printed (target: the cached Hub id under one second).

    python benchmarks/bench_model_names.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMIT = "f" * 40
REPO = "acme/llama-awq"


def make_cache(home: Path) -> None:
    """The shipped Llama 3.1 8B config with an AWQ ``quantization_config``, cached."""
    from roofprof._resources import data_root

    cfg = json.loads((data_root() / "models" / "llama-3.1-8b.json").read_text())
    cfg["quantization_config"] = {
        "bits": 4,
        "group_size": 128,
        "quant_method": "awq",
        "version": "gemm",
        "zero_point": True,
    }
    data = json.dumps(cfg).encode()
    repo = home / "hub" / ("models--" + REPO.replace("/", "--"))
    blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
    blob.parent.mkdir(parents=True)
    blob.write_bytes(data)
    snap = repo / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (snap / "config.json").symlink_to(os.path.relpath(blob, snap))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    from huggingface_hub import hf_hub_download

    found = hf_hub_download(REPO, "config.json", cache_dir=home / "hub", local_files_only=True)
    assert Path(found) == snap / "config.json", found


def timed(model: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "roofprof", "predict", "-m", model, "-g", "h100-sxm", "-f", "json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    seconds = time.perf_counter() - start
    if out.returncode:
        raise SystemExit(out.stderr)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        make_cache(home)
        env = {
            **os.environ,
            "HF_HOME": str(home),
            "HF_HUB_OFFLINE": "1",
            "ROOFPROF_CACHE": str(home / "rp"),
        }
        hub, shipped = [], []
        for _ in range(rounds):
            hub.append(timed(REPO, env))
            shipped.append(timed("llama-3.1-8b", env))
    print(f"cached hub id  best {min(hub):.3f} s  median {statistics.median(hub):.3f} s")
    print(f"shipped id     best {min(shipped):.3f} s  median {statistics.median(shipped):.3f} s")
    print(
        f"ratio (best)   {min(hub) / min(shipped):.3f}  target: hub id under 1 s: "
        f"{'yes' if min(hub) < 1.0 else 'no'}"
    )


if __name__ == "__main__":
    main()
