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
# 4. roofprof run on Llama 3.2 1B (time-boxed by RUN_TIMEOUT), its report.json kept;
# 5. gpu_check.json: one JSON summary (versions, each step's exit code and seconds).
#
# At most 8 files land in $OUT: gpu_check.json, gpu_check.log, doctor.json, selftest.json,
# selftest.md, selftest_roofline.json, counters_selftest.json, run_report.json.
# It never changes the GPU's clocks, power limit or modes; nvidia-smi is only queried.
# Budgets (seconds): SELFTEST_BUDGET (default 210), RUN_TIMEOUT (default 60); PYTHON picks the
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
SELFTEST_BUDGET="${SELFTEST_BUDGET:-210}"
RUN_TIMEOUT="${RUN_TIMEOUT:-60}"
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
T0=$(date +%s)
STEPS="$OUT/.steps"
: >"$STEPS"
step() { echo; echo "=== [$(( $(date +%s) - T0 )) s] $*"; S0=$(date +%s); }
done_step() { echo "$1 $2 $(( $(date +%s) - S0 ))" >>"$STEPS"; echo "--- $1: rc $2 in $(( $(date +%s) - S0 )) s"; }

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
timeout "$RUN_TIMEOUT" "$PY" -m roofprof run --model llama-3.2-1b --out "$RUN_DIR" --budget 0.05 --steps 4 \
    --batch-sweep 1,16; rc=$?
[ -f "$RUN_DIR/report.json" ] && cp "$RUN_DIR/report.json" "$OUT/run_report.json"
done_step run "$rc"

step "results"
"$PY" - "$OUT" "$STEPS" "$(( $(date +%s) - T0 ))" <<'EOF' || echo "summary failed"
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
