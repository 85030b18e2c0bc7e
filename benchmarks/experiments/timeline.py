"""Per-program timeline of one call (session 11): where a tiny or decode workload's microseconds go.

Copies ``src/mla_prefill/kernel`` into a temporary package and patches timer records into the
pooled split kernel, the main kernel and the combine (``%globaltimer`` ns and ``%clock64`` at
fixed points, each made to wait for a value computed just before it, plus ``%smid``). The
shipped sources are not touched. Each record point:

    split/main: 0 start, 1 range known (indptr chain and sizes), 2 first page indices in
                registers, 3 KV loop done, 4 partial/output stored (issued)
    combine:    0 start, 1 past gdc_wait, 2 stored (issued)

Each call follows a 256 MB write scrub (cold L2, as ``mla-prefill bench``; ``SCRUB=read`` reads
it back first, leaving clean lines), 9 times; the repetition with the median event time is printed
as (min, median, max over programs) and saved. Events include host time here (no spin ahead).

    python -u benchmarks/experiments/timeline.py OUT.json ed999c80:default 9265de63:default
"""

import importlib
import json
import os
import re
import statistics
import sys
from pathlib import Path

import torch

from mla_prefill.bench import make_inputs, parse_configs
from mla_prefill.io import load_index_tensors, load_workloads, repo_root

sys.path.insert(0, str(Path(__file__).parent))
from kernel_copy import patched_kernel_package  # noqa: E402  (sibling experiment script)

HELPERS = """

@triton.jit
def _rec(dbg, k, dep):
    d = (tl.zeros([1], tl.int32) + dep).to(tl.int32)
    g = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [d], dtype=tl.int64,
                                  is_pure=False, pack=1)
    c = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l,r", [d], dtype=tl.int64,
                                  is_pure=False, pack=1)
    o = tl.arange(0, 1)
    tl.store(dbg + 2 * k + o, g)
    tl.store(dbg + 2 * k + 1 + o, c)


@triton.jit
def _smid(dbg):
    d = tl.zeros([1], tl.int32)
    s = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [d], dtype=tl.int32,
                                  is_pure=False, pack=1)
    tl.store(dbg + 15 + tl.arange(0, 1), s.to(tl.int64))

"""

# (pattern, replacement) applied once each to attention.py; every pattern must match exactly once
ATTENTION = [
    (r"(def is_interpreter\(\) -> bool:\n.*?\n.*?\n)", r"\1" + HELPERS.replace("\\", "\\\\")),
    # pooled split kernel
    (r"(    num_pieces,\n)", r"\1    dbg_ptr,\n"),
    (
        r"(    q = tl.program_id\(0\)\n)",
        r"\1    dbg = dbg_ptr + q * 16\n    _rec(dbg, 0, q)\n    _smid(dbg)\n",
    ),
    (r"(    chunk = tl.maximum\(chunk, MIN_CHUNK\).*\n)", r"\1    _rec(dbg, 1, chunk)\n"),
    (
        r"(INTERPRET,\n        \)  # fmt: skip\n)(        acc = tl.zeros\(\[NUM_HEADS)",
        r"\1        _rec(dbg, 2, tl.max(pages, 0))\n\2",
    ),
    (
        r"(            lo, hi, hi, causal_lim, qk_scale,\n.*\n        \)  # fmt: skip\n)",
        r"\1        _rec(dbg, 3, tl.sum(l_i, 0).to(tl.int32))\n",
    ),
    (r"(        tl.store\(part_lse_ptr \+ slot, .*\n)", r"\1        _rec(dbg, 4, q)\n"),
    # main kernel
    (r"(    num_kv_indices,\n)", r"\1    dbg_ptr,\n"),
    (
        r"(    tok_end = tl.minimum\(tok0 \+ BLOCK_T, total_q\)\n)",
        r"\1    dbg = dbg_ptr + (tl.program_id(0) * tl.num_programs(1) + split) * 16\n"
        r"    _rec(dbg, 0, tile)\n    _smid(dbg)\n",
    ),
    (r"(        prefix = kv_len - \(q_end - q_start\)\n)", r"\1        _rec(dbg, 1, prefix)\n"),
    (
        r"(        if ONE_TOKEN:\n            mid_n = lo\n)",
        r"        _rec(dbg, 2, tl.max(pages, 0))\n\1",
    ),
    (
        r"(            mid_n, hi, hi, causal_lim, qk_scale,\n.*\n        \)  # fmt: skip\n)",
        r"\1        _rec(dbg, 3, tl.sum(l_i, 0).to(tl.int32))\n",
    ),
    (r"(        tl.store\(l_ptrs, lse, mask=in_seq\)\n)", r"\1        _rec(dbg, 4, b)\n"),
    # combine
    (
        r"(    stride_l_h,\n)(    NUM_HEADS: tl.constexpr,\n    HEAD_CKV: tl.constexpr,\n    BLOCK_D)",
        r"\1    dbg_ptr,\n\2",
    ),
    (
        r"(    if USE_PDL:\n        gdc_wait\(\).*\n)",
        r"    dbg = dbg_ptr + (tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)) * 16\n"
        r"    _rec(dbg, 0, 0)\n    _smid(dbg)\n\1    _rec(dbg, 1, 0)\n",
    ),
    (
        r"(        tl.store\(lse_ptr \+ tok \* stride_l_t \+ head \* stride_l_h, lse\)\n)\Z",
        r"\1    _rec(dbg, 2, 0)\n",
    ),
]
MAIN = [
    (r"(LOG2E = .*\n)", r"\1_DBG = [None, None]\n"),
    (r"(total_q, batch, scale \* LOG2E, num_pieces)\)", r"\1, _DBG[0])"),
    (r"\(\*args, num_kv\)", r"(*args, num_kv, _DBG[0])"),
    (
        r"(so\[0\], so\[1\], sl\[0\], sl\[1\])\)",
        r"\1, _DBG[1])",
    ),
]


