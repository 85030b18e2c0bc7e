#!/usr/bin/env bash
# Same-run A/B of a kernel patch on the device: the committed sources (orig) against the sources
# with PATCH applied (new), benched orig / new / new / orig (ours only, every timed call
# re-checked on refilled inputs), after an optional pytest run on the patched sources.
#   bash tools/ab_patch.sh PATCH [--tests PYTEST_K] -- BENCH_ARGS...
# Writes $OUT/ab-<i>-<orig|new>.json and logs to $OUT/gpu_check.log (scripts/gpu_check.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_out}
patch=$1; shift
tests=""
if [ "${1:-}" = "--tests" ]; then tests=$2; shift 2; fi
[ "${1:-}" = "--" ] && shift
bash scripts/gpu_check.sh py -c "print('wheels installed')" >/dev/null 2>&1 || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src:/tmp/site"
rm -rf /tmp/orig_src /tmp/new_src && cp -r src /tmp/orig_src
git apply "$patch" || exit 1
cp -r src /tmp/new_src
if [ -n "$tests" ]; then
  timeout "${TEST_TIMEOUT:-150}" python3 -m pytest -q -x --device cuda tests/test_kernel.py \
    -k "$tests" -p no:cacheprovider 2>&1 | tail -15 | tee -a "$OUT/gpu_check.log"
fi
i=0
for v in orig new new orig; do
  i=$((i + 1))
  rm -rf src && cp -r "/tmp/${v}_src" src
  echo "== ab $i $v" | tee -a "$OUT/gpu_check.log"
  timeout "${BENCH_TIMEOUT:-120}" python3 -m mla_prefill.bench --no-flashinfer "$@" \
    --output "$OUT/ab-$i-$v.json" 2>&1 | tee -a "$OUT/gpu_check.log" | tail -3
done
rm -rf src && cp -r /tmp/orig_src src
