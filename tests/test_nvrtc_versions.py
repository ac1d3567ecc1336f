"""The CUDA C sources under real NVRTC releases old and new (no GPU needed).

CuPy compiles ``kernels/cuda/*.cu`` with whatever ``libnvrtc.so.12`` the process loaded first
(a torch cu121 wheel brings NVRTC 12.1), straight to a cubin for the GPU's ``sm_XX``. fp8
``mma.sync`` needs PTX ISA 8.4 (CUDA 12.4): before the ``__CUDACC_VER_*`` guard in ``probes.cu``
an older NVRTC failed the whole file, taking every probe with it.

For each release in :data:`RELEASES` the ``nvidia-cuda-nvrtc-cu12`` wheel and the
``nvidia-cuda-runtime-cu12`` wheel of the same release (its ``cuda_bf16.h`` headers) are
installed once with ``pip install --target`` into ``~/.cache/roofprof-test`` (tests/pip_cache.py;
pip cannot hold two versions in one environment). One subprocess per release loads its libnvrtc
with ctypes and compiles with ``cuda_models.nvrtc_options(arch, include)`` (what roofprof hands
CuPy; CuPy's own ``-arch=sm_XX`` is the same option). Checked:

* every source compiles for sm_90 under NVRTC 12.1 and 12.9, ``probes.cu`` also for sm_80/sm_89
  (and under 12.3 and 12.4 for sm_89/sm_90);
* ``probe_mma_fp8`` holds an e4m3 ``mma`` exactly when ``cuda_models.fp8_mma_probe_unavailable``
  says it is available (12.1 and 12.3: empty; 12.4 and 12.9: present on sm_89/sm_90);
* the threshold is tight: NVRTC 12.3 with the guard forced on fails on the fp8 ``mma``.

Skips when PyPI is unreachable. Warm cache: 15-25 s on 2 busy cores (the two gemv.cu compiles
dominate); a cold cache adds the download of four ~25 MB wheels.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pip_cache import cached_install  # noqa: E402

# slow: pinned installs; the first run downloads them (minutes on a cold cache)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

try:
    from roofprof.kernels import cuda_models as cm
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from kernels import cuda_models as cm

RELEASES = {
    # (major, minor): (nvidia-cuda-nvrtc-cu12 version, nvidia-cuda-runtime-cu12 version)
    (12, 1): ("12.1.105", "12.1.105"),  # torch <= 2.4 cu121 wheels ship this NVRTC
    (12, 3): ("12.3.107", "12.3.101"),  # last release without fp8 mma (PTX ISA 8.3)
    (12, 4): ("12.4.127", "12.4.127"),  # first with fp8 mma (PTX ISA 8.4)
    (12, 9): ("12.9.86", "12.9.79"),  # current 12.x
}
FULL = ((12, 1), (12, 9))  # every source; the others compile probes.cu only
ARCH_CC = {"sm_80": (8, 0), "sm_89": (8, 9), "sm_90": (9, 0)}
FORCE_FP8 = "-DROOFPROF_PTX_HAS_FP8_MMA=1"
SUBPROCESS_TIMEOUT_S = 300

_COMPILE_SCRIPT = textwrap.dedent(
    r"""
    import ctypes, json, sys
    job = json.loads(sys.argv[1])
    try:
        lib = ctypes.CDLL(job["lib"])
    except OSError as exc:
        print(json.dumps({"load_error": str(exc)}))
        sys.exit(0)
    c_void_pp = ctypes.POINTER(ctypes.c_void_p)
    lib.nvrtcVersion.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)]
    lib.nvrtcCreateProgram.argtypes = [c_void_pp, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int,
                                       ctypes.c_void_p, ctypes.c_void_p]
    lib.nvrtcCompileProgram.argtypes = [ctypes.c_void_p, ctypes.c_int,
                                        ctypes.POINTER(ctypes.c_char_p)]
    lib.nvrtcGetProgramLogSize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
    lib.nvrtcGetProgramLog.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.nvrtcGetPTXSize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
    lib.nvrtcGetPTX.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.nvrtcDestroyProgram.argtypes = [c_void_pp]
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    results = []
    for case in job["cases"]:
        prog = ctypes.c_void_p()
        code = open(case["path"], "rb").read()
        assert lib.nvrtcCreateProgram(ctypes.byref(prog), code, case["name"].encode(), 0, None,
                                      None) == 0
        opts = [o.encode() for o in case["options"]]
        rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        ptx = b""
        if rc == 0 and lib.nvrtcGetPTXSize(prog, ctypes.byref(size)) == 0:
            buf = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetPTX(prog, buf)
            ptx = buf.value
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
        version = __import__("re").search(rb"^\.version\s+(\d+\.\d+)", ptx, 8)
        results.append({"rc": rc, "log": log.value.decode(errors="replace")[-1500:],
                        "ptx_version": version.group(1).decode() if version else None,
                        "fp8_mma": b".e4m3.e4m3" in ptx, "ptx_bytes": len(ptx)})
    print(json.dumps({"version": [major.value, minor.value], "results": results}))
    """
)


def _cases(release: tuple[int, int], include: Path) -> list[dict]:
    cases = []
    sources = cm.SOURCES if release in FULL else ("probes.cu",)
    for source in sources:
        if source != "probes.cu":
            archs = ("sm_90",)
        elif release in FULL:
            archs = tuple(ARCH_CC)
        else:  # the boundary releases: only the fp8-capable targets matter
            archs = ("sm_89", "sm_90")
        for arch in archs:
            cases.append(
                {
                    "name": source,
                    "path": str(cm.source_path(source)),
                    "arch": arch,
                    "options": list(cm.nvrtc_options(arch, include)),
                    "forced": False,
                }
            )
    if release == (12, 3):  # the guard forced on: proves NVRTC 12.3 cannot take the fp8 mma
        opts = [*cm.nvrtc_options("sm_90", include), FORCE_FP8]
        cases.append(
            {
                "name": "probes.cu",
                "path": str(cm.source_path("probes.cu")),
                "arch": "sm_90",
                "options": opts,
                "forced": True,
            }
        )
    return cases


def _compile_release(release: tuple[int, int]) -> dict:
    nvrtc, runtime = RELEASES[release]
    folder, why = cached_install(
        f"nvidia-cuda-nvrtc-cu12=={nvrtc}", f"nvidia-cuda-runtime-cu12=={runtime}"
    )
    if folder is None:
        return {"skip": why}
    libs = sorted((folder / "nvidia" / "cuda_nvrtc" / "lib").glob("libnvrtc.so.*"))
    include = folder / "nvidia" / "cuda_runtime" / "include"
    if not libs or not (include / "cuda_bf16.h").is_file():
        return {"skip": f"unexpected wheel layout in {folder}"}
    cases = _cases(release, include)
    job = {"lib": str(libs[0]), "cases": cases}
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    proc = subprocess.run(
        [sys.executable, "-c", _COMPILE_SCRIPT, json.dumps(job)],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"NVRTC {release} subprocess failed:\n{proc.stderr[-3000:]}")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    if "load_error" in report:
        return {"skip": f"cannot load {libs[0]}: {report['load_error']}"}
    report["cases"] = cases
    return report


@pytest.fixture(scope="module")
def releases() -> dict[tuple[int, int], dict]:
    """Per NVRTC release: its reported version and one result per compiled case."""
    order = sorted(RELEASES, key=lambda r: r not in FULL)  # the two long jobs first, one per core
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {r: pool.submit(_compile_release, r) for r in order}
        reports = {r: futures[r].result() for r in RELEASES}
    skips = {r["skip"] for r in reports.values() if "skip" in r}
    if skips:
        pytest.skip("; ".join(sorted(skips)))
    return reports


def _results(report: dict, *, forced: bool = False):
    for case, result in zip(report["cases"], report["results"], strict=True):
        if case["forced"] == forced:
            yield case, result


@pytest.mark.parametrize("release", list(RELEASES), ids=lambda r: f"nvrtc{r[0]}.{r[1]}")
def test_release_reports_its_version_and_ptx_isa(releases, release):
    report = releases[release]
    assert tuple(report["version"]) == release
    isas = {r["ptx_version"] for _, r in _results(report) if r["rc"] == 0}
    # NVRTC 12.x emits PTX ISA 8.x with x = its minor release (8.1 for 12.1 ... 8.4 for 12.4)
    assert len(isas) == 1
    isa = tuple(int(v) for v in isas.pop().split("."))
    assert isa[0] == 8 and (isa >= (8, 4)) == (release >= cm.FP8_MMA_MIN_NVRTC), isa


@pytest.mark.parametrize("release", list(RELEASES), ids=lambda r: f"nvrtc{r[0]}.{r[1]}")
def test_every_source_compiles(releases, release):
    """Before the fp8 guard probes.cu failed for sm_89/sm_90 under NVRTC 12.1 and 12.3."""
    report = releases[release]
    compiled = [(c["name"], c["arch"]) for c, _ in _results(report)]
    if release in FULL:
        assert {name for name, _ in compiled} == set(cm.SOURCES)
    for case, result in _results(report):
        assert result["rc"] == 0, f"NVRTC {release} {case['name']} {case['arch']}:\n{result['log']}"
        assert result["ptx_bytes"] > 0


@pytest.mark.parametrize("release", list(RELEASES), ids=lambda r: f"nvrtc{r[0]}.{r[1]}")
def test_fp8_probe_present_exactly_when_the_model_says(releases, release):
    for case, result in _results(releases[release]):
        if case["name"] != "probes.cu":
            continue
        why = cm.fp8_mma_probe_unavailable(release, ARCH_CC[case["arch"]])
        assert result["fp8_mma"] == (why is None), (release, case["arch"], why)


def test_fp8_guard_threshold_is_tight(releases):
    """NVRTC 12.3 with the guard overridden cannot assemble fp8 mma: 12.4 is the real floor."""
    forced = list(_results(releases[(12, 3)], forced=True))
    assert len(forced) == 1
    _, result = forced[0]
    assert result["rc"] != 0
    assert re.search(r"mma|e4m3|PTX ISA|\.version", result["log"]), result["log"]
