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
