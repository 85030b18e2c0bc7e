"""``mla-prefill report`` and ``mla-prefill compare``: tables (and plots) from committed traces.

No GPU needed. TFLOP/s come from the exact causal pair count of each workload's index blobs
(``flops.py``); ratios are taken only between traces measured on the same hardware.
"""

import argparse
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Dict, List

from mla_prefill.flops import MATMUL_CEILING_TFLOPS, bucket, flops, min_bytes
from mla_prefill.io import (
    iter_workload_lines,
    load_index_tensors,
    load_workloads,
    repo_root,
    sequence_lengths,
    traces_dir,
)

FLASHINFER_SOLUTION = "flashinfer_wrapper_plan_inside"
OURS = "mla_prefill_triton_hopper"
HBM_TBPS = 4.8  # H200 datasheet; 4.3 TB/s measured copy bandwidth on this workplace's H200


def load_traces(paths: List[Path]) -> List[dict]:
    """Every trace with an evaluation from ``*.jsonl`` files or folders of them."""
    out = []
    for p in paths:
        if not p.exists():
            continue
        files = sorted(p.rglob("*.jsonl")) if p.is_dir() else [p]
        for f in files:
            for wl in iter_workload_lines(f):
                if wl.record.get("evaluation"):
                    out.append(wl.record)
    return out


def workload_info(root: Path) -> Dict[str, dict]:
    """uuid -> total_q, batch, GFLOP (exact causal pairs), minimum bytes."""
    info = {}
    for wl in load_workloads(root):
        w = wl.workload
        try:
            idx = load_index_tensors(root, w)
        except FileNotFoundError:
            continue
        lengths = sequence_lengths(idx["qo_indptr"], idx["kv_indptr"])
        info[w["uuid"]] = {
            "total_q": w["axes"]["total_q"],
            "batch": len(lengths),
            "gflop": flops(lengths) / 1e9,
            "mbytes": min_bytes(w["axes"]["total_q"], w["axes"]["num_kv_indices"]) / 1e6,
        }
    return info


def _hw(trace: dict) -> str:
    return trace["evaluation"]["environment"]["hardware"]


def build_rows(traces: List[dict], info: Dict[str, dict]) -> List[dict]:
    """One row per (workload, solution, hardware): latency, TFLOP/s, ceiling share, speedups."""
    latest: Dict[tuple, dict] = {}
    for t in traces:
        latest[(t["workload"]["uuid"], t["solution"], _hw(t))] = t  # later lines win
    fi = {
        (u, hw): t
        for (u, s, hw), t in latest.items()
        if s == FLASHINFER_SOLUTION and t["evaluation"]["status"] == "PASSED"
    }
    rows = []
    for (uuid, sol, hw), t in sorted(
        latest.items(), key=lambda kv: (info.get(kv[0][0], {}).get("total_q", 0), kv[0])
    ):
        ev = t["evaluation"]
        perf = ev.get("performance") or {}
        lat = perf.get("latency_ms") if ev["status"] == "PASSED" else None
        wi = info.get(uuid, {})
        row = {
            "uuid": uuid,
            "solution": sol,
            "hardware": hw,
            "status": ev["status"],
            "total_q": wi.get("total_q"),
            "latency_ms": lat,
            "tflops": wi["gflop"] / lat if lat and wi else None,
            "ref_speedup": perf.get("speedup_factor")
            if lat and perf.get("reference_latency_ms")
            else None,
            "vs_flashinfer": None,
        }
        row["ceiling_pct"] = 100 * row["tflops"] / MATMUL_CEILING_TFLOPS if row["tflops"] else None
        f = fi.get((uuid, hw))
        if lat and f is not None:
            row["vs_flashinfer"] = f["evaluation"]["performance"]["latency_ms"] / lat
        rows.append(row)
    return rows


def _fmt(v, spec: str) -> str:
    return format(v, spec) if isinstance(v, (int, float)) else "-"


def render_table(rows: List[dict], markdown: bool) -> str:
    head = [
        "workload",
        "tokens",
        "solution",
        "hardware",
        "status",
        "latency ms",
        "TFLOP/s",
        "% of 790",
        "x ref",
        "x FlashInfer",
    ]
    body = [
        [
            r["uuid"][:8], str(r["total_q"]), r["solution"], r["hardware"], r["status"],
            _fmt(r["latency_ms"], ".4f"),
            _fmt(r["tflops"], ".1f") if (r["total_q"] or 0) >= 1000 else "-",
            _fmt(r["ceiling_pct"], ".0f") if (r["total_q"] or 0) >= 1000 else "-",
            _fmt(r["ref_speedup"], ".1f"), _fmt(r["vs_flashinfer"], ".2f"),
        ]
        for r in rows
    ]  # fmt: skip
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r) + " |" for r in body]
        return "\n".join(lines)
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in [head] + body)


