#!/usr/bin/env bash
# compute-sanitizer memcheck, racecheck and synccheck over seeded random batches (small ones: the
# tools slow every kernel down). Run after scripts/gpu_check.sh has installed the wheels on the
# machine, e.g.
#   bash scripts/gpu_check.sh py -c 'print()' && bash scripts/sanitize.sh
# Writes $OUT/sanitizer.log and the batch lists; each tool's "ERROR SUMMARY" line is the result.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
export PYTHONPATH="$PWD/src:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# sanitizer TOOL TIMEOUT LINES FUZZ_ARGS...: the fuzz under one tool, the last LINES of its report
sanitizer() {
  local tool=$1 limit=$2 lines=$3; shift 3
  timeout "$limit" compute-sanitizer --tool "$tool" --print-limit 20 \
    python3 -m mla_prefill.fuzz "$@" 2>&1 | tail -"$lines"
}
small=(--n 4 --seed 12 --max-tokens 256 --max-q 128 --max-prefix 512)
{
  echo "== memcheck"
  sanitizer memcheck "${MEMCHECK_TIMEOUT:-240}" 4 \
    --n 40 --seed 11 --max-tokens 2048 --max-q 1024 --max-prefix 4096 \
    --output "$OUT/memcheck-batches.json"
  # racecheck: every hazard printed, and the summary
  echo "== racecheck"
  sanitizer racecheck "${RACECHECK_TIMEOUT:-300}" 60 "${small[@]}" \
    --output /tmp/racecheck-batches.json
  # the split paths: seed 196 draws a 47-token batch over 1,759 cached tokens (Gluon, 11 pieces)
  # and a 25-token one over 2,276 (Triton, 5 pieces)
  echo "== racecheck, split paths"
  sanitizer racecheck "${RACECHECK_TIMEOUT:-300}" 60 \
    --n 2 --seed 196 --max-tokens 1024 --max-q 128 --max-prefix 4096 \
    --output /tmp/racecheck-split-batches.json
  # barrier use (named barriers met by both warpgroups, mbarrier arrive/wait counts)
  echo "== synccheck"
  sanitizer synccheck "${SYNCCHECK_TIMEOUT:-150}" 30 "${small[@]}" \
    --output /tmp/synccheck-batches.json
} | tee "$OUT/sanitizer.log"
