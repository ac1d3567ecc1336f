"""Benchmark the CPU roofline's memory ceilings against BabelStream, alternating, in one run.

BabelStream (UoB-HPC/BabelStream, its OpenMP build, vendored in ``benchmarks/babelstream/``
with its licence) is the reference people quote for memory bandwidth. A round interleaves
it (``-n 50``, its default arrays of 2^25 doubles: 256 MiB each, 8 × this machine's LLC)
with ``roofprof roofline --device cpu --quick --format json`` in a fresh process, as a user
would: B R B R B R B (``--repeats 3``). Both report a best (BabelStream the fastest of its
50 iterations, roofprof the fastest call on its DRAM plateau), and on a shared host the
memory system's speed moves by ±25 % from one 5-second run to the next (measured: the
spread of the round's BabelStream runs is in the result), so one run of each is a sample of
the neighbours, not of the tool. The round's ratio is the best roofprof reached over the
best BabelStream reached in the same interleaved window. Ratios per round, roofprof ÷
BabelStream:

* ``DRAM read`` ÷ BabelStream ``Dot`` (both read-only streams),
* ``DRAM copy`` ÷ ``Copy`` and ``DRAM triad`` ÷ ``Triad`` (same byte counts, write-allocate
  not counted by either),
* ``DRAM read`` ÷ ``Dot (vectorised)``: BabelStream's Dot from a second build with
  ``-ffast-math``. The stock build (``-O3`` alone) may not reorder the sum, so its Dot adds
  one element after another into one register: on a 2-core Zen 4 guest that chain caps it at
  ~35 GB/s however fast memory is (measured with arrays that fit the caches, recorded as
  ``dot_in_cache``), below what Copy and Triad read from DRAM. The vectorised build sums in
  SIMD lanes, as roofprof's read does; the other kernels compile the same in both builds.

The interleaved build also sets BabelStream's own ``ALIGNMENT`` to 64 bytes
(``-DALIGNMENT=64``, roofprof's alignment). Its default, 2 MiB, starts the three arrays at
the same offset modulo 2 MiB, so ``a[i]``, ``b[i]`` and ``c[i]`` fall in the same cache sets
and DRAM banks; on this guest's fast memory state that caps its Copy at ~40 GB/s where the
64-byte-aligned build reads up to 44 GB/s (alternating runs; Dot 2-7 % higher, Triad within
2 %). The stock build (default alignment, no ``-ffast-math``) runs once per round after the
window, its kernels recorded beside the ratios as ``stock_ratios``, for reference.

Each run of either tool runs beside a :class:`physmem.Ballast`: a helper process that holds
the free memory's small blocks (below 2 MiB) until the run ends. Linux serves a page fault
from the smallest free block, so otherwise the arrays a process writes first (BabelStream's,
at its start) land on frames scattered over memory and stream up to ~20 % slower than the
buffer roofprof writes after Python's start-up has used up those blocks. Where frame numbers
are readable (root), the physical locality both tools' arrays got is recorded per run
(``physical_memory``); ``--no-ballast`` leaves the helper out.

BabelStream's arrays live on ordinary 4 KiB pages where transparent huge pages are
``madvise`` only (a ``new``'d array asks for none), roofprof's numpy buffers ask for huge
pages; in a KVM guest a TLB miss is a two-level page walk and the 4 KiB stream loses up to
~40 %. So each round runs roofprof twice: on 4 KiB pages (``NUMPY_MADVISE_HUGEPAGE=0``, like
for like: the ratio the target is for) and as it runs by default (huge pages).

Target: 0.95–1.10 like for like (read ÷ vectorised Dot, copy ÷ Copy, triad ÷ Triad, all on
4 KiB pages) in every round on a quiet machine (the benchmark waits for ≥ 90 % idle before
each phase and records what it saw). The stock Dot and the huge-page run are recorded once
per round, after the window, for reference. The target is judged on steady rounds, those
in which each tool's own runs agree (the slowest run of each kernel ≥ 0.90 × its fastest,
``STEADY``, for BabelStream's runs and for roofprof's, ``babelstream_run_spread`` and
``roofprof_run_spread``): a ratio of two bests compares the tools only when both saw the
same memory system through the window. An unsteady round is recorded, with which tool's
runs moved, and another is run, up to ``--max-rounds``. Beside the rounds, every run of
every round is pooled and the tools are compared at each of the host's two speeds
(:func:`levels`, ``level_matched``): the median run of each at the fast level and at the
slow one.

Usage::

    python benchmarks/bench_babelstream.py [--rounds 3] [--repeats 3] [--out babelstream_cpu.json]
    python benchmarks/bench_babelstream.py --levels benchmarks/results/babelstream_cpu_*.json
    python benchmarks/bench_babelstream.py --alignment-ab 12 [--out alignment.json]
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_cpu_roofline import QUIET_LOG, lscpu, wait_quiet  # noqa: E402
from physmem import Ballast, mapped_locality  # noqa: E402

SOURCES = HERE / "babelstream"
#: BabelStream's kernel → the roofprof DRAM ceiling that measures the same traffic.
PAIRS = {"Dot": "DRAM read", "Copy": "DRAM copy", "Triad": "DRAM triad"}
#: The vectorised Dot (the ``-ffast-math`` build) against the DRAM read.
VEC_DOT = "Dot (vectorised)"
#: Doubles per array of the in-cache run (1 MiB each: L2/L3-resident), where Dot's add
#: chain, not memory, sets its speed.
IN_CACHE_ELEMENTS = 1 << 17
#: BabelStream's default doubles per array (2^25: 256 MiB).
DEFAULT_ELEMENTS = 1 << 25
TARGET = (0.95, 1.10)
#: The like-for-like pairs the target is for (the stock Dot is capped by its add chain).
#: A round is steady when each BabelStream kernel's slowest run of the round is at least this
#: fraction of its fastest: the host's memory system held still enough to compare against.
STEADY = 0.90
#: BabelStream's ``ALIGNMENT`` for the interleaved build: roofprof's own (64 bytes), not its
#: 2 MiB default, which puts its three arrays at one offset modulo 2 MiB.
ALIGNMENT = 64
#: The two builds' names in ``--alignment-ab``'s results.
DEFAULT_ALIGNMENT, ALIGNED = "2 MiB (default)", f"{ALIGNMENT} B"
TARGETED = ("DRAM read / Dot (vectorised)", "DRAM copy / Copy", "DRAM triad / Triad")
#: Each measured run: the ballast it ran beside and the physical locality its arrays got.
PHYSMEM_LOG: list[dict[str, Any]] = []
#: Whether runs get a :class:`physmem.Ballast` (``--no-ballast`` turns it off).
BALLAST = {"enabled": True}


def build_babelstream(
    workdir: Path, *, fast_math: bool = False, alignment: int | None = None
) -> Path:
    """Compile the vendored OpenMP build (``g++ -O3 -march=native -fopenmp``; with
    ``fast_math`` also ``-ffast-math``, which lets the compiler vectorise Dot's sum; with
    ``alignment`` its arrays aligned to that many bytes, ``-DALIGNMENT``, not 2 MiB)."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        sys.exit("bench_babelstream: no C++ compiler (g++) on PATH")
    name = "babelstream-omp" + ("-fastmath" if fast_math else "")
    exe = workdir / (name + (f"-align{alignment}" if alignment else ""))
    cmd = [
        cxx,
        "-O3",
        "-march=native",
        "-fopenmp",
        *(["-ffast-math"] if fast_math else []),
        *([f"-DALIGNMENT={alignment}"] if alignment else []),
        "-DOMP",
        f"-I{SOURCES}",
        f"-I{SOURCES / 'omp'}",
        str(SOURCES / "main.cpp"),
        str(SOURCES / "omp" / "OMPStream.cpp"),
        "-o",
        str(exe),
    ]
    subprocess.run(cmd, check=True)
    return exe


