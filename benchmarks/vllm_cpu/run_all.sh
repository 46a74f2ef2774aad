#!/usr/bin/env bash
# Produce every committed run under data/validation/vllm-cpu/ (about 20-25 min on the
# 2-core machine).  Run it on a quiet machine: nothing else heavy while it measures.
#   benchmarks/vllm_cpu/run_all.sh [VENV_PYTHON]   (default /opt/vllm-venv/bin/python)
# Stage 1: step profile.  Stage 2: burst-all (every request at t=0) gives the saturated
# throughput; every other rate is a fraction of it.  Stage 3: the serving runs,
# interleaved.  Stage 4 (REPEATS=1): a second run of each validation workload (-rep2).
set -euo pipefail
PY=${1:-/opt/vllm-venv/bin/python}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$(cd "$HERE/../.." && pwd)/data/validation/vllm-cpu}
LOG=${LOG:-/tmp/vllm_cpu_run_all.log}
mkdir -p "$OUT"
stamp() { echo "[$(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)] $*" | tee -a "$LOG"; }
# WARMUP=short reproduces the first two campaigns' warm-up (serve.py WARMUPS); default full
WARMUP=${WARMUP:-full}
run() { stamp "start $*"; "$PY" "$HERE/serve.py" --out "$OUT" --warmup "$WARMUP" "$@" >>"$LOG.engine" 2>&1 \
        || { stamp "FAILED $*"; return 0; }; tail -1 "$LOG.engine" | tee -a "$LOG"; }

if [ "${SKIP_PROFILE:-0}" != 1 ]; then
  stamp "profile"
  "$PY" "$HERE/profile_steps.py" --out "$OUT/profile" --warmup "$WARMUP" \
    --repeats "${PROFILE_REPEATS:-3}" --only "${PROFILE_ONLY:-}" >>"$LOG.engine" 2>&1
  tail -1 "$LOG.engine" | tee -a "$LOG"
fi
if [ -z "${CAPACITY:-}" ]; then
  run --run burst-all
  CAPACITY=$("$PY" -c "import json,sys; s=json.load(open(sys.argv[1]))['summary']; \
print(round(s['requests']/s['makespan_s'],3))" "$OUT/burst-all/meta.json")
fi
stamp "capacity ${CAPACITY} req/s"
echo "$CAPACITY" > "$OUT/capacity_rps.txt"
for w in ${RUNS:-poisson-mid poisson-light poisson-high shared-prefix poisson-overload \
         gamma-bursty preempt shared-prefix-b32 poisson-mid-b poisson-high-b \
         poisson-high-long budget-512 seqcap-overload poisson-light-b}; do
  run --run "$w" --capacity "$CAPACITY"
done
if [ "${REPEATS:-1}" = 1 ]; then
  for w in ${REPEAT_RUNS:-poisson-light poisson-mid poisson-high poisson-overload \
           gamma-bursty shared-prefix shared-prefix-b32 preempt poisson-high-long \
           budget-512 seqcap-overload}; do
    if [ -n "${DEADLINE:-}" ] && [ "$(date -u +%H%M)" -ge "$DEADLINE" ]; then
      stamp "deadline $DEADLINE reached, stopping repeats"; break
    fi
    run --run "$w" --capacity "$CAPACITY" --tag="${REPEAT_TAG:--rep2}"
  done
fi
stamp "done"
if [ "${SKIP_PROFILE:-0}" != 1 ]; then
  stamp "profile-rep2 (drift check)"
  "$PY" "$HERE/profile_steps.py" --out "$OUT/profile-rep2" --warmup "$WARMUP" \
    --repeats "${PROFILE_REPEATS:-3}" --only "${PROFILE_ONLY:-}" >>"$LOG.engine" 2>&1
  stamp "all done"
fi
