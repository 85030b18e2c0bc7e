#!/usr/bin/env bash
# On the device machine, after scripts/prepare_triton.sh's three folders arrived (and .whl was
# installed by an earlier scripts/gpu_check.sh call on the same warm machine): the kernels under
# that Triton release in place of the pinned one, MLA_PREFILL_UNRUN_TRITON=1 (the Gluon kernel and
# the direct launcher enabled). The quick kernel tests (scripts/quick_kernel_tests.k; stop on a
# failure), then side by side the launcher and serving tests and the fuzz on the solution's path
# and the serving plan's (FUZZ_N batches each, default 400), results to
# $OUT/fuzz-triton-<release>-*.json.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
release=$(cat .t37c/release)
cat .t37a/p0 .t37b/p1 .t37c/p2 > /tmp/release.tar.xz
[ "$(sha256sum /tmp/release.tar.xz | cut -d' ' -f1)" = "$(cat .t37c/sha256)" ] \
  || { echo "the release's pieces do not match its hash"; exit 1; }
rm -rf /tmp/triton-release && mkdir -p /tmp/triton-release
tar -xJf /tmp/release.tar.xz -C /tmp/triton-release
# the Gluon kernel and the direct launcher run under a release without GPU evidence only on opt-in
export PYTHONPATH="/tmp/triton-release:$PWD/src:/tmp/site" PYTHONUNBUFFERED=1 MLA_PREFILL_UNRUN_TRITON=1
python3 -c "import triton, torch; print('triton', triton.__version__, 'torch', torch.__version__); \
from mla_prefill.kernel.main import gluon_available; from mla_prefill.kernel import launch; \
print('gluon kernel', gluon_available(), 'direct launch', launch._SUPPORTED)"
timeout 200 python3 -m pytest -q -x --device cuda tests/test_kernel.py -p no:cacheprovider \
  -k "$(cat scripts/quick_kernel_tests.k)" > "$OUT/kernel-tests.log" 2>&1
rc=$?; echo "kernel tests rc=$rc"; tail -2 "$OUT/kernel-tests.log"
[ $rc -eq 0 ] || { tail -40 "$OUT/kernel-tests.log"; exit 1; }
n=${FUZZ_N:-400}
fuzz="python3 -m mla_prefill.fuzz --n $n --seed 11"
timeout 240 $fuzz --output "$OUT/fuzz-triton-$release-call.json" > /tmp/fuzz-call.log 2>&1 &
timeout 240 $fuzz --path plan --output "$OUT/fuzz-triton-$release-plan.json" > /tmp/fuzz-plan.log 2>&1 &
timeout 240 python3 -m pytest -q --device cuda tests/test_launch.py tests/test_serving.py \
  tests/test_gluon_compile.py -p no:cacheprovider > "$OUT/launch-serving-tests.log" 2>&1 &
wait
tail -2 "$OUT/launch-serving-tests.log"
for f in fuzz-call fuzz-plan; do tail -1 "/tmp/$f.log" | cut -c1-200; done