def run_babelstream(exe: Path, times: int = 50, elements: int | None = None) -> dict[str, float]:
    """BabelStream's best bandwidth per kernel (bytes/s) over ``times`` runs (``elements``
    doubles per array: its default, 2^25, when None), beside a :class:`physmem.Ballast`;
    the physical locality of its three arrays, sampled while it runs, goes to
    :data:`PHYSMEM_LOG`."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(len(os.sched_getaffinity(0))),
        "OMP_PROC_BIND": "true",
    }
    array_bytes = 8 * (elements or DEFAULT_ELEMENTS)
    cmd = [str(exe), "-n", str(times), "--csv", *(["-s", str(elements)] if elements else [])]
    with Ballast(BALLAST["enabled"]) as ballast:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
        locality = None
        for _ in range(40):  # its arrays are written within a second of its start
            time.sleep(0.1)
            found = mapped_locality(proc.pid, array_bytes)
            if proc.poll() is not None or found is None:
                break
            if found[0] >= 3 * array_bytes:  # all three arrays written
                locality = found[1]
                break
        out, _ = proc.communicate()
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    PHYSMEM_LOG.append(
        {
            "run": exe.name,
            "ballast_bytes": ballast.bytes,
            "array_locality": None if locality is None else [locality],
        }
    )
    rows = csv.DictReader(io.StringIO(out[out.index("function") :]))
    return {r["function"]: float(r["max_MB_per_sec"]) * 1e6 for r in rows}


def run_roofprof(
    outdir: Path, *, huge_pages: bool, tree: Path | None = None
) -> tuple[dict[str, float], list[str], float]:
    """``roofprof roofline --device cpu --quick`` in a fresh process: DRAM ceilings, warnings.

    ``huge_pages=False`` runs it with ``NUMPY_MADVISE_HUGEPAGE=0``: its buffers then live on
    4 KiB pages, as BabelStream's do where transparent huge pages are ``madvise`` only.
    ``tree``: run the roofprof of that source tree instead (``PYTHONPATH``).
    """
    cmd = [sys.executable, "-m", "roofprof", "roofline", "--device", "cpu", "--quick"]
    cmd += ["--out", str(outdir), "--format", "json"]
    env = {**os.environ, "NUMPY_MADVISE_HUGEPAGE": "1" if huge_pages else "0"}
    if tree is not None:  # another checkout's roofprof (its roofprof/kernels linked in)
        env["PYTHONPATH"] = str(tree)
    t0 = time.perf_counter()
    with Ballast(BALLAST["enabled"]) as ballast:
        subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    result = json.loads((outdir / "roofline.json").read_text())
    dram_points = [
        p
        for points in result["sweeps"]["bandwidth"].values()
        for p in points
        if p.get("level") == "dram"
    ]
    seen = {(p.get("params") or {}).get("physical_locality") for p in dram_points}
    PHYSMEM_LOG.append(
        {
            "run": "roofprof" + (" (huge pages)" if huge_pages else ""),
            "ballast_bytes": ballast.bytes,
            "array_locality": sorted(c for c in seen if c is not None) or None,
        }
    )
    ceilings = {c["name"]: c["value"] for c in result["ceilings"]}
    return ceilings, list(result.get("warnings", [])), wall


def ratios(roofprof: dict[str, float], babelstream: dict[str, float]) -> dict[str, float]:
    """roofprof's DRAM ceilings ÷ BabelStream's kernels of the same traffic, by pair name.

    >>> r = ratios({"DRAM read": 40e9, "DRAM triad": 45e9}, {"Dot": 32e9, "Triad": 45e9,
    ...            VEC_DOT: 40e9})
    >>> r["DRAM read / Dot"], r["DRAM triad / Triad"], r["DRAM read / Dot (vectorised)"]
    (1.25, 1.0, 1.0)
    """
    pairs = [(ours, theirs) for theirs, ours in PAIRS.items()] + [("DRAM read", VEC_DOT)]
    return {
        f"{ours} / {theirs}": roofprof[ours] / babelstream[theirs]
        for ours, theirs in pairs
        if ours in roofprof and theirs in babelstream
    }


def spread(rounds: list[dict], key: str, names: list[str]) -> dict[str, dict[str, float]]:
    """Min / median / max over the rounds of each ratio in ``round[key]["ratios"]``."""
    out = {}
    for n in names:
        vals = [r[key]["ratios"][n] for r in rounds if n in r.get(key, {}).get("ratios", {})]
        if vals:
            out[n] = {"min": min(vals), "median": statistics.median(vals), "max": max(vals)}
    return out


#: The like-for-like pairs of the level-matched comparison: roofprof ceiling -> BabelStream.
MATCHED = {"DRAM read": VEC_DOT, "DRAM copy": "Copy", "DRAM triad": "Triad"}


def levels(rounds: list[dict]) -> dict[str, dict[str, float | int]]:
    """Each tool's runs of every round pooled, split at the host's two levels, compared level
    by level.

    This host's memory system flips between two speeds (about 33 and 43-50 GB/s) for
    seconds to minutes, whichever tool runs. The split for each pair is the midpoint of
    BabelStream's slowest and fastest run over all rounds (the reference sets it, not the
    tool under test); per level, the ratio is roofprof's median run over BabelStream's. A
    level with no run of one tool has no ratio.

    >>> r = [{"babelstream_runs_bytes_per_s": [{"Triad": 33e9}, {"Triad": 44e9}],
    ...       "4k": {"roofprof_runs_bytes_per_s": [{"DRAM triad": 34e9}, {"DRAM triad": 48e9}]}}]
    >>> round(levels(r)["DRAM triad / Triad"]["fast_ratio"], 3)
    1.091
    """
    out: dict[str, dict[str, float | int]] = {}
    for ours, theirs in MATCHED.items():
        ref = [
            run[theirs]
            for r in rounds
            for run in r.get("babelstream_runs_bytes_per_s", [])
            if theirs in run
        ]
        tool = [
            run[ours]
            for r in rounds
            for run in r.get("4k", {}).get("roofprof_runs_bytes_per_s", [])
            if ours in run
        ]
        if not ref or not tool:
            continue
        split = (min(ref) + max(ref)) / 2
        row: dict[str, float | int] = {"split_bytes_per_s": split}
        for level, fast in (("fast", True), ("slow", False)):
            a = [x for x in tool if (x >= split) == fast]
            b = [x for x in ref if (x >= split) == fast]
            row[f"{level}_runs_roofprof"], row[f"{level}_runs_babelstream"] = len(a), len(b)
            if a and b:
                row[f"{level}_ratio"] = statistics.median(a) / statistics.median(b)
        out[f"{ours} / {theirs}"] = row
    return out


def _thp() -> str:
    try:
        return Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
    except OSError:
        return "unknown"


def _min_median_max(values) -> dict[str, float]:
    vals = list(values)
    return {"min": min(vals), "median": statistics.median(vals), "max": max(vals)}


def _target_note(s: dict) -> str:
    if not s["targeted"]:
        return "  (reference only)"
    return "" if s["every_round_in_target"] else "  (outside 0.95-1.10 in some round)"


def _best(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each key's best (highest) value over ``runs``."""
    return {k: max(r[k] for r in runs if k in r) for k in {k for r in runs for k in r}}


