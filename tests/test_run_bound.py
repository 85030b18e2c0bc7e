"""The solution's ``run`` keeps the launchers of each call layout and calls them on later calls
of the same layout: every such call must be as right as the first, whatever its pointers."""

import pytest
import torch

from mla_prefill.accuracy import poisoned_outputs, reference_fast
from mla_prefill.fuzz import ARGS, Batch, make_batch_inputs
from mla_prefill.kernel import main
from tests.test_kernel import assert_close

BATCHES = {
    "one tile": [(7, 40)],
    "gluon tiles": [(300, 300), (200, 900)],
    "per-tile split": [(400, 4400)],
    "pooled split": [(1, 3000), (1, 2000), (1, 40), (1, 5000)],
}


def _call(x, out, lse):
    main.run(*[x[k] for k in ARGS], out, lse)


def _check(x, out, lse):
    ref_out, ref_lse = reference_fast(*[x[k] for k in ARGS])
    assert_close("output", out, ref_out)
    assert_close("lse", lse, ref_lse)


@pytest.mark.cpu_only
def test_the_interpreter_takes_the_full_path_every_call(device):
    x = make_batch_inputs(Batch([(3, 10)], 20, 0), device)
    out, lse = poisoned_outputs(3, device)
    assert main._run_key((*[x[k] for k in ARGS[:7]], out, lse), x["sm_scale"]) is None


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(BATCHES))
def test_later_calls_of_a_layout_are_right_on_new_values_and_new_buffers(name, device):
    lengths = BATCHES[name]
    pages = sum(k for _, k in lengths) + 30
    main._BOUND.clear()
    for seed in range(3):  # fresh tensors each time: new pointers, the same layout
        x = make_batch_inputs(Batch(lengths, pages, seed), device)
        out, lse = poisoned_outputs(x["q_nope"].shape[0], device)
        _call(x, out, lse)
        torch.cuda.synchronize()
        _check(x, out, lse)
        assert len(main._BOUND) == 1  # bound by the first call, used by the others


@pytest.mark.gpu
def test_a_launch_hook_or_validation_takes_the_full_path(device, monkeypatch):
    x = make_batch_inputs(Batch([(3, 10)], 20, 0), device)
    out, lse = poisoned_outputs(3, device)
    tensors = (*[x[k] for k in ARGS[:7]], out, lse)
    assert main._run_key(tensors, x["sm_scale"]) is not None
    monkeypatch.setenv("MLA_PREFILL_VALIDATE", "1")
    assert main._run_key(tensors, x["sm_scale"]) is None
    bad = x["kv_indices"].clone()
    bad[1] = 10_000
    with pytest.raises(ValueError, match=r"kv_indices\[1\] = 10000"):
        main.run(*[x[k] for k in ARGS[:6]], bad, x["sm_scale"], out, lse)


@pytest.mark.gpu
def test_another_layout_is_checked_again(device):
    x = make_batch_inputs(Batch([(3, 10)], 20, 0), device)
    out, lse = poisoned_outputs(3, device)
    _call(x, out, lse)
    with pytest.raises(ValueError, match="q_pe: expected dtype torch.bfloat16"):
        main.run(*[x[k] if k != "q_pe" else x[k].float() for k in ARGS], out, lse)


def _refill(x, seed):
    """New values in the same buffers (same pointers, same layout)."""
    g = torch.Generator(device=x["q_nope"].device).manual_seed(seed)
    for k in ("q_nope", "q_pe", "ckv_cache", "kpe_cache"):
        x[k].copy_(torch.randn(x[k].shape, generator=g, device=x[k].device).to(x[k].dtype))


@pytest.mark.gpu
def test_split_calls_of_one_layout_on_two_streams_concurrently(device):
    """Bound split calls take their split buffers per stream: two streams running the same
    layout at once never share them."""
    lengths = BATCHES["pooled split"]
    pages = sum(k for _, k in lengths) + 30
    main._BOUND.clear()
    xs = [make_batch_inputs(Batch(lengths, pages, 20 + i), device) for i in range(2)]
    outs = [poisoned_outputs(x["q_nope"].shape[0], device) for x in xs]
    for x, (o, s) in zip(xs, outs):
        _call(x, o, s)  # the first binds, the second takes the bound launches
    assert len(main._BOUND) == 1
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    torch.cuda.synchronize()
    for o, s in outs:
        o.fill_(float("nan"))
        s.fill_(float("nan"))
    for _ in range(3):
        for st, x, (o, s) in zip(streams, xs, outs):
            st.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(st):
                _call(x, o, s)
    torch.cuda.synchronize()
    for x, (o, s) in zip(xs, outs):
        _check(x, o, s)


@pytest.mark.gpu
def test_a_captured_split_call_replays_new_values(device):
    """A bound split call captured into a CUDA graph allocates its split buffers from the
    graph's pool (not the stream's reusable ones) and replays right on new values; eager calls
    after it stay right."""
    lengths = BATCHES["pooled split"]
    pages = sum(k for _, k in lengths) + 30
    main._BOUND.clear()
    x = make_batch_inputs(Batch(lengths, pages, 30), device)
    out, lse = poisoned_outputs(x["q_nope"].shape[0], device)
    _call(x, out, lse)  # binds
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        _call(x, out, lse)  # bound, eager, on the capture stream
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        _call(x, out, lse)
    for seed in (1, 2):
        _refill(x, seed)
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check(x, out, lse)
    out.fill_(float("nan"))
    _call(x, out, lse)
    torch.cuda.synchronize()
    _check(x, out, lse)
