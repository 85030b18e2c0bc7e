"""Plan once per batch, run per layer (``serving.MLAPrefillPlan``), the FlashInfer drop-in, CUDA
graphs, concurrent streams, and flashinfer-bench's ``apply`` substitution."""

import os
import subprocess
import sys

import pytest
import torch

from mla_prefill.accuracy import poisoned_outputs, reference_fast
from mla_prefill.fuzz import ARGS, Batch, make_batch_inputs, planned_call
from mla_prefill.serving import MLAPrefillPlan
from tests.test_kernel import assert_close

BATCHES = {
    "one sequence": [(37, 37)],
    "prefixes": [(5, 70), (0, 4), (9, 9), (1, 130)],
    "decode-like": [(1, 300), (1, 45), (1, 3), (1, 200)],
}


def _check(inputs, out, lse):
    ref_out, ref_lse = reference_fast(*[inputs[k] for k in ARGS])
    assert_close("output", out, ref_out)
    assert_close("lse", lse, ref_lse)


def _plan(inputs, device, **kw):
    p = MLAPrefillPlan(device, **kw)
    p.plan(inputs["qo_indptr"], inputs["kv_indptr"], inputs["kv_indices"], inputs["sm_scale"])
    return p


def _run(p, inputs, out=None, lse=None):
    return p.run(inputs["q_nope"], inputs["q_pe"], inputs["ckv_cache"], inputs["kpe_cache"],
                 out, lse)  # fmt: skip


@pytest.mark.parametrize("name", sorted(BATCHES))
def test_plan_then_runs_on_new_values(name, device):
    """Every run is right: the first (it binds the launches) and later ones on new values."""
    lengths = BATCHES[name]
    inputs = make_batch_inputs(Batch(lengths, sum(k for _, k in lengths) + 9, 1), device)
    p = _plan(inputs, device)
    for seed in (2, 3):
        out, lse = poisoned_outputs(inputs["q_nope"].shape[0], device)
        _run(p, inputs, out, lse)
        _check(inputs, out, lse)
        fresh = make_batch_inputs(Batch(lengths, sum(k for _, k in lengths) + 9, seed), device)
        for k in ("q_nope", "q_pe", "ckv_cache", "kpe_cache"):
            inputs[k].copy_(fresh[k])


@pytest.mark.parametrize("kind", ["ordered", "scheduled"])
def test_tiles_run_from_the_table_the_plan_wrote(kind, device):
    """Ordered tiles and a scheduled split read a work table made from the indptrs alone: the
    plan writes it once, and no run launches its kernel; every run is right, on new values and
    after a replan of the same plan with other lengths of the same sizes (the table written
    again in the same buffer)."""
    from tests.test_kernel import ordered_config, scheduled_config

    cfg = ordered_config(4, device) if kind == "ordered" else scheduled_config(4, 3, device)
    p = MLAPrefillPlan(device)
    buffer = None
    for lengths in ([(6, 90), (0, 3), (3, 40), (9, 9), (1, 130)],
                    [(1, 4), (0, 60), (9, 200), (8, 8), (1, 130)]):  # fmt: skip
        inputs = make_batch_inputs(Batch(lengths, 420, len(lengths)), device)
        p.plan(inputs["qo_indptr"], inputs["kv_indptr"], inputs["kv_indices"],
               inputs["sm_scale"], config=cfg)  # fmt: skip
        for _ in range(2):
            out, lse = poisoned_outputs(inputs["q_nope"].shape[0], device)
            _run(p, inputs, out, lse)
            _check(inputs, out, lse)
            inputs["q_nope"].normal_()
        kernels = [ln.kernel for ln in p._bound.plan.launches]
        assert "order" not in kernels and "schedule" not in kernels, kernels
        assert buffer is None or p._partials.data_ptr() == buffer  # same sizes: same buffer
        buffer = p._partials.data_ptr()


def test_replan_of_the_same_sizes_reads_the_new_indices(device):
    a = make_batch_inputs(Batch([(3, 40), (4, 8)], 60, 4), device)
    b = make_batch_inputs(Batch([(5, 30), (2, 18)], 60, 5), device)  # same sizes, new lengths
    p = _plan(a, device)
    _check(a, *_run(p, a))
    p.plan(b["qo_indptr"], b["kv_indptr"], b["kv_indices"], b["sm_scale"])
    _check(b, *_run(p, b))


