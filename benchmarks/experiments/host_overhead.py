"""Host time of one call, by part (session 13): where our ``run`` spends the ~20 us (one launch)
to ~110 us (pooled split + combine) more host time than FlashInfer's wrapper (``wall_ms`` in
``benchmarks/h200.json``).

    PYTHONPATH=src python -u benchmarks/experiments/host_overhead.py OUT.json [uuid prefixes]

Per workload: microseconds of host time per call, each part called ``N`` times back to back
without a sync (the GPU work is queued, never waited for), for our full call (and again with
every launch through Triton's ``JITFunction.run``, alternated, medians of 7 rounds), FlashInfer's
``run``, our input checks, the config choice, one empty Triton launch with as many arguments as
our kernel takes, and the tensor allocations of a split; then a cProfile of our full call (top
functions by own time). Host-side only: says nothing about GPU time.
"""

import cProfile
import io
import json
import pstats
import statistics
import sys
import time

import torch
import triton
import triton.language as tl

from mla_prefill.bench import flashinfer_planned, make_inputs, ours
from mla_prefill.io import INPUTS, load_index_tensors, load_workloads, repo_root
from mla_prefill.kernel import launch as launch_mod
from mla_prefill.kernel import main as km
from mla_prefill.kernel.validate import check_inputs

N = 300


@triton.jit
def _empty(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18,
           a19, a20, a21, a22, a23, X: tl.constexpr):  # fmt: skip
    pass


def per_call_us(fn, n=N):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return round((t1 - t0) / n * 1e6, 2)


def alternating_us(fn, rounds=7):
    """Median host us per call of our call with the cached launcher, then with every launch
    through ``JITFunction.run`` (``launch.TRITON_LAUNCH``), alternated over ``rounds`` rounds so
    that drifts of the host's speed hit both alike."""
    cached, plain = [], []
    try:
        for _ in range(rounds):
            launch_mod.TRITON_LAUNCH = False
            cached.append(per_call_us(fn))
            launch_mod.TRITON_LAUNCH = True
            plain.append(per_call_us(fn))
    finally:
        launch_mod.TRITON_LAUNCH = False
    return statistics.median(cached), statistics.median(plain)


def profile(fn, n=N, top=18):
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(top)
    return s.getvalue()


def main(out_path, prefixes):
    root = repo_root()
    rows = []
    for wl in load_workloads(root):
        w = wl.workload
        if not any(w["uuid"].startswith(p) for p in prefixes):
            continue
        inputs = make_inputs(w, load_index_tensors(root, w), "cuda", 0)
        total_q = w["axes"]["total_q"]
        out = torch.empty(total_q, 16, 512, dtype=torch.bfloat16, device="cuda")
        lse = torch.empty(total_q, 16, dtype=torch.float32, device="cuda")
        args = [inputs[k] for k in INPUTS]
        shape = (total_q, len(inputs["qo_indptr"]) - 1, args[6].numel(), args[0].device)
        cfg = km.default_config(*shape)
        fi = flashinfer_planned(inputs, torch.empty_like(out), torch.empty_like(lse))
        ptrs = [a for a in args if isinstance(a, torch.Tensor)] + [out, lse]
        ints = [1] * (24 - len(ptrs))
        row = {
            "uuid": w["uuid"],
            "total_q": total_q,
            "config": repr(cfg),
            "ours_us": None,  # below, alternated with the Triton launch
            "ours_triton_launch_us": None,
            "flashinfer_us": per_call_us(fi),
            "check_inputs_us": per_call_us(lambda: check_inputs(*args[:7], out, lse)),
            "default_config_us": per_call_us(lambda: km.default_config(*shape)),
            "empty_launch_us": per_call_us(lambda: _empty[(1,)](*ptrs, *ints, X=1)),
            "empty_launch_pdl_us": per_call_us(
                lambda: _empty[(1,)](*ptrs, *ints, X=2, launch_pdl=True)
            ),
            "partials_alloc_us": per_call_us(lambda: km._partials((6 * total_q,), args[0].device)),
        }
        row["ours_us"], row["ours_triton_launch_us"] = alternating_us(ours(inputs, out, lse))
        row["profile"] = profile(ours(inputs, out, lse))
        print(json.dumps({k: v for k, v in row.items() if k != "profile"}), flush=True)
        print(row["profile"], flush=True)
        rows.append(row)
        del inputs
        torch.cuda.empty_cache()
    with open(out_path, "w") as f:
        json.dump(
            {"gpu": torch.cuda.get_device_name(), "triton": triton.__version__, "rows": rows},
            f,
            indent=1,
        )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or ["d88c9577", "9265de63", "ed999c80", "4eeb9b51", "bda0e743"])
