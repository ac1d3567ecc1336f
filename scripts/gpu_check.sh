#!/usr/bin/env bash
# gpu_check.sh: the one prepared script for a lent GPU machine (about 9 minutes at most).
#
#   OUT=/some/folder bash scripts/gpu_check.sh      # from the repository root
#
# 1. installs roofprof (pip install -e ".[cuda12,test]"; on a machine without network, where
#    CuPy, numba-cuda, torch and nvidia-ml-py are already installed, the package alone with
#    --no-deps, else the checkout on PYTHONPATH; wheels carried in .whl/ are installed first);
# 2. roofprof doctor (what is there and what is missing);
# 3. roofprof selftest --out "$OUT" (correctness of every kernel, GPU roofline, Llama-shape
#    benchmarks against cuBLAS, Nsight Compute counters, pytest -m gpu; time-boxed);
# 4. roofprof run (the end-to-end job, if the command exists), its report.json kept.
#
# At most 8 files land in $OUT: selftest.json, selftest.md, selftest_roofline.json,
# counters_selftest.json, counters_selftest.csv, doctor.json, run_report.json, gpu_check.log.
# It never changes the GPU's clocks, power limit or modes; nvidia-smi is only queried.
# Budgets (seconds) can be changed: SELFTEST_BUDGET (default 330), RUN_TIMEOUT (default 110);
# SKIP_INSTALL=1 uses the Python environment as it is.

set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
OUT="${OUT:-$ROOT/gpu-check-out}"
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
: >"$LOG"
exec > >(tee -a "$LOG") 2>&1

PY="${PYTHON:-python3}"
SELFTEST_BUDGET="${SELFTEST_BUDGET:-330}"
RUN_TIMEOUT="${RUN_TIMEOUT:-110}"
export PYTHONUNBUFFERED=1
T0=$(date +%s)
step() { echo; echo "=== [$(( $(date +%s) - T0 )) s] $*"; }

step "machine"
"$PY" --version
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv || true

step "install"
if [ -n "${SKIP_INSTALL:-}" ]; then
    echo "SKIP_INSTALL set: using the Python environment as it is"
elif ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ -n "${SKIP_INSTALL:-}" ]; then
    :
elif "$PY" -c "import cupy, numba.cuda, pynvml, typer, rich, pytest" 2>/dev/null; then
    echo "CuPy, numba-cuda, nvidia-ml-py, typer, rich, pytest already present: installing roofprof alone"
    timeout 120 "$PY" -m pip install -q --no-deps --no-build-isolation -e . || echo "editable install failed"
else
    timeout 180 "$PY" -m pip install -q -e ".[cuda12,test]" || echo "pip install -e .[cuda12,test] failed (no network?)"
fi
if ! "$PY" -c "import roofprof.kernels.cuda_models" 2>/dev/null; then
    echo "roofprof is not installed: running from the checkout (PYTHONPATH=$ROOT)"
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi
"$PY" -c "import roofprof, cupy; print('roofprof', roofprof.__version__, 'from', roofprof.__file__, '| cupy', cupy.__version__)" || true

step "roofprof doctor"
timeout 90 "$PY" -m roofprof doctor --format json >"$OUT/doctor.json" || echo "doctor failed (rc $?)"
"$PY" - "$OUT/doctor.json" <<'EOF' || true
import json, sys
for row in json.load(open(sys.argv[1]))["components"]:
    print(f"{'ok' if row['ok'] else 'MISSING':>8}  {row['component']}: {row['detail']}")
EOF

step "roofprof selftest (budget ${SELFTEST_BUDGET} s)"
timeout $(( SELFTEST_BUDGET + 150 )) "$PY" -m roofprof selftest --out "$OUT" --budget "$SELFTEST_BUDGET"
echo "selftest rc $?"

step "roofprof run (timeout ${RUN_TIMEOUT} s)"
if "$PY" -m roofprof run --help >/dev/null 2>&1; then
    RUN_DIR="$(mktemp -d /tmp/roofprof-run.XXXXXX)"
    timeout "$RUN_TIMEOUT" "$PY" -m roofprof run --out "$RUN_DIR" --budget 0.05 --steps 4 --batch-sweep 1,16
    echo "run rc $?"
    [ -f "$RUN_DIR/report.json" ] && cp "$RUN_DIR/report.json" "$OUT/run_report.json"
else
    echo "roofprof run is not available in this build"
fi

step "results"
KEEP="selftest.json selftest.md selftest_roofline.json counters_selftest.json counters_selftest.csv doctor.json run_report.json gpu_check.log"
for f in "$OUT"/*; do
    name="$(basename "$f")"
    case " $KEEP " in *" $name "*) ;; *) echo "removing $name from \$OUT (at most 8 files come back)"; rm -rf "$f" ;; esac
done
ls -l "$OUT"
if [ -f "$OUT/selftest.md" ]; then
    sed -n '/^## Targets/,/^## Sections/p' "$OUT/selftest.md"
    sed -n '/^## Sections/,/^## Ceilings/p' "$OUT/selftest.md"
fi
echo "total $(( $(date +%s) - T0 )) s"
