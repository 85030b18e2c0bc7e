"""Where the Gluon kernel's cycles go, per warpgroup and per KV block (session 14).

Copies ``src/mla_prefill/kernel`` into a temporary package (as ``timeline.py`` does for the
Triton kernels) and adds ``%clock`` reads to both partitions of the warp-specialised kernel;
the shipped sources are not touched. Each program sums, over its KV blocks, the cycles spent

    softmax warpgroup: ready  waiting for the block's gather to land (mbarrier `ready`)
                       qk     issuing Q K^T and waiting for it
                       soft   online softmax, issuing its P V half, publishing P
                       pv     waiting for its P V, releasing the stage
    loader warpgroup:  empty  waiting for the stage to be released (mbarrier `empty`)
                       gather issuing the cp.async of the block and loading the next indices
                       pready waiting for P of the previous block (mbarrier `p_ready`)
                       pvlo   its P V half (issue and wait)

plus each partition's total, and stores them at its end. The softmax warpgroup also stamps
``%clock`` at its entry, when its first block's gather has landed, after its last block and at
its exit, with its ``%smid`` (the counter is per SM, so only stamps of one SM are compared):
per program a prologue, body and epilogue, and per SM the gap between one program's exit and
the next one's entry (``per_program``; session 15), i.e. what a persistent launch could hide.
The added waits repeat waits the code makes anyway (same barrier and phase), so they only split
the time. Printed: cycles per KV block of each phase, averaged over every block of every
program, the per-program times, and the event time of the call with and without the clock reads
(cold L2: a 256 MB write scrub before each call, as the bench).

    python -u benchmarks/experiments/gluon_phases.py OUT.json a06f2653 733a7bbe ...
    python benchmarks/experiments/gluon_phases.py --offline   # sm_90 compile, ptxas report

Written in sessions 14-15 and compiled offline (no spills; ``tests/test_gluon_compile.py`` keeps
its patches applying to the kernel sources); neither session could start a device machine, so its
numbers are still to be seen.
"""

import importlib
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from kernel_copy import patched_kernel_package  # noqa: E402  (sibling experiment script)

HELPERS = """

CLK_L = gl.constexpr(gl.BlockedLayout([1], [32], [4], [0]))


@gluon.jit
def _clk():
    d = gl.zeros([1], gl.int32, layout=CLK_L)
    return gl.inline_asm_elementwise("mov.u32 $0, %clock;", "=r,r", [d], dtype=gl.int32,
                                     is_pure=False, pack=1)


@gluon.jit
def _smid():
    d = gl.zeros([1], gl.int32, layout=CLK_L)
    return gl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [d], dtype=gl.int32,
                                     is_pure=False, pack=1)


@gluon.jit
def _put(dbg_ptr, k, v):
    pid = gl.program_id(0) * gl.num_programs(1) + gl.program_id(1)
    gl.store(dbg_ptr + pid * 16 + k + gl.arange(0, 1, layout=CLK_L), v)
"""


