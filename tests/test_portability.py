"""``mla-prefill portability`` on the CPU: every launch of a call compiles for the target GPUs,
and its JSON rows are enough to recompile a launch independently with ``triton.compile``.

Run in a subprocess without ``TRITON_INTERPRET`` (the CPU tests set it; interpreted kernels
cannot be compiled)."""

import importlib
import json
import os
import subprocess
import sys

import pytest
import torch


def _env():
    return {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}


@pytest.fixture(scope="module")
def b200_rows():
    r = subprocess.run(
        [sys.executable, "-m", "mla_prefill.cli", "portability", "--target", "b200",
         "--grid-only", "--json"],
        capture_output=True, text=True, env=_env(), timeout=1200,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def test_every_b200_launch_fits_and_does_not_spill(b200_rows):
    assert {r["target"] for r in b200_rows} == {"b200"}
    assert all(r["capability"] == 100 for r in b200_rows)
    for r in b200_rows:
        assert not r["problems"], r
        assert 0 <= r["shared_bytes"] <= r["shared_limit"] == 232_448
        assert r["spills"] == 0 and r["registers"] > 0
    kernels = {r["kernel"].split(":")[1] for r in b200_rows}
    assert {"_mla_prefill_kernel", "_mla_pooled_split_kernel", "_combine_kernel"} <= kernels
    # the wide tiles a B200 gets: 2 tokens, 32-key steps, 4 stages (not Hopper's Gluon tile)
    big = next(r for r in b200_rows if r["workload"] == "single-32k")
    assert big["constants"]["BLOCK_T"] == 2 and big["num_stages"] == 4


RECOMPILE = r"""
import importlib, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
rows = json.load(sys.stdin)
out = []
for row in rows:
    module, name = row["kernel"].split(":")
    fn = getattr(importlib.import_module(module), name)
    names = fn.arg_names
    sig = {n: "constexpr" if n in row["constants"] else row["signature"][n] for n in names}
    consts = {(names.index(n),): v for n, v in row["constants"].items()}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in row["divisible_by_16"]}
    opts = dict(row["options"], num_warps=row["num_warps"], num_stages=row["num_stages"])
    k = triton.compile(ASTSource(fn, sig, consts, attrs),
                       target=GPUTarget("cuda", row["capability"], 32), options=opts)
    out.append(k.metadata.shared)
print(json.dumps(out))
"""


def test_rows_recompile_independently_to_the_same_shared_memory(b200_rows):
    """The largest shapes' rows, recompiled from the JSON alone with plain ``triton.compile``."""
    rows = [r for r in b200_rows if r["workload"] in ("single-32k", "wide", "decode-pooled")]
    assert len(rows) >= 4
    r = subprocess.run([sys.executable, "-c", RECOMPILE], input=json.dumps(rows),
                       capture_output=True, text=True, env=_env(), timeout=1200)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout) == [row["shared_bytes"] for row in rows]


PTXAS_OPTIONS = """
import json, sys
from mla_prefill.portability import _spec_of, recompile
spec = _spec_of(json.loads(sys.stdin.read()))
plain = recompile(spec)
capped = recompile(dict(spec, options=dict(spec["options"], ptx_options="--minnctapersm 3")))
print(json.dumps([plain["registers"], plain["spills"], capped["registers"], capped["spills"]]))
"""


