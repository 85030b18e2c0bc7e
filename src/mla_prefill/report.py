"""``mla-prefill report`` and ``mla-prefill compare``: tables (and plots) from traces.

No GPU needed. TFLOP/s come from the exact causal pair count of each workload's index blobs
(``flops.py``); ratios are taken only between traces measured on the same hardware, and every
table is grouped by hardware.
"""

import argparse
import datetime
import json
import os
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional

from mla_prefill.flops import MATMUL_CEILING_TFLOPS, bucket, flops, min_bytes
from mla_prefill.io import (
    find_root,
    is_trace_set,
    iter_workload_lines,
    load_index_tensors,
    load_workloads,
    sequence_lengths,
    small_set,
    traces_dir,
    workloads_path,
)

FLASHINFER_SOLUTION = "flashinfer_wrapper_plan_inside"
OURS = "mla_prefill_triton_hopper"
HBM_TBPS = 4.8  # H200 datasheet
BENCH_RESULTS = Path("benchmarks") / "results" / "h200.json"  # kernel to kernel, in a checkout
# what report's ratio is, and what it is not (bench's kernel-to-kernel ratio)
FI_COLUMN = "x FI+plan"
FI_NOTE = (
    f"{FI_COLUMN}: FlashInfer's wrapper with plan() inside every call (the upstream baseline) "
    "over ours, both as flashinfer-bench 0.1.2 times a call: CUDA events from an idle, "
    "synchronised GPU, so host time (Python, planning, launches) is included and dominates "
    "where kernels take tens of microseconds. It is not `mla-prefill bench`'s kernel-to-kernel "
    "ratio (FlashInfer planned outside the timed call, GPU-side time)."
)
NOT_COMPARABLE = (
    "Latencies are compared only within one hardware group: another GPU runs other code at "
    "another speed, and the leaderboard's latencies come from flashinfer-bench's CUPTI timing "
    "(kernel time only, cold L2) while 0.1.2's traces include host time."
)


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


def trace_set_above(path: Path) -> Optional[Path]:
    """The trace set a trace file or folder belongs to: the nearest folder above it that holds
    the definition."""
    for folder in (path.resolve(), *path.resolve().parents):
        if is_trace_set(folder):
            return folder
    return None


def workload_info(*roots: Path) -> Dict[str, dict]:
    """uuid -> total_q, batch, GFLOP (exact causal pairs), minimum bytes, over the workloads of
    every trace set given."""
    info = {}
    for root in roots:
        if root is None or not workloads_path(root).exists():
            continue
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