def _dram(ceilings: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in ceilings.items() if k.startswith("DRAM")}


def _dram_warnings(warnings: list[str]) -> list[str]:
    return [w for w in warnings if "DRAM" in w or "plausib" in w]


def run_round(i: int, exe: Path, exe_vec: Path, tmp: Path, args: argparse.Namespace) -> dict:
    """One round: BabelStream (vectorised build) and roofprof on 4 KiB pages interleaved
    ``args.repeats`` times, BabelStream once more, then the stock build and roofprof on huge
    pages once each. The round's ratios are best ÷ best over the interleaved window."""
    bs_runs: list[dict[str, float]] = []
    rp_runs: list[dict[str, float]] = []
    first_log = len(PHYSMEM_LOG)
    warnings: list[str] = []
    walls: list[float] = []
    single: list[dict[str, float]] = []

    def babelstream(label: str) -> None:
        wait_quiet(label, args.max_wait)
        vec = run_babelstream(exe_vec, times=args.times)
        bs_runs.append({"Copy": vec["Copy"], "Triad": vec["Triad"], VEC_DOT: vec["Dot"]})

    for j in range(args.repeats):
        babelstream(f"babelstream {i + 1}.{j + 1}")
        wait_quiet(f"roofprof 4k {i + 1}.{j + 1}", args.max_wait)
        rp, warned, wall = run_roofprof(tmp / f"r{i}_{j}4k", huge_pages=False)
        rp_runs.append(_dram(rp))
        warnings += _dram_warnings(warned)
        walls.append(wall)
        single.append(ratios(rp, bs_runs[-1]))
    babelstream(f"babelstream {i + 1} closing")
    bs_best = _best(bs_runs)
    wait_quiet(f"babelstream stock {i + 1}", args.max_wait)
    stock_run = run_babelstream(exe, times=args.times)
    stock = {k: stock_run[k] for k in PAIRS}
    bs_best["Dot"] = stock["Dot"]  # the stock build's Dot: reference only
    rp_best = _best(rp_runs)
    row: dict = {
        "babelstream_runs_bytes_per_s": bs_runs,
        "babelstream_best_bytes_per_s": bs_best,
        # the stock build (2 MiB-aligned arrays), one run after the window: reference only
        "babelstream_stock_bytes_per_s": stock,
        "stock_ratios": ratios(rp_best, stock),
        "babelstream_run_spread": {
            k: min(r[k] for r in bs_runs) / max(r[k] for r in bs_runs) for k in bs_runs[0]
        },
        # roofprof's own runs of the round, slowest ÷ fastest (recorded beside BabelStream's:
        # a round whose roofprof runs disagree saw the host move too, whatever BabelStream saw)
        "roofprof_run_spread": {
            k: min(r[k] for r in rp_runs) / max(r[k] for r in rp_runs)
            for k in rp_runs[0]
            if all(r.get(k) for r in rp_runs)
        },
        "4k": {
            "roofprof_runs_bytes_per_s": rp_runs,
            "roofprof_bytes_per_s": rp_best,
            "ratios": ratios(rp_best, bs_best),
            "single_run_ratios": {
                n: statistics.median(r[n] for r in single if n in r) for n in single[0]
            },
            "roofprof_warnings": warnings,
            "roofprof_wall_s": walls,
        },
    }
    wait_quiet(f"roofprof huge {i + 1}", args.max_wait)
    rp, warned, wall = run_roofprof(tmp / f"r{i}huge", huge_pages=True)
    row["huge"] = {
        "roofprof_bytes_per_s": _dram(rp),
        "ratios": ratios(rp, bs_best),
        "roofprof_warnings": _dram_warnings(warned),
        "roofprof_wall_s": wall,
    }
    if args.baseline_tree is not None:
        wait_quiet(f"baseline {i + 1}", args.max_wait)
        rp, warned, wall = run_roofprof(
            tmp / f"r{i}base", huge_pages=False, tree=args.baseline_tree
        )
        row["baseline_4k"] = {
            "roofprof_bytes_per_s": _dram(rp),
            "ratios": ratios(rp, bs_best),
            "roofprof_warnings": _dram_warnings(warned),
            "roofprof_wall_s": wall,
        }
    row["ratios"] = row["4k"]["ratios"]  # like for like: both on 4 KiB pages
    row["physical_memory"] = PHYSMEM_LOG[first_log:]
    print(
        f"round {i + 1}: "
        + ", ".join(f"{k} {v:.3f}" for k, v in row["ratios"].items())
        + " | stock build (2 MiB-aligned): "
        + ", ".join(f"{v:.3f}" for v in row["stock_ratios"].values())
        + " | huge pages: "
        + ", ".join(f"{v:.3f}" for v in row["huge"]["ratios"].values())
        + (
            " | baseline: " + ", ".join(f"{v:.3f}" for v in row["baseline_4k"]["ratios"].values())
            if "baseline_4k" in row
            else ""
        )
        + " (BabelStream runs: Triad "
        + ", ".join(f"{r['Triad'] / 1e9:.1f}" for r in bs_runs)
        + " GB/s; roofprof DRAM triad "
        + ", ".join(f"{r.get('DRAM triad', 0) / 1e9:.1f}" for r in rp_runs)
        + " GB/s)",
        flush=True,
    )
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="babelstream_cpu.json")
    ap.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="roofprof runs per round, each after a BabelStream run (and one BabelStream after)",
    )
    ap.add_argument(
        "--times",
        type=int,
        default=50,
        help="BabelStream's -n: iterations per run (its best is over these)",
    )
    ap.add_argument(
        "--max-rounds",
        type=int,
        default=0,
        help="rounds to try for --rounds steady ones (default 3 × --rounds)",
    )
    ap.add_argument("--max-wait", type=float, default=120.0, help="seconds to wait for quiet")
    ap.add_argument(
        "--baseline-tree",
        type=Path,
        help="also run the roofprof of this source tree (4 KiB pages) in every round: a "
        "checkout with roofprof/kernels and roofprof/data linked to its kernels/ and data/",
    )
    ap.add_argument(
        "--levels",
        nargs="+",
        type=Path,
        metavar="RESULT",
        help="measure nothing: print the level-matched comparison of kept result files",
    )
    ap.add_argument(
        "--alignment-ab",
        type=int,
        metavar="PAIRS",
        help="measure BabelStream alone: its default 2 MiB alignment against 64 bytes "
        "(both -ffast-math), alternating in random order, PAIRS times",
    )
    ap.add_argument(
        "--no-ballast",
        action="store_true",
        help="run each tool on whatever free memory the kernel hands out, without first "
        "taking up the fragments of free memory (physmem.Ballast)",
    )
    args = ap.parse_args(argv)
    BALLAST["enabled"] = not args.no_ballast
    if args.alignment_ab:
        return alignment_ab(args)
    if args.levels:
        for path in args.levels:
            print_levels(f"{path.name}: ", levels(json.loads(path.read_text())["rounds"]))
        return 0
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_babelstream(Path(tmp))
        exe_vec = build_babelstream(Path(tmp), fast_math=True, alignment=ALIGNMENT)
        wait_quiet("babelstream in cache", args.max_wait)
        in_cache = {
            "stock": run_babelstream(exe, elements=IN_CACHE_ELEMENTS),
            "vectorised": run_babelstream(exe_vec, elements=IN_CACHE_ELEMENTS),
        }
        print(
            "in cache (3 x 1 MiB): "
            + ", ".join(
                f"{build} Dot {v['Dot'] / 1e9:.1f} / Copy {v['Copy'] / 1e9:.1f} GB/s"
                for build, v in in_cache.items()
            ),
            flush=True,
        )
        limit = args.max_rounds or 3 * args.rounds
        while sum(r["steady"] for r in rounds) < args.rounds and len(rounds) < limit:
            row = run_round(len(rounds), exe, exe_vec, Path(tmp), args)
            row["steady_babelstream"] = min(row["babelstream_run_spread"].values()) >= STEADY
            row["steady_roofprof"] = min(row["roofprof_run_spread"].values(), default=1.0) >= STEADY
            row["steady"] = row["steady_babelstream"] and row["steady_roofprof"]
            if not row["steady_babelstream"]:
                print(f"round {len(rounds) + 1}: BabelStream itself moved (unsteady)", flush=True)
            elif not row["steady_roofprof"]:
                print(
                    f"round {len(rounds) + 1}: BabelStream's runs agreed, but roofprof's own "
                    "runs moved (unsteady; slowest ÷ fastest "
                    + ", ".join(f"{k} {v:.2f}" for k, v in row["roofprof_run_spread"].items())
                    + ")",
                    flush=True,
                )
            rounds.append(row)
    all_rounds, rounds = rounds, [r for r in rounds if r["steady"]] or rounds
    names = sorted({k for r in rounds for k in r["ratios"]})
    summary = {
        n: {
            "min": min(r["ratios"][n] for r in rounds),
            "median": statistics.median(r["ratios"][n] for r in rounds),
            "max": max(r["ratios"][n] for r in rounds),
            "every_round_in_target": all(TARGET[0] <= r["ratios"][n] <= TARGET[1] for r in rounds),
            "targeted": n in TARGETED,
        }
        for n in names
    }
    huge = spread(rounds, "huge", names)
    stock_spread = {
        n: _min_median_max(r["stock_ratios"][n] for r in rounds)
        for n in names
        if all(n in r.get("stock_ratios", {}) for r in rounds)
    }
    single = {
        n: _min_median_max(
            r["4k"]["single_run_ratios"][n] for r in rounds if n in r["4k"]["single_run_ratios"]
        )
        for n in names
        if any(n in r["4k"]["single_run_ratios"] for r in rounds)
    }
    self_names = sorted({k for r in rounds for k in r["babelstream_run_spread"]})
    babelstream_spread = {
        k: _min_median_max(r["babelstream_run_spread"][k] for r in rounds) for k in self_names
    }
    rp_names = sorted({k for r in rounds for k in r.get("roofprof_run_spread", {})})
    roofprof_spread = {
        k: _min_median_max(
            r["roofprof_run_spread"][k] for r in rounds if k in r.get("roofprof_run_spread", {})
        )
        for k in rp_names
    }
    baseline = spread(rounds, "baseline_4k", names) if args.baseline_tree is not None else {}
    payload = {
        "benchmark": "roofprof CPU roofline (quick) vs BabelStream OpenMP, alternating rounds",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {**lscpu(), "python": platform.python_version()},
        "babelstream": "UoB-HPC/BabelStream 57637d5 (2026-04-10), src/main.cpp + "
        "src/omp/OMPStream.cpp, g++ -O3 -march=native -fopenmp, "
        f"-n {args.times}, default size; "
        f"interleaved build (Copy, Triad, '{VEC_DOT}'): -ffast-math -DALIGNMENT={ALIGNMENT} "
        "added; stock build (default 2 MiB alignment) once a round after the window",
        "babelstream_alignment_bytes": ALIGNMENT,
        "dot_in_cache": {
            "elements_per_array": IN_CACHE_ELEMENTS,
            "bytes_per_s": in_cache,
        },
        "target": list(TARGET),
        "steady_ratio": STEADY,
        "steady_rounds": sum(r["steady"] for r in all_rounds),
        "rounds": all_rounds,
        "summary": summary,
        "summary_roofprof_on_huge_pages": huge,
        "summary_against_stock_build": stock_spread,
        "summary_single_runs_4k": single,
        "babelstream_run_spread": babelstream_spread,
        "roofprof_run_spread": roofprof_spread,
        # every round's runs (steady or not) pooled and compared at the host's two levels
        "level_matched": levels(all_rounds),
        "repeats": args.repeats,
        **(
            {"summary_baseline_4k": baseline, "baseline_tree": str(args.baseline_tree)}
            if baseline
            else {}
        ),
        "transparent_hugepage": _thp(),
        "ballast": BALLAST["enabled"],
        "physical_memory": locality_summary(PHYSMEM_LOG),
        "quiet_log": QUIET_LOG,
    }
    Path(args.out).write_text(json.dumps(payload, indent=1))
    print_locality(payload["physical_memory"])
    steady = payload["steady_rounds"]
    print(
        f"{steady} of {len(all_rounds)} rounds steady"
        + ("" if steady else " (none: the figures below are over every round)")
    )
    for n, s in summary.items():
        h = huge[n]
        print(
            f"{n} (4 KiB pages): min {s['min']:.3f}, median {s['median']:.3f}, "
            f"max {s['max']:.3f}"
            f"{_target_note(s)}; "
            f"huge pages: {h['min']:.3f} / {h['median']:.3f} / {h['max']:.3f}"
            + (
                f"; baseline: {baseline[n]['min']:.3f} / {baseline[n]['median']:.3f} / "
                f"{baseline[n]['max']:.3f}"
                if n in baseline
                else ""
            )
        )
    for n, s in stock_spread.items():
        print(
            f"{n}, against the stock build (2 MiB-aligned arrays, one run a round): "
            f"min {s['min']:.3f}, median {s['median']:.3f}, max {s['max']:.3f}"
        )
    for n, s in single.items():
        print(
            f"{n} (4 KiB, each roofprof run ÷ the BabelStream run before it): "
            f"min {s['min']:.3f}, median {s['median']:.3f}, max {s['max']:.3f}"
        )
    for k, s in babelstream_spread.items():
        print(
            f"BabelStream {k} slowest ÷ fastest run of a round (the host's own noise): "
            f"min {s['min']:.3f}, median {s['median']:.3f}, max {s['max']:.3f}"
        )
    for k, s in roofprof_spread.items():
        print(
            f"roofprof {k} slowest ÷ fastest run of a round: "
            f"min {s['min']:.3f}, median {s['median']:.3f}, max {s['max']:.3f}"
        )
    print_levels("", payload["level_matched"])
    return 0


