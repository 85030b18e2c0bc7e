"""Where the ~7.5-14 us of a tiny workload goes: the floor of one launch, the cost of each cold
dependent load, and of gathering N random KV rows on one SM or spread over several.

Same timing as ``mla-prefill bench`` (``time_gpu``: cold L2 behind a 256 MB scrub, events, median,
host ahead). The KV cache has the workloads' size (989,669 pages of 512 + 64 bf16).

    python -u benchmarks/experiments/chain_probe.py OUT.json
"""

import json
import sys

import torch
import triton
import triton.language as tl

from mla_prefill.bench import time_gpu

NUM_PAGES = 989_669


@triton.jit
def _chain(a_ptr, out_ptr, N_RT: tl.constexpr):
    """N_RT dependent loads (pointer chasing through a cold array), then one store."""
    i = tl.program_id(0) * 0
    for _ in tl.static_range(N_RT):
        i = tl.load(a_ptr + i)
    tl.store(out_ptr, i)


@triton.jit
def _gather(idx_ptr, ckv_ptr, kpe_ptr, out_ptr, ROWS: tl.constexpr, INDIRECT: tl.constexpr):
    """Each program gathers ROWS rows (1152 B each) and stores a column sum. INDIRECT: the page
    indices themselves are loaded first (the kernel's index -> rows chain); otherwise they are
    computed (rows only)."""
    pid = tl.program_id(0)
    offs = pid * ROWS + tl.arange(0, ROWS)
    if INDIRECT:
        pg = tl.load(idx_ptr + offs).to(tl.int64)
    else:
        pg = ((offs.to(tl.int64) * 7919 + 12345) % 989_669).to(tl.int64)
    d = tl.arange(0, 512)
    kc = tl.load(ckv_ptr + pg[:, None] * 512 + d[None, :]).to(tl.float32)
    kp = tl.load(kpe_ptr + pg[:, None] * 64 + tl.arange(0, 64)[None, :]).to(tl.float32)
    s = tl.sum(kc, 0) + tl.sum(tl.sum(kp, 1), 0)
    tl.store(out_ptr + pid * 512 + d, s)


def main(path):
    dev = "cuda"
    scrub = torch.empty(64 << 20, dtype=torch.int32, device=dev)
    rows = []

    def record(name, fn, iters=40):
        fn()
        torch.cuda.synchronize()
        ms, ahead = time_gpu(fn, scrub, iters)
        rows.append({"probe": name, "gpu_us": round(ms * 1e3, 2), "host_ahead": ahead})
        print(f"{name:40s} {ms * 1e3:7.2f} us  host_ahead={ahead}", flush=True)

    # a pointer chain spread over 256 MB: every hop a different 2 MB region
    n = 64 << 20
    a = torch.zeros(n, dtype=torch.int32, device=dev)
    hops = torch.randperm(n // (1 << 19), device=dev)[:16] * (1 << 19) + 17
    a[0] = int(hops[0])
    for x, y in zip(hops[:-1].tolist(), hops[1:].tolist()):
        a[x] = y
    out = torch.empty(1 << 20, dtype=torch.float32, device=dev)
    for k in (0, 1, 2, 3, 4, 6):
        record(f"chain {k} dependent loads", lambda k=k: _chain[(1,)](a, out, N_RT=k))

    ckv = torch.randn(NUM_PAGES, 512, device=dev).to(torch.bfloat16)
    kpe = torch.randn(NUM_PAGES, 64, device=dev).to(torch.bfloat16)
    idx = torch.randint(0, NUM_PAGES, (1 << 16,), dtype=torch.int32, device=dev)
    seq = torch.arange(1 << 16, dtype=torch.int32, device=dev) + 5000
    for rows_per, progs in ((8, 1), (16, 1), (32, 1), (64, 1), (128, 1), (32, 4), (16, 8), (64, 2)):
        for name, ix, ind in (
            ("random", idx, True),
            ("contiguous", seq, True),
            ("computed", idx, False),
        ):
            record(
                f"gather {progs} x {rows_per} rows {name}",
                lambda r=rows_per, p=progs, ix=ix, ind=ind: _gather[(p,)](
                    ix, ckv, kpe, out, ROWS=r, INDIRECT=ind, num_warps=4
                ),
            )
    meta = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "command": " ".join(["python", *sys.argv]),
        "method": "mla_prefill.bench.time_gpu: 256 MB scrub before each call, events, median",
    }
    with open(path, "w") as f:
        json.dump({**meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
