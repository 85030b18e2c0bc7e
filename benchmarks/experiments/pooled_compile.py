"""Compile the pooled split kernel and the combine for sm_90 on a machine without a GPU and print
their resources, the gather buffering and the synchronising SASS instructions (session 9).

    PYTHONPATH=src python benchmarks/experiments/pooled_compile.py 64,8,3   # block_n,warps,stages

Needs ``cuobjdump`` from Triton's bundled CUDA tools (``triton/backends/nvidia/bin``).
"""

import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton

sys.path.insert(0, str(Path(__file__).parent))
from ttgir_buffers import compile_kernel  # noqa: E402

from mla_prefill.kernel.attention import _combine_kernel, _mla_pooled_split_kernel  # noqa: E402

FP32 = ("part_o_ptr", "part_lse_ptr", "lse_ptr")
ALIGNED = ("table_ptr", "out_ptr")
CUOBJDUMP = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"


def report(name, kernel):
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        res = subprocess.run([CUOBJDUMP, "-res-usage", f.name], capture_output=True, text=True)
        sass = subprocess.run([CUOBJDUMP, "-sass", f.name], capture_output=True, text=True).stdout
    regs = re.search(r"REG:(\d+)", res.stdout).group(1)
    n = len(re.findall(r"^\s+/\*[0-9a-f]{4}\*/", sass, re.M))
    ops = collections.Counter(re.findall(r"\b(BAR|SHFL|LDS|STS)[A-Z0-9.]*", sass))
    ttgir = kernel.asm["ttgir"]
    bufs = re.findall(r"local_alloc : \(\) -> !ttg.memdesc<(\d+)x", ttgir)
    smem = kernel.metadata.shared
    gdc = re.findall(r"griddepcontrol\.\w+", kernel.asm["ptx"])
    print(
        f"{name}: {regs} registers, {smem} B shared, {n} SASS instructions, {dict(ops)}, buffers {bufs}, {gdc}"
    )


def main(argv):
    bn, warps, stages = (int(x) for x in (argv[0] if argv else "64,8,3").split(","))
    consts = dict(NUM_HEADS=16, HEAD_CKV=512, HEAD_KPE=64, BLOCK_N=bn, MIN_CHUNK=128,
                  BLOCK_TQ=32, OFFS32=True, GUESS32=True, INTERPRET=False, USE_PDL=True)  # fmt: skip
    report(
        f"pooled {bn},{warps},{stages}",
        compile_kernel(_mla_pooled_split_kernel, consts, warps, stages, FP32, ALIGNED),
    )
    for pooled in (True, False):
        consts = dict(NUM_HEADS=16, HEAD_CKV=512, BLOCK_D=512, BLOCK_S=16, POOLED=pooled, USE_PDL=True)
        report(
            f"combine pooled={pooled}", compile_kernel(_combine_kernel, consts, 4, 3, FP32, ALIGNED)
        )


if __name__ == "__main__":
    main(sys.argv[1:])