def test_a_launchs_ptx_options_reach_the_ptxas_report(b200_rows):
    """A launch's ``ptx_options`` (Triton hands them to ptxas) are in the registers and spills
    the report gives: three blocks of 256 threads per SM cap a thread at 80 registers."""
    row = next(r for r in b200_rows if r["kernel"].endswith(":_mla_pooled_split_kernel"))
    r = subprocess.run([sys.executable, "-c", PTXAS_OPTIONS], input=json.dumps(row),
                       capture_output=True, text=True, env=_env(), timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    regs, spills, capped_regs, capped_spills = json.loads(r.stdout)
    assert regs > 85 and spills == 0, (regs, spills)
    assert capped_regs <= 85 and capped_spills > 0, (capped_regs, capped_spills)


def test_kernel_paths_are_importable(b200_rows):
    for r in b200_rows:
        module, name = r["kernel"].split(":")
        assert hasattr(importlib.import_module(module), name)


def test_what_fails_a_launch_and_what_only_warns():
    from mla_prefill.portability import problems_of, warnings_of

    row = dict(shared_bytes=100, shared_limit=200, spills=0, shared_estimate=120)
    assert problems_of(row) == [] and warnings_of(row) == []
    assert problems_of(dict(row, shared_bytes=201)) == ["shared 201 > limit 200"]
    assert problems_of(dict(row, spills=8)) == ["8 bytes of register spills"]
    assert problems_of(dict(row, error="PTXASError: boom\nmore")) == ["PTXASError: boom"]
    over_estimate = dict(row, shared_bytes=150)
    assert problems_of(over_estimate) == []
    assert warnings_of(over_estimate) == ["shared 150 > the chooser's estimate 120"]
    pooled = dict(row, kernel="mla_prefill.kernel.attention:_mla_pooled_split_kernel",
                  num_stages=2, capability=100, ptx_counts={"cp_async": 0})  # fmt: skip
    assert problems_of(pooled) == []
    assert warnings_of(pooled) == ["KV gathers not pipelined (no cp.async)"]
    assert warnings_of(dict(pooled, ptx_counts={"cp_async": 36})) == []
    assert warnings_of(dict(pooled, num_stages=1)) == []


PINNED_SPLIT = r"""
import json
import mla_prefill.kernel.config as config
from mla_prefill.kernel.config import KernelConfig
from mla_prefill.kernel.targets import target_named
from mla_prefill.portability import Shape, run

# no default plan splits 2-token Triton tiles on a schedule; a pinned config (tests, sweeps) does
pinned = KernelConfig(2, 32, 3, 32, 8, 2)
config.choose_config = lambda *a, **k: pinned
rows = run([target_named(t) for t in ("h200", "b200")], [Shape("pinned", 40, 3, 4000)], False, 1)
print(json.dumps(rows))
"""


def test_a_pinned_scheduled_triton_split_compiles():
    """Every kernel of a scheduled split of Triton tiles compiles for sm_90 and sm_100 without
    spills: the path no default plan takes, so ``portability`` over the plans never compiles it,
    and the interpreter runs code that does not compile (it checks no types)."""
    r = subprocess.run([sys.executable, "-c", PINNED_SPLIT], capture_output=True, text=True,
                       env=_env(), timeout=900)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    rows = json.loads(r.stdout.strip().splitlines()[-1])
    kernels = {(row["target"], row["kernel"].split(":")[1]) for row in rows}
    for t in ("h200", "b200"):
        assert {
            (t, "_split_schedule_kernel"),
            (t, "_mla_prefill_kernel"),
            (t, "_combine_kernel"),
        } <= kernels
    for row in rows:
        assert not row["problems"] and row["spills"] == 0, row
        if row["kernel"].endswith("_mla_prefill_kernel"):
            assert row["constants"]["SCHEDULED"] is True


def test_a_triton_too_old_to_plan_the_launches_is_refused_by_name(monkeypatch, capsys):
    """Triton 3.4 and older have no ``JITFunction._pack_args``, which the launch specs are read
    through: the command says which Triton it needs instead of failing on a missing attribute."""
    import argparse

    from triton.runtime.jit import JITFunction

    from mla_prefill import portability

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delattr(JITFunction, "_pack_args")
    args = argparse.Namespace(target=["b200"], json=False, root=None, grid_only=True, jobs=1)
    assert portability.cmd_portability(args) == 2
    assert "needs Triton 3.5 or later" in capsys.readouterr().err


def test_a_triton_older_than_the_kernels_need_is_refused_with_what_to_install(monkeypatch, device):
    """Triton 3.4's compiler fails on 22 of the B200's 40 distinct launches: a call says which
    Triton it needs before the first launch, instead of failing inside a compiler pass."""
    import triton

    from mla_prefill.kernel import main

    assert main.triton_release("3.6.0") == (3, 6)
    assert main.triton_release("3.10.0+git1a2b3c4") == (3, 10)
    assert main.triton_release("nightly") == (0, 0)
    q = torch.zeros(1, 16, 512, dtype=torch.bfloat16, device=device)
    qp = torch.zeros(1, 16, 64, dtype=torch.bfloat16, device=device)
    ckv = torch.zeros(3, 1, 512, dtype=torch.bfloat16, device=device)
    kpe = torch.zeros(3, 1, 64, dtype=torch.bfloat16, device=device)
    ind = torch.tensor([0, 1], dtype=torch.int32, device=device)
    pages = torch.tensor([2], dtype=torch.int32, device=device)
    monkeypatch.setattr(triton, "__version__", "3.4.0")
    main.require_triton.cache_clear()
    main.plan_call.cache_clear()
    try:
        with pytest.raises(RuntimeError, match=r"Triton 3\.5 or later, found 3\.4\.0: install"):
            main.mla_paged_prefill(q, qp, ckv, kpe, ind, ind, pages, 0.1)
        monkeypatch.setattr(triton, "__version__", "3.5.1")
        main.require_triton.cache_clear()
        main.require_triton()  # 3.5 is enough
    finally:
        main.require_triton.cache_clear()
        main.plan_call.cache_clear()


def test_the_gluon_kernel_runs_under_the_release_it_was_run_under_and_opt_in_elsewhere(
    monkeypatch,
):
    """It compiles under 3.6-3.9 (CI) with the Gluon names it calls; it runs under 3.6, the
    release of the GPU evidence, and under 3.7-3.9 only with MLA_PREFILL_UNRUN_TRITON=1;
    neither an older nor a newer release, nor a release without those names."""
    import triton
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import async_copy

    from mla_prefill.kernel import launch, main

    def state(version, unrun=False):
        monkeypatch.setattr(triton, "__version__", version)
        monkeypatch.setattr(launch, "UNRUN_TRITON", unrun)
        main.gluon_compiles.cache_clear()
        main.gluon_available.cache_clear()
        return main.gluon_compiles(), main.gluon_available()

    try:
        assert state("3.5.1") == (False, False)
        assert state("3.6.0") == (True, True)
        assert state("3.8.0") == (True, False)
        assert state("3.8.0", unrun=True) == (True, True)
        assert state("3.10.0", unrun=True) == (False, False)
        with monkeypatch.context() as m:
            for name in ("barrier", "thread_barrier"):
                m.delattr(gl, name, raising=False)
            assert state("3.6.0") == (False, False)
        with monkeypatch.context() as m:
            for name in ("async_load", "async_copy_global_to_shared"):
                m.delattr(async_copy, name, raising=False)
            assert state("3.6.0") == (False, False)
    finally:
        monkeypatch.undo()
        main.gluon_compiles.cache_clear()
        main.gluon_available.cache_clear()


def test_triton_kv_gathers_are_pipelined(b200_rows):
    """Under the pinned Triton every Triton attention launch gathers KV with cp.async (the
    pipeliner's stages), and the portability report says so: no warning about it."""
    from mla_prefill.portability import PIPELINED_GATHERS

    rows = [r for r in b200_rows if r["kernel"].split(":")[1] in PIPELINED_GATHERS]
    assert {r["kernel"].split(":")[1] for r in rows} == set(PIPELINED_GATHERS)
    for r in rows:
        assert r["num_stages"] >= 2 and r["ptx_counts"]["cp_async"] > 0, r["workload"]
        assert not any("pipelined" in w for w in r["warnings"]), r["warnings"]
