"""Bad input gets a ValueError naming the argument and what was expected, before any launch."""

import pytest
import torch

from mla_prefill.fuzz import ARGS, Batch, make_batch_inputs
from mla_prefill.kernel.main import mla_paged_prefill
from tests.test_kernel import assert_close


@pytest.fixture
def inputs(device):
    return make_batch_inputs(Batch([(3, 10), (0, 4), (5, 5)], 40, 0), device)


def call(inputs, validate=None, **override):
    args = {**inputs, **override}
    return mla_paged_prefill(
        *[args[k] for k in ARGS], args.get("output"), args.get("lse"), validate=validate
    )


@pytest.mark.parametrize(
    "name,make,pattern",
    [
        (
            "q_nope",
            lambda x: x["q_nope"].half(),
            r"q_nope: expected dtype torch.bfloat16, got torch.float16",
        ),
        (
            "q_nope",
            lambda x: x["q_nope"][:, :8].contiguous(),
            r"q_nope: expected shape \[\*, 16, 512\], got \[8, 8, 512\]",
        ),
        ("q_pe", lambda x: x["q_pe"][:-1], r"q_pe: expected shape \[8, 16, 64\]"),
        (
            "ckv_cache",
            lambda x: x["ckv_cache"][..., :256],
            r"ckv_cache: expected shape \[\*, 1, 512\]",
        ),
        (
            "ckv_cache",
            lambda x: x["ckv_cache"].reshape(20, 2, 512),
            r"ckv_cache: expected shape \[\*, 1, 512\], got \[20, 2, 512\]",
        ),
        ("kpe_cache", lambda x: x["kpe_cache"][:-1], r"kpe_cache: expected shape \[40, 1, 64\]"),
        (
            "kv_indices",
            lambda x: x["kv_indices"].long(),
            r"kv_indices: expected dtype torch.int32, got torch.int64; convert",
        ),
        ("qo_indptr", lambda x: x["qo_indptr"].long(), r"qo_indptr: expected dtype torch.int32"),
        ("kv_indptr", lambda x: x["kv_indptr"][:-1], r"kv_indptr: expected shape \[4\]"),
        (
            "q_nope",
            lambda x: x["q_nope"].transpose(1, 2).contiguous().transpose(1, 2),
            r"q_nope: the last dimension must be contiguous",
        ),
        (
            "output",
            lambda x: torch.empty(8, 16, 512, dtype=torch.float32),
            r"output: expected dtype torch.bfloat16",
        ),
        ("lse", lambda x: torch.empty(8, 15), r"lse: expected shape \[8, 16\]"),
        (
            "kv_indices",
            lambda x: x["kv_indices"].to("meta"),
            r"kv_indices: expected every tensor on .* got meta",
        ),
        ("sm_scale", lambda x: float("nan"), r"sm_scale: expected a finite float"),
        ("sm_scale", lambda x: "0.1", r"sm_scale: expected a float"),
    ],
)
def test_metadata_errors(inputs, name, make, pattern):
    with pytest.raises(ValueError, match=pattern):
        call(inputs, **{name: make(inputs)})


def test_sm_scale_cpu_tensor_accepted(inputs, reference):
    out, lse = call(inputs, sm_scale=torch.tensor(inputs["sm_scale"]))
    ref_out, ref_lse = reference(*[inputs[k] for k in ARGS])
    assert_close("output", out, ref_out)


def test_strided_inputs_handled(inputs, reference, device):
    """Inputs that are views with padded rows (last dim contiguous) are read through their strides."""
    T = inputs["q_nope"].shape[0]
    big = torch.randn(T, 16, 600, device=device).to(torch.bfloat16)
    big[..., :512] = inputs["q_nope"]
    cache = torch.randn(40, 1, 700, device=device).to(torch.bfloat16)
    cache[..., :512] = inputs["ckv_cache"]
    view_q, view_c = big[..., :512], cache[..., :512]
    assert not view_q.is_contiguous()
    out, lse = call(inputs, q_nope=view_q, ckv_cache=view_c)
    ref_out, ref_lse = reference(*[inputs[k] for k in ARGS])
    assert_close("output", out, ref_out)
    assert_close("lse", lse, ref_lse)


