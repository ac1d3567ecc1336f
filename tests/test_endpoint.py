"""`roofprof endpoint` against an in-process streaming server with scripted delays.

Timing tolerance: the server stamps each write with perf_counter in this process; a text
chunk's measured arrival must be within 1 ms of its write as the median over requests and
chunks (TTFT, first event, ITL), and any single reading within 5 ms, since another job on a
shared 2-core machine can delay one wake-up by a few ms. Scripted delays are 20–30 ms, so a
reading off by one chunk still fails.
"""

from __future__ import annotations

import _thread
import json
import signal
import socket
import statistics
import time

import pytest
from endpoint_server import Script, ScriptedServer

from roofprof.cli import main
from roofprof.endpoint.client import ConnectFailure, HttpStatusError, Target, stream_request
from roofprof.endpoint.metrics import level_summary, parse_slo, stats
from roofprof.endpoint.prompts import WordPrompts
from roofprof.endpoint.protocol import Connection, SweepPlan, capped_prompts, measure
from roofprof.endpoint.records import LevelResult, RequestRecord
from roofprof.errors import ConfigError, RoofprofError

TOL_S = 1e-3  # a median of readings
ONE_READING_TOL_S = 5e-3  # a single reading


class StampedClock:
    """perf_counter that remembers its first reading (the client's t0)."""

    def __init__(self):
        self.t0 = None

    def __call__(self) -> float:
        now = time.perf_counter()
        if self.t0 is None:
            self.t0 = now
        return now


def _one(srv, api="completions", max_tokens=6, **kw):
    target = Target.parse(srv.url, api=api, model="scripted", timeout_s=kw.pop("timeout", 5.0))
    body = {"model": "scripted", "max_tokens": max_tokens, "stream": True}
    body["messages" if api == "chat" else "prompt"] = (
        [{"role": "user", "content": "hi"}] if api == "chat" else "hi"
    )
    clock = StampedClock()
    record, _ = stream_request(target, body, clock=clock, **kw)
    return record, clock.t0, srv.served[-1]


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_measured_ttft_and_itl_match_the_scripted_writes(api):
    ttft_diffs, itl_diffs, first_event_diffs = [], [], []
    with ScriptedServer(Script(first_s=0.03, gap_s=0.02)) as srv:
        for _ in range(3):  # three requests: their median is held to 1 ms
            record, t0, served = _one(srv, api, max_tokens=6)
            texts = [t for kind, t in served.writes if kind == "text"]
            assert record.error == "" and len(record.chunk_s) == 6 == len(texts)
            ttft_diffs.append(abs(record.ttft_s - (texts[0] - t0)))
            assert record.ttft_s >= 0.03
            gaps = [b - a for a, b in zip(texts, texts[1:], strict=False)]
            itl_diffs += [abs(m - g) for m, g in zip(record.itls_s, gaps, strict=True)]
            # one late chunk shortens the next gap by as much
            assert all(g >= 0.02 - ONE_READING_TOL_S for g in record.itls_s)
            assert record.output_tokens == 6 and record.tokens_from == "usage"  # on the last chunk
            assert record.done_sentinel is False  # no [DONE], as transformers serve
            assert len(record.itls_s) == 5  # the final empty-text chunk is not an ITL
            if api == "chat":  # the role-only chunk is the first event, not the first token
                role = next(t for kind, t in served.writes if kind == "role")
                first_event_diffs.append(abs(record.first_event_s - (role - t0)))
                assert record.ttft_s - record.first_event_s > 0.025
    for diffs in (ttft_diffs, itl_diffs, first_event_diffs):
        if diffs:
            assert statistics.median(diffs) < TOL_S and max(diffs) < ONE_READING_TOL_S, diffs


def test_usage_on_a_separate_chunk_and_done_sentinel_are_read():
    with ScriptedServer(Script(usage_on_last=False, done=True, tokens=4)) as srv:
        record, _, _ = _one(srv, max_tokens=4)
    assert record.done_sentinel and record.output_tokens == 4 and record.server_prompt_tokens == 1


