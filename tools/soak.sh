#!/usr/bin/env bash
# The conformance sweep over many seeds, for the soak figures of docs/reliability.md:
#
#   bash tools/soak.sh CLI PLUGIN.so [SEEDS] [JOBS] [-- CONFORM_ARGS...]
#
# runs `CLI conform PLUGIN.so --seed S --sweep 64 --case sweep_ --no-bad-inputs` (the
# commit-seed test's command, tests/conformance/commit_seed.cmake) for SEEDS seeds (default
# 200) S = BASE + i, BASE=$SOAK_BASE or drawn and printed, JOBS at a time (default: the
# cores). CONFORM_ARGS replace `--case sweep_` (e.g. `-- --dtype float32`; `-- --case ""`
# for every case, as a plugin of declared ops wants). SOAK_SECONDS=T starts no seed after T
# seconds (those started finish), so that a run fits a time limit and still counts whole
# seeds: the seeds run are always BASE..BASE+n-1. Prints the seeds run, rows passed, rows
# failed, the median and longest seed, and a reproduce line per failing seed; exit 1 on
# any failure.
set -uo pipefail
CLI=$1 PLUGIN=$2
SEEDS=${3:-200}
JOBS=${4:-$(nproc)}
shift $(($# < 4 ? $# : 4))
[ "${1:-}" = "--" ] && shift
ARGS=("$@")
[ ${#ARGS[@]} -eq 0 ] && ARGS=(--case sweep_)
BASE=${SOAK_BASE:-$(( (RANDOM << 15 | RANDOM) * 1000 ))}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
echo "soak: $(basename "$PLUGIN"), seeds $BASE..$((BASE + SEEDS - 1)), $JOBS at a time, args: --sweep 64 --no-bad-inputs ${ARGS[*]}"
start=$(date +%s)
stop=$((start + ${SOAK_SECONDS:-1000000000}))
# xargs starts the seeds in order, so the seeds past the deadline are a suffix.
seq "$BASE" $((BASE + SEEDS - 1)) | xargs -P "$JOBS" -I{} sh -c \
  'cli=$0 plugin=$1 stop=$2; shift 2; t=$(date +%s); [ "$t" -lt "$stop" ] || exit 0
   "$cli" conform "$plugin" --seed {} --sweep 64 --no-bad-inputs "$@" >"'"$DIR"'/{}.log" 2>&1
   echo $? >"'"$DIR"'/{}.rc"; echo $(($(date +%s) - t)) >"'"$DIR"'/{}.s"' "$CLI" "$PLUGIN" "$stop" "${ARGS[@]}"
passed=0 failed=0 bad=0 run=0
for rc in "$DIR"/*.rc; do
  [ -e "$rc" ] || continue
  run=$((run + 1))
  s=$(basename "$rc" .rc)
  line=$(grep -hE '^[0-9]+ passed, [0-9]+ failed' "$DIR/$s.log" | tail -1)
  [ -n "$line" ] || line="0 passed, 1 failed"  # no table: the run itself failed
  passed=$((passed + ${line%% passed*}))
  f=${line#*passed, }
  failed=$((failed + ${f%% failed*}))
  if [ "$(cat "$rc")" != 0 ]; then
    bad=$((bad + 1))
    grep -E '^FAIL' -A1 "$DIR/$s.log" | head -4
    echo "  reproduce: $CLI conform $PLUGIN --seed $s --sweep 64 --no-bad-inputs ${ARGS[*]}"
  fi
done
times=$(cat "$DIR"/*.s 2>/dev/null | sort -n)
median=$(echo "$times" | awk '{a[NR] = $1} END {print NR ? a[int((NR + 1) / 2)] : 0}')
echo "soak: $run seeds run ($BASE..$((BASE + run - 1)) of $SEEDS), $passed rows passed, $failed failed," \
  "$bad failing seeds, $(($(date +%s) - start)) s, $JOBS at a time, a seed $median s median, $(echo "$times" | tail -1) s longest"
[ "$bad" = 0 ] && [ "$run" -gt 0 ]