def test_a_new_layout_rebinds(device):
    inputs = make_batch_inputs(Batch([(6, 50)], 60, 6), device)
    p = _plan(inputs, device)
    _run(p, inputs)
    wide = torch.zeros(6, 16, 1024, dtype=torch.bfloat16, device=device)
    wide[..., :512] = inputs["q_nope"]
    strided = {**inputs, "q_nope": wide[..., :512]}  # another token stride: another launch
    _check(inputs, *_run(p, strided))


def test_run_refuses_what_the_plan_was_not_made_for(device):
    inputs = make_batch_inputs(Batch([(3, 10)], 20, 7), device)
    with pytest.raises(RuntimeError, match="plan the batch first"):
        _run(MLAPrefillPlan(device), inputs)
    p = _plan(inputs, device)
    _run(p, inputs)  # bound: later calls with other metadata are checked again
    short = {**inputs, "q_nope": inputs["q_nope"][:2], "q_pe": inputs["q_pe"][:2]}
    with pytest.raises(ValueError, match="the plan is for 3 tokens, got 2"):
        _run(p, short)
    with pytest.raises(ValueError, match="q_pe: expected dtype torch.bfloat16"):
        _run(p, {**inputs, "q_pe": inputs["q_pe"].float()})
    with pytest.raises(ValueError, match="kv_indices: expected a 1-D int32 tensor"):
        p.plan(inputs["qo_indptr"], inputs["kv_indptr"], inputs["kv_indices"].long(), 0.1)


def test_fuzz_planned_call_is_the_serving_path(device):
    inputs = make_batch_inputs(Batch([(4, 33), (1, 90)], 140, 8), device)
    out, lse = poisoned_outputs(5, device)
    planned_call()(*[inputs[k] for k in ARGS], out, lse)
    _check(inputs, out, lse)


def test_drop_in_wrapper_takes_flashinfer_arguments(device):
    from mla_prefill.flashinfer_compat import BatchMLAPagedAttentionWrapper

    lengths = [(5, 70), (9, 9)]
    x = make_batch_inputs(Batch(lengths, 100, 9), device)
    w = BatchMLAPagedAttentionWrapper(torch.empty(1024, dtype=torch.int8, device=device))
    kv_len = x["kv_indptr"][1:] - x["kv_indptr"][:-1]
    w.plan(x["qo_indptr"], x["kv_indptr"], x["kv_indices"], kv_len, 16, 512, 64, 1, True,
           x["sm_scale"], torch.bfloat16, torch.bfloat16)  # fmt: skip
    out, lse = w.run(x["q_nope"], x["q_pe"], x["ckv_cache"], x["kpe_cache"], return_lse=True)
    _check(x, out, lse)
    assert w.run(x["q_nope"], x["q_pe"], x["ckv_cache"], x["kpe_cache"]).shape == out.shape
    with pytest.raises(NotImplementedError, match="num_heads 16, head_dim_ckv 512"):
        w.plan(x["qo_indptr"], x["kv_indptr"], x["kv_indices"], kv_len, 128, 512, 64, 1, True,
               x["sm_scale"], torch.bfloat16, torch.bfloat16)  # fmt: skip


# --- GPU only -----------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("tiles", ["chosen", "scheduled", "ordered"])
def test_cuda_graph_replays_new_values_and_a_new_plan_of_the_same_sizes(tiles, device):
    """The graph holds the runs' launches only: a new plan rewrites the index buffers and the
    work table (scheduled split, ordered tiles) that the replay reads."""
    from tests.test_kernel import ordered_config, scheduled_config

    cfg = {"chosen": None, "scheduled": scheduled_config(4, 3, device),
           "ordered": ordered_config(4, device)}[tiles]  # fmt: skip
    lengths_a, lengths_b = [(3, 200), (1, 900), (4, 4)], [(5, 600), (2, 2), (1, 502)]
    a = make_batch_inputs(Batch(lengths_a, 1200, 10), device)
    b = make_batch_inputs(Batch(lengths_b, 1200, 11), device)
    static = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in a.items()}
    p = MLAPrefillPlan(device)
    p.plan(static["qo_indptr"], static["kv_indptr"], static["kv_indices"], static["sm_scale"],
           config=cfg)  # fmt: skip
    out, lse = poisoned_outputs(8, device)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        _run(p, static, out, lse)  # binds (compiles) before the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _run(p, static, out, lse)
    for src in (a, b):
        if src is b:  # a new batch of the same sizes: planned again into the same buffers
            p.plan(b["qo_indptr"], b["kv_indptr"], b["kv_indices"], b["sm_scale"], config=cfg)
        for k in ("q_nope", "q_pe", "ckv_cache", "kpe_cache"):
            static[k].copy_(src[k])
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check(src, out, lse)


