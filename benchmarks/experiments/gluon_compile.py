"""Compile the Gluon warp-specialised kernel for sm_90 without a GPU; report shared memory,
registers/spills (ptxas -v) and where the barriers and waits landed.

    python benchmarks/experiments/gluon_compile.py [block_n] [--split]

Also used by tests/test_gluon_compile.py (CI has no GPU, but it can compile for one).
"""

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource

from mla_prefill.kernel.gluon_attention import _mla_prefill_ws_kernel

sys.path.insert(0, str(Path(__file__).parent))
from ttgir_buffers import signature  # noqa: E402  (sibling experiment script)


def compile_ws(block_n=64, split=False, kernel=_mla_prefill_ws_kernel):
    """``kernel`` (the shipped one, or a patched copy of it) compiled for sm_90."""
    sig, attrs = signature(kernel.arg_names, split)
    consts = dict(NUM_HEADS=16, HEAD_CKV=512, HEAD_KPE=64, BLOCK_T=4, BLOCK_N=block_n,
                  MIN_CHUNK=128 if split else 0, OFFS32=True)  # fmt: skip
    src = GluonASTSource(kernel, sig, consts, attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))


def ptxas_report(kernel):
    """ptxas -v for sm_90a on the kernel's PTX: (return code, its report)."""
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(kernel.asm["ptx"])
    ptxas = triton.backends.nvidia.__path__[0] + "/bin/ptxas"
    r = subprocess.run([ptxas, "-v", "-arch=sm_90a", f.name, "-o", "/dev/null"],
                       capture_output=True, text=True)  # fmt: skip
    Path(f.name).unlink()
    return r.returncode, r.stderr.strip()


def main(argv):
    block_n = int(argv[0]) if argv and argv[0].isdigit() else 64
    k = compile_ws(block_n, "--split" in argv)
    ptx = k.asm["ptx"]
    if "--json" in argv:  # for tests/test_gluon_compile.py
        rc, report = ptxas_report(k)
        print(json.dumps(dict(shared=k.metadata.shared, wgmma="wgmma.mma_async" in ptx,
                              st_global_v4=len(re.findall(r"st\.global\.v4\.b32", ptx)),
                              ptxas_rc=rc, ptxas=report)))  # fmt: skip
        return
    print("shared bytes", k.metadata.shared, "warps", k.metadata.num_warps)
    print("setmaxnreg", re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32 (\d+)", ptx))
    print(
        "bar.sync",
        len(re.findall(r"bar\.sync", ptx)),
        "wgmma",
        len(re.findall(r"wgmma\.mma_async", ptx)),
    )
    print(ptxas_report(k)[1][-600:])


if __name__ == "__main__":
    main(sys.argv[1:])
