"""The cached launcher (``kernel/launch.py``): its argument classes against Triton's own
specialisation (CPU), and on the GPU the kernel it launches against the one ``JITFunction.run``
picks for the same arguments, with results checked against the reference."""

import itertools

import pytest
import torch
from triton._C.libtriton import native_specialize_impl
from triton.backends.nvidia.compiler import CUDABackend

from mla_prefill.fuzz import ARGS, Batch, make_batch_inputs
from mla_prefill.kernel import launch as launch_mod
from mla_prefill.kernel import main
from tests.test_kernel import assert_close, tiles


def triton_spec(a):
    """What Triton 3.6 specialises a (non-constexpr, specialisable) argument on."""
    return native_specialize_impl(CUDABackend, a, False, True, True)


def _values():
    ints = [0, 1, 2, 3, 15, 16, 17, 31, 32, 48, 512, 8192, 2**31 - 16, 2**31 - 1, 2**31]
    ints += [2**31 + 16, 2**32, 2**40 + 3, 2**63 + 16, -1, -15, -16, -32]
    buf = torch.zeros(64, dtype=torch.bfloat16)
    fbuf = torch.zeros(64, dtype=torch.float32)
    tensors = [buf, buf[1:], buf[4:], buf[8:], buf[16:], fbuf, fbuf[2:], fbuf[4:]]
    tensors += [torch.zeros(8, dtype=torch.int32), torch.zeros(8, dtype=torch.int32)[3:]]
    return ints + [0.5, 16.0, 1.0, 0.0] + tensors


def test_arg_class_is_at_least_as_fine_as_tritons_specialisation():
    vals = _values()
    classes = [launch_mod.arg_class((v,))[0] for v in vals]
    specs = [triton_spec(v) for v in vals]
    shared = 0
    for (ca, sa, va), (cb, sb, vb) in itertools.combinations(zip(classes, specs, vals), 2):
        if ca == cb:
            shared += 1
            assert sa == sb, f"{va!r} and {vb!r} share class {ca!r} but Triton has {sa} / {sb}"
    assert shared >= 20  # the classes do merge values (else this test would prove nothing)
    # the boundaries where Triton's specialisation changes
    for a, b in [(1, 17), (0, 16), (16, 32 + 1), (-16, 16), (2**31 - 16, 2**31 + 16), (16.0, 16)]:
        assert launch_mod.arg_class((a,)) != launch_mod.arg_class((b,)), (a, b)


def test_arg_class_leaves_unknown_types_to_triton():
    import numpy as np

    for odd in (True, np.int32(4), np.float32(0.5), None, torch.nn.Parameter(torch.zeros(2))):
        assert launch_mod.arg_class((3, odd)) == (False, None)


@pytest.mark.gpu
def test_cached_launch_matches_tritons_choice(device, reference, monkeypatch):
    """Every call through ``launch`` is checked after the fact: the kernel cached for its arguments
    is the one ``JITFunction.run`` selects for them. The batches vary what Triton specialises on:
    token counts of 1, 16 and others, pointers 16-byte aligned or not (views at an offset),
    split and pooled paths (two launches, PDL), the Gluon kernel; results against the reference."""
    launch_mod.clear_cache()
    seen = []
    real = launch_mod.launch

    def checked(fn, grid, args, consts, **options):
        real(fn, grid, args, consts, **options)
        cached = launch_mod.cached_kernel(fn, args, consts, **options)
        picked = fn.run(*args, grid=grid, warmup=True, **consts, **options)
        assert cached is picked, f"{fn.__name__}: cached launcher differs from Triton's kernel"
        seen.append((fn.__name__, launch_mod.arg_class(args)))

    monkeypatch.setattr(main, "launch", checked)
    cases = [
        ([(1, 40)], None, 0),
        ([(16, 16)], None, 0),
        ([(1, 300), (1, 7), (1, 90)], tiles(1, 32, 4, 32), 0),  # pooled + combine
        ([(5, 40), (12, 80)], tiles(4, 16, 3), 0),  # per-tile split
        ([(100, 300), (99, 99)], None, 0),  # Gluon on sm_90
        ([(3, 40), (2, 2)], None, 8),  # q_nope / output at an 8-byte offset
        ([(100, 300)], None, 8),
    ]
    for rep in range(2):  # the second pass launches from the cache
        for lengths, config, offset in cases:
            inputs = make_batch_inputs(Batch(lengths, 400, 3 + rep), device)
            args = [inputs[k] for k in ARGS]
            T = args[0].shape[0]
            if offset:  # same values, at a pointer 16 does not divide
                shifted = torch.empty(T * 16 * 512 + 8, dtype=torch.bfloat16, device=device)
                args[0] = shifted[offset // 2 :][: T * 16 * 512].view(T, 16, 512)
                args[0].copy_(inputs["q_nope"])
            out_buf = torch.full((T * 16 * 512 + 8,), float("nan"), dtype=torch.bfloat16)
            out = out_buf.to(device)[offset // 2 :][: T * 16 * 512].view(T, 16, 512)
            lse = torch.full((T, 16), float("nan"), dtype=torch.float32, device=device)
            main.mla_paged_prefill(*args, out, lse, config=config)
            ref_out, ref_lse = reference(*args)
            assert_close(f"output {lengths}", out, ref_out)
            assert_close(f"lse {lengths}", lse, ref_lse)
    assert len({c for _, c in seen}) >= 6  # the cases did reach different classes
    assert {"_combine_kernel", "_mla_pooled_split_kernel", "_mla_prefill_kernel"} <= {
        n for n, _ in seen
    }


def assert_uncached_and_correct(device, reference, lengths, num_pages):
    """One call from an empty cache: correct against the reference, and nothing cached."""
    launch_mod.clear_cache()
    inputs = make_batch_inputs(Batch(lengths, num_pages, 1), device)
    args = [inputs[k] for k in ARGS]
    out, lse = main.mla_paged_prefill(*args)
    assert not launch_mod._CACHE
    ref_out, ref_lse = reference(*args)
    assert_close("output", out, ref_out)
    assert_close("lse", lse, ref_lse)


@pytest.mark.gpu
def test_triton_launch_switch_bypasses_the_cache(device, reference, monkeypatch):
    monkeypatch.setattr(launch_mod, "TRITON_LAUNCH", True)
    assert_uncached_and_correct(device, reference, [(2, 30)], 60)


@pytest.mark.gpu
def test_launch_hooks_still_called(device):
    """A profiler's launch hook (Triton's ``knobs.runtime.launch_enter_hook``) sees every launch:
    with a hook installed, launches go through Triton, which calls it."""
    from triton import knobs

    inputs = make_batch_inputs(Batch([(2, 30)], 60, 1), device)
    args = [inputs[k] for k in ARGS]
    main.mla_paged_prefill(*args)  # cached
    names = []

    def hook(metadata):
        names.append(metadata.get()["name"])

    knobs.runtime.launch_enter_hook.add(hook)
    try:
        main.mla_paged_prefill(*args)
        torch.cuda.synchronize()
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert names == ["_mla_prefill_kernel"]


@pytest.mark.cpu_only
def test_interpreter_launches_through_triton(device, reference):
    """Under ``TRITON_INTERPRET=1`` the kernels are ``InterpretedFunction``s: nothing is cached."""
    assert_uncached_and_correct(device, reference, [(2, 9)], 20)
