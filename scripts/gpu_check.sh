#!/usr/bin/env bash
# gpu_check.sh: the one prepared script for the lent GPU machine (nvidia-h200), at most about
# 6.5 minutes, so that a rerun still fits in the 15 minutes of device time a task gets.
#
#   OUT=/some/folder bash scripts/gpu_check.sh      # from the repository root (the device tool
#                                                   # sets $OUT; run it with timeout_s=480)
#
# The H200 machine (see docs/gpu.md and /work/.library/device/KINDS.md) has NO network and
# already holds everything roofprof needs in /opt/torch/.venv (Python 3.12: torch 2.11+cu130,
# cupy-cuda13x 14.2, numba-cuda, nvidia-ml-py, typer, rich, pytest; ncu 2025.3.1 on PATH).
# So nothing is downloaded:
# 1. install: roofprof alone from the copied tree, `pip install --no-deps --no-build-isolation
#    --no-index -e .` (wheels carried in .whl/ are installed first, also without an index);
#    if that fails, the checkout goes on PYTHONPATH;
# 2. roofprof doctor --format json (the CUDA stack versions: driver, runtime, NVRTC, CuPy,
#    numba-cuda, torch + its CUDA, ncu);
# 3. roofprof selftest (correctness of every kernel, the GPU roofline, Llama-shape benchmarks
#    against cuBLAS, Nsight Compute counters, pytest -m gpu; time-boxed by SELFTEST_BUDGET);
# 4. roofprof run on Llama 3.2 1B (time-boxed by RUN_TIMEOUT) on the selftest's roofline
#    (no second roofline measurement), implementations cupy, cublas, torch-eager; its
#    report.json kept, or, when the time box ends it, the per-step JSON it wrote so far;
# 5. gpu_check.json: one JSON summary (versions, each step's exit code and seconds),
#    rewritten after every step, so a run cut short still leaves what finished.
# numba-cuda finds NVVM through CUDA_HOME/CUDA_PATH (numba/cuda/cuda_paths.py); the image
# has no nvidia-nvvm wheel, so CUDA_HOME is set to /usr/local/cuda when that has nvvm/.
#
# At most 8 files land in $OUT: gpu_check.json, gpu_check.log, doctor.json, selftest.json,
# selftest.md, selftest_roofline.json, counters_selftest.json, run_report.json.
# It never changes the GPU's clocks, power limit or modes; nvidia-smi is only queried.
# Budgets (seconds): SELFTEST_BUDGET (default 180), RUN_TIMEOUT (default 150); PYTHON picks the
# interpreter (default /opt/torch/.venv/bin/python3 when present, else python3);
# SKIP_INSTALL=1 uses the Python environment as it is.

set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
OUT="${OUT:-$ROOT/gpu-check-out}"
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
: >"$LOG"
exec > >(tee -a "$LOG") 2>&1

if [ -z "${PYTHON:-}" ] && [ -x /opt/torch/.venv/bin/python3 ]; then
    PY=/opt/torch/.venv/bin/python3
else
    PY="${PYTHON:-python3}"
fi
SELFTEST_BUDGET="${SELFTEST_BUDGET:-180}"
RUN_TIMEOUT="${RUN_TIMEOUT:-150}"
if [ -z "${CUDA_HOME:-}${CUDA_PATH:-}" ] && [ -d /usr/local/cuda/nvvm ]; then
    export CUDA_HOME=/usr/local/cuda  # numba-cuda's NVVM (no nvidia-nvvm wheel on the image)
fi
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
T0=$(date +%s)
STEPS="$(mktemp /tmp/gpu_check_steps.XXXXXX)"  # outside $OUT: at most 8 files come back
: >"$STEPS"
step() { echo; echo "=== [$(( $(date +%s) - T0 )) s] $*"; S0=$(date +%s); }
done_step() {
    echo "$1 $2 $(( $(date +%s) - S0 ))" >>"$STEPS"; echo "--- $1: rc $2 in $(( $(date +%s) - S0 )) s"
    summary
}
summary() {  # gpu_check.json from the steps done so far (rewritten after each step)
    "$PY" - "$OUT" "$STEPS" "$(( $(date +%s) - T0 ))" >/dev/null <<'EOF' || echo "summary failed"
import json, os, sys
out, steps, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
summary = {"schema": "roofprof.gpu_check/1", "total_s": total, "steps": {}}
for line in open(steps):
    name, rc, secs = line.split()
    summary["steps"][name] = {"rc": int(rc), "seconds": int(secs)}
try:
    rows = json.load(open(os.path.join(out, "doctor.json")))["components"]
    summary["doctor"] = {r["component"]: r["detail"] for r in rows}
except Exception as exc:  # noqa: BLE001
    summary["doctor"] = f"unavailable: {exc}"
try:
    st = json.load(open(os.path.join(out, "selftest.json")))
    summary["selftest"] = {"complete": st.get("complete"),
                           "sections": {k: v.get("status") for k, v in st.get("sections", {}).items()},
                           "targets": {t.get("id", t.get("name", "?")): t.get("passed") for t in st.get("targets", [])}}
except Exception as exc:  # noqa: BLE001
    summary["selftest"] = f"unavailable: {exc}"
with open(os.path.join(out, "gpu_check.json"), "w") as f:
    json.dump(summary, f, indent=1)
print(json.dumps(summary["steps"]))
EOF
}