GLUON = [
    ("ROW_O = gl.constexpr(gl.SliceLayout(1, O_LAYOUT))\n",
     "ROW_O = gl.constexpr(gl.SliceLayout(1, O_LAYOUT))\n" + HELPERS),
    # loader partition
    ("    BLOCK_N: gl.constexpr, MIN_CHUNK: gl.constexpr, OFFS32: gl.constexpr,\n):",
     "    dbg_ptr, BLOCK_N: gl.constexpr, MIN_CHUNK: gl.constexpr, OFFS32: gl.constexpr,\n):"),
    ("    nfin = tok0 * 0  # sequences with a non-empty range so far: phase of `fin`\n",
     "    nfin = tok0 * 0  # sequences with a non-empty range so far: phase of `fin`\n"
     "    t_beg = _clk()\n    w_empty = t_beg * 0\n    c_gather = t_beg * 0\n"
     "    w_pready = t_beg * 0\n    c_pvlo = t_beg * 0\n"),
    ("                mbarrier.wait(empty.index(st), ((g // NUM_STAGES) + 1) & 1, "
     "pred=g >= NUM_STAGES)\n",
     "                T0 = _clk()\n"
     "                mbarrier.wait(empty.index(st), ((g // NUM_STAGES) + 1) & 1, "
     "pred=g >= NUM_STAGES)\n"
     "                T1 = _clk()\n                w_empty += T1 - T0\n"),
    ("                if k > 0:\n"
     "                    acc = _pv_lo(acc, g - 1, kv_lo, pe_bufs, alpha_s, p_ready)\n"
     "            acc = _pv_lo(acc, it + n - 1, kv_lo, pe_bufs, alpha_s, p_ready)\n",
     "                T2 = _clk()\n                c_gather += T2 - T1\n"
     "                if k > 0:\n"
     "                    mbarrier.wait(p_ready.index((g - 1) % NUM_STAGES), "
     "((g - 1) // NUM_STAGES) & 1)\n"
     "                    T3 = _clk()\n                    w_pready += T3 - T2\n"
     "                    acc = _pv_lo(acc, g - 1, kv_lo, pe_bufs, alpha_s, p_ready)\n"
     "                    c_pvlo += _clk() - T3\n"
     "            T2 = _clk()\n"
     "            mbarrier.wait(p_ready.index((it + n - 1) % NUM_STAGES), "
     "((it + n - 1) // NUM_STAGES) & 1)\n"
     "            T3 = _clk()\n            w_pready += T3 - T2\n"
     "            acc = _pv_lo(acc, it + n - 1, kv_lo, pe_bufs, alpha_s, p_ready)\n"
     "            c_pvlo += _clk() - T3\n"),
    ("        b, q_start, q_end, kv_start, kv_end = _next_seq(\n"
     "            qo_indptr_ptr, kv_indptr_ptr, b, q_end, kv_end, batch\n        )\n\n\n# ---",
     "        b, q_start, q_end, kv_start, kv_end = _next_seq(\n"
     "            qo_indptr_ptr, kv_indptr_ptr, b, q_end, kv_end, batch\n        )\n"
     "    _put(dbg_ptr, 8, w_empty)\n    _put(dbg_ptr, 9, c_gather)\n"
     "    _put(dbg_ptr, 10, w_pready)\n    _put(dbg_ptr, 11, c_pvlo)\n"
     "    _put(dbg_ptr, 12, _clk() - t_beg)\n\n\n# ---"),
    # softmax partition
    ("    BLOCK_N: gl.constexpr, MIN_CHUNK: gl.constexpr,\n):",
     "    dbg_ptr, BLOCK_N: gl.constexpr, MIN_CHUNK: gl.constexpr,\n):"),
    ("    tok0, tok_end = _tile_tokens(total_q, BLOCK_T)\n\n    # Q into shared memory once",
     "    g_entry = _clk()\n    tok0, tok_end = _tile_tokens(total_q, BLOCK_T)\n\n"
     "    # Q into shared memory once"),
    ("    it = tok0 * 0\n    while",
     "    it = tok0 * 0\n    t_beg = _clk()\n    w_ready = t_beg * 0\n    w_qk = t_beg * 0\n"
     "    c_soft = t_beg * 0\n    w_pv = t_beg * 0\n    nblk = t_beg * 0\n"
     "    g_first = t_beg * 0\n    g_last = t_beg * 0\n    while"),
    ("                s = warpgroup_mma_wait(\n"
     "                    0, deps=[_issue_qk(q_lo, q_hi, q_pe, kv_lo, kv_hi, pe_bufs, ready, g, "
     "s_layout)]\n                )\n",
     "                T0 = _clk()\n"
     "                mbarrier.wait(ready.index(st), (g // NUM_STAGES) & 1)\n"
     "                T1 = _clk()\n                w_ready += T1 - T0\n"
     "                g_first = gl.where(nblk == 0, _clk(), g_first)\n"
     "                s = warpgroup_mma_wait(\n"
     "                    0, deps=[_issue_qk(q_lo, q_hi, q_pe, kv_lo, kv_hi, pe_bufs, ready, g, "
     "s_layout)]\n                )\n"
     "                T2 = _clk()\n                w_qk += T2 - T1\n"),
    ("                _publish_p(p, alpha, g, pe_bufs, alpha_s, p_ready)\n"
     "                acc = warpgroup_mma_wait(0, deps=[acc])\n",
     "                _publish_p(p, alpha, g, pe_bufs, alpha_s, p_ready)\n"
     "                T3 = _clk()\n                c_soft += T3 - T2\n"
     "                acc = warpgroup_mma_wait(0, deps=[acc])\n"),
    ("                mbarrier.arrive(empty.index(st), count=1)  # block g is done with its stage\n",
     "                mbarrier.arrive(empty.index(st), count=1)  # block g is done with its stage\n"
     "                w_pv += _clk() - T3\n                nblk += 1\n"
     "                g_last = _clk()\n"),
    ("        b, q_start, q_end, kv_start, kv_end = _next_seq(\n"
     "            qo_indptr_ptr, kv_indptr_ptr, b, q_end, kv_end, batch\n        )\n\n\n@gluon",
     "        b, q_start, q_end, kv_start, kv_end = _next_seq(\n"
     "            qo_indptr_ptr, kv_indptr_ptr, b, q_end, kv_end, batch\n        )\n"
     "    _put(dbg_ptr, 0, w_ready)\n    _put(dbg_ptr, 1, w_qk)\n    _put(dbg_ptr, 2, c_soft)\n"
     "    _put(dbg_ptr, 3, w_pv)\n    _put(dbg_ptr, 4, _clk() - t_beg)\n"
     "    _put(dbg_ptr, 5, nblk)\n    _put(dbg_ptr, 6, g_entry)\n    _put(dbg_ptr, 7, _smid())\n"
     "    _put(dbg_ptr, 13, g_first)\n    _put(dbg_ptr, 14, g_last)\n"
     "    _put(dbg_ptr, 15, _clk())\n\n\n@gluon"),
    # kernel: the argument, passed to both partitions
    ("    total_q, batch, qk_scale,\n    NUM_HEADS: gl.constexpr, HEAD_CKV: gl.constexpr,",
     "    total_q, batch, qk_scale, dbg_ptr,\n    NUM_HEADS: gl.constexpr, HEAD_CKV: gl.constexpr,"),
    ("                NUM_HEADS, HEAD_KPE, BLOCK_T, BLOCK_N, MIN_CHUNK,\n",
     "                NUM_HEADS, HEAD_KPE, BLOCK_T, dbg_ptr, BLOCK_N, MIN_CHUNK,\n"),
    ("                NUM_HEADS, HEAD_KPE, BLOCK_T, BLOCK_N, MIN_CHUNK, OFFS32,\n",
     "                NUM_HEADS, HEAD_KPE, BLOCK_T, dbg_ptr, BLOCK_N, MIN_CHUNK, OFFS32,\n"),
]  # fmt: skip
MAIN = [
    ("        launch(_mla_prefill_ws_kernel, grid, args, consts, num_warps=4)\n",
     "        launch(_mla_prefill_ws_kernel, grid, (*args, _DBG[0]), consts, num_warps=4)\n"),
    ("LOG2E = 1.0 / math.log(2.0)\n", "LOG2E = 1.0 / math.log(2.0)\n_DBG = [None]\n"),
]  # fmt: skip
SOFTMAX = ("ready", "qk", "soft", "pv")
LOADER = ("empty", "gather", "pready", "pvlo")