def alignment_ab(args: argparse.Namespace) -> int:
    """BabelStream's 2 MiB-aligned build against its 64-byte-aligned one, alternating: the
    reason the interleaved build sets ``-DALIGNMENT=64``. Each pair's two runs are adjacent;
    :func:`same_level_pairs` summarises the pairs whose runs saw the same memory state."""
    runs: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        builds = {
            DEFAULT_ALIGNMENT: build_babelstream(Path(tmp), fast_math=True),
            ALIGNED: build_babelstream(Path(tmp), fast_math=True, alignment=ALIGNMENT),
        }
        for i in range(args.alignment_ab):
            order = list(builds)
            random.shuffle(order)
            pair = {}
            for name in order:
                wait_quiet(f"alignment {i + 1} {name}", args.max_wait)
                got = run_babelstream(builds[name], times=args.times)
                pair[name] = {k: got[k] for k in PAIRS}
            runs.append({"order": order, "bytes_per_s": pair})
            print(
                f"pair {i + 1}: "
                + "; ".join(
                    f"{name} "
                    + ", ".join(f"{k} {pair[name][k] / 1e9:.1f}" for k in PAIRS)
                    + " GB/s"
                    for name in builds
                ),
                flush=True,
            )
    payload = {
        "benchmark": "BabelStream OpenMP, 2 MiB against 64-byte array alignment, alternating",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {**lscpu(), "python": platform.python_version()},
        "babelstream": "UoB-HPC/BabelStream 57637d5, g++ -O3 -march=native -fopenmp "
        f"-ffast-math, -n {args.times}, default size; -DALIGNMENT={ALIGNMENT} for the other",
        "pairs": runs,
        "same_level": same_level_pairs(runs),
        "ballast": BALLAST["enabled"],
        "physical_memory": locality_summary(PHYSMEM_LOG),
        "physical_memory_log": PHYSMEM_LOG,
        "quiet_log": QUIET_LOG,
    }
    Path(args.out).write_text(json.dumps(payload, indent=1))
    print_alignment(payload["same_level"])
    return 0


