"""How fast can 132 SMs gather ed999c80's KV rows when every copy is issued at once?

A register-staged gather with one block in flight per program measures its own issue pattern
(~1 TB/s), not the memory system. Here each program issues its whole share of rows before
waiting for any (all of it fits in shared memory), so the time is the memory side's: launch
floor + one burst. Two mechanisms:

- ``cp``: cp.async, 16 bytes per thread (what the shipped kernels use);
- ``tma``: one bulk tensor copy per row piece from a single thread (the TMA engine), ckv seen as
  ``[num_pages * 512 / W, W]`` with boxes of ``[1, W]`` (W = 256: 3 copies per key with kpe;
  W = 64: 9, the only width a 128-byte-swizzled MMA tile could take).

Rows are random pages of a 989,669-page cache (as the workloads) or consecutive ones; the bytes
are about the workload's (132 x 135 = 17,820 rows of 1,152 B; ed999c80 has 17,759). Timed like ``mla-prefill bench``
(256 MB write scrub, events, median): subtract ``empty`` for the burst. ``SCRUB=read`` reads a
256 MB buffer instead, leaving L2 full of clean lines: the burst then pays no write-backs.

    [SCRUB=read] [CHAIN_ONLY=1] python -u tools/gather_ceiling.py OUT.json
"""

import json
import os
import sys

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import async_copy, mbarrier, tma
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from mla_prefill.bench import time_gpu

NUM_PAGES = 989_669
LD_KV = gl.constexpr(gl.BlockedLayout([1, 8], [1, 32], [4, 1], [1, 0]))
LD_PE = gl.constexpr(gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0]))
FLAT_LAYOUT = gl.NVMMASharedLayout(0, 16, 2)  # a [1, W] box: no swizzle
FLAT = gl.constexpr(FLAT_LAYOUT)


@gluon.jit
def _issue_rows(lo, hi, pe, idx_ptr, r0, n, ckv_ptr, kpe_ptr, PE: gl.constexpr):
    """cp.async of rows [r0, r0 + BR) of a range of n page indices at ``idx_ptr`` (rows at or past
    n are masked off) into ``lo`` / ``hi`` (ckv columns [0, 256) / [256, 512)) and ``pe`` (kpe)."""
    BR: gl.constexpr = lo.shape[0]
    rows = r0 + gl.arange(0, BR, layout=gl.SliceLayout(1, LD_KV))
    ok = rows < n
    pg = gl.load(idx_ptr + rows, mask=ok, other=0).to(gl.int64)
    cols = gl.arange(0, 256, layout=gl.SliceLayout(0, LD_KV))
    base = ckv_ptr + pg[:, None] * 512 + cols[None, :]
    async_copy.async_copy_global_to_shared(lo, base, mask=ok[:, None])
    async_copy.async_copy_global_to_shared(hi, base + 256, mask=ok[:, None])
    if PE:
        rows_p = r0 + gl.arange(0, BR, layout=gl.SliceLayout(1, LD_PE))
        ok_p = rows_p < n
        pg_p = gl.load(idx_ptr + rows_p, mask=ok_p, other=0).to(gl.int64)
        cols_p = gl.arange(0, 64, layout=gl.SliceLayout(0, LD_PE))
        async_copy.async_copy_global_to_shared(
            pe, kpe_ptr + pg_p[:, None] * 64 + cols_p[None, :], mask=ok_p[:, None]
        )
    async_copy.commit_group()


@gluon.jit
def _burst_cp(idx_ptr, ckv_ptr, kpe_ptr, out_ptr, R, NB: gl.constexpr, BR: gl.constexpr,
              PE: gl.constexpr):  # fmt: skip
    pid = gl.program_id(0)
    dt: gl.constexpr = ckv_ptr.dtype.element_ty
    kv_l: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BR, 256], dt)
    pe_l: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BR, 64], dt)
    lo = gl.allocate_shared_memory(dt, [NB, BR, 256], kv_l)
    hi = gl.allocate_shared_memory(dt, [NB, BR, 256], kv_l)
    pe = gl.allocate_shared_memory(dt, [NB, BR, 64], pe_l)
    for b in gl.static_range(NB):
        _issue_rows(lo.index(b), hi.index(b), pe.index(b), idx_ptr + pid * R, b * BR, R, ckv_ptr,
                    kpe_ptr, PE)  # fmt: skip
    async_copy.wait_group(0)
    gl.thread_barrier()
    v = hi.index(NB - 1).load(LD_KV)
    cols = gl.arange(0, 256, layout=gl.SliceLayout(0, LD_KV))
    gl.store(out_ptr + pid * 256 + cols, gl.sum(v.to(gl.float32), 0))


