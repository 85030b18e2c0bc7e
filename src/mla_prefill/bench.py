"""``mla-prefill bench``: our ``run`` vs FlashInfer's ``BatchMLAPagedAttentionWrapper`` side by side.

Same inputs, one process, cold L2 (a 256 MB scrub is written before every timed call), CUDA
events, median. Two latencies per contender:

- ``gpu_ms``: events around the call, queued behind the scrub; a spin kernel holds the stream
  until the host has enqueued every timed call, so no call waits for the host (checked:
  ``host_ahead`` in each row) -- the GPU-side latency a serving loop sees, host overhead hidden;
- ``wall_ms``: host clock with a device sync before and after (host overhead exposed);
- ``host_us``: host clock per call while a spin kernel holds the GPU and 40 calls are queued
  (median of seven rounds): what one call costs the host, as a serving loop that launches a
  layer's attention eagerly pays it.

Three contenders: ``ours`` (the solution's destination-passing ``run``: it checks, plans and
binds the first call of a layout, later calls of that layout call the bound launchers),
``ours_plan`` (``serving.MLAPrefillPlan``: planned once per batch, outside timing, then
``run`` per call) and ``flashinfer`` (its wrapper planned once, then ``run``).

FlashInfer's ``plan`` runs outside the timed region, as a server plans once per batch for all
layers. After timing, every input is refilled in place with new values (``kv_indices`` permuted),
the outputs are poisoned with NaN, each contender is called again and compared with the
definition's reference: a result cached by pointer or a stale plan shows up there.
"""

import argparse
import datetime
import json
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import torch

from mla_prefill.accuracy import compare, draw_inputs, poisoned_outputs, versions
from mla_prefill.flops import MATMUL_CEILING_TFLOPS, bucket, flops
from mla_prefill.fuzz import kernel_sha256
from mla_prefill.io import (
    INPUTS,
    dataset_override,
    find_root,
    load_index_tensors,
    load_workloads,
    reference_fn,
    sequence_lengths,
)
from mla_prefill.kernel.validate import HEAD_DIM_CKV, HEAD_DIM_KPE, NUM_QO_HEADS
from mla_prefill.serving import fallback_note_here

SCRUB_BYTES = 256 << 20


def make_inputs(workload: dict, index: Dict[str, torch.Tensor], device: str, seed: int) -> dict:
    """A workload's inputs: its index blobs, and random q/caches (``accuracy.draw_inputs``)."""
    axes = workload["axes"]
    return draw_inputs(
        axes["total_q"], axes["num_pages"], index, workload["inputs"]["sm_scale"]["value"],
        device, seed,
    )  # fmt: skip


def refill_(inputs: dict, seed: int) -> None:
    """New values in the same buffers: q and caches redrawn, kv_indices permuted."""
    g = torch.Generator(device=inputs["q_nope"].device).manual_seed(seed)
    for name in ("q_nope", "q_pe", "ckv_cache", "kpe_cache"):
        t = inputs[name]
        t.copy_(torch.randn(t.shape, generator=g, device=t.device))
    idx = inputs["kv_indices"]
    if idx.numel():
        perm = torch.randperm(idx.numel(), generator=g, device=idx.device)
        idx.copy_(idx[perm].clone())


def ours(
    inputs: dict, out: torch.Tensor, lse: torch.Tensor, config=None, target=None
) -> Callable[[], None]:
    """The solution's entry point (``main.run``, destination-passing), or the same call with
    pinned tiles or another GPU's plan."""
    from mla_prefill.kernel.main import mla_paged_prefill, run

    args = [inputs[k] for k in INPUTS]

    if config is None and target is None:

        def call():
            run(*args, out, lse)

    else:

        def call():
            mla_paged_prefill(*args, out, lse, config=config, target=target)

    return call