def summary(rows: List[dict]) -> List[str]:
    """Geometric-mean speedup over FlashInfer per solution, hardware and token bucket."""
    groups = defaultdict(list)
    for r in rows:
        if r["vs_flashinfer"] and r["solution"] != FLASHINFER_SOLUTION:
            groups[(r["solution"], r["hardware"], bucket(r["total_q"] or 0))].append(
                r["vs_flashinfer"]
            )
    out = []
    for (sol, hw, b), vals in sorted(groups.items()):
        out.append(
            f"{sol} on {hw}, {b}: {statistics.geometric_mean(vals):.2f}x FlashInfer (geomean of {len(vals)})"
        )
    return out


def plot(rows: List[dict], info: Dict[str, dict], out_dir: Path) -> List[Path]:
    """latency.png, tflops.png, roofline.png under ``out_dir``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    series = defaultdict(list)
    for r in rows:
        if r["latency_ms"]:
            series[f"{r['solution']} ({r['hardware']})"].append(r)
    order = sorted(
        {r["uuid"] for r in rows if r["latency_ms"]},
        key=lambda u: info.get(u, {}).get("total_q", 0),
    )
    pos = {u: i for i, u in enumerate(order)}
    paths = []
    for key, ylabel, fname, logy in (
        ("latency_ms", "latency (ms)", "latency.png", True),
        ("tflops", "TFLOP/s", "tflops.png", False),
    ):
        fig, ax = plt.subplots(figsize=(12, 4.5))
        for name, rs in sorted(series.items()):
            rs = sorted(rs, key=lambda r: pos[r["uuid"]])
            ax.plot(
                [pos[r["uuid"]] for r in rs], [r[key] for r in rs], marker="o", ms=3, label=name
            )
        ax.set_xticks(
            range(len(order)),
            [f"{u[:6]} ({info.get(u, {}).get('total_q', '?')})" for u in order],
            rotation=90,
            fontsize=7,
        )
        if logy:
            ax.set_yscale("log")
        if key == "tflops":
            ax.axhline(
                MATMUL_CEILING_TFLOPS,
                color="grey",
                ls="--",
                lw=1,
                label="bf16 matmul ceiling (790)",
            )
        ax.set_ylabel(ylabel)
        ax.set_xlabel("workload (total_q), by tokens")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / fname, dpi=110)
        plt.close(fig)
        paths.append(out_dir / fname)
    fig, ax = plt.subplots(figsize=(7, 5))
    xs = [0.1, 10000]
    ax.plot(xs, [min(MATMUL_CEILING_TFLOPS, x * HBM_TBPS) for x in xs], color="grey", lw=1)
    grid = [10 ** (i / 10) for i in range(-10, 41)]
    ax.plot(
        grid,
        [min(MATMUL_CEILING_TFLOPS, x * HBM_TBPS) for x in grid],
        color="grey",
        lw=1,
        label="roofline (790 TFLOP/s, 4.8 TB/s)",
    )
    for name, rs in sorted(series.items()):
        pts = [
            (info[r["uuid"]]["gflop"] * 1e3 / info[r["uuid"]]["mbytes"], r["tflops"])
            for r in rs
            if r["uuid"] in info and r["tflops"]
        ]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=12, label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / minimum byte)")
    ax.set_ylabel("TFLOP/s")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "roofline.png", dpi=110)
    plt.close(fig)
    paths.append(out_dir / "roofline.png")
    return paths


def add_report_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--traces", nargs="*", default=None, help="trace files or folders (default: traces/)"
    )
    p.add_argument(
        "--markdown", action="store_true", help="print a Markdown table (the README embeds it)"
    )
    p.add_argument("--plots", default=None, help="folder for latency/TFLOP/s/roofline PNGs")


def cmd_report(args: argparse.Namespace) -> int:
    root = repo_root()
    paths = [Path(p) for p in args.traces] if args.traces else [traces_dir(root)]
    traces = load_traces([p for p in paths if p.exists()])
    if not traces:
        print(f"no traces under {', '.join(map(str, paths))}; run `mla-prefill run` first")
        return 1
    info = workload_info(root)
    rows = build_rows(traces, info)
    print(render_table(rows, args.markdown))
    print()
    for line in summary(rows):
        print(("- " if args.markdown else "") + line)
    print(
        ("\n" if args.markdown else "")
        + "x FI wrapper: speedup over the FlashInfer wrapper solution as flashinfer-bench times it "
        "(plan() inside every call, as the upstream baseline; host overhead included). "
        "flashinfer-bench times each call from a synchronised, idle GPU, so latency ms is the "
        "call's host time plus its GPU time: where kernels take tens of microseconds it is mostly "
        "host time (Python, planning, launches). The "
        "kernel-to-kernel comparison, plan outside the timed call, is `mla-prefill bench` "
        "(benchmarks/h200.json). "
        "TFLOP/s from the exact causal pair count, shown for workloads of >= 1000 tokens (below, "
        "launch and latency dominate); x ref is flashinfer-bench's speedup over the definition's "
        "reference where its latency was profiled ('-': not timed, see `run --reference-max-q`)."
    )
    if args.plots:
        try:
            for p in plot(rows, info, Path(args.plots)):
                print(f"wrote {p}")
        except ImportError:
            print("plots need matplotlib: pip install 'mla-prefill[report]'")
            return 1
    return 0


# --- compare ----------------------------------------------------------------------------------


def leaderboard_dir(root: Path) -> Path:
    return root / "leaderboard"


def add_compare_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--traces", nargs="*", default=None, help="our trace files or folders (default: traces/)"
    )
    p.add_argument(
        "--leaderboard",
        nargs="*",
        default=None,
        help="leaderboard JSONL files (default: leaderboard/)",
    )
    p.add_argument("--workload", nargs="*", default=None, help="uuid prefixes")
    p.add_argument("--markdown", action="store_true")


def cmd_compare(args: argparse.Namespace) -> int:
    root = repo_root()
    ours = load_traces([Path(p) for p in args.traces] if args.traces else [traces_dir(root)])
    board = load_traces(
        [Path(p) for p in args.leaderboard] if args.leaderboard else [leaderboard_dir(root)]
    )
    info = workload_info(root)
    by_uuid = defaultdict(list)
    for t in ours:
        if t["evaluation"]["status"] == "PASSED":
            by_uuid[t["workload"]["uuid"]].append(("ours", t))
    for t in board:
        by_uuid[t["workload"]["uuid"]].append(("leaderboard", t))
    uuids = sorted(by_uuid, key=lambda u: info.get(u, {}).get("total_q", 0))
    if args.workload:
        uuids = [u for u in uuids if any(u.startswith(p) for p in args.workload)]
    head = [
        "workload",
        "tokens",
        "source",
        "solution",
        "hardware",
        "latency ms",
        f"ratio vs {OURS}",
    ]
    body = []
    for u in uuids:
        entries = by_uuid[u]
        mine = {_hw(t): t for src, t in entries if src == "ours" and t["solution"] == OURS}
        for src, t in entries:
            lat = (t["evaluation"].get("performance") or {}).get("latency_ms")
            hw = _hw(t)
            if src == "ours" and t["solution"] == OURS:
                ratio = "(this)"
            elif hw in mine and lat:
                ratio = (
                    f"{lat / mine[hw]['evaluation']['performance']['latency_ms']:.2f}x our latency"
                )
            else:
                ratio = f"n/a: {hw} vs {', '.join(sorted(mine)) or 'no trace of ours'}"
            body.append(
                [
                    u[:8],
                    str(info.get(u, {}).get("total_q", "?")),
                    src,
                    t["solution"],
                    hw,
                    _fmt(lat, ".4f"),
                    ratio,
                ]
            )
    if args.markdown:
        print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
        print("\n".join("| " + " | ".join(r) + " |" for r in body))
    else:
        widths = (
            [max(len(x) for x in col) for col in zip(head, *body)]
            if body
            else [len(h) for h in head]
        )
        for r in [head] + body:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    print(
        "\nRatios only between the same hardware; other rows say n/a. Leaderboard rows come from "
        "leaderboard/*.jsonl (one FlashInfer-Bench trace per line; adding an entry is adding a line)."
    )
    return 0