@pytest.mark.gpu
def test_two_streams_run_two_batches_concurrently(device):
    batches = [[(64, 4000), (1, 9000)], [(300, 300), (7, 7), (100, 2100)]]
    xs = [make_batch_inputs(Batch(ls, sum(k for _, k in ls) + 50, 12 + i), device)
          for i, ls in enumerate(batches)]  # fmt: skip
    plans = [_plan(x, device) for x in xs]
    outs = [poisoned_outputs(x["q_nope"].shape[0], device) for x in xs]
    for p, x, (o, s) in zip(plans, xs, outs):
        _run(p, x, o, s)  # bind first
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for o, s in outs:
        o.fill_(float("nan"))
        s.fill_(float("nan"))
    torch.cuda.synchronize()
    for _ in range(3):
        for st, p, x, (o, s) in zip(streams, plans, xs, outs):
            with torch.cuda.stream(st):
                _run(p, x, o, s)
    torch.cuda.synchronize()
    for x, (o, s) in zip(xs, outs):
        _check(x, o, s)


@pytest.mark.gpu
def test_drop_in_matches_flashinfer_on_the_same_calls(device):
    """The same calling code against FlashInfer's wrapper and ours: both right, ours equal to the
    plan/run path bit for bit."""
    flashinfer = pytest.importorskip("flashinfer")
    from mla_prefill.flashinfer_compat import BatchMLAPagedAttentionWrapper

    lengths = [(17, 1000), (1, 77), (130, 130), (0, 5)]
    x = make_batch_inputs(Batch(lengths, 2000, 13), device)
    kv_len = x["kv_indptr"][1:] - x["kv_indptr"][:-1]
    results = {}
    for name, cls in (("flashinfer", flashinfer.mla.BatchMLAPagedAttentionWrapper),
                      ("ours", BatchMLAPagedAttentionWrapper)):  # fmt: skip
        w = cls(torch.empty(128 << 20, dtype=torch.int8, device=device), backend="auto")
        w.plan(x["qo_indptr"], x["kv_indptr"], x["kv_indices"], kv_len, 16, 512, 64, 1, True,
               x["sm_scale"], torch.bfloat16, torch.bfloat16)  # fmt: skip
        out, lse = poisoned_outputs(x["q_nope"].shape[0], device)
        w.run(x["q_nope"], x["q_pe"], x["ckv_cache"], x["kpe_cache"], out=out, lse=lse,
              return_lse=True)  # fmt: skip
        _check(x, out, lse)
        results[name] = out
    direct, _ = _run(_plan(x, device), x)
    assert torch.equal(results["ours"], direct)


APPLY = r"""
import json, sys, torch, flashinfer
from flashinfer_bench.apply import ApplyConfig, enable_apply
from mla_prefill.fuzz import ARGS, Batch, make_batch_inputs
from mla_prefill.kernel.main import mla_paged_prefill
from mla_prefill.accuracy import compare, reference_fast

root = sys.argv[1]
x = make_batch_inputs(Batch([(40, 900), (3, 3), (200, 1200)], 3000, 14), "cuda")
kv_len = x["kv_indptr"][1:] - x["kv_indptr"][:-1]

def flashinfer_call():
    w = flashinfer.mla.BatchMLAPagedAttentionWrapper(
        torch.empty(128 << 20, dtype=torch.int8, device="cuda"), backend="auto")
    w.plan(x["qo_indptr"], x["kv_indptr"], x["kv_indices"], kv_len, 16, 512, 64, 1, True,
           x["sm_scale"], torch.bfloat16, torch.bfloat16)
    return w.run(x["q_nope"], x["q_pe"], x["ckv_cache"], x["kpe_cache"], return_lse=True)

plain_out, _ = flashinfer_call()
# the evaluator's PASSED already applies the per-element rule; the table's error filter takes
# maxima over all elements, which that rule does not bound (the traces' relative maxima are ~1e4)
rt = enable_apply(root, ApplyConfig(max_atol=1.0, max_rtol=1e6, on_miss_policy="use_def_best"))
applied_out, applied_lse = flashinfer_call()
ours_out, ours_lse = mla_paged_prefill(*[x[k] for k in ARGS])
ref = reference_fast(*[x[k] for k in ARGS])
print(json.dumps({
    "def_best": rt._table.def_best,
    "applied_equals_ours": bool(torch.equal(applied_out, ours_out)),
    "plain_equals_ours": bool(torch.equal(plain_out, ours_out)),
    "applied_correct": compare(applied_out, applied_lse, *ref)["correct"],
}))
"""