def info_for(paths: List[Path], default_root: Optional[Path] = None) -> Dict[str, dict]:
    """``workload_info`` of the trace sets the given trace paths belong to."""
    roots = {trace_set_above(p) for p in paths if p.exists()} | {default_root}
    return workload_info(*sorted((r for r in roots if r is not None), key=str))


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

    def order(kv):
        (uuid, sol, hw), t = kv
        return (hw, t["workload"].get("axes", {}).get("total_q", 0), uuid, sol)

    for (uuid, sol, hw), t in sorted(latest.items(), key=order):
        ev = t["evaluation"]
        perf = ev.get("performance") or {}
        lat = perf.get("latency_ms") if ev["status"] == "PASSED" else None
        wi = info.get(uuid, {})
        row = {
            "uuid": uuid,
            "solution": sol,
            "hardware": hw,
            "status": ev["status"],
            # the trace carries its workload's axes, so tokens are known without its trace set
            "total_q": wi.get("total_q", t["workload"].get("axes", {}).get("total_q")),
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


def _ratio(v) -> str:
    """A ratio with two significant digits at least (a 0.004x interpreter run is not 0.0)."""
    return "-" if not isinstance(v, (int, float)) else (f"{v:.2f}" if v >= 0.995 else f"{v:.2g}")


def render_table(rows: List[dict], markdown: bool) -> str:
    """One table per hardware: latency, TFLOP/s (>= 1000 tokens), share of the matmul ceiling,
    speedup over the definition's reference and over FlashInfer's wrapper (plan inside)."""
    head = ["workload", "tokens", "solution", "status", "latency ms", "TFLOP/s", "% of 790",
            "x ref", FI_COLUMN]  # fmt: skip
    groups: Dict[str, List[List[str]]] = defaultdict(list)
    for r in rows:
        big = (r["total_q"] or 0) >= 1000
        groups[r["hardware"]].append([
            r["uuid"][:8], str(r["total_q"]), r["solution"], r["status"],
            _fmt(r["latency_ms"], ".4f"),
            _fmt(r["tflops"], ".1f") if big else "-",
            _fmt(r["ceiling_pct"], ".0f") if big else "-",
            _ratio(r["ref_speedup"]), _ratio(r["vs_flashinfer"]),
        ])  # fmt: skip
    out = []
    for hw, body in groups.items():
        out.append(f"#### {hw}\n" if markdown else f"== {hw}")
        out += _table(head, body, markdown)
        out.append("")
    return "\n".join(out).rstrip()


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


def figures(rows: List[dict], info: Dict[str, dict]) -> Dict[str, object]:
    """The report's matplotlib figures by file name: latency.png, tflops.png, roofline.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = {}
    tokens = {r["uuid"]: r["total_q"] or 0 for r in rows}
    series = defaultdict(list)
    for r in rows:
        if r["latency_ms"]:
            series[f"{r['solution']} ({r['hardware']})"].append(r)
    order = sorted({r["uuid"] for r in rows if r["latency_ms"]}, key=lambda u: (tokens[u], u))
    pos = {u: i for i, u in enumerate(order)}
    for key, ylabel, fname, logy, title in (
        ("latency_ms", "latency (ms)", "latency.png", True,
         "Latency per workload, as flashinfer-bench times a call (host + GPU)"),
        ("tflops", "TFLOP/s", "tflops.png", False,
         "Throughput per workload (exact causal FLOPs / flashinfer-bench latency)"),
    ):  # fmt: skip
        fig, ax = plt.subplots(figsize=(12, 4.5))
        for name, rs in sorted(series.items()):
            rs = sorted((r for r in rs if r[key]), key=lambda r: pos[r["uuid"]])
            ax.plot(
                [pos[r["uuid"]] for r in rs], [r[key] for r in rs], marker="o", ms=3, label=name
            )
        ax.set_xticks(
            range(len(order)),
            [f"{u[:6]} ({tokens[u]})" for u in order],
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
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(ylabel)
        ax.set_xlabel("workload (total_q), by tokens")
        ax.legend(fontsize=8)
        fig.tight_layout()
        figs[fname] = fig
    fig, ax = plt.subplots(figsize=(7, 5))
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
    ax.set_title("Roofline: each workload at its arithmetic intensity", fontsize=10)
    ax.set_xlabel("arithmetic intensity (FLOP / minimum byte)")
    ax.set_ylabel("TFLOP/s")
    ax.legend(fontsize=8)
    fig.tight_layout()
    figs["roofline.png"] = fig
    return figs


def plot(rows: List[dict], info: Dict[str, dict], out_dir: Path) -> List[Path]:
    """The report's figures as PNGs under ``out_dir``."""
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for fname, fig in figures(rows, info).items():
        fig.savefig(out_dir / fname, dpi=110)
        plt.close(fig)
        paths.append(out_dir / fname)
    return paths


def add_report_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", default=None, help="trace set (default: the one at or above the "
                   "current directory, with its small/ set, where a CPU `run` writes)")  # fmt: skip
    p.add_argument(
        "--traces", nargs="*", default=None,
        help="trace files or folders (default: the traces/ of the trace set and of its small/)",
    )  # fmt: skip
    p.add_argument(
        "--markdown", action="store_true", help="print Markdown (the results document's format)"
    )
    p.add_argument("--plots", default=None, help="folder for latency/TFLOP/s/roofline PNGs")
    p.add_argument(
        "--output", default=None,
        help="write the whole results document here as Markdown (benchmarks/results/REPORT.md): "
        "the kernel-to-kernel bench, these traces and the plots' links",
    )  # fmt: skip


def default_trace_paths(root: Path) -> List[Path]:
    """Where `run` writes: the trace set's traces/, and its small/ set's (a CPU run)."""
    small = small_set(root)
    return [traces_dir(root)] + ([traces_dir(small)] if small else [])


def bench_section(path: Path, shown: str) -> List[str]:
    """Markdown of a `mla-prefill bench` result: how it was measured and one row per workload."""
    d = json.loads(path.read_text())
    s = d["summary"]
    kernel = f"`{d['kernel_sha256'][:8]}`" if d.get("kernel_sha256") else "hash not recorded"
    v = d.get("versions", {})
    lines = [
        "## Kernel to kernel (`mla-prefill bench`)",
        "",
        f"`{shown}`: {d['gpu']}, {d['date']}, `{d['command']}`; torch {v.get('torch')}, "
        f"triton {v.get('triton')}, flashinfer-python {v.get('flashinfer-python')}, kernel "
        f"{kernel}. FlashInfer's "
        "`BatchMLAPagedAttentionWrapper` planned outside the timed call; same inputs, cold L2, "
        "median GPU-side time with the stream held until every timed call is queued; every timed "
        "call re-checked on refilled inputs.",
        "",
        f"Geomean {s['geomean_speedup_vs_flashinfer']:.3f}x FlashInfer; GPU ms summed over the "
        f"workloads: ours {s['ours_gpu_ms_sum']:.3f}, FlashInfer {s['flashinfer_gpu_ms_sum']:.3f}; "
        f"all correct: {s['all_correct']}.",
        "",
        "| bucket | workloads | x FlashInfer, geomean (min - max) | wall of the solution's run, geomean | GPU ms, ours vs FI |",
        "|---|---|---|---|---|",
    ]
    for name, b in s.get("by_bucket", {}).items():
        lines.append(
            f"| {name} | {b['workloads']} | {b['geomean_speedup']:.2f}x ({b['min_speedup']:.2f}x - "
            f"{b['max_speedup']:.2f}x) | {b['geomean_wall_speedup']:.2f}x | "
            f"{b['ours_gpu_ms_sum']:.3f} vs {b['flashinfer_gpu_ms_sum']:.3f} |"
        )
    lines += [
        "",
        "GPU ms, TFLOP/s: kernel time of the solution's `run` (the serving plan's runs launch the "
        "same kernels unless a table kernel runs, which `plan` then runs once). Host us: host time "
        "per call with the GPU held and 40 calls queued (median of 7 rounds); `ours`: the "
        "solution's `run` (a repeated layout calls the launchers its first call bound), `plan`: "
        "`serving.MLAPrefillPlan.run` after one `plan`, FI: FlashInfer's "
        "`run` after its `plan`. Wall ms: synced, one call (`plan`'s path and FlashInfer's).",
        "",
        "| workload | tokens | seqs | ours GPU ms | FI GPU ms | x FI | ours TFLOP/s | host us: ours | plan | FI | wall ms: plan | FI |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for w in d["workloads"]:
        o, p, f = w.get("ours", {}), w.get("ours_plan", {}), w.get("flashinfer", {})
        lines.append(
            f"| {w['uuid'][:8]} | {w['total_q']} | {w['batch']} | {_fmt(o.get('gpu_ms'), '.4f')} | "
            f"{_fmt(f.get('gpu_ms'), '.4f')} | {_fmt(w.get('speedup_vs_flashinfer'), '.2f')} | "
            f"{_fmt(o.get('tflops'), '.1f')} | {_fmt(o.get('host_us'), '.1f')} | "
            f"{_fmt(p.get('host_us'), '.1f')} | {_fmt(f.get('host_us'), '.1f')} | "
            f"{_fmt(p.get('wall_ms'), '.4f')} | {_fmt(f.get('wall_ms'), '.4f')} |"
        )
    h = s.get("host")
    if h:
        lines += [
            "",
            f"Host time per call, geomean: ours {h['ours_host_us_geomean']} us, plan "
            f"{h['ours_plan_host_us_geomean']} us, FlashInfer {h['flashinfer_host_us_geomean']} "
            f"us. Against FlashInfer's `run` (geomean of the per-workload ratios, worst): ours "
            f"{h.get('ours_host_vs_flashinfer_geomean')}x ({h.get('ours_host_vs_flashinfer_max')}x), "
            f"plan {h.get('ours_plan_host_vs_flashinfer_geomean')}x "
            f"({h.get('ours_plan_host_vs_flashinfer_max')}x). Wall time of `plan`'s path on the "
            f"<= 100-token workloads: {h.get('ours_plan_wall_speedup_small_geomean')}x "
            "FlashInfer's (geomean).",
        ]
    return lines


def _shown(path: Path, root: Path) -> str:
    """``path`` relative to the trace set when it is inside it."""
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return str(path)


def cmd_report(args: argparse.Namespace) -> int:
    root = find_root(args.root)
    paths = [Path(p) for p in args.traces] if args.traces else default_trace_paths(root)
    traces = load_traces([p for p in paths if p.exists()])
    if not traces:
        print(f"no traces under {', '.join(map(str, paths))}; run `mla-prefill run` first")
        return 1
    info = info_for(paths, root)
    rows = build_rows(traces, info)
    markdown = args.markdown or args.output
    table = render_table(rows, markdown)
    notes = [("- " if markdown else "") + line for line in summary(rows)]
    notes += ["", FI_NOTE, "", "TFLOP/s from the exact causal pair count, shown for workloads "
              "of >= 1000 tokens; x ref: flashinfer-bench's speedup over the definition's "
              "reference where its latency was profiled ('-': not timed, see `run "
              "--reference-max-q`)."]  # fmt: skip
    plots = []
    if args.plots:
        try:
            plots = plot(rows, info, Path(args.plots))
        except ImportError:
            print("plots need matplotlib: pip install 'mla-prefill[report]'")
            return 1
    if args.output:
        out = Path(args.output)
        doc = ["# Results", "", f"Generated by `mla-prefill report --output {args.output}` on "
               f"{datetime.date.today().isoformat()} from the files it names.", ""]  # fmt: skip
        bench = root / BENCH_RESULTS
        if bench.exists():
            doc += bench_section(bench, _shown(bench, root)) + [""]
        doc += ["## As flashinfer-bench times a call (`mla-prefill run`)", "",
                f"Traces: {', '.join(f'`{_shown(p, root)}`' for p in paths if p.exists())}.", "",
                table, ""] + notes  # fmt: skip
        if plots:
            doc += ["", "## Plots", ""]
            doc += [
                f"![{p.stem}]({Path(os.path.relpath(p, out.parent)).as_posix()})" for p in plots
            ]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("\n".join(doc) + "\n")
        print(f"wrote {out}")
        return 0
    print(table)
    print()
    print("\n".join(notes))
    for p in plots:
        print(f"wrote {p}")
    return 0


# --- compare ----------------------------------------------------------------------------------


def leaderboard_dir(root: Path) -> Path:
    return root / "leaderboard"


def add_compare_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", default=None, help="trace set (default: the one at or above the "
                   "current directory)")  # fmt: skip
    p.add_argument(
        "--traces", nargs="*", default=None, help="our trace files or folders (default: traces/)"
    )
    p.add_argument(
        "--leaderboard",
        nargs="*",
        default=None,
        help="leaderboard JSONL files (default: leaderboard/ of the trace set)",
    )
    p.add_argument("--workload", nargs="*", default=None, help="uuid prefixes to show")
    p.add_argument("--markdown", action="store_true", help="print Markdown tables")


def is_flashinfer(solution: str) -> bool:
    return solution.startswith("flashinfer")


def compare_groups(traces: List[dict], info: Dict[str, dict]) -> Dict[str, dict]:
    """Per hardware: the latency of every solution per workload, FlashInfer's solution on that
    hardware, and each solution's ratio to it (FlashInfer's latency over the solution's: > 1 is
    faster) per workload and as a geomean over the workloads both have."""
    groups: Dict[str, dict] = {}
    for t in traces:
        if t["evaluation"]["status"] != "PASSED":
            continue
        lat = (t["evaluation"].get("performance") or {}).get("latency_ms")
        if not lat:
            continue
        g = groups.setdefault(_hw(t), {"latency": defaultdict(dict)})
        g["latency"][t["solution"]][t["workload"]["uuid"]] = lat  # later lines win
    for g in groups.values():
        fi = sorted(s for s in g["latency"] if is_flashinfer(s))
        g["flashinfer"] = fi[0] if fi else None
        g["ratios"] = {}
        if g["flashinfer"] is None:
            continue
        base = g["latency"][g["flashinfer"]]
        for sol, lats in g["latency"].items():
            if sol == g["flashinfer"]:
                continue
            per = {u: base[u] / lat for u, lat in lats.items() if u in base}
            if per:
                g["ratios"][sol] = {"per_workload": per,
                                    "geomean": statistics.geometric_mean(per.values())}  # fmt: skip
    return groups


def cmd_compare(args: argparse.Namespace) -> int:
    root = find_root(args.root)
    ours_paths = [Path(p) for p in args.traces] if args.traces else [traces_dir(root)]
    board_paths = (
        [Path(p) for p in args.leaderboard] if args.leaderboard else [leaderboard_dir(root)]
    )
    traces = load_traces(ours_paths) + load_traces(board_paths)
    info = info_for(ours_paths, root)
    groups = compare_groups(traces, info)
    if not groups:
        print("no passed traces with a latency to compare; run `mla-prefill run` first")
        return 1

    def tokens(u: str) -> int:
        return info.get(u, {}).get("total_q", 0)

    out = []
    for hw, g in sorted(groups.items()):
        fi = g["flashinfer"]
        sols = sorted(g["latency"], key=lambda s: (not is_flashinfer(s), s))
        uuids = sorted({u for lats in g["latency"].values() for u in lats}, key=tokens)
        if args.workload:
            uuids = [u for u in uuids if any(u.startswith(p) for p in args.workload)]
        out.append(("### " if args.markdown else "== ") + hw
                   + (f" (ratios: x {fi}, > 1 is faster)" if fi else " (no FlashInfer trace: no ratios)"))  # fmt: skip
        head = ["workload", "tokens"] + [f"{s} ms" for s in sols]
        head += [f"{s} x FI" for s in sols if s in g["ratios"]]
        body = []
        for u in uuids:
            row = [u[:8], str(tokens(u) or "?")]
            row += [_fmt(g["latency"][s].get(u), ".4f") for s in sols]
            row += [_ratio(g["ratios"][s]["per_workload"].get(u)) for s in sols if s in g["ratios"]]
            body.append(row)
        out += _table(head, body, args.markdown)
        for s, r in sorted(g["ratios"].items(), key=lambda kv: -kv[1]["geomean"]):
            out.append(f"{'- ' if args.markdown else '  '}{s}: {r['geomean']:.2f}x {fi} "
                       f"(geomean over {len(r['per_workload'])} workloads)")  # fmt: skip
        out.append("")
    out.append(NOT_COMPARABLE)
    out.append(
        "Leaderboard rows come from leaderboard/*.jsonl (one FlashInfer-Bench trace per line; "
        "adding an entry is adding a line)."
    )
    print("\n".join(out))
    return 0


def _table(head: List[str], body: List[List[str]], markdown: bool) -> List[str]:
    if markdown:
        return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + [
            "| " + " | ".join(r) + " |" for r in body
        ]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in [head] + body]
