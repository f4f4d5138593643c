#!/usr/bin/env bash
# Times bench_dnnl26 (oneDNN 2.6.3) and bench_dnnl32 (oneDNN 3.2) alternately on a shared
# machine: per round and per thread count A B A' B' (A = 2.6.3, B = 3.2), so every 3.2 run
# sits between two 2.6.3 runs and A vs A' (same binary, same round) is the A/A noise band.
# Then one verbose run per version (which implementation each primitive dispatches to).
#
#   bench/peers/onednn_versions/run.sh OUT_DIR [ROUNDS] [REPS]     # defaults 5 rounds, 40 reps
#   python3 bench/peers/onednn_versions/analyze.py OUT_DIR          # the table
#
# Environment: CASES=a,b,... (only those cases), RUNS=name.jsonl (default runs.jsonl),
# VERBOSE=0 (skip the verbose runs).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
out="$1"; rounds="${2:-5}"; reps="${3:-40}"
bin="$root/build/onednn_versions"
mkdir -p "$out"
[[ -x "$bin/bench_dnnl26" && -x "$bin/bench_dnnl32" ]] || "$here/build.sh" "$bin"

log() { echo "$(date -u +%FT%TZ) $*" | tee -a "$out/schedule.log"; }
one() {  # one() TAG VERSION THREADS
  log "start $1 dnnl$2 OMP_NUM_THREADS=$3 load=$(cut -d' ' -f1-3 /proc/loadavg)"
  OMP_NUM_THREADS=$3 "$bin/bench_dnnl$2" --reps "$reps" --warmup 5 ${CASES:+--cases "$CASES"} |
    sed "s/^{/{\"run\": \"$1\", /" >>"$out/${RUNS:-runs.jsonl}"
}
for r in $(seq 1 "$rounds"); do
  for t in 2 1; do
    one "r$r.A" 26 "$t"; one "r$r.B" 32 "$t"; one "r$r.A2" 26 "$t"; one "r$r.B2" 32 "$t"
  done
done
[[ "${VERBOSE:-1}" == 0 ]] && { log "done"; exit 0; }
log "verbose runs"
DNNL_VERBOSE=1 OMP_NUM_THREADS=2 "$bin/bench_dnnl26" --reps 1 --warmup 0 >"$out/verbose_dnnl26.txt" 2>&1
ONEDNN_VERBOSE=1 OMP_NUM_THREADS=2 "$bin/bench_dnnl32" --reps 1 --warmup 0 >"$out/verbose_dnnl32.txt" 2>&1
log "done"