def patch(text, subs, name):
    for old, new in subs:
        n = text.count(old)
        if n != 1:
            raise SystemExit(f"{name}: {n} matches for {old[:70]!r}")
        text = text.replace(old, new)
    return text


def instrumented():
    """A patched copy of the kernel package, importable as ``mla_ph``."""
    return patched_kernel_package("mla_ph", {"gluon_attention.py": GLUON, "main.py": MAIN}, patch)


def offline():
    """Compile the patched kernel for sm_90 (no GPU needed) and print ptxas' report."""
    import re

    from gluon_compile import compile_ws, ptxas_report

    instrumented()
    k = compile_ws(kernel=importlib.import_module("mla_ph.gluon_attention")._mla_prefill_ws_kernel)
    rc, report = ptxas_report(k)
    clocks = len(re.findall(r"%clock;", k.asm["ptx"]))
    print(json.dumps(dict(clock_reads=clocks, ptxas_rc=rc, ptxas=report)))


def per_program(rows):
    """Per-program times from the softmax warpgroup's ``%clock`` stamps (cycles; one counter
    per SM, so stamps are compared within an SM only): entry -> first block's gather landed
    (prologue: Q, indptrs, page indices, first gather), first -> last block done (body), last
    block -> exit (epilogue: stores), and the gap from one program's exit to the next one's entry
    on the same SM. ``hideable_share``: prologues, epilogues and gaps against the SMs' busy spans
    (first entry to last exit, summed over SMs), what a persistent launch could at most hide."""
    import torch

    half = 1 << 31  # stamps are the counter's low 32 bits; a call spans far fewer cycles
    parts = {"prologue": [], "body": [], "epilogue": [], "gap": []}
    span = 0
    sms = rows[:, 7].unique().tolist()
    for s in sms:
        r = rows[rows[:, 7] == s]
        entry, first, last, end = (
            (r[:, k] - int(r[0, 6]) + half) % (2 * half) - half for k in (6, 13, 14, 15)
        )
        order = entry.argsort()
        entry, first, last, end = entry[order], first[order], last[order], end[order]
        parts["prologue"] += (first - entry).tolist()
        parts["body"] += (last - first).tolist()
        parts["epilogue"] += (end - last).tolist()
        parts["gap"] += (entry[1:] - end[:-1]).tolist()
        span += int(end.max() - entry.min())
    hidden = sum(sum(parts[k]) for k in ("prologue", "epilogue", "gap"))
    res = {"programs": len(rows), "sms": len(sms), "busy_cycles": span}
    for k, v in parts.items():
        res[f"{k}_median_cycles"] = float(torch.tensor(v).float().median()) if v else None
    res["hideable_share"] = round(hidden / span, 3) if span else None
    return res