def ours_planned(
    inputs: dict, out: torch.Tensor, lse: torch.Tensor, target=None
) -> Callable[[], None]:
    """``serving.MLAPrefillPlan``: planned here, outside timing; ``call.replan()`` plans again
    (after the inputs were refilled: the plan holds copies of the index tensors)."""
    from mla_prefill.serving import HopperFallbackWarning, MLAPrefillPlan

    with warnings.catch_warnings():  # run_bench printed the note once, and the results hold it
        warnings.simplefilter("ignore", HopperFallbackWarning)
        plan = MLAPrefillPlan(inputs["q_nope"].device, target=target)
    q_nope, q_pe, ckv, kpe = (inputs[k] for k in ("q_nope", "q_pe", "ckv_cache", "kpe_cache"))

    def replan():
        plan.plan(inputs["qo_indptr"], inputs["kv_indptr"], inputs["kv_indices"],
                  inputs["sm_scale"], total_q=q_nope.shape[0])  # fmt: skip

    def call():
        plan.run(q_nope, q_pe, ckv, kpe, out, lse)

    replan()
    call.replan = replan
    return call


def flashinfer_planned(inputs: dict, out: torch.Tensor, lse: torch.Tensor) -> Callable[[], None]:
    """FlashInfer's wrapper (backend auto: fa3 on Hopper), planned once here, outside timing."""
    import flashinfer

    dev = inputs["q_nope"].device
    workspace = torch.empty(128 << 20, dtype=torch.int8, device=dev)
    wrapper = flashinfer.mla.BatchMLAPagedAttentionWrapper(workspace, backend="auto")
    kv_indptr = inputs["kv_indptr"]
    wrapper.plan(
        inputs["qo_indptr"], kv_indptr, inputs["kv_indices"], kv_indptr[1:] - kv_indptr[:-1],
        NUM_QO_HEADS, HEAD_DIM_CKV, HEAD_DIM_KPE, 1, True, inputs["sm_scale"], torch.bfloat16,
        torch.bfloat16,
    )  # fmt: skip

    def call():
        wrapper.run(
            inputs["q_nope"], inputs["q_pe"], inputs["ckv_cache"], inputs["kpe_cache"],
            out=out, lse=lse, return_lse=True,
        )  # fmt: skip

    call.backend = getattr(wrapper, "_backend", "?")
    return call


SPIN_CYCLES_PER_MS = 2_000_000  # ~2 GHz SM clock; the spin length only needs to be about right


def time_gpu(fn: Callable[[], None], scrub: torch.Tensor, iters: int) -> Tuple[float, bool]:
    """Median GPU-side ms of ``fn`` (events around each call, behind a cold-L2 scrub).

    A spin kernel first holds the stream while the host enqueues every (scrub, event, call, event).
    If the spin is still running when the host is done, no call waited for the host: the events
    time the GPU alone. Otherwise the spin is lengthened and the measurement repeated. Returns
    ``(median_ms, host_ahead)``; ``host_ahead`` False means the number includes host time.
    """
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    spin_ms, ahead = 1.0 + 0.1 * iters, False
    for _ in range(4):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.cuda._sleep(int(spin_ms * SPIN_CYCLES_PER_MS))
        spun = torch.cuda.Event()
        spun.record()
        for i in range(iters):
            scrub.zero_()
            starts[i].record()
            fn()
            ends[i].record()
        host_ms = (time.perf_counter() - t0) * 1e3
        ahead = not spun.query()
        torch.cuda.synchronize()
        if ahead:
            break
        spin_ms = min(max(4 * spin_ms, 2 * host_ms), 500.0)
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)), ahead


