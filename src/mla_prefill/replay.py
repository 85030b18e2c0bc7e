"""``mla-prefill run``: replay workloads x solutions and write traces in flashinfer-bench's format.

On a GPU, flashinfer-bench's own evaluator does the work (persistent runner; inputs cloned and L2
flushed per iteration; atol = rtol = 1e-2 on every element). Without one, the same loop runs the
small workloads (``small/``) on the CPU through Triton's interpreter and says so: its latencies
measure the interpreter, not a GPU.

Traces go to ``traces/mla_paged/<definition>/<solution>.jsonl`` (one file per solution, under the
trace-set root that was replayed). Pairs already traced are skipped unless ``--force``. Each file
is rewritten atomically (temporary file, fsync, rename) after every workload, so a crash, Ctrl-C or
SIGKILL leaves every trace file whole, and the next run completes the missing pairs.
"""

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Dict, List, Set, Tuple

from mla_prefill.io import (
    dataset_override,
    find_root,
    is_trace_set,
    iter_workload_lines,
    small_set,
    traces_dir,
    workloads_path,
    write_text_atomic,
)

INTERPRETER_HARDWARE = "CPU (Triton interpreter)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--solution", nargs="*", default=None, help="solution names (default: all)")
    p.add_argument(
        "--workload", nargs="*", default=None, help="workload uuid prefixes (default: all)"
    )
    p.add_argument("--dataset", default=None, help="official dataset clone whose blobs to use")
    p.add_argument("--warmup", type=int, default=10, help="untimed calls before each trial (GPU)")
    p.add_argument("--iterations", type=int, default=50, help="timed calls per trial (GPU)")
    p.add_argument(
        "--trials", type=int, default=3, help="trials per pair; the trace keeps the median"
    )
    p.add_argument(
        "--reference-max-q",
        type=int,
        default=1024,
        help="time the definition's reference (a Python loop over tokens) only up to this total_q; "
        "above it the reference still checks correctness but its latency is not profiled",
    )
    p.add_argument("--force", action="store_true", help="re-run pairs that already have a trace")
    p.add_argument("--small", action="store_true", help="replay the small set even on a GPU")
    p.add_argument(
        "--root",
        default=None,
        help="trace set to replay: a checkout, its small/ set, an export bundle or a dataset clone "
        "(default: the one at or above the current directory on a GPU, its small/ set on the CPU); "
        "solutions come from it, or from the checkout above a small/ set",
    )


def trace_file(root: Path, solution: str) -> Path:
    return traces_dir(root) / f"{solution}.jsonl"


def read_traces(path: Path) -> List[dict]:
    return [wl.record for wl in iter_workload_lines(path)] if path.exists() else []


def write_atomic(path: Path, records: List[dict]) -> None:
    """Write all ``records`` as JSONL so that the file is always either the old or the new whole."""
    write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in records))


def append_traces(root: Path, solution: str, new: List[dict]) -> None:
    """Add ``new`` traces to the solution's file, replacing earlier ones of the same workloads."""
    path = trace_file(root, solution)
    replaced = {t["workload"]["uuid"] for t in new}
    kept = [t for t in read_traces(path) if t["workload"]["uuid"] not in replaced]
    write_atomic(path, kept + new)


def done_pairs(root: Path, solutions: List[str]) -> Set[Tuple[str, str]]:
    """(workload uuid, solution) pairs that already have a trace with an evaluation."""
    done = set()
    for name in solutions:
        for t in read_traces(trace_file(root, name)):
            if t.get("evaluation"):
                done.add((t["workload"]["uuid"], name))
    return done


def _libs() -> Dict[str, str]:
    from mla_prefill.accuracy import versions

    return versions(cuda=False)


def failed_evaluation(status: str, log: str, hardware: str) -> dict:
    return {
        "status": status,
        "environment": {"hardware": hardware, "libs": _libs()},
        "timestamp": datetime.datetime.now().isoformat(),
        "log": log[-20000:],
        "correctness": None,
        "performance": None,
    }


def _select(args, trace_set, def_name):
    solutions = trace_set.solutions.get(def_name, [])
    if args.solution:
        missing = set(args.solution) - {s.name for s in solutions}
        if missing:
            raise SystemExit(
                f"mla-prefill run: no solution named {', '.join(sorted(missing))}; this trace set "
                f"has: {', '.join(sorted(s.name for s in solutions)) or 'none'}"
            )
        solutions = [s for s in solutions if s.name in args.solution]
    workloads = [w.workload for w in trace_set.workloads.get(def_name, [])]
    if args.workload:
        workloads = [w for w in workloads if any(w.uuid.startswith(p) for p in args.workload)]
        if not workloads:
            raise SystemExit(f"mla-prefill run: no workload matches {args.workload}")
    return solutions, workloads


