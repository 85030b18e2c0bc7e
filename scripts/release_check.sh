#!/usr/bin/env bash
# The GPU evidence a kernel change needs, in calls of at most 10 minutes each (a warm machine
# runs them back to back without a new start):
#   bash scripts/release_check.sh correctness   (~7 min on an H100)
#       the quick kernel tests (scripts/quick_kernel_tests.k, a pytest -k expression; stops on
#       a failure), then side by side: the fuzz of 1000 batches on the three paths (the GPU's
#       tiles, the B200's, the serving plan), the whole GPU test suite and scripts/sanitize.sh
#       (memcheck, racecheck, synccheck)
#   bash scripts/release_check.sh performance   (~5 min)
#       mla-prefill bench --random 60 --seed 7, then, with BASELINE_SRC (the src/ folder of the
#       previous kernel with the checkout's blob/workload_lengths.json beside it, e.g.
#       `git archive REV src blob/workload_lengths.json | tar -x -C DIR`, BASELINE_SRC=DIR/src),
#       tools/tile_sweep.py on SWEEP_KINDS with the baseline's sources and with these, then
#       mla-prefill bench (the 38; BENCH_38=0 leaves it out when their launches are unchanged);
#       alone on the GPU
#   bash scripts/gpu_check.sh run --force       (~4 min: flashinfer-bench's evaluator, traces/)
# Results go to $OUT under the names benchmarks/results/ uses (<gpu>-random.json, <gpu>.json,
# fuzz-*.json, sanitizer.log), the logs to $OUT/<mode>-logs.tgz.
set -u
cd "$(dirname "$0")/.."
mode=${1:?usage: release_check.sh correctness|performance}
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
bash scripts/gpu_check.sh py -c 'print()' > /tmp/install.log 2>&1 || { tail -30 /tmp/install.log; exit 1; }
cat "$OUT/gpu_check.log"; rm -f "$OUT/gpu_check.log"
export PYTHONPATH="$PWD/src:/tmp/site" PYTHONUNBUFFERED=1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) tag=h200 ;; *H100*) tag=h100 ;; *B200*) tag=b200 ;; *) tag=gpu ;;
esac
logs=(install.log)

case $mode in
correctness)
  timeout 150 python3 -m pytest -q -x --device cuda tests/test_kernel.py -p no:cacheprovider \
    -k "${QUICK_K:-$(cat scripts/quick_kernel_tests.k)}" > /tmp/kernel-tests.log 2>&1
  rc=$?; logs+=(kernel-tests.log)
  echo "kernel tests rc=$rc at $(elapsed) s"; tail -2 /tmp/kernel-tests.log
  [ $rc -eq 0 ] || { tail -60 /tmp/kernel-tests.log; exit 1; }
  ft=${FUZZ_TIMEOUT:-420}
  fuzz="python3 -m mla_prefill.fuzz --n 1000 --seed 11"
  timeout "$ft" $fuzz --output "$OUT/fuzz-call.json" > /tmp/fuzz-call.log 2>&1 &
  timeout "$ft" $fuzz --target b200 --output "$OUT/fuzz-b200-tiles.json" \
    > /tmp/fuzz-b200.log 2>&1 &
  timeout "$ft" $fuzz --path plan --output "$OUT/fuzz-plan.json" > /tmp/fuzz-plan.log 2>&1 &
  # the two deselected tests compare the committed fuzz files with the kernel: they hold the
  # previous hash until this call's files are committed
  timeout "$ft" python3 -m pytest -q --device cuda tests -p no:cacheprovider \
    --deselect tests/test_package.py::test_check_passes_on_repo \
    --deselect tests/test_package.py::test_committed_gpu_evidence_describes_the_kernel \
    > /tmp/gpu-tests.log 2>&1 &
  MEMCHECK_TIMEOUT=${MEMCHECK_TIMEOUT:-240} RACECHECK_TIMEOUT=${RACECHECK_TIMEOUT:-150} \
    bash scripts/sanitize.sh > /tmp/sanitize.log 2>&1 &
  wait
  logs+=(fuzz-call.log fuzz-b200.log fuzz-plan.log gpu-tests.log sanitize.log)
  echo "done at $(elapsed) s"
  tail -2 /tmp/gpu-tests.log
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" /tmp/sanitize.log
  for f in fuzz-call fuzz-b200 fuzz-plan; do tail -1 "/tmp/$f.log" | cut -c1-160; done
  ;;
performance)
  timeout 240 python3 -m mla_prefill.bench --random 60 --seed 7 --output "$OUT/$tag-random.json" \
    > /tmp/random.log 2>&1
  echo "random bench rc=$? at $(elapsed) s"; tail -1 /tmp/random.log; logs+=(random.log)
  if [ -n "${BASELINE_SRC:-}" ]; then
    kinds=${SWEEP_KINDS:-many,edges}
    PYTHONPATH="$BASELINE_SRC:/tmp/site" timeout 90 python3 tools/tile_sweep.py \
      "$OUT/sweep-baseline.json" "$kinds" > /tmp/sweep-baseline.log 2>&1
    timeout 90 python3 tools/tile_sweep.py "$OUT/sweep.json" "$kinds" > /tmp/sweep.log 2>&1
    logs+=(sweep-baseline.log sweep.log)
    echo "sweeps done at $(elapsed) s"
  fi
  if [ "${BENCH_38:-1}" = 1 ]; then
    timeout $(( ${BUDGET_S:-580} - $(elapsed) )) python3 -m mla_prefill.bench \
      --output "$OUT/$tag.json" > /tmp/bench.log 2>&1
    echo "bench rc=$? at $(elapsed) s"; tail -1 /tmp/bench.log | cut -c1-300; logs+=(bench.log)
  fi
  ;;
*) echo "unknown mode $mode (correctness or performance)"; exit 2 ;;
esac
tar -czf "$OUT/$mode-logs.tgz" -C /tmp "${logs[@]}"
