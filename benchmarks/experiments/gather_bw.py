"""How fast can the H200 gather ed999c80's KV rows at all? (session 11)

Each of P programs gathers R page rows (ckv 1024 B + kpe 128 B, page size 1) and only sums
them: no MMA, no softmax, no partials. Rows are random pages of a 989,669-page cache (as the
workloads), or consecutive ones. Timed like ``mla-prefill bench`` (256 MB write scrub before
each call, events, median, host ahead), so the ~3.5 us launch floor is included: compare with
``empty`` and with our kernel / FlashInfer on ed999c80 (17,759 rows: ~22 / ~24 us). One block in
flight per program, through registers: it measures its own issue pattern; ``gather_ceiling.py``
(session 12) issues every copy first and is the one to read for the memory side.

    python -u benchmarks/experiments/gather_bw.py OUT.json
"""

import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(__file__))
from gather_ceiling import recorder, write_rows  # noqa: E402  (sibling experiment script)

NUM_PAGES = 989_669


@triton.jit
def _gather_sum(idx_ptr, ckv_ptr, kpe_ptr, out_ptr, R, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    d = tl.arange(0, 512)
    e = tl.arange(0, 64)
    acc = tl.zeros([512], tl.float32)
    acc_p = tl.zeros([64], tl.float32)
    for r0 in range(0, R, BLOCK):  # BLOCK rows in flight per program (loads not pipelined)
        rows = r0 + tl.arange(0, BLOCK)
        ok = rows < R
        pg = tl.load(idx_ptr + pid * R + rows, mask=ok, other=0)
        kc = tl.load(ckv_ptr + pg[:, None] * 512 + d[None, :], mask=ok[:, None], other=0.0)
        kp = tl.load(kpe_ptr + pg[:, None] * 64 + e[None, :], mask=ok[:, None], other=0.0)
        acc += tl.sum(kc.to(tl.float32), 0)
        acc_p += tl.sum(kp.to(tl.float32), 0)
    tl.store(out_ptr + pid * 512 + d, acc + tl.sum(acc_p, 0))


@triton.jit
def _empty(out_ptr):
    tl.store(out_ptr + tl.program_id(0), 0.0)


def main(path):
    dev = "cuda"
    scrub = torch.empty(64 << 20, dtype=torch.int32, device=dev)
    ckv = torch.randn(NUM_PAGES, 512, device=dev).to(torch.bfloat16)
    kpe = torch.randn(NUM_PAGES, 64, device=dev).to(torch.bfloat16)
    out = torch.empty(1 << 20, dtype=torch.float32, device=dev)
    rows = []

    record = recorder(rows, scrub, 44)

    record("empty", lambda: _empty[(132,)](out))
    for progs, r in ((132, 135), (104, 171), (264, 68), (132, 270)):
        n = progs * r
        rnd = torch.randint(0, NUM_PAGES, (n,), dtype=torch.int32, device=dev)
        seq = torch.arange(n, dtype=torch.int32, device=dev) + 5000
        for block, warps, stages in ((64, 8, 1), (128, 8, 1), (256, 16, 1)):
            for name, ix in (("random", rnd), ("consecutive", seq)):
                record(
                    f"{progs} x {r} rows {name} b{block} w{warps} s{stages}",
                    lambda ix=ix, p=progs, r=r, b=block, w=warps, s=stages: _gather_sum[(p,)](
                        ix, ckv, kpe, out, r, BLOCK=b, num_warps=w, num_stages=s
                    ),
                    n * 1152,
                )
    write_rows(path, rows)


if __name__ == "__main__":
    main(sys.argv[1])