def main(path, uuids):
    import torch

    from mla_prefill.bench import make_inputs
    from mla_prefill.io import load_index_tensors, load_workloads, repo_root
    from mla_prefill.kernel import main as shipped

    instrumented()
    mod = importlib.import_module("mla_ph.main")
    root = repo_root()
    wls = load_workloads(root)
    scrub = torch.empty(64 << 20, dtype=torch.int32, device="cuda")
    report = {"gpu": torch.cuda.get_device_name(), "command": " ".join(sys.argv), "runs": []}
    for uuid in uuids:
        (wl,) = [w for w in wls if w.uuid.startswith(uuid)]
        inputs = make_inputs(wl.workload, load_index_tensors(root, wl.workload, None), "cuda", 0)
        out = torch.empty_like(inputs["q_nope"])
        lse = torch.empty(out.shape[:2], dtype=torch.float32, device="cuda")
        total_q = out.shape[0]
        dbg = torch.zeros((total_q * 4 + 64, 16), dtype=torch.int32, device="cuda")
        mod._DBG[0] = dbg
        batch = inputs["qo_indptr"].numel() - 1
        cfg = shipped.default_config(total_q, batch, inputs["kv_indices"].numel(), out.device)
        if cfg.kernel != "gluon":
            print(f"== {uuid}: default config {cfg} is not the Gluon kernel, skipped")
            continue

        def call(m):
            m.mla_paged_prefill(
                inputs["q_nope"], inputs["q_pe"], inputs["ckv_cache"], inputs["kpe_cache"],
                inputs["qo_indptr"], inputs["kv_indptr"], inputs["kv_indices"],
                float(inputs["sm_scale"]), out, lse,
            )  # fmt: skip

        times = {}
        for name, m in (("shipped", shipped), ("clocked", mod)):
            call(m)
            ts = []
            for _ in range(7):
                dbg.zero_()
                scrub.fill_(1)
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                call(m)
                e1.record()
                torch.cuda.synchronize()
                ts.append(e0.elapsed_time(e1) * 1e3)
            times[name] = statistics.median(ts)
        rows = dbg.cpu().to(torch.int64)
        rows = rows[rows[:, 5] > 0]
        blocks = int(rows[:, 5].sum())
        per_block = {
            f"softmax.{n}": float(rows[:, i].sum()) / blocks for i, n in enumerate(SOFTMAX)
        }
        per_block.update({f"loader.{n}": float(rows[:, 8 + i].sum()) / blocks
                          for i, n in enumerate(LOADER)})  # fmt: skip
        per_block["softmax.total"] = float(rows[:, 4].sum()) / blocks
        per_block["loader.total"] = float(rows[:, 12].sum()) / blocks
        run = {"uuid": wl.uuid, "config": str(cfg), "programs_with_blocks": len(rows),
               "kv_blocks": blocks, "event_us": times, "cycles_per_block": per_block,
               "per_program_cycles": per_program(rows)}  # fmt: skip
        report["runs"].append(run)
        print(f"== {uuid}: {len(rows)} programs, {blocks} KV blocks; event us shipped "
              f"{times['shipped']:.1f}, clocked {times['clocked']:.1f}")  # fmt: skip
        for k, v in per_block.items():
            print(f"   {k:16s} {v:8.0f} cycles / block")
        for k, v in run["per_program_cycles"].items():
            print(f"   {k:16s} {v}")
    Path(path).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    if sys.argv[1:] == ["--offline"]:
        offline()
    else:
        main(sys.argv[1], sys.argv[2:])
