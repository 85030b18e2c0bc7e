"""The pieces of `mla-prefill bench` that do not need a GPU: inputs, refill, our call, compare."""

import pytest
import torch

from mla_prefill.accuracy import compare
from mla_prefill.bench import make_inputs, ours, refill_
from mla_prefill.io import INPUTS, load_index_tensors, load_workloads, reference_fn, small_root


def test_bench_call_refill_and_compare(device):
    root = small_root()
    wl = [w for w in load_workloads(root) if w.workload["axes"]["len_indptr"] > 2][0].workload
    inputs = make_inputs(wl, load_index_tensors(root, wl), device, seed=0)
    T = wl["axes"]["total_q"]
    out = torch.full((T, 16, 512), float("nan"), dtype=torch.bfloat16, device=device)
    lse = torch.full((T, 16), float("nan"), device=device)
    call = ours(inputs, out, lse)
    call()
    ref = reference_fn(root)
    assert compare(out, lse, *ref(*[inputs[k] for k in INPUTS]))["correct"]
    before = {k: inputs[k].clone() for k in ("q_nope", "ckv_cache", "kv_indices")}
    ptrs = {k: inputs[k].data_ptr() for k in before}
    refill_(inputs, seed=1)
    for k in before:  # new values in the same buffers
        assert inputs[k].data_ptr() == ptrs[k]
        assert not torch.equal(inputs[k], before[k])
    assert sorted(inputs["kv_indices"].tolist()) == sorted(before["kv_indices"].tolist())
    out.fill_(float("nan"))
    call()
    new_ref = ref(*[inputs[k] for k in INPUTS])
    assert compare(out, lse, *new_ref)["correct"]
    # and a stale output (from before the refill) would have been caught
    stale = torch.zeros_like(out)
    assert not compare(stale, lse, *new_ref)["correct"]


def test_recheck_catches_a_call_that_replays_its_first_result(device):
    """``bench.recheck`` (the check of every timed call, in the bench and the GPU tools): an
    honest call passes on the refilled inputs, one that caches its result by pointer fails."""
    from mla_prefill.bench import recheck

    root = small_root()
    wl = [w for w in load_workloads(root) if w.workload["axes"]["len_indptr"] > 2][0].workload
    inputs = make_inputs(wl, load_index_tensors(root, wl), device, seed=0)
    T = wl["axes"]["total_q"]
    outs = [(torch.empty(T, 16, 512, dtype=torch.bfloat16, device=device),
             torch.empty(T, 16, device=device)) for _ in range(2)]  # fmt: skip
    honest = ours(inputs, *outs[0])
    cached = {}

    def by_pointer():  # the first result, replayed for the same pointers
        key = inputs["q_nope"].data_ptr()
        if key not in cached:
            ours(inputs, *outs[1])()
            cached[key] = (outs[1][0].clone(), outs[1][1].clone())
        outs[1][0].copy_(cached[key][0])
        outs[1][1].copy_(cached[key][1])

    honest()
    by_pointer()
    result = recheck({"honest": (honest, *outs[0]), "cached": (by_pointer, *outs[1])}, inputs, 1,
                     reference_fn(root))  # fmt: skip
    assert result["honest"]["correct"] and not result["cached"]["correct"]


def test_summary_buckets_count_workloads_meeting_the_bar():
    from mla_prefill.bench import summarize

    def row(uuid, total_q, ours, fi):
        r = {"uuid": uuid, "total_q": total_q}
        r["ours"] = {"gpu_ms": ours, "wall_ms": ours, "correct": True, "host_ahead": True}
        r["flashinfer"] = {"gpu_ms": fi, "wall_ms": fi, "correct": True, "host_ahead": True}
        r["speedup_vs_flashinfer"] = fi / ours
        r["wall_speedup_vs_flashinfer"] = fi / ours
        return r

    s = summarize([row("a", 5, 1.0, 1.6), row("b", 50, 1.0, 1.2), row("c", 4000, 1.0, 0.9)])
    small, large = s["by_bucket"]["small (<=100 tok)"], s["by_bucket"]["large (>=1000 tok)"]
    assert (small["workloads"], small["meeting_target"]) == (2, 1)
    assert (large["workloads"], large["meeting_target"]) == (1, 1)
    assert s["all_correct"] and s["all_host_ahead"]


def test_parse_configs():
    from mla_prefill.bench import parse_configs

    tri, glu = parse_configs("4,64,1,8,2;g:4,64,1,4,2")
    assert (tri.kernel, tri.block_t, tri.num_warps, tri.num_stages) == ("triton", 4, 8, 2)
    assert (glu.kernel, glu.block_n) == ("gluon", 64)
    assert parse_configs("1,32,12,4,2,256")[0].min_chunk == 256
    assert parse_configs(None) == []
    for bad in ("g:1,32,1,4,2", "4,64,1"):  # gluon takes 4 x 64 only; too few numbers
        with pytest.raises(ValueError, match="--configs"):
            parse_configs(bad)


def test_random_batches_cover_the_distribution_and_are_seeded():
    from mla_prefill.bench import DECODE_BATCH, RANDOM_KINDS, random_batches

    batches = random_batches(60, 7)
    assert batches == random_batches(60, 7) and batches != random_batches(60, 8)
    assert {kind for kind, _ in batches} == set(RANDOM_KINDS)
    for kind, lengths in batches:
        assert lengths and all(k >= q or k == 0 for q, k in lengths), (kind, lengths)
    assert any(q == 0 or k == 0 for _, ls in batches for q, k in ls)  # empty sequences
    assert any(len(ls) >= 64 and max(q for q, _ in ls) <= 8 for _, ls in batches)
    assert any(max(q for q, _ in ls) <= 4 and min(k for _, k in ls) >= 2048 for _, ls in batches)
    name, decode = DECODE_BATCH
    assert len(decode) == 64 and sum(k for _, k in decode) == 64 * 16_700 >= 1_000_000


def test_random_summary_judges_both_calls_on_the_heavy_batches():
    """The generalisation summary: the solution's ``run`` and the serving plan's against
    FlashInfer, every batch and those of at least 0.1 ms (either side), and the decode rate."""
    from mla_prefill.bench import DECODE_BATCH, random_summary

    def row(kind, ours, plan, fi):
        r = {"kind": kind, "speedup_vs_flashinfer": fi / ours}
        r["ours"] = {"gpu_ms": ours, "correct": True}
        r["ours_plan"] = {"gpu_ms": plan, "correct": True, "speedup_vs_flashinfer": fi / plan}
        r["flashinfer"] = {"gpu_ms": fi, "correct": True}
        return r

    rows = [row("a", 0.05, 0.04, 0.04), row("b", 0.2, 0.19, 0.19), row("c", 0.4, 0.4, 0.5)]
    rows[-1]["kind"] = DECODE_BATCH[0]
    rows[-1]["ours"]["tb_per_s"] = 3.1
    s = random_summary(rows)
    assert s["heavy_batches"] == 2 and s["heavy_at_or_above_1x"] == 1
    assert s["heavy_min_speedup"] == 0.95 and s["plan_heavy_min_speedup"] == 1.0
    assert s["plan_heavy_at_or_above_1x"] == 2
    assert s["geomean_speedup_vs_flashinfer"] < s["plan_geomean_speedup_vs_flashinfer"]
    assert s["decode_tb_per_s"] == 3.1 and s["all_correct"]
    rows[0]["ours_plan"]["correct"] = False
    assert not random_summary(rows)["all_correct"]
