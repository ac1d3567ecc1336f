"""Streaming import of ncu CSV files: same results as before, bounded memory.

The streaming parser (``roofprof.counters.parse``) is compared with a frozen copy of the
parser it replaced (``tests/ncu_parse_before_streaming.py``): the same records and the same
warnings on every fixture and on mutated files, or an error from both.
"""

from __future__ import annotations

import dataclasses
import io
import tracemalloc
import warnings
from pathlib import Path

import ncu_parse_before_streaming as before
import pytest
from fuzz_support import examples, run_cli, strict_json, time_bound
from hypothesis import given
from hypothesis import strategies as st

from roofprof import counters
from roofprof.errors import RoofprofError

pytestmark = time_bound()  # CI bound per property test; none for long runs

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CSVS = sorted(FIXTURES.glob("ncu_*.csv"))
DETAILS = FIXTURES / "ncu_details_RTX5070_ncu2026.2_Olajide-Badejo_saxpy.csv"


def _outcome(fn, *args, **kwargs):
    """``("ok", records, warning texts)`` or ``("error", exception type)``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            records = fn(*args, **kwargs)
        except RoofprofError as exc:
            return ("error", type(exc).__name__)
    return ("ok", [dataclasses.asdict(r) for r in records], sorted(str(w.message) for w in caught))


@pytest.mark.parametrize("path", CSVS, ids=lambda p: p.name)
def test_streamed_parse_equals_the_previous_parser_on_every_fixture(path):
    old = _outcome(before.read_ncu_csv, path)
    assert old[0] == "ok" and old[1]
    assert _outcome(counters.read_ncu_csv, path) == old
    text = path.read_text(encoding="utf-8-sig")
    assert _outcome(counters.parse_ncu_csv, text, source="t") == _outcome(
        before.parse_ncu_csv, text, source="t"
    )


_JUNK = [
    b"",
    b"\n",
    b'"',
    b'""',
    b'","',
    b"n/a",
    b"-1",
    b"inf",
    b"\xff",
    b"\x00",
    b"\r",
    b"\r\n",
    b"\x0b",
    "\u2028".encode(),
    b'"ID",',
    b"==PROF== x",
    b"1,000",
    b"byte",
    b"%",
    b"\xef\xbb\xbf",
    b"No kernels were profiled",
    b'"Rule ',
]


@st.composite
def _mutated(draw):
    data = bytearray(draw(st.sampled_from(CSVS)).read_bytes())
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(data)))
        op = draw(st.integers(0, 3))
        if op == 0:
            data[i:i] = draw(st.sampled_from(_JUNK))
        elif op == 1:
            del data[i : i + draw(st.integers(1, 300))]
        elif op == 2:
            data = data[:i]
        else:
            lines = data.split(b"\n")
            j, k = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            lines.insert(j, lines[k])
            data = bytearray(b"\n".join(lines))
    return bytes(data)


@examples(60)
@given(data=_mutated())
def test_streamed_parse_equals_the_previous_parser_on_mutated_files(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("m") / "ncu.csv"
    path.write_bytes(data)
    old, new = _outcome(before.read_ncu_csv, path), _outcome(counters.read_ncu_csv, path)
    if any(line.count(b'"') % 2 for line in data.splitlines()):
        # a quote left open at a line's end: the csv module reads on into the next line
        # (a cell spanning lines, as real ncu writes), the line-based parser cut it there
        return
    if old[0] == "error":  # both refuse (the first defect in file order may differ)
        assert new[0] == "error", new
    else:
        assert new == old


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_line_breaks_and_bom_are_read_as_before(tmp_path, newline):
    text = DETAILS.read_text(encoding="utf-8-sig")
    path = tmp_path / "x.csv"
    path.write_bytes(("\ufeff" + newline.join(text.splitlines()) + newline).encode())
    old = _outcome(before.read_ncu_csv, path)
    assert old[0] == "ok" and _outcome(counters.read_ncu_csv, path) == old


def _folded_file(path: Path, megabytes: float) -> int:
    """A details page whose one kernel repeats its rows until the file has ``megabytes``."""
    lines = [
        ln for ln in DETAILS.read_text(encoding="utf-8-sig").splitlines() if ln.startswith('"')
    ]
    header, rows = lines[0], lines[1:]
    with open(path, "w", encoding="utf-8") as f:
        f.write(header + "\n")
        while f.tell() < megabytes * 1e6:
            f.write("\n".join(rows) + "\n")
    return path.stat().st_size


def test_memory_grows_with_the_kernels_not_with_the_file(tmp_path):
    """4 MB of rows folding into one kernel: the old parser held every line and row (about
    5× the file), the streamed one holds the kernel only."""
    size = _folded_file(tmp_path / "big.csv", 4)
    tracemalloc.start()
    try:
        (kernel,) = counters.read_ncu_csv(tmp_path / "big.csv")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < size / 8, (peak, size)
    (expected,) = counters.read_ncu_csv(DETAILS)  # the rows fold into the first occurrence
    assert kernel.metrics == expected.metrics and kernel.time_s == expected.time_s


def test_file_progress_is_in_bytes_and_ends_at_the_size(tmp_path, monkeypatch):
    import roofprof.counters.parse as parse

    monkeypatch.setattr(parse, "PROGRESS_EVERY", 50)
    size = _folded_file(tmp_path / "p.csv", 0.2)
    calls = []
    counters.read_ncu_csv(
        tmp_path / "p.csv", progress=lambda done, total: calls.append((done, total))
    )
    assert len(calls) > 5 and {t for _, t in calls} == {size}
    assert [d for d, _ in calls] == sorted(d for d, _ in calls) and calls[-1] == (size, size)


def test_write_json_streamed_is_the_one_shot_text():
    from roofprof.cli.counters import write_json_streamed
    from roofprof.units import dumps_strict

    records = counters.read_ncu_csv(CSVS[0]) + counters.read_ncu_csv(DETAILS)
    placements = counters.place_hierarchical(records)
    buf = io.StringIO()
    write_json_streamed(
        {"source": "s", "kernels": records, "hierarchical": placements, "x": []}, buf
    )
    one_shot = counters.records_to_json(records, placements, source="s", x=[])
    one_shot = {
        "source": "s",
        "kernels": one_shot["kernels"],
        "hierarchical": one_shot["hierarchical"],
        "x": [],
    }
    assert buf.getvalue() == dumps_strict(one_shot) + "\n"
    buf = io.StringIO()
    write_json_streamed({}, buf)
    assert buf.getvalue() == "{}\n"


def test_cli_import_of_a_large_file_says_so_on_stderr_and_prints_strict_json(tmp_path, monkeypatch):
    import roofprof.cli.counters as cli_counters

    monkeypatch.setattr(cli_counters, "BIG_CSV_BYTES", 1000)
    rc, out, err = run_cli(["counters", "import", str(DETAILS), "--format", "json"])
    assert rc == 0, err
    assert err.startswith("roofprof: reading 0 MB of Nsight Compute output")
    payload = strict_json(out)
    (record,) = counters.read_ncu_csv(DETAILS)
    assert payload["source"] == str(DETAILS)
    assert payload["kernels"][0]["time_s"] == pytest.approx(record.time_s)
    assert payload["kernels"][0]["dram_bytes"] == pytest.approx(record.dram_bytes)
    assert len(payload["hierarchical"]) == 1


def test_benchmark_file_generator_builds_a_parsable_export(tmp_path):
    """benchmarks/bench_ncu_import.py's file: every page kind parses to the kernels it wrote."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "bench_ncu_import",
        Path(__file__).resolve().parents[1] / "benchmarks" / "bench_ncu_import.py",
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for page in ("details", "raw"):
        path = tmp_path / f"{page}.csv"
        kernels = bench.make_csv(path, 0.05, page)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            records = counters.read_ncu_csv(path)
        assert len(records) == kernels > 2
        assert [r.id for r in records] == list(range(kernels))
        assert {r.time_s for r in records[:2]} == {
            k.time_s for k in counters.read_ncu_csv(DETAILS)
        } | {
            k.time_s
            for k in counters.read_ncu_csv(
                FIXTURES / "ncu_details_RTX5070_ncu2026.2_Olajide-Badejo_gemm_tiled.csv"
            )
        }