def _edit(inputs, name, fn):
    t = inputs[name].clone()
    fn(t)
    return {name: t}


@pytest.mark.parametrize(
    "edit,pattern",
    [
        (
            lambda x: _edit(x, "qo_indptr", lambda t: t.__setitem__(0, 1)),
            r"qo_indptr: must start at 0",
        ),
        (
            lambda x: _edit(x, "kv_indptr", lambda t: t.__setitem__(2, 1)),
            r"kv_indptr: must never decrease: kv_indptr\[1\] = 10 > kv_indptr\[2\] = 1",
        ),
        (
            lambda x: _edit(x, "qo_indptr", lambda t: t.__setitem__(3, 7)),
            r"qo_indptr: must end at total_q \(q_nope.shape\[0\]\) = 8",
        ),
        (
            lambda x: _edit(x, "kv_indptr", lambda t: t.__setitem__(3, 18)),
            r"kv_indptr: must end at len\(kv_indices\) = 19",
        ),
        (
            lambda x: _edit(x, "kv_indices", lambda t: t.__setitem__(4, 40)),
            r"kv_indices: kv_indices\[4\] = 40 is outside \[0, num_pages = 40\)",
        ),
        (
            lambda x: _edit(x, "kv_indices", lambda t: t.__setitem__(0, -1)),
            r"kv_indices: kv_indices\[0\] = -1 is outside",
        ),
        (
            lambda x: {
                "qo_indptr": torch.tensor(
                    [0, 3, 3, 8], dtype=torch.int32, device=x["qo_indptr"].device
                ),
                "kv_indptr": torch.tensor(
                    [0, 10, 14, 18], dtype=torch.int32, device=x["qo_indptr"].device
                ),
                "kv_indices": x["kv_indices"][:18],
            },
            r"kv_indptr: sequence 2: kv_len 4 < q_len 5",
        ),
    ],
)
def test_index_data_errors(inputs, edit, pattern):
    bad = edit(inputs)
    with pytest.raises(ValueError, match=pattern):
        call(inputs, validate=True, **bad)


def test_validation_env_switch(inputs, monkeypatch):
    bad = _edit(inputs, "kv_indices", lambda t: t.__setitem__(1, 10_000))
    monkeypatch.setenv("MLA_PREFILL_VALIDATE", "1")
    with pytest.raises(ValueError, match=r"kv_indices\[1\] = 10000"):
        call(inputs, **bad)


def test_no_queries_is_a_no_op(device):
    x = make_batch_inputs(Batch([(0, 5)], 10, 0), device)
    out, lse = call(x, validate=True)
    assert out.shape == (0, 16, 512) and lse.shape == (0, 16)


# --- one rule table: the fast check and the explaining one agree --------------------------------

VALID_VARIANTS = {
    "as drawn": lambda x: {},
    "output and lse given": lambda x: {
        "output": torch.empty(8, 16, 512, dtype=torch.bfloat16, device=x["q_nope"].device),
        "lse": torch.empty(8, 16, dtype=torch.float32, device=x["q_nope"].device),
    },
    "q_nope strided over tokens": lambda x: {
        "q_nope": torch.empty(8, 16, 1024, dtype=torch.bfloat16, device=x["q_nope"].device)[
            ..., :512
        ].copy_(x["q_nope"])
    },
}


def _rule_args(args):
    return [args[k] for k in ARGS[:7]] + [args.get("output"), args.get("lse")]