def time_host(fns: Dict[str, Callable[[], None]], calls: int = 40, rounds: int = 7) -> dict:
    """Host microseconds per call of each of ``fns`` with the GPU held: a spin kernel keeps the
    stream busy while the host queues ``calls`` calls, so no call waits for the device. The
    contenders take turns within each round (the order rotating), so a slow stretch of the host
    falls on all of them alike; per contender, the median of ``rounds`` (a round the spin did
    not cover is dropped). Timed one contender after another, 3 rounds each, one call's figure
    moved by up to 9 us between runs (ed999c80's planned run: 23.7 and 32.6 us)."""
    names = list(fns)
    per_call: Dict[str, List[float]] = {k: [] for k in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            torch.cuda.synchronize()
            torch.cuda._sleep(int(20 * SPIN_CYCLES_PER_MS))  # ~20 ms: longer than the loop
            spun = torch.cuda.Event()
            spun.record()
            fn = fns[name]
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            elapsed = time.perf_counter() - t0
            held = not spun.query()
            torch.cuda.synchronize()
            if held:
                per_call[name].append(elapsed / calls * 1e6)
    return {k: round(statistics.median(v), 2) if v else None for k, v in per_call.items()}


def time_wall(fn: Callable[[], None], scrub: torch.Tensor, iters: int) -> float:
    times = []
    for _ in range(iters):
        scrub.zero_()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def bench_workload(
    wl, root, dataset, contenders, iters_cap, seed, configs=None, target=None
) -> dict:
    w = wl.workload
    index = load_index_tensors(root, w, dataset)
    lengths = sequence_lengths(index["qo_indptr"], index["kv_indptr"])
    gflop = flops(lengths) / 1e9
    inputs = make_inputs(w, index, "cuda", seed)
    row = {
        "uuid": w["uuid"],
        "total_q": w["axes"]["total_q"],
        "batch": len(lengths),
        "num_kv_indices": w["axes"]["num_kv_indices"],
        "gflop": round(gflop, 4),
    }
    return time_contenders(
        inputs, row, contenders, iters_cap, seed, reference_fn(root), configs, target
    )


# the fixed decode-like batch of every random run: 64 sequences x 1 new token over 16,700 cached
# tokens each (1.07M KV rows), memory-bound: its rate is counted in bytes, num_kv_indices x 1152
DECODE_BATCH = ("decode 64x1 over 16.7K", [(1, 16_700)] * 64)
KV_ROW_BYTES = (HEAD_DIM_CKV + HEAD_DIM_KPE) * 2
RANDOM_KINDS = ("long prompt", "many short", "long prefix, few new", "q_len = kv_len",
                "with empty sequences", "tile edges")  # fmt: skip


def random_batches(n: int, seed: int) -> List[Tuple[str, List[Tuple[int, int]]]]:
    """``n`` seeded batches, as (kind, [(q_len, kv_len), ...]), cycling over the whole
    distribution: single long prompts (with or without a prefix), many short sequences, long
    prefixes with 1-4 new tokens, q_len = kv_len, batches with empty sequences, and sizes at
    tile and wave edges (multiples of 4 tokens +-1, the 1.25- and 2.5-wave bounds)."""
    import random

    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind = RANDOM_KINDS[i % len(RANDOM_KINDS)]
        if kind == "long prompt":
            q = int(2 ** rng.uniform(10, 14))
            lengths = [(q, q + rng.choice([0, 0, rng.randint(1, 8192)]))]
        elif kind == "many short":
            lengths = [(q, q + rng.randint(0, 64))
                       for q in (rng.randint(1, 8) for _ in range(rng.randint(64, 256)))]  # fmt: skip
        elif kind == "long prefix, few new":
            lengths = [(q, q + int(2 ** rng.uniform(11, 15)))
                       for q in (rng.randint(1, 4) for _ in range(rng.randint(8, 64)))]  # fmt: skip
        elif kind == "q_len = kv_len":
            lengths = [(q, q) for q in (int(2 ** rng.uniform(4, 11))
                                        for _ in range(rng.randint(2, 16)))]  # fmt: skip
        elif kind == "with empty sequences":
            lengths = [(q, q + rng.randint(0, 2048)) for q in
                       (int(2 ** rng.uniform(0, 10)) for _ in range(rng.randint(2, 24)))]  # fmt: skip
            for _ in range(rng.randint(1, 4)):
                lengths.insert(
                    rng.randrange(len(lengths) + 1), rng.choice([(0, 0), (0, 17), (3, 0)])
                )
        else:
            total = rng.choice([4 * rng.randint(40, 1000) + rng.choice([-1, 0, 1]), 165, 166,
                                330, 331, 131, 133, 4095, 4097])  # fmt: skip
            parts = rng.randint(1, 8)
            cuts = sorted(rng.sample(range(1, total), min(parts - 1, total - 1)))
            qs = [b - a for a, b in zip([0, *cuts], [*cuts, total])]
            lengths = [(q, q + rng.choice([0, rng.randint(1, 4096)])) for q in qs]
        out.append((kind, lengths))
    return out


def bench_batch(kind: str, lengths, contenders, iters_cap, seed, configs=None, target=None) -> dict:
    """One random batch timed like a workload (fuzz's index and data drawing), checked against
    the fast fp32 reference; ``config`` records the tiles our call planned, and ``configs``
    (pinned tiles) are timed beside it as ``ours[...]``."""
    from mla_prefill.accuracy import reference_fast
    from mla_prefill.fuzz import Batch, make_batch_inputs
    from mla_prefill.kernel.main import default_config

    num_kv = sum(k for _, k in lengths)
    inputs = make_batch_inputs(Batch(list(lengths), num_kv + 1000, seed), "cuda")
    row = {
        "kind": kind,
        "lengths": [list(x) for x in lengths],
        "total_q": sum(q for q, _ in lengths),
        "batch": len(lengths),
        "num_kv_indices": num_kv,
        "gflop": round(flops(lengths) / 1e9, 4),
    }
    cfg = default_config(
        row["total_q"], row["batch"], num_kv, inputs["q_nope"].device, target=target
    )
    row["config"] = dict(cfg.__dict__)
    row = time_contenders(inputs, row, contenders, iters_cap, seed, reference_fast, configs, target)
    if kind == DECODE_BATCH[0] and "gpu_ms" in row.get("ours", {}):
        row["ours"]["tb_per_s"] = round(num_kv * KV_ROW_BYTES / row["ours"]["gpu_ms"] / 1e9, 3)
    del inputs
    torch.cuda.empty_cache()
    return row


def random_summary(rows: List[dict]) -> dict:
    """Geomean of ours (the solution's ``run``) against FlashInfer (GPU-side), and how the
    batches of at least 0.1 ms (either side) fare: the generalisation figures tile choices are
    judged on; the same for the serving plan's ``run`` (``plan_*``: planned outside the timed
    call, as FlashInfer is)."""
    sp = [r["speedup_vs_flashinfer"] for r in rows if "speedup_vs_flashinfer" in r]
    heavy = [r for r in rows if "speedup_vs_flashinfer" in r
             and max(r["ours"]["gpu_ms"], r["flashinfer"]["gpu_ms"]) >= 0.1]  # fmt: skip
    decode = [r["ours"].get("tb_per_s") for r in rows if r["kind"] == DECODE_BATCH[0]]
    timed = [v for r in rows for v in r.values() if isinstance(v, dict) and "gpu_ms" in v]
    plan = [r["ours_plan"]["speedup_vs_flashinfer"] for r in rows
            if "speedup_vs_flashinfer" in r.get("ours_plan", {})]  # fmt: skip
    plan_heavy = [r["ours_plan"]["speedup_vs_flashinfer"] for r in heavy
                  if "speedup_vs_flashinfer" in r.get("ours_plan", {})]  # fmt: skip
    return {
        "batches": len(rows),
        "geomean_speedup_vs_flashinfer": round(statistics.geometric_mean(sp), 3) if sp else None,
        "heavy_batches": len(heavy),
        "heavy_at_or_above_1x": sum(r["speedup_vs_flashinfer"] >= 1.0 for r in heavy),
        "heavy_min_speedup": min((r["speedup_vs_flashinfer"] for r in heavy), default=None),
        "ours_gpu_ms_sum": round(
            sum(r["ours"]["gpu_ms"] for r in rows if "gpu_ms" in r.get("ours", {})), 4
        ),
        "flashinfer_gpu_ms_sum": round(
            sum(r["flashinfer"]["gpu_ms"] for r in rows if "gpu_ms" in r.get("flashinfer", {})), 4
        ),
        "decode_tb_per_s": decode[0] if decode else None,
        "plan_geomean_speedup_vs_flashinfer": (
            round(statistics.geometric_mean(plan), 3) if plan else None
        ),
        "plan_heavy_at_or_above_1x": sum(x >= 1.0 for x in plan_heavy) if plan_heavy else None,
        "plan_heavy_min_speedup": min(plan_heavy, default=None),
        "all_correct": all(c.get("correct", False) for c in timed),
    }


def time_gpu_fitted(fn, scrub, iters_cap: int, budget_ms: float = 300.0):
    """``time_gpu`` after a warm-up call (compile, JIT and module load stay out of the timings)
    and a 3-call estimate: as many calls as fit ``budget_ms``, 5 to ``iters_cap``. Returns
    (median GPU ms, host ahead, calls timed)."""
    fn()
    torch.cuda.synchronize()
    est, _ = time_gpu(fn, scrub, 3)
    iters = int(max(5, min(iters_cap, budget_ms / max(est, 1e-3))))
    gpu_ms, host_ahead = time_gpu(fn, scrub, iters)
    return gpu_ms, host_ahead, iters


def recheck(calls: Dict[str, tuple], inputs: dict, seed: int, reference) -> Dict[str, dict]:
    """The timed calls checked on new data: every input refilled in place (``refill_``), each
    call's outputs poisoned with NaN, the call made again (a planned call plans the new batch
    first, as a server plans each batch) and compared with ``reference`` on the new inputs. A
    result cached by pointer, a stale plan or an unwritten element shows up here.

    ``calls``: name -> (call, its output, its lse). Returns ``compare``'s result per name."""
    refill_(inputs, seed)
    ref_out, ref_lse = reference(*[inputs[k] for k in INPUTS])
    results = {}
    for name, (fn, out, lse) in calls.items():
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        if hasattr(fn, "replan"):
            fn.replan()
        fn()
        if out.is_cuda:
            torch.cuda.synchronize()
        results[name] = compare(out, lse, ref_out, ref_lse)
    return results


def time_contenders(
    inputs: dict, row: dict, contenders, iters_cap, seed, reference, configs=None, target=None
) -> dict:
    """Time each contender on ``inputs`` (GPU-side, wall, host), then refill the inputs, poison
    the outputs, call every contender again and compare it with ``reference``: ``row``
    completed with one object per contender and the ratios to FlashInfer."""
    total_q, gflop = inputs["q_nope"].shape[0], row["gflop"]
    scrub = torch.empty(SCRUB_BYTES, dtype=torch.int8, device="cuda")
    outs, fns = {}, {}
    variants = [("ours", None)] + [(f"ours[{c}]", c) for c in (configs or [])]
    for name in contenders:
        for vname, cfg in variants if name == "ours" else [(name, None)]:
            out, lse = poisoned_outputs(total_q, "cuda")
            try:
                if name == "ours":
                    fn = ours(inputs, out, lse, cfg, target)
                elif name == "ours_plan":
                    fn = ours_planned(inputs, out, lse, target)
                else:
                    fn = flashinfer_planned(inputs, out, lse)
                gpu_ms, host_ahead, iters = time_gpu_fitted(fn, scrub, iters_cap)
                wall_ms = time_wall(fn, scrub, max(5, iters // 2))
            except Exception as e:  # a contender that fails is reported, not fatal
                row[vname] = {"error": f"{type(e).__name__}: {e}"[:500]}
                continue
            row[vname] = {
                "gpu_ms": round(gpu_ms, 5),
                "wall_ms": round(wall_ms, 5),
                "tflops": round(gflop / gpu_ms, 1) if gpu_ms > 0 else None,
                "iters": iters,
                "host_ahead": host_ahead,
            }
            if hasattr(fn, "backend"):
                row[vname]["backend"] = fn.backend
            outs[vname], fns[vname] = (out, lse), fn
    # host time, the contenders taking turns (configs beside ours are for GPU time only)
    for vname, us in time_host({v: fns[v] for v in fns if not v.startswith("ours[")}).items():
        row[vname]["host_us"] = us
    checked = recheck({v: (fns[v], *outs[v]) for v in outs}, inputs, seed + 1, reference)
    for vname, result in checked.items():
        row[vname].update(result)
    if "ours" in outs and "flashinfer" in outs and "gpu_ms" in row.get("flashinfer", {}):
        row["speedup_vs_flashinfer"] = round(row["flashinfer"]["gpu_ms"] / row["ours"]["gpu_ms"], 3)
        row["wall_speedup_vs_flashinfer"] = round(
            row["flashinfer"]["wall_ms"] / row["ours"]["wall_ms"], 3
        )
    fi = row.get("flashinfer", {})
    if "ours_plan" in outs and "gpu_ms" in fi:
        # both planned outside the timed call: the serving path's per-layer GPU time
        row["ours_plan"]["speedup_vs_flashinfer"] = round(
            fi["gpu_ms"] / row["ours_plan"]["gpu_ms"], 3
        )
    for mine in ("ours", "ours_plan"):
        o = row.get(mine, {})
        if o.get("host_us") and fi.get("host_us"):
            o["host_vs_flashinfer"] = round(o["host_us"] / fi["host_us"], 3)  # < 1: less host
        if o.get("wall_ms") and fi.get("wall_ms"):
            o["wall_speedup_vs_flashinfer"] = round(fi["wall_ms"] / o["wall_ms"], 3)
    del inputs, scrub
    torch.cuda.empty_cache()
    return row


def summarize(rows: List[dict]) -> dict:
    def total(key, field="gpu_ms"):
        vals = [r[key][field] for r in rows if field in r.get(key, {})]
        return round(sum(vals), 4) if len(vals) == len(rows) else None

    sp = [r["speedup_vs_flashinfer"] for r in rows if "speedup_vs_flashinfer" in r]
    geo = statistics.geometric_mean(sp) if sp else None
    # every contender entry that was timed (ours, FlashInfer, ours[config])
    timed = [v for r in rows for v in r.values() if isinstance(v, dict) and "gpu_ms" in v]
    return {
        "ours_gpu_ms_sum": total("ours"),
        "flashinfer_gpu_ms_sum": total("flashinfer"),
        "ours_wall_ms_sum": total("ours", "wall_ms"),
        "flashinfer_wall_ms_sum": total("flashinfer", "wall_ms"),
        "geomean_speedup_vs_flashinfer": round(geo, 3) if geo else None,
        "all_correct": all(c.get("correct", False) for c in timed),
        "all_host_ahead": all(c.get("host_ahead", False) for c in timed),
        "matmul_ceiling_tflops": MATMUL_CEILING_TFLOPS,
        "by_bucket": by_bucket(rows),
        "host": host_summary(rows),
    }


def host_summary(rows: List[dict]) -> dict:
    """Host time per call (``host_us``): geomeans per contender, and our two calls against
    FlashInfer's ``run`` (worst workload and geomean of the ratios; < 1 is less host time), and
    the wall-time speedup of the planned call on the workloads of at most 100 tokens."""

    def geo(vals):
        vals = [v for v in vals if v]
        return round(statistics.geometric_mean(vals), 3) if vals else None

    out = {f"{k}_host_us_geomean": geo(r.get(k, {}).get("host_us") for r in rows)
           for k in ("ours", "ours_plan", "flashinfer")}  # fmt: skip
    for k in ("ours", "ours_plan"):
        ratios = [r[k]["host_vs_flashinfer"] for r in rows if "host_vs_flashinfer" in r.get(k, {})]
        if ratios:
            out[f"{k}_host_vs_flashinfer_geomean"] = geo(ratios)
            out[f"{k}_host_vs_flashinfer_max"] = max(ratios)
    small = [r["ours_plan"]["wall_speedup_vs_flashinfer"] for r in rows
             if r["total_q"] <= 100 and "wall_speedup_vs_flashinfer" in r.get("ours_plan", {})]  # fmt: skip
    out["ours_plan_wall_speedup_small_geomean"] = geo(small)
    return out


# speed targets per token bucket, GPU-side against FlashInfer: >= 0.8x on every workload of
# >= 1000 tokens, >= 1.5x on those of <= 100
TARGETS = {"large (>=1000 tok)": 0.8, "small (<=100 tok)": 1.5}


def by_bucket(rows: List[dict]) -> Dict[str, dict]:
    """Per token bucket: geomean / min / max of the GPU-side and wall ratios, GPU ms sums, and how
    many workloads meet their target in ``TARGETS``."""
    groups: Dict[str, List[dict]] = {}
    for r in rows:
        if "speedup_vs_flashinfer" in r:
            groups.setdefault(bucket(r["total_q"]), []).append(r)
    out = {}
    for name, rs in groups.items():
        sp = [r["speedup_vs_flashinfer"] for r in rs]
        wall = [r["wall_speedup_vs_flashinfer"] for r in rs]
        out[name] = {
            "workloads": len(rs),
            "geomean_speedup": round(statistics.geometric_mean(sp), 3),
            "min_speedup": min(sp),
            "max_speedup": max(sp),
            "geomean_wall_speedup": round(statistics.geometric_mean(wall), 3),
            "ours_gpu_ms_sum": round(sum(r["ours"]["gpu_ms"] for r in rs), 4),
            "flashinfer_gpu_ms_sum": round(sum(r["flashinfer"]["gpu_ms"] for r in rs), 4),
        }
        if name in TARGETS:
            out[name]["target"] = TARGETS[name]
            out[name]["meeting_target"] = sum(s >= TARGETS[name] for s in sp)
    return out


def parse_configs(text: Optional[str]):
    """``"4,64,1,8,2;1,32,12,4,2,128;g:4,32,1,8,3"`` -> KernelConfigs
    (block_t, block_n, num_splits, warps, stages[, min_chunk]); a ``g:`` prefix picks the
    gluon kernel."""
    if not text:
        return []
    from mla_prefill.kernel.config import DEFAULT_MIN_CHUNK, KernelConfig

    configs = []
    for part in text.split(";"):
        if part:
            kernel = "gluon" if part.startswith("g:") else "triton"
            v = [int(x) for x in part.removeprefix("g:").split(",")]
            if len(v) not in (5, 6):
                raise ValueError(
                    f"--configs: {part!r}: expected bt,bn,splits,warps,stages[,min_chunk]"
                )
            cfg = KernelConfig(
                block_t=v[0],
                block_n=v[1],
                num_splits=v[2],
                num_warps=v[3],
                num_stages=v[4],
                min_chunk=v[5] if len(v) == 6 else DEFAULT_MIN_CHUNK,
                kernel=kernel,
            )
            if cfg.problems():
                raise ValueError(f"--configs: {part!r}: " + "; ".join(cfg.problems()))
            configs.append(cfg)
    return configs


def pinned_times(row: dict) -> str:
    """``ours[<config>]=<gpu ms or error>`` for each pinned-tile contender of a row."""
    return " ".join(
        f"{k}={row[k].get('gpu_ms', row[k].get('error'))}" for k in row if k.startswith("ours[")
    )


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="mla-prefill bench", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run_bench(p.parse_args(argv))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", default=None, help="trace set whose workloads to time (default: "
                   "the one at or above the current directory)")  # fmt: skip
    p.add_argument("--workload", nargs="*", default=None, help="uuid prefixes (default: all 38)")
    p.add_argument("--no-flashinfer", action="store_true", help="time our calls only")
    p.add_argument("--iters", type=int, default=100, help="cap on timed iterations per contender")
    p.add_argument("--seed", type=int, default=0, help="seed of the random q and caches")
    p.add_argument(
        "--configs",
        default=None,
        help="extra tile configs to time beside ours, also with --random (see parse_configs)",
    )
    p.add_argument(
        "--target",
        default=None,
        help="plan our tiles for this GPU of kernel/targets.py (e.g. b200) and run them here",
    )
    p.add_argument("--dataset", default=None, help="official dataset clone whose blobs to use")
    p.add_argument(
        "--random", type=int, default=None, metavar="N",
        help="time N seeded random batches from the whole distribution (--seed picks them), plus "
        "a fixed decode-like batch (64 x 1 token over 16.7K cached), instead of the workloads",
    )  # fmt: skip
    p.add_argument("--output", default=None, help="JSON file to write (default: print only)")


def run_bench(args: argparse.Namespace) -> int:
    if not torch.cuda.is_available():
        print(
            "mla-prefill bench: needs a CUDA GPU (timings are GPU-side); none found.",
            file=sys.stderr,
        )
        return 2
    note = fallback_note_here()
    if note:
        print(note, file=sys.stderr, flush=True)
    if args.random is not None:
        return run_random(args)
    root = find_root(args.root)
    dataset = dataset_override(args.dataset)
    lines = load_workloads(root)
    if args.workload:
        lines = [wl for wl in lines if any(wl.uuid.startswith(p) for p in args.workload)]
    contenders = ["ours", "ours_plan"] + ([] if args.no_flashinfer else ["flashinfer"])
    configs = parse_configs(args.configs)
    rows = []
    print(
        f"{'uuid':8} {'tok':>6} {'GFLOP':>8} {'ours ms':>9} {'FI ms':>9} {'x FI':>6} {'ours TF/s':>9} "
        f"{'host us: dps':>12} {'plan':>6} {'FI':>6} ok"
    )
    for wl in sorted(lines, key=lambda w: w.workload["axes"]["total_q"]):
        row = bench_workload(
            wl, root, dataset, contenders, args.iters, args.seed, configs, args.target
        )
        if args.target:
            from mla_prefill.kernel.main import default_config

            a = wl.workload["axes"]
            cfg = default_config(
                a["total_q"], a["len_indptr"] - 1, a["num_kv_indices"], torch.device("cuda"),
                target=args.target,
            )  # fmt: skip
            row["config"] = cfg.__dict__
        rows.append(row)
        o, f = row.get("ours", {}), row.get("flashinfer", {})
        extra = pinned_times(row)
        print(
            f"{row['uuid'][:8]} {row['total_q']:>6} {row['gflop']:>8.3f} {o.get('gpu_ms', float('nan')):>9.4f} "
            f"{f.get('gpu_ms', float('nan')):>9.4f} {row.get('speedup_vs_flashinfer', float('nan')):>6.2f} "
            f"{o.get('tflops') or 0:>9.1f} {o.get('host_us') or 0:>12.1f} "
            f"{row.get('ours_plan', {}).get('host_us') or 0:>6.1f} {f.get('host_us') or 0:>6.1f} "
            f"{o.get('correct')}/{row.get('ours_plan', {}).get('correct')}/{f.get('correct')} "
            f"{o.get('error', '')}{row.get('ours_plan', {}).get('error', '')}{f.get('error', '')} {extra}",
            flush=True,
        )
    return write_result(args, summarize(rows), workloads=rows,
                        tiles_planned_for=args.target or "this GPU")  # fmt: skip


def write_result(args: argparse.Namespace, summary: dict, **rows) -> int:
    """The result document (when, where, with what, how measured, the summary, the rows):
    printed in short, written whole to ``--output``."""
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(),
        "num_sms": torch.cuda.get_device_properties(0).multi_processor_count,
        "versions": versions(),
        "kernel_sha256": kernel_sha256(),
        "hopper_fallback": fallback_note_here(),
        "command": "mla-prefill bench "
        + " ".join(sys.argv[2:] if sys.argv[1:2] == ["bench"] else sys.argv[1:]),
        "method": __doc__.strip(),
        "summary": summary,
    }
    result.update(rows)
    print(json.dumps(summary))
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(result, indent=1) + "\n")
    return 0


def run_random(args: argparse.Namespace) -> int:
    """``--random N``: the generalisation benchmark; rows under ``batches``."""
    contenders = ["ours", "ours_plan"] + ([] if args.no_flashinfer else ["flashinfer"])
    batches = random_batches(args.random, args.seed) + [DECODE_BATCH]
    rows = []
    print(f"{'#':>3} {'kind':22} {'tok':>6} {'seqs':>4} {'kv':>8} {'ours ms':>9} {'plan ms':>9} "
          f"{'FI ms':>9} {'x FI':>6} ok")  # fmt: skip
    configs = parse_configs(args.configs)
    for i, (kind, lengths) in enumerate(batches):
        row = bench_batch(
            kind, lengths, contenders, args.iters, args.seed * 1000 + i, configs, args.target
        )
        rows.append(row)
        o, f = row.get("ours", {}), row.get("flashinfer", {})
        pl = row.get("ours_plan", {})
        print(
            f"{i:>3} {kind:22} {row['total_q']:>6} {row['batch']:>4} {row['num_kv_indices']:>8} "
            f"{o.get('gpu_ms', float('nan')):>9.4f} {pl.get('gpu_ms', float('nan')):>9.4f} "
            f"{f.get('gpu_ms', float('nan')):>9.4f} "
            f"{row.get('speedup_vs_flashinfer', float('nan')):>6.2f} {o.get('correct')}/"
            f"{pl.get('correct')}/{f.get('correct')} {o.get('tb_per_s', '')} {pinned_times(row)}",
            flush=True,
        )
    return write_result(args, random_summary(rows), batches=rows)


if __name__ == "__main__":
    sys.exit(main())