@pytest.mark.gpu
def test_flashinfer_bench_apply_runs_our_kernel_for_flashinfer_calls():
    """flashinfer-bench's documented substitution: ``enable_apply`` on this trace set patches
    FlashInfer's wrapper, and its ``run`` then returns our kernel's output (bit for bit)."""
    pytest.importorskip("flashinfer")
    from mla_prefill.io import repo_root

    r = subprocess.run([sys.executable, "-c", APPLY, str(repo_root())], capture_output=True,
                       text=True, timeout=600, env=dict(os.environ))  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    import json

    res = json.loads(r.stdout.strip().splitlines()[-1])
    name = "mla_paged_prefill_causal_h16_ckv512_kpe64_ps1"
    assert res["def_best"][name] == "mla_prefill_triton_hopper", res
    assert res["applied_equals_ours"] and not res["plain_equals_ours"], res
    assert res["applied_correct"], res


@pytest.mark.cpu_only
def test_a_hopper_gpu_without_the_gluon_kernel_is_told_so(monkeypatch):
    """Under a Triton whose Gluon API the Hopper kernel is not enabled for, a plan on an H100 or
    H200 warns that it runs the portable kernel; other GPUs, and Hopper with the Gluon kernel,
    hear nothing."""
    import warnings

    import triton

    from mla_prefill import serving
    from mla_prefill.kernel.targets import TARGETS

    monkeypatch.setattr(serving, "gluon_available", lambda: False)
    note = serving.hopper_fallback_note(TARGETS["h200"])
    assert note is not None and triton.__version__ in note and "Triton 3.6" in note
    # a release the kernel is written for, but was not run under: the note names the opt-in
    real = triton.__version__

    def release(version):
        monkeypatch.setattr(triton, "__version__", version)
        serving.gluon_compiles.cache_clear()

    try:
        release("3.8.0")
        assert "MLA_PREFILL_UNRUN_TRITON=1" in serving.hopper_fallback_note(TARGETS["h100"])
        release("3.10.0")
        assert "MLA_PREFILL_UNRUN_TRITON" not in serving.hopper_fallback_note(TARGETS["h100"])
    finally:
        release(real)
    assert serving.hopper_fallback_note(TARGETS["b200"]) is None
    assert serving.hopper_fallback_note(TARGETS["a100"]) is None
    # the plan's constructor, on a device whose target is an H100 (compiled kernels, no GPU)
    monkeypatch.setattr(serving, "is_interpreter", lambda: False)
    monkeypatch.setattr(serving, "device_target", lambda index: TARGETS["h100"])
    with pytest.warns(serving.HopperFallbackWarning, match="portable Triton kernel"):
        MLAPrefillPlan("cpu")
    # the bench prints the note once itself: its planned contender does not warn it again
    from mla_prefill import bench

    monkeypatch.setattr(MLAPrefillPlan, "plan", lambda self, *a, **k: None)
    inputs = {k: torch.empty(0) for k in ("q_nope", "q_pe", "ckv_cache", "kpe_cache", "qo_indptr",
                                          "kv_indptr", "kv_indices")}  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bench.ours_planned(dict(inputs, sm_scale=0.1), torch.empty(0), torch.empty(0))
    monkeypatch.setattr(serving, "gluon_available", lambda: True)
    assert serving.hopper_fallback_note(TARGETS["h100"]) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        MLAPrefillPlan("cpu")