def test_no_usage_falls_back_to_the_tokenizer_or_the_chunk_count():
    with ScriptedServer(Script(usage=False, tokens=5, first_s=0.0, gap_s=0.0)) as srv:
        by_chunks, _, _ = _one(srv, max_tokens=5)
        by_tok, _, _ = _one(srv, max_tokens=5, count_tokens=lambda text: len(text.split()) * 2)
    assert (by_chunks.output_tokens, by_chunks.tokens_from) == (5, "chunks")
    assert (by_tok.output_tokens, by_tok.tokens_from) == (10, "tokenizer")


def test_a_stalled_stream_is_a_recorded_error_not_a_hang():
    with ScriptedServer(Script(first_s=0.0, gap_s=0.0, stall_s=3.0, stall_after=2)) as srv:
        start = time.perf_counter()
        record, _, _ = _one(srv, max_tokens=5, timeout=0.3)
    assert time.perf_counter() - start < 2.0
    assert "stalled" in record.error and len(record.chunk_s) == 2 and not record.ok


def test_malformed_sse_is_a_recorded_error():
    with ScriptedServer(Script(first_s=0.0, gap_s=0.0, malformed_at=2)) as srv:
        record, _, _ = _one(srv, max_tokens=5)
    assert record.error.startswith("malformed SSE event") and not record.ok


