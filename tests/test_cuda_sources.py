"""Compile-time proof of the CUDA C kernels (no GPU needed).

Every ``kernels/cuda/*.cu`` is compiled once per architecture (sm_80, sm_89, sm_90) with
``nvcc -cubin -Xptxas -v`` into a temporary folder, in a small thread pool. The tests then check:

* ptxas: every entry point of ``cuda_models.ENTRY_SIGNATURES`` exists, with 0 bytes of spill
  stores/loads and no stack frame; static shared memory as the model says;
* the ELF parameter table (``cuobjdump -elf``): each entry's parameter sizes match the documented
  signature, so the host side can rely on the argument order and types;
* the SASS (``cuobjdump -sass``, which needs ``nvdisasm``): tensor-core instructions in the GEMM
  and mma probes, 128-bit global loads in the GEMV and bandwidth probes, LDGSTS (cp.async) and
  LDSM (ldmatrix) in the GEMM, enough FMA/MMA instructions per loop that nothing was hoisted;
  L1-bypassing loads (``LDG.E.128.STRONG.GPU``) in the L2 read probe and L1-allocating ones in
  the L1 probe; a ``%globaltimer`` spin loop in the delay kernel.

Skipped with a reason when nvcc, cuobjdump or nvdisasm is missing (pip wheels
``nvidia-cuda-cuobjdump`` and ``nvidia-cuda-nvdisasm`` carry the last two). A GPU run is still
the only proof that the kernels compute the right thing: see docs/cuda_kernels.md.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from roofprof.kernels import cuda_models as cm

ARCHS = ("sm_80", "sm_89", "sm_90")
NVCC = shutil.which("nvcc")
COMPILE_TIMEOUT_S = 300

pytestmark = [
    pytest.mark.slow,  # nvcc per architecture: a minute on 2 cores
    pytest.mark.skipif(NVCC is None, reason="nvcc not found on PATH (CUDA toolkit absent)"),
]


def find_tool(name: str) -> str | None:
    """A CUDA binary tool on PATH or inside an installed ``nvidia-*`` pip wheel."""
    found = shutil.which(name)
    if found:
        return found
    try:
        import nvidia  # namespace package of the NVIDIA pip wheels
    except ImportError:
        return None
    for root in getattr(nvidia, "__path__", []):
        for candidate in sorted(Path(root).glob(f"*/bin/{name}")):
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    return None


CUOBJDUMP = find_tool("cuobjdump")
NVDISASM = find_tool("nvdisasm")


@dataclass(frozen=True)
class Compiled:
    source: str
    arch: str
    cubin: Path
    ptxas_log: str
    sass: str | None  # None when cuobjdump/nvdisasm are missing
    elf: str | None


@dataclass(frozen=True)
class PtxasEntry:
    registers: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    smem_bytes: int


def _tool_env() -> dict[str, str]:
    env = dict(os.environ)
    if NVDISASM:
        env["PATH"] = str(Path(NVDISASM).parent) + os.pathsep + env.get("PATH", "")
        env["NVDISASM_PATH"] = str(Path(NVDISASM).parent)
    return env


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, env=_tool_env(), check=False
    )


def _build(source: str, arch: str, out_dir: Path) -> Compiled:
    cubin = out_dir / f"{Path(source).stem}_{arch}.cubin"
    cmd = [
        NVCC,
        "-cubin",
        f"-arch={arch}",
        "-Xptxas",
        "-v",
        "-o",
        str(cubin),
        str(cm.source_path(source)),
    ]
    proc = _run(cmd)
    if proc.returncode != 0:
        raise AssertionError(f"nvcc failed for {source} {arch}:\n{proc.stderr}\n{proc.stdout}")
    sass = elf = None
    if CUOBJDUMP:
        elf_proc = _run([CUOBJDUMP, "-elf", str(cubin)])
        elf = elf_proc.stdout if elf_proc.returncode == 0 else None
        if NVDISASM:
            sass_proc = _run([CUOBJDUMP, "-sass", str(cubin)])
            sass = sass_proc.stdout if sass_proc.returncode == 0 else None
    return Compiled(source, arch, cubin, proc.stderr + proc.stdout, sass, elf)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict[tuple[str, str], Compiled]:
    out_dir = tmp_path_factory.mktemp("cubins")
    jobs = [(src, arch) for src in cm.SOURCES for arch in ARCHS]
    # Largest first so the pool stays busy; 2 cores finish all nine builds in well under a minute.
    jobs.sort(key=lambda j: -cm.source_path(j[0]).stat().st_size)
    workers = max(1, min(4, os.cpu_count() or 2))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {job: pool.submit(_build, job[0], job[1], out_dir) for job in jobs}
        return {job: fut.result() for job, fut in futures.items()}


def parse_ptxas(log: str) -> dict[str, PtxasEntry]:
    """Per entry point: registers, stack frame, spill stores/loads, static shared memory."""
    out: dict[str, PtxasEntry] = {}
    chunks = re.split(r"ptxas info\s*: Compiling entry function '([^']+)' for '\w+'", log)
    for name, body in zip(chunks[1::2], chunks[2::2], strict=True):
        frame = re.search(
            r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", body
        )
        regs = re.search(r"Used (\d+) registers", body)
        smem = re.search(r"(\d+) bytes smem", body)
        if frame is None or regs is None:
            raise AssertionError(f"unparsed ptxas output for {name}:\n{body}")
        out[name] = PtxasEntry(
            int(regs.group(1)),
            int(frame.group(1)),
            int(frame.group(2)),
            int(frame.group(3)),
            int(smem.group(1)) if smem else 0,
        )
    return out


_SASS_LINE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)", re.M)


def parse_sass(sass: str) -> dict[str, list[str]]:
    """Per function: the list of SASS opcodes (with modifiers), in program order."""
    parts = re.split(r"^\s*Function : (\S+)\s*$", sass, flags=re.M)
    return {
        name: _SASS_LINE.findall(body) for name, body in zip(parts[1::2], parts[2::2], strict=True)
    }


def sass_bodies(sass: str) -> dict[str, str]:
    """Per function: its SASS text (opcodes with operands), for checks on operands."""
    parts = re.split(r"^\s*Function : (\S+)\s*$", sass, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def parse_kparams(elf: str) -> dict[str, list[int]]:
    """Per entry: parameter sizes in bytes, by ordinal (from EIATTR_KPARAM_INFO)."""
    out: dict[str, list[int]] = {}
    sections = re.split(r"^\.nv\.info\.(\S+)\s*$", elf, flags=re.M)
    for name, body in zip(sections[1::2], sections[2::2], strict=True):
        params = re.findall(
            r"Ordinal\s*:\s*0x([0-9a-f]+)\s+Offset\s*:\s*0x[0-9a-f]+\s+Size\s*:\s*0x([0-9a-f]+)",
            body,
        )
        sizes = {int(o, 16): int(s, 16) for o, s in params}
        out[name] = [sizes[i] for i in range(len(sizes))]
    return out


def count(ops: list[str], pattern: str) -> int:
    rx = re.compile(pattern)
    return sum(1 for op in ops if rx.fullmatch(op))


CASES = [(src, arch) for src in cm.SOURCES for arch in ARCHS]
CASE_IDS = [f"{Path(s).stem}-{a}" for s, a in CASES]


# ----------------------------------------------------------------------------------- ptxas
@pytest.mark.parametrize(("source", "arch"), CASES, ids=CASE_IDS)
def test_every_entry_compiles_without_spills(compiled, source, arch):
    info = parse_ptxas(compiled[(source, arch)].ptxas_log)
    expected = set(cm.entries(source))
    assert set(info) == expected, f"entry points differ from cuda_models: {set(info) ^ expected}"
    report = ", ".join(f"{n}={e.registers}" for n, e in sorted(info.items()))
    print(f"\n{source} {arch} registers: {report}")
    for name, entry in info.items():
        assert entry.spill_store_bytes == 0 and entry.spill_load_bytes == 0, (name, entry)
        assert entry.stack_bytes == 0, f"{name} uses a {entry.stack_bytes}-byte stack frame"
        assert entry.registers <= 255


@pytest.mark.parametrize("arch", ARCHS)
def test_static_shared_memory_matches_model(compiled, arch):
    gemm = parse_ptxas(compiled[("gemm_mma.cu", arch)].ptxas_log)
    for name, entry in gemm.items():
        assert entry.smem_bytes == cm.GEMM_STATIC_SMEM_BYTES, name
        assert entry.smem_bytes <= cm.STATIC_SMEM_LIMIT_BYTES
    probes = parse_ptxas(compiled[("probes.cu", arch)].ptxas_log)
    assert probes["probe_smem_u4"].smem_bytes == cm.PROBE_SMEM_STATIC_BYTES
    others = [n for n, e in probes.items() if n != "probe_smem_u4" and e.smem_bytes]
    assert not others
    gemv = parse_ptxas(compiled[("gemv.cu", arch)].ptxas_log)
    assert all(e.smem_bytes == 0 for e in gemv.values())


# ----------------------------------------------------------------------------------- ELF
@pytest.mark.skipif(
    CUOBJDUMP is None, reason="cuobjdump not found (pip install nvidia-cuda-cuobjdump)"
)
@pytest.mark.parametrize(("source", "arch"), CASES, ids=CASE_IDS)
def test_parameter_sizes_match_signatures(compiled, source, arch):
    elf = compiled[(source, arch)].elf
    assert elf, "cuobjdump -elf failed"
    params = parse_kparams(elf)
    for name in cm.entries(source):
        _, sig = cm.ENTRY_SIGNATURES[name]
        expected = [cm.c_type_size(c_type) for c_type, _ in sig]
        assert params.get(name, []) == expected, f"{name}: ELF {params.get(name)} vs {sig}"


# ----------------------------------------------------------------------------------- SASS
needs_sass = pytest.mark.skipif(
    CUOBJDUMP is None or NVDISASM is None,
    reason="cuobjdump -sass needs cuobjdump and nvdisasm "
    "(pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)",
)


def _sass(compiled, source: str, arch: str) -> dict[str, list[str]]:
    text = compiled[(source, arch)].sass
    assert text, f"cuobjdump -sass produced nothing for {source} {arch}"
    funcs = parse_sass(text)
    assert set(funcs) == set(cm.entries(source))
    return funcs


LDG128 = r"LDG\.E\.128(\..*)?"  # sm_80..sm_90 spell it LDG.E.128 / LDG.E.128.CONSTANT


@needs_sass
@pytest.mark.parametrize("arch", ARCHS)
def test_no_local_memory_anywhere(compiled, arch):
    for source in cm.SOURCES:
        for name, ops in _sass(compiled, source, arch).items():
            assert not count(ops, r"(LDL|STL)(\..*)?"), f"{name} touches local memory on {arch}"


@needs_sass
@pytest.mark.parametrize("arch", ARCHS)
def test_gemm_uses_tensor_cores_ldmatrix_and_cp_async(compiled, arch):
    funcs = _sass(compiled, "gemm_mma.cu", arch)
    k_steps = cm.GEMM_BK // 16
    for name, ops in funcs.items():
        hmma = r"HMMA\.16816\.F32\.BF16" if "_bf16_" in name else r"HMMA\.16816\.F32"
        # one K tile: MT*NT mma per 16-wide k step
        assert count(ops, hmma) >= cm.GEMM_MT * cm.GEMM_NT * k_steps, (name, arch)
        assert count(ops, r"LDSM\.16\.M88\.4") >= (cm.GEMM_MT + cm.GEMM_NT // 2) * k_steps, name
        assert count(ops, r"LDGSTS\.E(\.\w+)*\.128") >= 2 * (
            cm.GEMM_BM * cm.GEMM_CHUNKS // cm.GEMM_THREADS
        ), name
        assert count(ops, r"BAR\.SYNC.*") >= 1, name


@needs_sass
@pytest.mark.parametrize("arch", ARCHS)
def test_gemv_uses_128_bit_loads_and_shuffles(compiled, arch):
    funcs = _sass(compiled, "gemv.cu", arch)
    for name, ops in funcs.items():
        if "reduce" in name:
            continue
        assert count(ops, LDG128) >= cm.GEMV_UNROLL, (name, arch)
        assert count(ops, r"SHFL\.BFLY.*") >= 5, name


@needs_sass
@pytest.mark.parametrize("arch", ARCHS)
def test_probe_sass(compiled, arch):
    f = _sass(compiled, "probes.cu", arch)
    per_iter_fma = cm.PROBE_FMA_NACC * cm.PROBE_FMA_UNROLL
    assert count(f["probe_read_u4"], LDG128) >= 4
    assert count(f["probe_read_l1_u4"], LDG128) >= 4
    assert count(f["probe_copy_u4"], LDG128) >= 4
    assert count(f["probe_copy_u4"], r"STG\.E\.128.*") >= 4
    assert count(f["probe_intensity_fp32"], LDG128) >= 2
    assert count(f["probe_intensity_fp32"], r"FFMA") >= 8
    assert count(f["probe_smem_u4"], r"LDS\.128") >= cm.PROBE_SMEM_READS
    assert count(f["probe_fma_fp32"], r"FFMA") >= per_iter_fma
    assert count(f["probe_fma_fp64"], r"DFMA") >= per_iter_fma
    assert count(f["probe_fma_fp16x2"], r"HFMA2") >= per_iter_fma
    assert count(f["probe_fma_bf16x2"], r"HFMA2\.BF16(_V2)?") >= per_iter_fma
    nacc = cm.PROBE_MMA_NACC
    assert count(f["probe_mma_bf16"], r"HMMA\.16816\.F32\.BF16") >= nacc
    assert count(f["probe_mma_fp16"], r"HMMA\.16816\.F32") >= nacc
    assert count(f["probe_mma_tf32"], r"HMMA\.1688\.F32\.TF32") >= nacc
    assert count(f["probe_mma_int8"], r"IMMA\.16832\.S8\.S8") >= nacc
    assert f["probe_empty"] and count(f["probe_empty"], r"EXIT") >= 1
    fp8 = f["probe_mma_fp8"]
    if arch == "sm_80":  # body compiled out below sm_89
        assert not count(fp8, r"[HQI]MMA.*")
    elif arch == "sm_89":  # native fp8 mma.sync
        assert count(fp8, r"QMMA\.16832\.F32\.E4M3\.E4M3") >= nacc
    else:  # sm_90: emulated (unpack to f16 + 2 HMMA per mma), and not hoisted out of the loop
        assert count(fp8, r"F2FP\.F16\.E4M3\.UNPACK_B") >= 1
        assert count(fp8, r"HMMA\.16816\.F32") >= 2 * nacc


# ld.global.cg as nvcc 13.0 emits it for sm_80..sm_90: a GPU-scope strong load, served by L2
# (the per-SM L1 is not coherent at GPU scope, so such a load never hits or allocates there).
L1_BYPASSING = r"LDG\.E\.128\.STRONG\.(GPU|SYS)"
# Weak loads (LDG.E.128) and the read-only path (LDG.E.128.CONSTANT) are cached in L1.
L1_CACHED = r"LDG\.E\.128(\.CONSTANT)?"


@needs_sass
@pytest.mark.parametrize("arch", ARCHS)
def test_l2_read_probe_loads_bypass_l1(compiled, arch):
    """probe_read_u4 (the L2 probe and the read sweep) re-reads each SM's share every pass: its
    loads must not be L1-allocating, or the "L2" ceiling is the L1 hit rate. Before the fix
    they were LDG.E.128.CONSTANT (__ldg)."""
    read = _sass(compiled, "probes.cu", arch)["probe_read_u4"]
    loads = [op for op in read if op.startswith("LDG")]
    assert count(read, L1_BYPASSING) >= 4, loads
    assert all(re.fullmatch(L1_BYPASSING, op) for op in loads), (
        f"L1-cached loads on {arch}: {loads}"
    )
    assert not count(read, L1_CACHED)


@needs_sass
@pytest.mark.parametrize("arch", ARCHS)
def test_l1_read_probe_loads_allocate_in_l1(compiled, arch):
    """probe_read_l1_u4 is the explicit L1 ceiling: the same loop with read-only-path loads."""
    read_l1 = _sass(compiled, "probes.cu", arch)["probe_read_l1_u4"]
    loads = [op for op in read_l1 if op.startswith("LDG")]
    assert count(read_l1, r"LDG\.E\.128\.CONSTANT") >= 4, loads
    assert not count(read_l1, L1_BYPASSING), loads


@needs_sass
@pytest.mark.parametrize("arch", ARCHS)
def test_delay_kernel_spins_on_the_global_timer(compiled, arch):
    """probe_delay_ns reads %globaltimer (SR_GLOBALTIMERLO/HI in SASS) before and inside its
    loop, never the SM clock, so its length does not depend on clocks or a calibration."""
    assert compiled[("probes.cu", arch)].sass
    body = sass_bodies(compiled[("probes.cu", arch)].sass)["probe_delay_ns"]
    reads = re.findall(r"\b(?:CS2R|S2R|S2UR)(?:\.\w+)*\s+\w+,\s*(SR_\w+)", body)
    timer = [r for r in reads if r.startswith("SR_GLOBALTIMER")]
    assert len(timer) >= 2, reads  # the start time and the one re-read every loop trip
    assert not [r for r in reads if r.startswith("SR_CLOCK")], reads
    # the spin loop: a backward branch whose body re-reads the timer
    lines = re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", body)
    timer_at = [int(a, 16) for a, text in lines if "SR_GLOBALTIMER" in text]
    loops = [
        (int(m.group(1), 16), int(a, 16))
        for a, text in lines
        if (m := re.search(r"\bBRA\s+(?:`\()?(?:0x)?([0-9a-f]+)", text))
        and int(m.group(1), 16) < int(a, 16)
    ]
    assert any(lo <= t < hi for lo, hi in loops for t in timer_at), (loops, timer_at)
    ops = parse_sass(compiled[("probes.cu", arch)].sass)["probe_delay_ns"]
    assert count(ops, r"STG\.E\.64") == 1, ops


# ----------------------------------------------------------------------------------- NVRTC
def find_nvrtc() -> tuple[str, list[Path]] | None:
    """libnvrtc and the header folders of the same CUDA release (pip wheel layout first)."""
    try:
        import nvidia
    except ImportError:
        nvidia = None
    for root in getattr(nvidia, "__path__", []):
        for lib in sorted(Path(root).glob("*/lib/libnvrtc.so*")):
            if "builtins" in lib.name or "alt" in lib.name:
                continue
            pkg = lib.parents[1]
            incs = [
                d
                for d in (pkg / "include", pkg.parent / "cuda_runtime" / "include")
                if (d / "cuda_bf16.h").is_file()
            ]
            if incs:
                return str(lib), incs
    system = ctypes.util.find_library("nvrtc")
    if system and cm.cuda_include_dirs():
        return system, list(cm.cuda_include_dirs())
    return None


NVRTC = find_nvrtc()


@pytest.mark.skipif(NVRTC is None, reason="libnvrtc with cuda_bf16.h headers not found")
@pytest.mark.parametrize("source", cm.SOURCES)
def test_sources_compile_under_nvrtc(source):
    """What CuPy RawModule(code=..., options=nvrtc_options()) does on a GPU machine."""
    lib_path, includes = NVRTC
    lib = ctypes.CDLL(lib_path)
    lib.nvrtcCreateProgram.argtypes = [
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
    lib.nvrtcCompileProgram.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.POINTER(ctypes.c_char_p),
    ]
    lib.nvrtcGetProgramLogSize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
    lib.nvrtcGetProgramLog.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    prog = ctypes.c_void_p()
    code = cm.source_path(source).read_bytes()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), code, source.encode(), 0, None, None) == 0
    try:
        opts = [o.encode() for o in cm.nvrtc_options("sm_90", includes[0])]
        rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        assert rc == 0, log.value.decode(errors="replace")
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
