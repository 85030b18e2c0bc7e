"""Side-by-side view of several `mla-prefill bench` JSON files (source variants, repeated runs):
per workload our GPU time in us and the ratio to FlashInfer *of that run*, then how many
workloads of each bucket meet the kernel issue's bar in each file.

    python benchmarks/experiments/compare_bench.py benchmarks/experiments/session7/call3-*.json
    python benchmarks/experiments/compare_bench.py A.json B.json --max-tokens 200

Files are ordered by their `date`; the column name is the file's stem. Ratios, never absolute
times, compare across runs: FlashInfer's own time moves by ~0.3-0.5 us between runs.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../src"))
from mla_prefill.bench import TARGETS, by_bucket  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+")
    p.add_argument("--max-tokens", type=int, default=None, help="only workloads up to this size")
    args = p.parse_args(argv)
    runs = []
    for f in args.files:
        d = json.load(open(f))
        if "workloads" in d:
            runs.append((d.get("date", ""), os.path.splitext(os.path.basename(f))[0], d))
    runs.sort(key=lambda r: r[0])
    rows = {w["uuid"]: w["total_q"] for _, _, d in runs for w in d["workloads"]}
    width = max(12, *(len(name) for _, name, _ in runs))
    print(f"{'workload':8} {'tokens':>6} " + " ".join(f"{n:>{width}}" for _, n, _ in runs))
    for uuid, tokens in sorted(rows.items(), key=lambda kv: kv[1]):
        if args.max_tokens is not None and tokens > args.max_tokens:
            continue
        cells = []
        for _, _, d in runs:
            w = next((w for w in d["workloads"] if w["uuid"] == uuid), None)
            cell = "-"
            if w is not None:
                cell = f"{w['ours']['gpu_ms'] * 1e3:.1f}us {w['speedup_vs_flashinfer']:.2f}x"
                if not w["ours"].get("correct", True):
                    cell += " WRONG"
            cells.append(f"{cell:>{width}}")
        print(f"{uuid[:8]} {tokens:6d} " + " ".join(cells))
    for name, bar in TARGETS.items():
        counts = []
        for _, _, d in runs:
            b = by_bucket(d["workloads"]).get(name)
            counts.append(f"{b['meeting_target']} of {b['workloads']}" if b else "-")
        print(f"{name} at >= {bar}x: " + ", ".join(counts))


if __name__ == "__main__":
    main()