def _progress(k: int, n: int, msg: str) -> None:
    width = 24
    filled = int(width * k / max(n, 1))
    print(f"[{'#' * filled}{'.' * (width - filled)}] {k}/{n} {msg}", file=sys.stderr, flush=True)


def cmd_run(args: argparse.Namespace) -> int:
    import torch

    on_gpu = torch.cuda.is_available() and not args.small
    if not on_gpu:
        if not torch.cuda.is_available():
            print(
                "mla-prefill run: no CUDA GPU found: replaying the small workloads (small/) on the "
                "CPU through Triton's interpreter; latencies below measure the interpreter.",
                flush=True,
            )
        os.environ["TRITON_INTERPRET"] = "1"
        import numpy

        if tuple(int(x) for x in numpy.__version__.split(".")[:2]) >= (2, 3):
            print(
                f"mla-prefill run: numpy {numpy.__version__} breaks Triton's interpreter "
                "(int() of a size-1 array); install the CPU extra: pip install 'mla-prefill[cpu]' "
                "(numpy<2.3)",
                file=sys.stderr,
            )
            return 2
    return _run(args, on_gpu)


def _run(args: argparse.Namespace, on_gpu: bool) -> int:
    from flashinfer_bench import TraceSet

    from mla_prefill.io import DEFINITION_NAME

    root = find_root(args.root)
    if not args.root and not on_gpu:
        root = small_set(root) or root  # the interpreter cannot replay 1 GB caches
    try:
        trace_set = TraceSet.from_path(str(root))
    except Exception:
        # a line that does not parse: say which (path:line:column), not flashinfer-bench's trace
        for path in [workloads_path(root), *sorted(traces_dir(root).rglob("*.jsonl"))]:
            if path.exists():
                for _ in iter_workload_lines(path):
                    pass
        raise
    if not trace_set.solutions.get(DEFINITION_NAME) and is_trace_set(root.parent):
        # a checkout's small/ set shares the checkout's solutions
        trace_set.solutions = TraceSet.from_path(str(root.parent)).solutions
    solutions, workloads = _select(args, trace_set, DEFINITION_NAME)
    if not on_gpu:
        for s in [s for s in solutions if _needs_cuda(s)]:
            print(f"skipping {s.name}: it needs CUDA (no CPU path)", flush=True)
        solutions = [s for s in solutions if not _needs_cuda(s)]
    definition = trace_set.definitions[DEFINITION_NAME]
    done = set() if args.force else done_pairs(root, [s.name for s in solutions])
    todo = [(w, [s for s in solutions if (w.uuid, s.name) not in done]) for w in workloads]
    todo = [(w, sols) for w, sols in todo if sols]
    n_pairs = sum(len(s) for _, s in todo)
    skipped = len(workloads) * len(solutions) - n_pairs
    print(f"{n_pairs} pair(s) to run, {skipped} already traced (use --force to re-run)", flush=True)
    if not n_pairs:
        return 0
    if on_gpu:
        from mla_prefill.serving import fallback_note_here

        note = fallback_note_here()
        if note:
            print(note, file=sys.stderr, flush=True)
        runner = _GpuRunner(args)
    else:
        runner = _InterpreterRunner(root)
    k, failures = 0, 0
    try:
        for workload, sols in todo:
            evals = runner.run(definition, workload, sols, root)
            for sol in sols:
                k += 1
                ev = evals[sol.name]
                status = ev["status"]
                failures += status != "PASSED"
                lat = (ev.get("performance") or {}).get("latency_ms")
                _progress(
                    k,
                    n_pairs,
                    f"{workload.uuid[:8]} {sol.name}: {status}" + (f" {lat:.4f} ms" if lat else ""),
                )
                record = {
                    "definition": definition.name,
                    "workload": workload.model_dump(mode="json"),
                    "solution": sol.name,
                    "evaluation": ev,
                }
                append_traces(root, sol.name, [record])
    finally:
        runner.close()
    print(f"done: {k} pair(s), {failures} not PASSED; traces under {traces_dir(root)}")
    return 0


