#!/usr/bin/env bash
# One device call does everything: install the carried wheels, print the environment, then run the
# steps named on the command line (default: tests bench), logging to $OUT/gpu_check.log.
#   tests          pytest on the GPU (no interpreter): small workloads + random batches vs reference
#   bench [ARGS]   mla-prefill bench ... --output $OUT/h200.json (ours vs FlashInfer, cold L2);
#                  BENCH_TIMEOUT (s) bounds it
#   run [ARGS]     mla-prefill run ... (flashinfer-bench's evaluator; traces under traces/)
#   py FILE ARGS   any python script (experiments); PY_TIMEOUT (s) bounds it
# Carry: .whl (scripts/prepare_wheels.sh) and, if present, .fi_aot (a prebuilt FlashInfer module).
# Stops at the first failing step (its status is the exit code); KEEP_GOING=1 runs the remaining
# steps anyway and exits with the first failure's status (a timed-out fuzz, resumable with
# --resume, then does not cost the steps after it).
set -uo pipefail
shopt -s extglob
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
exec > >(tee -a "$LOG") 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
if [ -d .fi_aot ] && [ -d /tmp/site/flashinfer ]; then
  mkdir -p /tmp/site/flashinfer/data/aot && cp -r .fi_aot/* /tmp/site/flashinfer/data/aot/
fi
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
python3 -c "import torch, triton, importlib.metadata as m; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda); [print(d, m.version(d)) for d in ('flashinfer-bench','flashinfer-python') if __import__('importlib').util.find_spec(d.replace('-python','').replace('-','_'))]"
steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(tests bench)
i=0
while [ $i -lt ${#steps[@]} ]; do
  step=${steps[$i]}; i=$((i+1))
  args=()
  while [ $i -lt ${#steps[@]} ] && [[ ${steps[$i]} != @(tests|bench|run|py) ]]; do args+=("${steps[$i]}"); i=$((i+1)); done
  echo "== step: $step ${args[*]:-}"
  t0=$(date +%s)
  case $step in
    tests) python3 -m pytest -q -x --device cuda tests "${args[@]}" ;;
    bench) timeout "${BENCH_TIMEOUT:-3000}" python3 -m mla_prefill.bench --output "$OUT/h200.json" "${args[@]}" ;;
    run)   timeout "${RUN_TIMEOUT:-480}" python3 -m mla_prefill.cli run "${args[@]}"; rc_run=$?
           mkdir -p "$OUT/traces" && cp traces/mla_paged/*/*.jsonl "$OUT/traces/"; (exit $rc_run) ;;
    py)    timeout "${PY_TIMEOUT:-3000}" python3 "${args[@]}" ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
  rc=$?
  echo "== step $step: rc=$rc in $(( $(date +%s) - t0 )) s"
  [ $rc -ne 0 ] && [ "${first_rc:-0}" -eq 0 ] && first_rc=$rc
  [ $rc -ne 0 ] && [ -z "${KEEP_GOING:-}" ] && break
done
rc=${first_rc:-0}
# keep a JIT-built FlashInfer module so the next call can skip compiling it
so=$(find ~/.cache/flashinfer -name '*.so' -path '*mla*' 2>/dev/null | head -5)
if [ -n "$so" ] && [ ! -d .fi_aot ]; then
  tar -czf "$OUT/fi_aot.tar.gz" $(for f in $so; do echo "-C $(dirname "$(dirname "$f")") $(basename "$(dirname "$f")")"; done) && echo "saved $so"
fi
exit ${rc:-0}
