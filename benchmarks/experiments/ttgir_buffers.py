"""Compile the main kernel for sm_90 on a machine without a GPU and report how Triton's pipeliner
buffered the gathered KV rows (buffers per shared allocation, async_wait depths, shared memory).

    python benchmarks/experiments/ttgir_buffers.py 1,32,4,3 4,64,8,2     # block_t,block_n,warps,stages

Pointers and strides are marked 16-divisible, as Triton specialises them at a real launch; without
that hint the loads are not vectorised and nothing is pipelined, so the numbers would mislead.
This is how kernel v4d's fix was found (NOTES.md): before it, every config showed one buffer per
gather and ``async_wait {num = 0}`` at the top of the KV loop.
"""

import re
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from mla_prefill.kernel.attention import _mla_prefill_kernel

ALIGNED = {
    "q_nope_ptr", "q_pe_ptr", "ckv_ptr", "kpe_ptr", "qo_indptr_ptr", "kv_indptr_ptr",
    "kv_indices_ptr", "out_ptr", "lse_ptr", "stride_qn_t", "stride_qn_h", "stride_qp_t",
    "stride_qp_h", "stride_ckv_p", "stride_kpe_p", "stride_o_s", "stride_o_t", "stride_o_h",
    "stride_l_s", "stride_l_t",
}  # fmt: skip


def signature(names, split=False):
    """Launch-like signature and 16-divisibility hints for a kernel with the main kernel's
    arguments (``arg_names``): also used by ``gluon_compile.py``."""
    sig = {}
    for n in names:
        if n in ("q_nope_ptr", "q_pe_ptr", "ckv_ptr", "kpe_ptr"):
            sig[n] = "*bf16"
        elif n == "out_ptr":
            sig[n] = "*fp32" if split else "*bf16"
        elif n == "lse_ptr":
            sig[n] = "*fp32"
        elif n.endswith("_ptr"):
            sig[n] = "*i32"
        elif n == "qk_scale":
            sig[n] = "fp32"
        elif n.isupper():
            sig[n] = "constexpr"
        else:
            sig[n] = "i32"
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n in ALIGNED}
    return sig, attrs


def compile_kernel(fn, consts, warps, stages, fp32=(), aligned=()):
    """Compile ``fn`` for sm_90 with ``signature``'s types and hints; the pointer arguments named
    in ``fp32`` are fp32 (split partials, lse), and those and the ones in ``aligned`` are marked
    16-divisible as a launch would find them."""
    sig, attrs = signature(fn.arg_names)
    for i, n in enumerate(fn.arg_names):
        if n in fp32:
            sig[n] = "*fp32"
        if n in fp32 or n in aligned:
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn, sig, consts, attrs)
    return triton.compile(
        src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=stages)
    )


def compile_config(block_t, block_n, warps, stages, split=False, offs32=True):
    consts = dict(NUM_HEADS=16, HEAD_CKV=512, HEAD_KPE=64, BLOCK_T=block_t, BLOCK_N=block_n,
                  MIN_CHUNK=128 if split else 0, OFFS32=offs32,
                  GUESS32=True, INTERPRET=False)  # fmt: skip
    fp32 = ("out_ptr",) if split else ()
    return compile_kernel(_mla_prefill_kernel, consts, warps, stages, fp32)


def main(argv):
    for spec in argv or ["1,16,4,3", "1,32,4,3", "4,64,8,2", "4,32,8,4"]:
        bt, bn, w, st = (int(x) for x in spec.split(","))
        ttgir = compile_config(bt, bn, w, st).asm["ttgir"]
        bufs = re.findall(r"local_alloc : \(\) -> !ttg.memdesc<(\d+)x", ttgir)
        waits = re.findall(r"async_wait.*?num = (\d+)", ttgir)
        print(f"block_t {bt} block_n {bn} warps {w} stages {st}: buffers {bufs} waits {waits}")


if __name__ == "__main__":
    main(sys.argv[1:])
