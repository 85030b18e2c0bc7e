"""The Gluon kernel runs only on a Hopper GPU, but it compiles for sm_90 on any machine: CI
catches a kernel that no longer compiles, spills registers, or outgrows shared memory.

Compiled in a subprocess without ``TRITON_INTERPRET`` (the CPU tests set it, and under the
interpreter Gluon functions cannot be compiled)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "benchmarks" / "experiments" / "gluon_compile.py"
PHASES = ROOT / "benchmarks" / "experiments" / "gluon_phases.py"
SM90_MAX_SHARED = 227 * 1024  # opt-in shared memory per block on sm_90


def compile_tool(*args):
    """The last line of a compile tool's output, as JSON."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, env=env,
                       timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def assert_no_spills(out):
    assert out["ptxas_rc"] == 0, out["ptxas"]
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", out["ptxas"])
    assert m, out["ptxas"]
    assert (int(m.group(1)), int(m.group(2))) == (0, 0), out["ptxas"]


@pytest.mark.parametrize("split", [False, True], ids=["no_split", "split"])
def test_gluon_kernel_compiles_for_hopper_without_spills(split):
    out = compile_tool(TOOL, "64", "--json", *(["--split"] if split else []))
    assert 0 < out["shared"] <= SM90_MAX_SHARED, out["shared"]
    assert out["wgmma"]
    # the output of a launch without split leaves through shared memory in 16-byte row pieces
    # (st.global.v4): the MMA layout's 4-byte stores cost 892d1b8f 17% (benchmarks/NOTES.md)
    if not split:
        assert out["st_global_v4"] > 0, "the staged output store is gone"
    assert_no_spills(out)


def test_phase_timer_patches_still_apply_and_do_not_spill():
    """benchmarks/experiments/gluon_phases.py patches clock reads into a copy of the kernel by
    exact text: a kernel edit that moves its anchors fails here, not on the GPU."""
    out = compile_tool(PHASES, "--offline")
    # every phase of both warpgroups, and the softmax warpgroup's four per-program stamps
    assert out["clock_reads"] >= 16, out["clock_reads"]
    assert_no_spills(out)


@pytest.mark.parametrize(
    "base", [2**32 - 500, 2**31 - 3000, 12345], ids=["wrap32", "wrap31", "no_wrap"]
)
def test_phase_timer_per_program_times_on_synthetic_stamps(base):
    """gluon_phases.per_program: stamps are the low 32 bits of a per-SM cycle counter, read back
    as int32; two SMs whose counters differ, two programs each, across both wraps."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("gluon_phases", PHASES)
    phases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(phases)
    # (sm, entry, first gather landed, last block done, exit), in the SM's own cycles
    programs = [(0, 5700, 6700, 9000, 9400), (0, 0, 1000, 5000, 5500),
                (1, 0, 1200, 8000, 8300), (1, 8500, 9000, 9100, 9300)]  # fmt: skip
    rows = torch.zeros(len(programs), 16, dtype=torch.int64)
    for i, (sm, *stamps) in enumerate(programs):
        for col, v in zip((6, 13, 14, 15), stamps):
            rows[i, col] = (base + 777_777 * sm + v) % 2**32
        rows[i, 7], rows[i, 5] = sm, 1
    res = phases.per_program(rows.to(torch.int32).to(torch.int64))
    assert res["sms"] == 2 and res["busy_cycles"] == 9400 + 9300
    # prologues 1000, 1000, 1200, 500; epilogues 500, 400, 300, 200; gaps 200, 200
    assert res["prologue_median_cycles"] == 1000 and res["gap_median_cycles"] == 200
    assert res["epilogue_median_cycles"] == 300
    assert res["hideable_share"] == round((3700 + 1400 + 400) / 18700, 3)