@gluon.jit
def _burst_tma(idx_ptr, ckv_desc, kpe_desc, out_ptr, R: gl.constexpr, W: gl.constexpr):
    pid = gl.program_id(0)
    P: gl.constexpr = 512 // W
    dt: gl.constexpr = ckv_desc.dtype
    ck = gl.allocate_shared_memory(dt, [R * P, 1, W], FLAT)
    pe = gl.allocate_shared_memory(dt, [R, 1, 64], FLAT)
    bar = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    mbarrier.init(bar.index(0), count=1)
    mbarrier.expect(bar.index(0), R * 1152)
    for r in gl.static_range(R):
        page = gl.load(idx_ptr + pid * R + r)
        for c in gl.static_range(P):
            tma.async_copy_global_to_shared(
                ckv_desc, [page * P + c, 0], bar.index(0), ck.index(r * P + c)
            )
        tma.async_copy_global_to_shared(kpe_desc, [page, 0], bar.index(0), pe.index(r))
    mbarrier.wait(bar.index(0), 0)
    v = ck.index(R * P - 1).load(LD_KV)
    cols = gl.arange(0, W, layout=gl.SliceLayout(0, LD_KV))
    gl.store(out_ptr + pid * W + cols, gl.sum(v.to(gl.float32), 0))


@gluon.jit
def _empty(out_ptr):
    gl.store(out_ptr + gl.program_id(0), 0.0)


@triton.jit
def _chain(kv_indptr_ptr, idx_ptr, ckv_ptr, kpe_ptr, out_ptr, BLOCK: tl.constexpr):
    """9265de63's dependent loads without the attention: indptr -> page indices -> rows (summed,
    no MMA) -> one 16 x 512 bf16 output row block per sequence, as the kernel stores it."""
    b = tl.program_id(0)
    k0 = tl.load(kv_indptr_ptr + b)
    n_kv = tl.load(kv_indptr_ptr + b + 1) - k0
    n = tl.arange(0, BLOCK)
    ok = n < n_kv
    pg = tl.load(idx_ptr + k0 + n, mask=ok, other=0)
    d = tl.arange(0, 512)
    kc = tl.load(ckv_ptr + pg[:, None] * 512 + d[None, :], mask=ok[:, None], other=0.0)
    kp = tl.load(
        kpe_ptr + pg[:, None] * 64 + tl.arange(0, 64)[None, :], mask=ok[:, None], other=0.0
    )
    o = tl.sum(kc.to(tl.float32), 0) + tl.sum(tl.sum(kp.to(tl.float32), 1), 0)
    h = tl.arange(0, 16)
    tl.store(
        out_ptr + (b * 16 + h[:, None]) * 512 + d[None, :],
        (o[None, :] + h[:, None]).to(tl.bfloat16),
    )


@gluon.jit
def _chain_cp(kv_indptr_ptr, idx_ptr, ckv_ptr, kpe_ptr, out_ptr, BLOCK: gl.constexpr):
    """``_chain`` with the rows gathered by cp.async into shared memory (as the kernels do) and
    the store made of one gathered row per head, so it waits for the gather."""
    b = gl.program_id(0)
    dt: gl.constexpr = ckv_ptr.dtype.element_ty
    kv_l: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK, 256], dt)
    pe_l: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK, 64], dt)
    lo = gl.allocate_shared_memory(dt, [BLOCK, 256], kv_l)
    hi = gl.allocate_shared_memory(dt, [BLOCK, 256], kv_l)
    pe = gl.allocate_shared_memory(dt, [BLOCK, 64], pe_l)
    k0 = gl.load(kv_indptr_ptr + b)
    n_kv = gl.load(kv_indptr_ptr + b + 1) - k0
    _issue_rows(lo, hi, pe, idx_ptr + k0, 0, n_kv, ckv_ptr, kpe_ptr, True)
    async_copy.wait_group(0)
    gl.thread_barrier()
    h = gl.arange(0, 16, layout=gl.SliceLayout(1, LD_KV))
    cols = gl.arange(0, 256, layout=gl.SliceLayout(0, LD_KV))
    v_lo = lo.slice(0, 16).load(LD_KV)
    v_hi = hi.slice(16, 16).load(LD_KV)
    o = out_ptr + (b * 16 + h[:, None]) * 512 + cols[None, :]
    gl.store(o, v_lo)
    gl.store(o + 256, v_hi)


class _ReadScrub:
    """Stands in for the write-scrub tensor of ``time_gpu``: its ``zero_`` reads instead."""

    def __init__(self, buf):
        self.buf = buf

    def zero_(self):
        self.buf.sum()


