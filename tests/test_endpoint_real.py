"""`roofprof endpoint` against a real `transformers serve` with a tiny local Llama.

The model is made offline by scripts/make_tiny_llama.py (a 0.43 M-parameter random Llama,
a tokenizer trained locally); the server is started on 127.0.0.1 and stopped by the test.
Timing bounds are loose: another job on the 2 shared cores can slow each token ~9×.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(url, model folder) of a running `transformers serve`."""
    for mod in ("fastapi", "uvicorn", "torch", "tokenizers"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"transformers serve needs {mod} (pip install 'roofprof[serve,torch]')")
    folder = tmp_path_factory.mktemp("tiny") / "tiny-llama"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_tiny_llama.py"), str(folder)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    exe = shutil.which("transformers") or str(Path(sys.executable).parent / "transformers")
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    log = open(folder.parent / "serve.log", "wb")
    proc = subprocess.Popen(
        [exe, "serve", str(folder), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 180
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail(
                    "transformers serve did not start: "
                    + (folder.parent / "serve.log").read_text(errors="replace")[-2000:]
                )
            time.sleep(0.2)
        yield url, folder
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_a_real_server_is_measured_and_placed_on_the_cpu_roofline(served, tmp_path, capsys):
    from roofprof.api import predict
    from roofprof.cli import main

    url, folder = served
    rc = main(
        [
            "endpoint",
            "--url",
            url,
            "--device",
            "cpu",
            "--prompt",
            "16,2000",
            "-n",
            "24",
            "--concurrency",
            "1,2",
            "--requests",
            "3",
            "--floor-requests",
            "3",
            "--out",
            str(tmp_path),
            "-f",
            "json",
        ]
    )
    out, err = capsys.readouterr()
    assert rc == 0, err
    data = json.loads(out)
    assert data["model_id"] == str(folder)
    assert "exact lengths" in " ".join(data["notes"])
    short, long, pair = data["levels"]
    for level in (short, long, pair):
        assert level["failed"] == 0, level["errors"]
        assert level["output_lens"] == [24] * 3  # usage.completion_tokens: runs to max_tokens
        assert level["tokens_from"] == ["usage"]
        assert 0 < level["median_ttft_ms"] < 20_000
        assert 0 < level["median_tpot_ms"] < 2_000
        # ITLs are the gaps between text chunks: one per token while the server keeps up,
        # fewer where it sends several tokens in one chunk (transformers 5.25 does when its
        # writer falls behind, as on 2 busy cores: " your your")
        assert all(1 <= len(itl) <= 23 for itl in level["itls"]), level["itls"]
        assert all(gap >= 0 for itl in level["itls"] for gap in itl)
        for ttft, itl in zip(level["ttfts"], level["itls"], strict=True):
            assert ttft + sum(itl) <= level["duration"] + 1e-6
    # exact prompts: the server counts the text's tokens plus its BOS
    assert short["input_lens"] == [17] * 3 and long["input_lens"] == [2001] * 3
    assert long["median_ttft_ms"] > short["median_ttft_ms"]  # prefill of 2,000 tokens shows
    roof = data["roofline"]
    assert roof["estimator"] == "measured" and roof["dtype"] == "fp32"
    row = roof["levels"][0]
    assert row["prompt_tokens"] == 17 and row["context_tokens"] == 17 + 12
    assert 0 < row["decode_percent_of_roofline"] < 1000
    assert roof["kv_slowdown"]["long_prompt_tokens"] == 2001
    assert roof["batch_curve"]["batches"] == [1, 2]
    # the same prediction as `roofprof predict --device cpu --estimator measured`
    p = predict(
        str(folder / "config.json"),
        estimator="measured",
        device="cpu",
        dtype="fp32",
        prompt_tokens=17,
        context_tokens=29,
    )
    # each measures this shared CPU afresh: the same op timings within a factor of 2
    ratio = row["predicted_decode_tokens_per_s"] * p.decode.seconds / p.decode.workload.batch
    assert 0.5 < ratio < 2.0
    assert (tmp_path / "endpoint.html").stat().st_size > 10_000


def test_chat_on_a_real_server_takes_ttft_at_the_first_content(served, tmp_path, capsys):
    from roofprof.cli import main

    url, _ = served
    rc = main(
        [
            "endpoint",
            "--url",
            url,
            "--api",
            "chat",
            "--prompt",
            "500",
            "-n",
            "8",
            "--requests",
            "2",
            "--floor-requests",
            "0",
            "--out",
            str(tmp_path),
            "-f",
            "json",
            "--no-html",
        ]
    )
    out, err = capsys.readouterr()
    assert rc == 0, err
    level = json.loads(out)["levels"][0]
    assert level["completed"] == 2 and level["output_lens"] == [8, 8]
    # transformers serve sends a role-only chunk before prefill: the first event comes first
    assert level["median_first_event_ms"] < level["median_ttft_ms"]