def _needs_cuda(solution) -> bool:
    return any("flashinfer" in d.lower() for d in solution.spec.dependencies)


class _GpuRunner:
    """flashinfer-bench's persistent runner; its evaluator is the acceptance test."""

    def __init__(self, args: argparse.Namespace) -> None:
        from flashinfer_bench import BenchmarkConfig
        from flashinfer_bench.bench.runner.persistent_runner import PersistentRunner

        self.args = args
        self.log_dir = tempfile.mkdtemp(prefix="mla_prefill_logs_")
        common = dict(
            warmup_runs=args.warmup,
            iterations=args.iterations,
            num_trials=args.trials,
            log_dir=self.log_dir,
        )
        self.cfg_ref = BenchmarkConfig(**common, profile_baseline=True)
        self.cfg_noref = BenchmarkConfig(**common, profile_baseline=False)
        self.runner = PersistentRunner(self.log_dir)
        self.dataset = dataset_override(args.dataset)

    def run(self, definition, workload, solutions, root: Path) -> Dict[str, dict]:
        import torch

        cfg = (
            self.cfg_ref
            if workload.axes["total_q"] <= self.args.reference_max_q
            else self.cfg_noref
        )
        data_root = self.dataset if self.dataset is not None else root
        hardware = torch.cuda.get_device_name()
        try:
            results = self.runner.run_workload(definition, workload, solutions, cfg, data_root)
        except Exception as e:  # a workload that breaks the runner becomes failed traces
            log = f"runner error on workload {workload.uuid}: {e}\n{traceback.format_exc()}"
            return {s.name: failed_evaluation("RUNTIME_ERROR", log, hardware) for s in solutions}
        out = {}
        for s in solutions:
            ev = results.get(s.name)
            if ev is None:
                out[s.name] = failed_evaluation(
                    "RUNTIME_ERROR", "the runner returned no evaluation", hardware
                )
            else:
                out[s.name] = ev.model_dump(mode="json")
        return out

    def close(self) -> None:
        self.runner.close()


class _InterpreterRunner:
    """The CPU path: build each solution with flashinfer-bench's builders and check it against the
    definition's reference on fresh N(0,1) inputs, under Triton's interpreter."""

    def __init__(self, root: Path) -> None:
        from flashinfer_bench.compile.registry import BuilderRegistry

        self.registry = BuilderRegistry.get_instance()

    def run(self, definition, workload, solutions, root: Path) -> Dict[str, dict]:
        from mla_prefill.accuracy import compare, poisoned_outputs
        from mla_prefill.bench import make_inputs
        from mla_prefill.io import load_index_tensors, reference_fn

        record = workload.model_dump(mode="json")
        inputs = make_inputs(record, load_index_tensors(root, record), "cpu", seed=0)
        args = [inputs[k] for k in definition.inputs]
        t0 = time.perf_counter()
        ref_out, ref_lse = reference_fn(root)(*args)
        ref_ms = (time.perf_counter() - t0) * 1e3
        out = {}
        for sol in solutions:
            try:
                runnable = self.registry.build(definition, sol)
                o, lse = poisoned_outputs(ref_out.shape[0], "cpu")
                t0 = time.perf_counter()
                runnable(*args, o, lse)
                ms = (time.perf_counter() - t0) * 1e3
            except Exception as e:
                out[sol.name] = failed_evaluation(
                    "RUNTIME_ERROR",
                    f"{type(e).__name__}: {e}\n{traceback.format_exc()}",
                    INTERPRETER_HARDWARE,
                )
                continue
            res = compare(o, lse, ref_out, ref_lse)
            rel = (
                (o.float() - ref_out.float()).abs() / ref_out.float().abs().clamp_min(1e-6)
            ).max()
            out[sol.name] = {
                "status": "PASSED" if res["correct"] else "INCORRECT_NUMERICAL",
                "environment": {"hardware": INTERPRETER_HARDWARE, "libs": _libs()},
                "timestamp": datetime.datetime.now().isoformat(),
                "log": "" if res["correct"] else json.dumps(res),
                "correctness": {
                    "max_relative_error": float(rel),
                    "max_absolute_error": res["max_abs_err_out"],
                    "extra": None,
                },
                "performance": {
                    "latency_ms": ms,
                    "reference_latency_ms": ref_ms,
                    "speedup_factor": ref_ms / ms if ms > 0 else 0.0,
                },
            }
        return out

    def close(self) -> None:
        pass