def test_http_errors_carry_the_servers_message():
    with ScriptedServer(Script(status=503, message="overloaded, retry later")) as srv:
        with pytest.raises(HttpStatusError, match="HTTP 503: overloaded, retry later"):
            _one(srv)
    with ScriptedServer(Script()) as srv:
        with pytest.raises(HttpStatusError, match="422.*Unexpected fields.*ignore_eos"):
            target = Target.parse(srv.url, model="scripted")
            stream_request(target, {"model": "scripted", "prompt": "x", "ignore_eos": True})


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _cli(args, capsys, tmp_path):
    rc = main(["endpoint", *args, "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    return rc, out, err


QUICK = ["--prompt", "4,8", "-n", "3", "--requests", "2", "--floor-requests", "2", "--warmup", "0"]


@pytest.mark.parametrize(
    "url, expected",
    [
        (lambda: f"http://127.0.0.1:{_free_port()}", "refused"),
        (lambda: "http://no-such-host.invalid:8000", "cannot resolve host"),
        (lambda: "ftp://127.0.0.1:1", "give http://HOST"),
        (lambda: "http://user:pw@127.0.0.1:1", "no credentials"),
    ],
)
def test_unreachable_and_bad_urls_are_one_line_exit_2(url, expected, capsys, tmp_path):
    rc, out, err = _cli(["--url", url(), "--timeout", "2", *QUICK], capsys, tmp_path)
    assert rc == 2 and expected in err and err.count("\n") == 1 and "Traceback" not in err


def test_tls_to_a_plain_http_server_is_one_line_exit_2(capsys, tmp_path):
    with ScriptedServer() as srv:
        url = srv.url.replace("http://", "https://")
        rc, _, err = _cli(["--url", url, "--timeout", "2", *QUICK], capsys, tmp_path)
    assert rc == 2 and "TLS" in err and err.count("\n") == 1


def test_a_refused_first_request_shows_the_servers_message(capsys, tmp_path):
    with ScriptedServer(Script(status=500, message="CUDA out of memory")) as srv:
        rc, _, err = _cli(["--url", srv.url, *QUICK], capsys, tmp_path)
    assert rc == 2 and "HTTP 500: CUDA out of memory" in err and err.count("\n") == 1
    with ScriptedServer(Script()) as srv:
        rc, _, err = _cli(
            ["--url", srv.url, "--extra", '{"ignore_eos": true}', *QUICK], capsys, tmp_path
        )
    assert rc == 2 and "HTTP 422" in err and "ignore_eos" in err


def test_a_server_refusing_optional_fields_is_measured_without_them(capsys, tmp_path):
    strict = frozenset({"model", "prompt", "max_tokens", "stream"})
    script = Script(first_s=0.0, gap_s=0.0, allowed_fields=strict)
    with ScriptedServer(script) as srv:
        rc, out, err = _cli(["--url", srv.url, "-f", "json", *QUICK], capsys, tmp_path)
    data = json.loads(out)
    assert rc == 0, err
    assert data["settings"]["fields_dropped"] == ["stream_options", "temperature"]
    assert any("refused" in n for n in data["notes"])
    assert [lv["completed"] for lv in data["levels"]] == [2, 2]


def test_the_json_has_vllm_field_names_and_per_request_samples(capsys, tmp_path):
    with ScriptedServer(Script(first_s=0.02, gap_s=0.02)) as srv:
        rc, out, err = _cli(
            [
                "--url",
                srv.url,
                "-f",
                "json",
                "--slo",
                "ttft=1000,tpot=1",
                "--concurrency",
                "1,2",
                *QUICK,
            ],
            capsys,
            tmp_path,
        )
    assert rc == 0, err
    data = json.loads(out)
    assert data == json.loads((tmp_path / "out" / "endpoint.json").read_text())
    level = data["levels"][0]
    for metric in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std", "p99", "p90"):
            assert isinstance(level[f"{stat}_{metric}_ms"], float)
    for key in (
        "output_throughput",
        "request_throughput",
        "ttfts",
        "itls",
        "input_lens",
        "output_lens",
        "errors",
        "completed",
        "failed",
        "duration",
    ):
        assert key in level
    assert level["output_lens"] == [3, 3] and level["input_lens"] == [4, 4]
    assert level["request_goodput"] == 0.0  # TPOT ≈ 20 ms never meets a 1 ms SLO
    assert [(lv["prompt_tokens"], lv["max_concurrency"]) for lv in data["levels"]] == [
        (4, 1),
        (8, 1),
        (4, 2),
    ]
    assert data["network_floor"]["median_ttft_ms"] >= 20.0
    assert "TPOT = (E2E − TTFT) / (n − 1)" in data["formulas"]["tpot"]
    assert (tmp_path / "out" / "endpoint.csv").read_text().startswith("prompt_tokens,")
    assert "<img" in (tmp_path / "out" / "endpoint.html").read_text()
    # distinct prompts, warm-up excluded, requests counted
    prompts = [s.body["prompt"] for s in srv.served]
    assert len(prompts) == len(set(prompts))


def test_the_api_key_is_sent_and_never_printed_or_saved(capsys, tmp_path, monkeypatch):
    key = "sk-test-4c1f9e-secret"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    with ScriptedServer(Script(first_s=0.0, gap_s=0.0)) as srv:
        rc, out, err = _cli(["--url", srv.url, *QUICK], capsys, tmp_path)
        sent = {s.headers.get("Authorization") for s in srv.served}
    assert rc == 0 and sent == {f"Bearer {key}"}
    assert key not in out + err
    for path in (tmp_path / "out").iterdir():
        assert key not in path.read_text()
    assert key not in repr(Target.parse(srv.url, api_key=key))


def test_per_request_failures_are_recorded_during_a_level(capsys, tmp_path):
    def script(body):
        # the first request, the 1-token floor and 4-word prompts succeed; the 8-word level fails
        level = len(body["prompt"].split()) == 8 and body["max_tokens"] == 3
        return Script(status=503, message="busy") if level else (Script(first_s=0.0, gap_s=0.0))

    with ScriptedServer(script) as srv:
        rc, out, err = _cli(["--url", srv.url, "-f", "json", *QUICK], capsys, tmp_path)
    data = json.loads(out)
    assert rc == 0, err
    assert (
        data["levels"][1]["failed"] == 2 and data["levels"][1]["errors"] == ["HTTP 503: busy"] * 2
    )


@pytest.fixture
def ctrl_c_delivered():
    """Python's own SIGINT handler for the test: ``_thread.interrupt_main`` does nothing when
    SIGINT is ignored, as it is for a background job of a non-interactive shell."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.usefixtures("ctrl_c_delivered")
def test_ctrl_c_writes_what_was_measured_whole(capsys, tmp_path):
    def interrupt(count):
        if count == 6:  # preflight, 2 floor requests, level 1 (2), then the first of level 2
            _thread.interrupt_main()

    with ScriptedServer(Script(first_s=0.02, gap_s=0.02), on_request=interrupt) as srv:
        rc, out, err = _cli(["--url", srv.url, "-f", "json", *QUICK], capsys, tmp_path)
    assert rc == 130 and "interrupted" in err and "Traceback" not in err
    data = json.loads((tmp_path / "out" / "endpoint.json").read_text())
    assert data["interrupted"] is True and data["levels"][0]["completed"] == 2


def test_poisson_rate_level_and_time_bound():
    with ScriptedServer(Script(first_s=0.0, gap_s=0.0)) as srv:
        connection = Connection(Target.parse(srv.url, model="scripted"), WordPrompts())
        plan = SweepPlan(
            prompt_lengths=(4,),
            output_tokens=2,
            rates=(50.0,),
            requests=6,
            warmup=0,
            floor_requests=0,
            draw=3,
        )
        result = measure(connection, plan, url=srv.url, model="scripted")
    with ScriptedServer(Script(first_s=0.02, gap_s=0.0)) as slow:  # >= 20 ms a request
        connection = Connection(Target.parse(slow.url, model="scripted"), WordPrompts())
        bounded = measure(
            connection,
            SweepPlan(
                prompt_lengths=(4,),
                output_tokens=2,
                requests=50,
                warmup=0,
                floor_requests=0,
                level_seconds=0.1,
                draw=4,
            ),
            url=slow.url,
            model="scripted",
        )
    rate_level = result.levels[-1]
    assert rate_level.request_rate == 50.0 and len(rate_level.requests) == 6
    sent = [r.sent_s for r in rate_level.requests]
    assert sent == sorted(sent) and sent[-1] > 0.01  # spread by the Poisson arrivals
    assert len(bounded.levels[0].requests) < 50 and "time bound" in bounded.levels[0].stopped_by


def test_statistics_and_slo_parsing():
    assert stats([]) == dict.fromkeys(("mean", "median", "std", "p90", "p99"))
    s = stats([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (s["median"], s["p90"], round(s["std"], 4)) == (3.0, 4.6, 1.4142)
    with pytest.raises(ConfigError, match="valid choices: ttft, tpot, e2el"):
        parse_slo("itl=5")
    with pytest.raises(ConfigError, match="positive number"):
        parse_slo("ttft=-1")
    rec = RequestRecord(0, 8, 3, 0.0, chunk_s=(0.1, 0.2, 0.3), output_tokens=3)
    bad = RequestRecord(1, 8, 3, 0.0, error="HTTP 500: x")
    summary = level_summary(LevelResult(8, 3, 1, None, (rec, bad), 1.0), {"ttft": 0.15})
    assert summary["completed"] == 1 and summary["failed"] == 1
    assert summary["request_goodput"] == 1.0 and summary["output_throughput"] == 3.0
    assert summary["errors"] == ["", "HTTP 500: x"] and summary["output_lens"] == [3, 0]
    assert summary["median_tpot_ms"] == pytest.approx(100.0)


def test_prompts_capped_by_the_context():
    assert capped_prompts([16, 2000], 128, None) == ([16, 2000], "")
    with pytest.raises(ConfigError, match="no room"):
        capped_prompts([16], 128, 100)


def test_connect_failure_is_a_roofprof_error():
    target = Target.parse(f"http://127.0.0.1:{_free_port()}", model="m", timeout_s=1)
    with pytest.raises(ConnectFailure, match="refused"):
        stream_request(target, {"model": "m", "prompt": "x", "max_tokens": 1})


def test_levels_are_placed_on_the_datasheet_roofline_of_the_named_model(capsys, tmp_path):
    """Llama 3.1 8B on an H100: the long prompt's decode is predicted 13 % slower (its KV)."""
    with ScriptedServer(Script(first_s=0.02, gap_s=0.02)) as srv:
        rc, out, err = _cli(
            [
                "--url",
                srv.url,
                "-f",
                "json",
                "--gpu",
                "h100-sxm",
                "--roofprof-model",
                "llama-3.1-8b",
                "--prompt",
                "16,16000",
                "-n",
                "3",
                "--requests",
                "2",
                "--floor-requests",
                "2",
                "--warmup",
                "0",
                "--concurrency",
                "1,4",
            ],
            capsys,
            tmp_path,
        )
    assert rc == 0, err
    roof = json.loads(out)["roofline"]
    assert (roof["model"], roof["estimator"], roof["dtype"]) == ("llama-3.1-8b", "spec", "bf16")
    short, long, four = roof["levels"]
    assert (short["prompt_tokens"], long["prompt_tokens"]) == (16, 16000)
    assert long["context_tokens"] == 16000 + 2  # prompt + half the output
    assert long["kv_cache_bytes"] == pytest.approx(2.1e9, rel=0.01)
    assert roof["kv_slowdown"]["predicted_percent"] == pytest.approx(13.0, abs=1.0)
    # ~20 ms a token scripted: far below the H100's ~210 tokens/s
    assert 15 < short["decode_percent_of_roofline"] < 30
    assert four["concurrency"] == 4 and roof["batch_curve"]["batches"] == [1, 2, 4]
    assert short["predicted_decode_tokens_per_s"] == pytest.approx(
        roof["batch_curve"]["predicted_output_throughput"][0]
    )


def test_a_server_that_accepts_but_never_answers_is_one_line_exit_2(capsys, tmp_path):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel accepts connections; nothing ever answers
    try:
        start = time.perf_counter()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        rc, _, err = _cli(["--url", url, "--timeout", "0.5", *QUICK], capsys, tmp_path)
    finally:
        silent.close()
    assert rc == 2 and "no answer" in err and err.count("\n") == 1
    assert time.perf_counter() - start < 10


def test_the_servers_tokenize_makes_word_prompts_exact(capsys, tmp_path):
    with ScriptedServer(Script(first_s=0.0, gap_s=0.0), tokenize=True) as srv:
        rc, out, err = _cli(
            ["--url", srv.url, "-f", "json", "--prompt", "40,300", *QUICK[2:]], capsys, tmp_path
        )
        prompts = [s.body["prompt"] for s in srv.served if s.body.get("max_tokens") == 3]
    assert rc == 0, err
    data = json.loads(out)
    assert "aligned by the server's /tokenize" in " ".join(data["notes"])
    counts = [sum(1 + (len(w) > 6) for w in p.split()) for p in prompts]
    assert counts == [40, 40, 300, 300]  # what the server counts, not the word count
    assert any(len(p.split()) != 40 for p in prompts[:2])


def test_the_python_facade_measures_before_and_after_the_package_is_imported():
    import roofprof

    with ScriptedServer(Script(first_s=0.0, gap_s=0.0)) as srv:
        kw = dict(prompt_lengths=(4,), output_tokens=2, requests=1, floor_requests=1, warmup=0)
        first = roofprof.endpoint(srv.url, **kw)
        import roofprof.endpoint.client  # noqa: F401  (binds the package to roofprof.endpoint)

        second = roofprof.endpoint(srv.url, **kw)
    for r in (first, second):
        assert r.model == "scripted" and r.levels[0].requests[0].output_tokens == 2
        assert r.floor is not None and len(r.floor.ttft_s) == 1 and r.roofline is None


def test_a_refused_key_is_one_line_with_the_servers_message(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with ScriptedServer(Script(status=401, message="invalid API key")) as srv:
        rc, _, err = _cli(["--url", srv.url, "--api-key", "wrong", *QUICK], capsys, tmp_path)
        asked = [s.body for s in srv.served]
    assert rc == 2 and "HTTP 401: invalid API key" in err and "wrong" not in err
    assert asked == []  # refused at /v1/models: no completion was sent


def _folder_model(tmp_path):
    from conftest import write_config

    folder = tmp_path / "my-tiny-llama"
    folder.mkdir()
    write_config(folder, "config.json", max_position_embeddings=4096)
    return folder


def test_the_served_model_is_found_as_predict_finds_it_without_fetching(tmp_path, monkeypatch):
    import roofprof.checkpoints as ckpt
    from roofprof.endpoint.placement import roofprof_model_for

    def no_hub(text):
        if not __import__("pathlib").Path(text).exists():
            raise AssertionError(f"fetched {text!r} from the Hub")
        return real(text)

    real = ckpt.locate
    monkeypatch.setattr(ckpt, "locate", no_hub)
    folder = _folder_model(tmp_path)
    assert roofprof_model_for(None, str(folder)) == (str(folder), "")  # a model folder
    assert roofprof_model_for(None, str(folder / "config.json"))[0] == str(folder / "config.json")
    assert roofprof_model_for(None, "llama-3.1-8b")[0] == "llama-3.1-8b"
    assert roofprof_model_for(None, "meta-llama/Llama-3.1-8B")[0] == "meta-llama/Llama-3.1-8B"
    assert roofprof_model_for(None, "meta-llama/Llama-3.1-8B-Instruct")[0] == "llama-3.1-8b"
    name, why = roofprof_model_for(None, "some-org/served-alias")  # not fetched implicitly
    assert name is None and "--model" in why and "Hub id" in why
    monkeypatch.undo()
    with pytest.raises(RoofprofError, match="unknown model"):  # given explicitly, it must load
        roofprof_model_for(str(tmp_path / "missing" / "config.json"), "scripted")


@pytest.mark.parametrize("flag", ["--model", "-m", "--roofprof-model"])
def test_model_takes_a_local_folder_as_predict_does(flag, capsys, tmp_path):
    folder = _folder_model(tmp_path)
    with ScriptedServer(Script(first_s=0.0, gap_s=0.0)) as srv:
        rc, out, err = _cli(
            ["--url", srv.url, "-f", "json", "--gpu", "h100-sxm", flag, str(folder), *QUICK],
            capsys,
            tmp_path,
        )
    assert rc == 0, err
    roof = json.loads(out)["roofline"]
    assert roof["model"] == "my-tiny-llama" and roof["estimator"] == "spec"  # its label
    assert [row["prompt_tokens"] for row in roof["levels"]] == [4, 8]


def test_an_unknown_model_is_one_line_exit_2_before_anything_is_sent(capsys, tmp_path):
    with ScriptedServer(Script(first_s=0.0, gap_s=0.0)) as srv:
        rc, _, err = _cli(
            ["--url", srv.url, "--gpu", "h100-sxm", "--model", "no-such-model", *QUICK],
            capsys,
            tmp_path,
        )
        sent = [s.body for s in srv.served]
    assert rc == 2 and "no-such-model" in err and err.count("\n") == 1 and "Traceback" not in err
    assert sent == []


def test_ctrl_c_while_predicting_keeps_the_measured_levels(capsys, tmp_path, monkeypatch):
    import roofprof.api as api

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "sweep", interrupted)
    with ScriptedServer(Script(first_s=0.0, gap_s=0.0)) as srv:
        rc, out, err = _cli(
            ["--url", srv.url, "-f", "json", "--gpu", "h100-sxm", "-m", "llama-3.1-8b", *QUICK],
            capsys,
            tmp_path,
        )
    assert rc == 130 and "measured before Ctrl-C" in err and "Traceback" not in err
    data = json.loads((tmp_path / "out" / "endpoint.json").read_text())
    assert data["interrupted"] is True and data["roofline"] is None
    assert [lv["completed"] for lv in data["levels"]] == [2, 2]
    assert "interrupted while predicting" in " ".join(data["notes"])
    assert (tmp_path / "out" / "endpoint.csv").read_text().count("\n") >= 3


@pytest.mark.usefixtures("ctrl_c_delivered")
def test_ctrl_c_during_the_network_floor_exits_130_with_the_file_whole(capsys, tmp_path):
    def interrupt(count):
        if count == 2:  # the preflight, then the first 1-token floor request
            _thread.interrupt_main()

    with ScriptedServer(Script(first_s=0.02, gap_s=0.02), on_request=interrupt) as srv:
        rc, _, err = _cli(["--url", srv.url, "-f", "json", *QUICK], capsys, tmp_path)
    assert rc == 130 and "Traceback" not in err
    data = json.loads((tmp_path / "out" / "endpoint.json").read_text())
    assert data["interrupted"] is True and data["levels"] == []
