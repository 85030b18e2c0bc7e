#!/usr/bin/env bash
# Prepare the wheels that scripts/gpu_check.sh installs on the bare device machine (CPython 3.12,
# no network). Output: .whl/ (ignored by git, carried with the device call, < 64 MiB in all).
#   flashinfer-bench 0.1.2 and its light deps (pydantic, ...), apache-tvm-ffi, and
#   flashinfer-python 0.7.2.post1 trimmed to what its Hopper MLA path needs (kernel sources for
#   other ops and architectures removed; it JIT-compiles the fa3 MLA module with nvcc on first use,
#   or loads a prebuilt one from flashinfer/data/aot/<module>/ when .fi_aot/ holds one).
set -euo pipefail
cd "$(dirname "$0")/.."
out=.whl
rm -rf "$out" && mkdir -p "$out"
dl() {
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$out" "$@"
}
dl flashinfer-bench==0.1.2 pydantic==2.12.5 pydantic-core==2.41.5 annotated-types typing-inspection \
   docstring-parser apache-tvm-ffi==0.1.15.post2 flashinfer-python==0.7.2.post1
python3 - "$out" <<'PY'
import sys, zipfile, pathlib
out = pathlib.Path(sys.argv[1])
src = next(out.glob("flashinfer_python-*.whl"))
drop = ("flashinfer/data/csrc/cake_", "flashinfer/data/csrc/kda", "flashinfer/data/csrc/fused_moe",
        "flashinfer/data/csrc/gdn", "flashinfer/data/csrc/blackwell", "flashinfer/data/csrc/experimental",
        "flashinfer/data/csrc/nv_internal", "flashinfer/data/csrc/alphamoe", "flashinfer/data/cutlass/examples",
        "flashinfer/data/cutlass/python", "flashinfer/data/cccl/python", "flashinfer/data/csrc/xqa",
        "flashinfer/data/csrc/trtllm")
tmp = src.with_suffix(".tmp")
with zipfile.ZipFile(src) as zi, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zo:
    for info in zi.infolist():
        if not info.filename.startswith(drop):
            zo.writestr(info, zi.read(info.filename))
tmp.replace(src)
PY
du -sh "$out"; ls -la "$out"
