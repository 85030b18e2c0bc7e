#!/usr/bin/env bash
# Prepare another Triton release for scripts/triton_check.sh on the device machine (CPython 3.12,
# no network, at most 64 MiB carried per call): the release's wheel without what compiling and
# launching for sm_90 does not use (CUPTI and the profiler, the Blackwell ptxas, the disassemblers),
# as tar.xz (~90 MB for 3.7.1), split over three carry folders: .t37a (24 MB, carried beside
# .whl), .t37b (60 MB, alone), .t37c (the rest). A warm machine keeps each folder after its call,
# so three back-to-back calls (each within the machine's idle window) bring the whole release.
#   bash scripts/prepare_triton.sh 3.7.1
set -euo pipefail
cd "$(dirname "$0")/.."
release=${1:?usage: prepare_triton.sh RELEASE}
work=$(mktemp -d)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 -d "$work" "triton==$release"
(cd "$work" && unzip -q triton-*.whl && rm triton-*.whl \
  && rm -rf triton/backends/nvidia/lib/cupti triton/backends/nvidia/bin/ptxas-blackwell \
            triton/backends/nvidia/bin/cuobjdump triton/backends/nvidia/bin/nvdisasm \
            triton/_C/libproton.so triton/instrumentation triton/FileCheck \
  && tar -cf - triton "triton-$release.dist-info" | xz -T0 -6 > release.tar.xz)
f=$work/release.tar.xz
rm -rf .t37a .t37b .t37c && mkdir -p .t37a .t37b .t37c
cut_part() { dd if="$f" of="$1" bs=4M iflag=skip_bytes,count_bytes skip="$2" ${3:+count=$3} status=none; }
cut_part .t37a/p0 0 24000000
cut_part .t37b/p1 24000000 60000000
cut_part .t37c/p2 84000000
sha256sum "$f" | cut -d' ' -f1 > .t37c/sha256
echo "$release" > .t37c/release
rm -rf "$work"
du -b .t37a .t37b .t37c