def patch(text, subs, name):
    for pat, rep in subs:
        text, n = re.subn(pat, rep, text, count=0, flags=re.S if pat.startswith("(def") else 0)
        if n != 1:
            raise SystemExit(f"{name}: pattern matched {n} times: {pat}")
    return text


def instrumented():
    """Import a patched copy of the kernel package (as ``mla_tl``)."""
    patched_kernel_package("mla_tl", {"attention.py": ATTENTION, "main.py": MAIN}, patch)
    return importlib.import_module("mla_tl.main")


def summarize(dbg, n_points, t_ref, clock_ghz):
    """Per program: start offset (us from t_ref), phase durations (us, from clock64), end."""
    rows = [r for r in dbg.tolist() if r[0] != 0]
    out = {"programs": len(rows), "sms": len({r[15] for r in rows})}
    starts = [(r[0] - t_ref) / 1e3 for r in rows]
    out["start_us"] = starts
    for k in range(1, n_points):
        out[f"phase{k}_us"] = [
            (r[2 * k + 1] - r[2 * k - 1]) / clock_ghz / 1e3 if r[2 * k] else None for r in rows
        ]
    ends = [(max(r[2 * k] for k in range(n_points) if r[2 * k]) - t_ref) / 1e3 for r in rows]
    out["end_us"] = ends
    return out


def stats(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    return f"{min(xs):6.2f} {statistics.median(xs):6.2f} {max(xs):6.2f} (n={len(xs)})"


def main(path, specs):
    mod = instrumented()
    root = repo_root()
    wls = load_workloads(root)
    scrub = torch.empty(64 << 20, dtype=torch.int32, device="cuda")
    report = {"gpu": torch.cuda.get_device_name(), "command": " ".join(sys.argv), "runs": []}
    for spec in specs:
        uuid, cfg = spec.split(":")
        (wl,) = [w for w in wls if w.uuid.startswith(uuid)]
        inputs = make_inputs(wl.workload, load_index_tensors(root, wl.workload, None), "cuda", 0)
        config = None if cfg == "default" else parse_configs(cfg)[0]
        out = torch.empty_like(inputs["q_nope"])
        lse = torch.empty(out.shape[:2], dtype=torch.float32, device="cuda")
        dbg = [torch.zeros((8192, 16), dtype=torch.int64, device="cuda") for _ in range(2)]
        mod._DBG[:] = dbg

        def call():
            mod.mla_paged_prefill(
                inputs["q_nope"], inputs["q_pe"], inputs["ckv_cache"], inputs["kpe_cache"],
                inputs["qo_indptr"], inputs["kv_indptr"], inputs["kv_indices"],
                float(inputs["sm_scale"]), out, lse, config=config,
            )  # fmt: skip

        call()
        torch.cuda.synchronize()
        reps = []
        for _ in range(9):
            for d in dbg:
                d.zero_()
            scrub.fill_(1)
            if os.environ.get("SCRUB") == "read":  # leave L2 full of clean lines instead
                scrub.sum()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            call()
            e1.record()
            torch.cuda.synchronize()
            a, c = dbg[0].cpu(), dbg[1].cpu()
            live = a[a[:, 0] != 0]
            t_ref = int(live[:, 0].min())
            done = live[live[:, 8] != 0]
            ghz = float(((done[:, 9] - done[:, 1]) / (done[:, 8] - done[:, 0])).median())
            rep = {"event_us": e0.elapsed_time(e1) * 1e3, "clock_ghz": ghz,
                   "split": summarize(a, 5, t_ref, ghz)}  # fmt: skip
            if (c[:, 0] != 0).any():
                rep["combine"] = summarize(c, 3, t_ref, ghz)
            reps.append(rep)
        reps.sort(key=lambda r: r["event_us"])
        med = reps[len(reps) // 2]
        print(f"== {spec}: events {[round(r['event_us'], 1) for r in reps]} us, "
              f"clock {med['clock_ghz']:.2f} GHz (median rep below: min med max over programs)")  # fmt: skip
        for kern in ("split", "combine"):
            if kern not in med:
                continue
            s = med[kern]
            print(f"  {kern}: {s['programs']} programs on {s['sms']} SMs")
            for key in [k for k in s if k.endswith("_us")]:
                print(f"    {key:10s} {stats(s[key])}")
        report["runs"].append(
            {"spec": spec, "event_us_all": [round(r["event_us"], 1) for r in reps],
             "median_rep": med}
        )  # fmt: skip
    Path(path).write_text(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