def recorder(rows, scrub, width=40):
    """``record(name, fn, nbytes=0)``: time ``fn`` as the bench does (scrub, events, median of 40),
    append a row to ``rows`` and print it; a probe that fails to compile or run is reported."""

    def record(name, fn, nbytes=0):
        try:
            fn()
            torch.cuda.synchronize()
        except Exception as e:  # a probe that does not compile is reported, not fatal
            print(f"{name}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
            rows.append({"probe": name, "error": f"{type(e).__name__}: {str(e)[:300]}"})
            return
        ms, ahead = time_gpu(fn, scrub, 40)
        tbs = nbytes / (ms * 1e-3) / 1e12 if nbytes else 0.0
        rows.append({"probe": name, "gpu_us": round(ms * 1e3, 2), "tb_s_incl_launch": round(tbs, 2),
                     "host_ahead": ahead})  # fmt: skip
        print(f"{name:{width}s} {ms * 1e3:7.2f} us {tbs:5.2f} TB/s (incl. launch) ahead={ahead}",
              flush=True)  # fmt: skip

    return record


def write_rows(path, rows, **extra):
    """The probe rows as JSON, with the GPU, versions and command that produced them."""
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": triton.__version__, "command": " ".join(["python", *sys.argv])}  # fmt: skip
    with open(path, "w") as f:
        json.dump({**meta, **extra, "rows": rows}, f, indent=1)


def main(path):
    dev = "cuda"
    scrub = torch.empty(64 << 20, dtype=torch.int32, device=dev)
    read_scrub = os.environ.get("SCRUB") == "read"
    if read_scrub:
        scrub = _ReadScrub(scrub.fill_(1))
    ckv = torch.randn(NUM_PAGES, 512, device=dev).to(torch.bfloat16)
    kpe = torch.randn(NUM_PAGES, 64, device=dev).to(torch.bfloat16)
    out = torch.empty(1 << 20, dtype=torch.float32, device=dev)
    rows = []

    record = recorder(rows, scrub)

    record("empty", lambda: _empty[(132,)](out, num_warps=4))
    # 9265de63: four 1-token sequences of 19, 5, 89 and 8 keys
    lens = torch.tensor([0, 19, 5, 89, 8], dtype=torch.int32)
    kv_indptr = torch.cumsum(lens, 0).to(torch.int32).to(dev)
    g = torch.Generator(device=dev).manual_seed(121)
    pages = torch.randint(0, NUM_PAGES, (121,), dtype=torch.int32, device=dev, generator=g)
    out_b = torch.empty(4 * 16 * 512, dtype=torch.bfloat16, device=dev)
    for warps in (4, 8):
        record(f"chain 9265de63 (no attention) w{warps}", lambda w=warps: _chain[(4,)](
            kv_indptr, pages, ckv, kpe, out_b, BLOCK=128, num_warps=w))  # fmt: skip
    for block in (128, 64):  # 64: the first 64 rows of each range only (one kernel step's worth)
        record(f"chain 9265de63 cp.async {block} rows", lambda bl=block: _chain_cp[(4,)](
            kv_indptr, pages, ckv, kpe, out_b, BLOCK=bl, num_warps=4))  # fmt: skip
    if os.environ.get("CHAIN_ONLY"):  # the 9265de63 probes only
        progs_rows = ()
    else:  # programs x rows, e.g. SHAPES=528x34,1056x17 (4 and 8 per SM)
        shapes = os.environ.get("SHAPES", "132x135,264x68").split(",")
        progs_rows = [tuple(int(v) for v in x.split("x")) for x in shapes]
    descs = {}
    for w in (256, 64):
        descs[w] = TensorDescriptor.from_tensor(ckv.view(-1, w), [1, w], FLAT_LAYOUT)
    pe_desc = TensorDescriptor.from_tensor(kpe, [1, 64], FLAT_LAYOUT)
    for progs, r in progs_rows:
        n = progs * r
        g = torch.Generator(device=dev).manual_seed(n)
        rnd = torch.randint(0, NUM_PAGES, (n,), dtype=torch.int32, device=dev, generator=g)
        seq = torch.arange(n, dtype=torch.int32, device=dev) + 5000
        nb, br = (3, 64) if r > 96 else (3, 32) if r > 48 else (3, 16) if r > 32 else (2, 16)
        for name, ix in (("random", rnd), ("consecutive", seq)):
            record(
                f"cp {progs}x{r} {name}",
                lambda ix=ix, p=progs, r=r, nb=nb, br=br: _burst_cp[(p,)](
                    ix, ckv, kpe, out, r, NB=nb, BR=br, PE=True, num_warps=4
                ),
                n * 1152,
            )
        record(
            f"cp {progs}x{r} random ckv only",
            lambda ix=rnd, p=progs, r=r, nb=nb, br=br: _burst_cp[(p,)](
                ix, ckv, kpe, out, r, NB=nb, BR=br, PE=False, num_warps=4
            ),
            n * 1024,
        )
        for w in (256, 64):
            for name, ix in (("random", rnd), ("consecutive", seq)):
                if w == 64 and name == "consecutive":
                    continue
                record(
                    f"tma w{w} {progs}x{r} {name}",
                    lambda ix=ix, p=progs, r=r, w=w: _burst_tma[(p,)](
                        ix, descs[w], pe_desc, out, R=r, W=w, num_warps=4
                    ),
                    n * 1152,
                )
    write_rows(path, rows, scrub="read 256 MB" if read_scrub else "write 256 MB")


if __name__ == "__main__":
    main(sys.argv[1])