step "machine"
"$PY" --version
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv || true
done_step machine 0

step "install (no network: --no-deps --no-build-isolation --no-index)"
rc=0
if [ -n "${SKIP_INSTALL:-}" ]; then
    echo "SKIP_INSTALL set: using the Python environment as it is"
else
    if ls .whl/*.whl >/dev/null 2>&1; then
        timeout 60 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site .whl/*.whl && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
    fi
    timeout 90 "$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e . ; rc=$?
    [ "$rc" -ne 0 ] && echo "editable install failed (rc $rc)"
fi
if ! "$PY" -c "import roofprof.kernels.cuda_models" 2>/dev/null; then
    echo "roofprof is not importable as installed: running from the checkout (PYTHONPATH=$ROOT)"
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi
"$PY" -c "import roofprof, cupy; print('roofprof', roofprof.__version__, 'from', roofprof.__file__, '| cupy', cupy.__version__)" || rc=1
done_step install "$rc"

step "roofprof doctor"
timeout 60 "$PY" -m roofprof doctor --format json >"$OUT/doctor.json"; rc=$?
"$PY" - "$OUT/doctor.json" <<'EOF' || true
import json, sys
for row in json.load(open(sys.argv[1]))["components"]:
    print(f"{'ok' if row['ok'] else 'MISSING':>8}  {row['component']}: {row['detail']}")
EOF
done_step doctor "$rc"

step "roofprof selftest (budget ${SELFTEST_BUDGET} s)"
timeout $(( SELFTEST_BUDGET + 60 )) "$PY" -m roofprof selftest --out "$OUT" --budget "$SELFTEST_BUDGET"; rc=$?
done_step selftest "$rc"

step "roofprof run (timeout ${RUN_TIMEOUT} s)"
RUN_DIR="$(mktemp -d /tmp/roofprof-run.XXXXXX)"
ROOF=()
[ -f "$OUT/selftest_roofline.json" ] && ROOF=(--roofline "$OUT/selftest_roofline.json")
timeout "$RUN_TIMEOUT" "$PY" -m roofprof run --model llama-3.2-1b --out "$RUN_DIR" --budget 0.05 --steps 4 \
    --batch-sweep 1,16 --impl cupy,cublas,torch-eager ${ROOF[@]+"${ROOF[@]}"}; rc=$?
if [ -f "$RUN_DIR/report.json" ]; then
    cp "$RUN_DIR/report.json" "$OUT/run_report.json"
else  # cut short: the per-step JSON files the run wrote so far, in one file
    "$PY" - "$RUN_DIR" "$OUT/run_report.json" "$rc" <<'EOF' || true
import json, pathlib, sys
folder, rc = pathlib.Path(sys.argv[1]), int(sys.argv[3])
parts = {}
for f in sorted(folder.glob("*.json")):
    try:
        parts[f.name] = json.loads(f.read_text())
    except ValueError as exc:
        parts[f.name] = f"unreadable: {exc}"
json.dump({"partial": True, "rc": rc, "files": parts}, open(sys.argv[2], "w"), indent=1)
print("run cut short (rc", rc, "): kept", ", ".join(parts) or "nothing")
EOF
fi
done_step run "$rc"

step "results"
summary
rm -f "$STEPS"
KEEP="gpu_check.json gpu_check.log doctor.json selftest.json selftest.md selftest_roofline.json counters_selftest.json run_report.json"
for f in "$OUT"/* "$OUT"/.[!.]*; do
    [ -e "$f" ] || continue
    name="$(basename "$f")"
    case " $KEEP " in *" $name "*) ;; *) echo "removing $name from \$OUT (at most 8 files come back)"; rm -rf "$f" ;; esac
done
ls -l "$OUT"
if [ -f "$OUT/selftest.md" ]; then
    sed -n '/^## Targets/,/^## Sections/p' "$OUT/selftest.md"
fi
echo "total $(( $(date +%s) - T0 )) s"
