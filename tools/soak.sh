#!/usr/bin/env bash
# The conformance sweep over many seeds, for the soak figures of docs/reliability.md:
#
#   bash tools/soak.sh CLI PLUGIN.so [SEEDS] [JOBS] [-- CONFORM_ARGS...]
#
# runs `CLI conform PLUGIN.so --seed S --sweep 64 --case sweep_ --no-bad-inputs` (the
# commit-seed test's command, tests/conformance/commit_seed.cmake) for SEEDS seeds (default
# 200) S = BASE + i, BASE=$SOAK_BASE or drawn and printed, JOBS at a time (default: the
# cores). CONFORM_ARGS replace `--case sweep_` (e.g. `-- --dtype float32`; `-- --case ""`
# for every case, as a plugin of declared ops wants). Prints seeds, rows passed, rows failed
# and a reproduce line per failing seed; exit 1 on any failure.
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
seq "$BASE" $((BASE + SEEDS - 1)) | xargs -P "$JOBS" -I{} sh -c \
  'cli=$0 plugin=$1; shift; "$cli" conform "$plugin" --seed {} --sweep 64 --no-bad-inputs "$@" >"'"$DIR"'/{}.log" 2>&1
   echo $? >"'"$DIR"'/{}.rc"' "$CLI" "$PLUGIN" "${ARGS[@]}"
passed=0 failed=0 bad=0
for rc in "$DIR"/*.rc; do
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
echo "soak: $SEEDS seeds, $passed rows passed, $failed failed, $bad failing seeds, $(($(date +%s) - start)) s"
[ "$bad" = 0 ]