@pytest.mark.parametrize("variant", sorted(VALID_VARIANTS))
def test_fast_check_accepts_what_the_rules_accept(inputs, variant):
    """The accept path of the fast check runs here (on the CPU too) and agrees with the rules."""
    from mla_prefill.kernel.validate import _explain_inputs, _inputs_ok

    args = _rule_args({**inputs, **VALID_VARIANTS[variant](inputs)})
    assert _explain_inputs(*args) == (8, 40, 3, 19)
    assert _inputs_ok(*args)


BROKEN = {
    "q_nope fp16": ("q_nope", lambda x: x["q_nope"].half()),
    "q_pe short": ("q_pe", lambda x: x["q_pe"][:-1]),
    "ckv 2 per page": ("ckv_cache", lambda x: x["ckv_cache"].reshape(20, 2, 512)),
    "kpe short": ("kpe_cache", lambda x: x["kpe_cache"][:-1]),
    "indices int64": ("kv_indices", lambda x: x["kv_indices"].long()),
    "kv_indptr short": ("kv_indptr", lambda x: x["kv_indptr"][:-1]),
    "indices strided": ("kv_indices", lambda x: x["kv_indices"].repeat_interleave(2)[::2]),
    "qo_indptr strided": ("qo_indptr", lambda x: x["qo_indptr"].repeat_interleave(2)[::2]),
    "output fp32": ("output", lambda x: torch.empty(8, 16, 512, dtype=torch.float32)),
    "lse short": ("lse", lambda x: torch.empty(8, 15)),
    "indices on meta": ("kv_indices", lambda x: x["kv_indices"].to("meta")),
    "no sequence": ("qo_indptr", lambda x: x["qo_indptr"][:1]),  # kv_indptr then mismatches
    "not a tensor": ("q_pe", lambda x: [1, 2]),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_fast_check_refuses_what_the_rules_refuse(inputs, case):
    from mla_prefill.kernel.validate import _explain_inputs, _inputs_ok

    name, make = BROKEN[case]
    args = _rule_args({**inputs, name: make(inputs)})
    with pytest.raises(ValueError, match="kv_indptr" if case == "no sequence" else name):
        _explain_inputs(*args)
    assert not _inputs_ok(*args)


def test_strided_index_tensor_is_refused(inputs):
    """A strided kv_indices would be read as if contiguous: a wrong answer, not an error."""
    strided = inputs["kv_indices"].repeat_interleave(2)[::2]
    assert torch.equal(strided, inputs["kv_indices"]) and strided.stride(0) == 2
    with pytest.raises(ValueError, match="kv_indices: the last dimension must be contiguous"):
        call(inputs, kv_indices=strided)


def test_wrong_destination_dtype_is_not_told_to_convert(inputs):
    """A converted copy of ``output`` would receive the result, not the caller's buffer."""
    with pytest.raises(ValueError, match="output: expected dtype") as e:
        call(inputs, output=torch.empty(8, 16, 512, dtype=torch.float32))
    assert ".to(" not in str(e.value) and "pass a torch.bfloat16 buffer" in str(e.value)


OUT_OF_RANGE_ON_CPU = r"""
import os, torch
os.environ["TRITON_INTERPRET"] = "1"
from mla_prefill.fuzz import ARGS, Batch, make_batch_inputs
from mla_prefill.kernel.main import mla_paged_prefill
x = make_batch_inputs(Batch([(3, 10), (5, 5)], 40, 0), "cpu")
x["kv_indices"][1] = 10_000
try:
    mla_paged_prefill(*[x[k] for k in ARGS], validate=False)
except ValueError as e:
    print("ValueError:", e)
"""


@pytest.mark.cpu_only
def test_out_of_range_page_under_the_interpreter_is_an_error_not_a_crash():
    """The interpreter has no memory protection: an out-of-range page index must be refused on
    the CPU even when validation is off (a subprocess, so a crash fails this test alone)."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", OUT_OF_RANGE_ON_CPU], capture_output=True,
                       text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert (
        "ValueError: kv_indices: kv_indices[1] = 10000 is outside [0, num_pages = 40)" in r.stdout
    )