def locality_summary(log: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per tool (BabelStream's builds, roofprof): how many runs, the ballast they ran beside
    (bytes, median) and the lowest physical locality any of their arrays got (None: not
    readable).

    >>> locality_summary([{"run": "bs", "ballast_bytes": 8, "array_locality": [0.9, 1.0]},
    ...                     {"run": "bs", "ballast_bytes": 4, "array_locality": None}])
    {'bs': {'runs': 2, 'ballast_bytes_median': 6.0, 'lowest_locality': 0.9, 'unread_runs': 1}}
    """
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(e["run"] for e in log):
        mine = [e for e in log if e["run"] == name]
        seen = [min(e["array_locality"]) for e in mine if e["array_locality"]]
        out[name] = {
            "runs": len(mine),
            "ballast_bytes_median": statistics.median(e["ballast_bytes"] for e in mine),
            "lowest_locality": min(seen) if seen else None,
            "unread_runs": len(mine) - len(seen),
        }
    return out


def print_locality(summary: dict[str, dict[str, Any]]) -> None:
    for name, s in summary.items():
        low = s["lowest_locality"]
        print(
            f"{name}: {s['runs']} runs beside a {s['ballast_bytes_median'] / 2**30:.2f} GiB "
            "ballast (median); lowest physical locality of its arrays (share of pages followed "
            "by one in the same 2 MiB block): "
            + (f"{low:.3f}" if low is not None else "not readable (root only)")
        )


def same_level_pairs(runs: list[dict]) -> dict[str, dict]:
    """The 64-byte build ÷ the default one, per kernel, over the pairs whose two runs sat at
    the same one of the host's two levels.

    The host's memory flips between two speeds within seconds, so a pair whose runs fell on
    either side of a flip compares the flip, not the builds. The split is the midpoint of
    the slowest and fastest Triad of both builds (Triad moves least with the alignment); a
    pair counts at a level when both its Triads lie on that side.

    >>> pair = lambda d, a: {"bytes_per_s": {DEFAULT_ALIGNMENT: d, ALIGNED: a}}
    >>> runs = [pair({"Copy": 36e9, "Triad": 39e9}, {"Copy": 40e9, "Triad": 39e9}),
    ...         pair({"Copy": 29e9, "Triad": 30e9}, {"Copy": 30e9, "Triad": 31e9}),
    ...         pair({"Copy": 37e9, "Triad": 40e9}, {"Copy": 30e9, "Triad": 31e9})]
    >>> out = same_level_pairs(runs)
    >>> out["fast"]["pairs"], round(out["fast"]["Copy"]["median"], 3), out["mixed_pairs"]
    (1, 1.111, 1)
    """
    triads = [r["bytes_per_s"][b]["Triad"] for r in runs for b in (DEFAULT_ALIGNMENT, ALIGNED)]
    split = (min(triads) + max(triads)) / 2
    out: dict[str, Any] = {"split_triad_bytes_per_s": split}
    mixed = 0
    by_level: dict[str, list[dict]] = {"fast": [], "slow": []}
    for r in runs:
        sides = {r["bytes_per_s"][b]["Triad"] >= split for b in (DEFAULT_ALIGNMENT, ALIGNED)}
        if len(sides) > 1:
            mixed += 1
        else:
            by_level["fast" if sides.pop() else "slow"].append(r["bytes_per_s"])
    for level, pairs in by_level.items():
        row: dict[str, Any] = {"pairs": len(pairs)}
        for k in PAIRS:
            if pairs and all(k in p[b] for p in pairs for b in p):
                row[k] = _min_median_max(p[ALIGNED][k] / p[DEFAULT_ALIGNMENT][k] for p in pairs)
        out[level] = row
    out["mixed_pairs"] = mixed
    return out


def print_alignment(same_level: dict[str, Any]) -> None:
    """One line per level and kernel of :func:`same_level_pairs`' summary."""
    print(f"{same_level['mixed_pairs']} pairs straddled a change of level (left out)")
    for level in ("fast", "slow"):
        row = same_level[level]
        for k in PAIRS:
            if k in row:
                s = row[k]
                print(
                    f"{k}, {ALIGNED} ÷ {DEFAULT_ALIGNMENT}, {row['pairs']} pairs at the "
                    f"{level} level: min {s['min']:.3f}, median {s['median']:.3f}, "
                    f"max {s['max']:.3f}"
                )


def print_levels(prefix: str, matched: dict[str, dict]) -> None:
    """One line per pair of :func:`levels`' comparison."""
    for n, row in matched.items():
        print(
            f"{prefix}{n}, every run at the host's two levels (split at "
            f"{row['split_bytes_per_s'] / 1e9:.1f} GB/s): "
            + ", ".join(
                f"{level} {row[f'{level}_ratio']:.3f} (runs {row[f'{level}_runs_roofprof']} / "
                f"{row[f'{level}_runs_babelstream']})"
                if f"{level}_ratio" in row
                else f"{level}: no run of one tool"
                for level in ("fast", "slow")
            )
        )


if __name__ == "__main__":
    raise SystemExit(main())
