"""``mla-prefill export``: a FlashInfer-Bench submission bundle, validated by loading it back.

Layout (the upstream dataset's): ``definitions/mla_paged/<def>.json``,
``solutions/mla_paged/<def>/<solution>.json``, ``traces/mla_paged/<def>.jsonl`` (the solution's
traces), ``workloads/mla_paged/<def>.jsonl`` (the traced workloads, blob paths unchanged) and the
blob files those workloads name. The bundle is a trace set of its own: ``mla-prefill check
--root BUNDLE`` validates it and ``mla-prefill run --root BUNDLE`` replays it.
"""

import argparse
import json
import shutil
from pathlib import Path

from mla_prefill.io import (
    DEFINITION_NAME,
    OP_TYPE,
    definition_path,
    find_root,
    is_trace_set,
    load_workloads,
    traces_dir,
    workloads_path,
)
from mla_prefill.pack import SOLUTION_NAME, solution_path, stale_sources
from mla_prefill.replay import read_traces, trace_file


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("output", help="folder to write the bundle into (must not exist)")
    p.add_argument("--root", default=None, help="trace set to export from (default: the one "
                   "at or above the current directory)")  # fmt: skip
    p.add_argument("--solution", default=SOLUTION_NAME, help="the solution to export")
    p.add_argument("--hardware", default=None, help="only traces from this hardware (exact name)")


def export(
    output: Path, solution: str = SOLUTION_NAME, hardware: str = None, root: Path = None
) -> dict:
    root = root or find_root()
    src = solution_path(root, solution)
    if not src.exists() and is_trace_set(root.parent):  # a checkout's small/ set
        src = solution_path(root.parent, solution)
    if not src.exists():
        raise SystemExit(f"export: no solution JSON {src}; run `mla-prefill pack`")
    stale = stale_sources(src, src.parents[3])
    if stale:
        raise SystemExit(
            f"export: {src.name} is stale ({', '.join(stale)}); run `mla-prefill pack`"
        )
    traces = [t for t in read_traces(trace_file(root, solution)) if t.get("evaluation")]
    if hardware:
        traces = [t for t in traces if t["evaluation"]["environment"]["hardware"] == hardware]
    if not traces:
        raise SystemExit(
            f"export: no traces of {solution} under {traces_dir(root)}; run `mla-prefill run`"
        )
    if output.exists():
        raise SystemExit(f"export: {output} exists; pick a new folder")
    uuids = {t["workload"]["uuid"] for t in traces}
    (output / "definitions" / OP_TYPE).mkdir(parents=True)
    shutil.copyfile(definition_path(root), definition_path(output))
    sol_dir = output / "solutions" / OP_TYPE / DEFINITION_NAME
    sol_dir.mkdir(parents=True)
    shutil.copyfile(src, sol_dir / src.name)
    wpath = workloads_path(output)
    wpath.parent.mkdir(parents=True)
    exported = [w for w in load_workloads(root) if w.uuid in uuids]
    wpath.write_text("".join(json.dumps(w.record) + "\n" for w in exported))
    for w in exported:  # the index blobs, so that the bundle replays on its own
        for spec in w.workload["inputs"].values():
            if spec.get("type") == "safetensors" and not (output / spec["path"]).exists():
                (output / spec["path"]).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(root / spec["path"], output / spec["path"])
    tpath = output / "traces" / OP_TYPE / f"{DEFINITION_NAME}.jsonl"
    tpath.parent.mkdir(parents=True)
    tpath.write_text("".join(json.dumps(t) + "\n" for t in traces))
    return validate_bundle(output, solution, len(traces))


def validate_bundle(output: Path, solution: str, n_traces: int) -> dict:
    """Load the bundle back with flashinfer-bench, check what it holds, and check it as a trace
    set of its own (``mla-prefill check``'s rules)."""
    from flashinfer_bench import TraceSet

    from mla_prefill.check import check_trace_set

    problems = check_trace_set(output)
    if problems:
        raise SystemExit("export: the bundle does not check: " + "; ".join(map(str, problems)))

    ts = TraceSet.from_path(str(output))
    names = [s.name for s in ts.solutions.get(DEFINITION_NAME, [])]
    got = len(ts.traces.get(DEFINITION_NAME, []))
    if DEFINITION_NAME not in ts.definitions or names != [solution] or got != n_traces:
        raise SystemExit(
            f"export: bundle does not load back as written (solutions {names}, traces {got}/{n_traces})"
        )
    return {
        "solution": solution,
        "traces": got,
        "workloads": len(ts.workloads.get(DEFINITION_NAME, [])),
    }


def cmd_export(args: argparse.Namespace) -> int:
    res = export(Path(args.output), args.solution, args.hardware, find_root(args.root))
    print(
        f"exported {res['solution']}: {res['traces']} traces over {res['workloads']} workloads to {args.output} (loads back with flashinfer-bench)"
    )
    return 0
