"""Random batches checked against an fp32 reference (``accuracy.reference_fast``): the
property-based CPU suite and the GPU sweep."""

import argparse
import ast
import functools
import hashlib
import io
import json
import math
import random
import sys
import time
import tokenize
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import torch
import triton

from mla_prefill.accuracy import (
    ATOL,
    RTOL,
    compare,
    draw_inputs,
    poisoned_outputs,
    reference_fast,
)
from mla_prefill.io import INPUTS, write_text_atomic
from mla_prefill.kernel.config import pools_ranges


@dataclass
class Batch:
    lengths: List[Tuple[int, int]]
    num_pages: int
    seed: int
    duplicate_pages: bool = False


def make_batch_inputs(batch: Batch, device: str) -> dict:
    """Index tensors for ``batch.lengths`` (shuffled pages, the last page always used) + N(0,1) data."""
    rng = random.Random(batch.seed)
    qo, kv = [0], [0]
    for q, k in batch.lengths:
        qo.append(qo[-1] + q)
        kv.append(kv[-1] + k)
    n = kv[-1]
    if batch.duplicate_pages:
        pages = [rng.randrange(batch.num_pages) for _ in range(n)]
    else:
        pages = rng.sample(range(batch.num_pages), n)
    if n:
        pages[rng.randrange(n)] = batch.num_pages - 1
    index = {
        "qo_indptr": torch.tensor(qo, dtype=torch.int32),
        "kv_indptr": torch.tensor(kv, dtype=torch.int32),
        "kv_indices": torch.tensor(pages, dtype=torch.int32),
    }
    # drawn on the device itself: a 600K-page cache takes seconds to draw on the host
    return draw_inputs(qo[-1], batch.num_pages, index, 1.0 / math.sqrt(192.0), device, batch.seed)


ARGS = INPUTS


def random_batch(
    rng: random.Random, seed: int, max_tokens: int, max_q: int, max_prefix: int
) -> Batch:
    """One random batch shape, with the corner cases mixed in on purpose."""
    kind = rng.random()
    if kind < 0.1:  # many tiny sequences
        n = rng.randint(64, 256)
        lengths = [(q, q + rng.randint(0, 64)) for q in (rng.randint(1, 4) for _ in range(n))]
    elif kind < 0.2:  # decode-like: q_len 1 with long prefixes
        n = rng.randint(1, 32)
        lengths = [(1, 1 + rng.randint(0, max_prefix * 2)) for _ in range(n)]
    else:
        n = rng.choice([1, 1, 2, 3, 5, 8, 16, 32, 64, 128])
        lengths = []
        budget = max_tokens
        for _ in range(n):
            q = min(budget, int(math.exp(rng.uniform(0, math.log(max_q)))))
            budget -= q
            prefix = rng.choice([0, rng.randint(0, max_prefix)])
            lengths.append((q, q + prefix if q else rng.choice([0, prefix])))
    if rng.random() < 0.15 and lengths:  # empty sequences in the middle
        lengths.insert(rng.randrange(len(lengths)), (0, rng.choice([0, 7])))
    n_kv = sum(k for _, k in lengths)
    num_pages = n_kv + rng.randint(1, 1000)
    return Batch(lengths, num_pages, seed, duplicate_pages=rng.random() < 0.1)


def check_batch(
    batch: Batch, device: str, fn=None, atol=ATOL, rtol=RTOL, target: Optional[str] = None
) -> dict:
    """Run ``fn`` (default: our kernel) on poisoned outputs, compare every element with the reference."""
    from mla_prefill.kernel.main import mla_paged_prefill

    fn = fn or functools.partial(mla_paged_prefill, target=target)
    inputs = make_batch_inputs(batch, device)
    args = [inputs[k] for k in ARGS]
    T = inputs["q_nope"].shape[0]
    out, lse = poisoned_outputs(T, device)
    fn(*args, out, lse)
    ref_out, ref_lse = reference_fast(*args)
    res = compare(out, lse, ref_out, ref_lse, atol, rtol)
    return {
        "total_q": T,
        "batch_size": len(batch.lengths),
        "num_kv_indices": int(inputs["kv_indices"].numel()),
        "max_q_len": max((q for q, _ in batch.lengths), default=0),
        "max_kv_len": max((k for _, k in batch.lengths), default=0),
        "empty_seqs": sum(1 for q, k in batch.lengths if q == 0 or k == 0),
        "duplicate_pages": batch.duplicate_pages,
        **_launch(batch, device, target),
        "bad_output": res["mismatched_out"],
        "bad_lse": res["mismatched_lse"],
        "max_abs_err": res["max_abs_err_out"],
        "ok": res["correct"],
    }


def _launch(batch: Batch, device: str, target: Optional[str] = None) -> dict:
    """The kernel, tile and KV split count our launcher picks for this batch (the path it
    exercised), and, for tiles of the global tiling, how many walk runs of several sequences."""
    from mla_prefill.kernel.main import default_config

    T = sum(q for q, _ in batch.lengths)
    if T == 0:
        return {"kernel": "none", "num_splits": 0, "block_t": 0, "ordered": False}
    n_kv = sum(k for _, k in batch.lengths)
    cfg = default_config(T, len(batch.lengths), n_kv, torch.device(device), target=target)
    global_tiling = cfg.block_t > 1 and not cfg.split and not cfg.ordered
    multi, gaps = tile_runs(batch.lengths, cfg.block_t) if global_tiling else (0, 0)
    return {"kernel": cfg.kernel, "num_splits": cfg.num_splits, "block_t": cfg.block_t,
            "ordered": cfg.ordered, "multi_seq_tiles": multi, "run_gap_tiles": gaps}  # fmt: skip


def tile_runs(lengths: List[Tuple[int, int]], block_t: int) -> Tuple[int, int]:
    """Of the global tiling in ``block_t``-token tiles: the tiles that hold several sequences
    (with queries), and those of them with a query-less sequence with KV between two of its
    sequences (a gap: walked and masked within one KV step, else the start of a new run;
    ``attention._mla_prefill_kernel``)."""
    first: Dict[int, int] = {}  # tile -> its first and last sequence with queries
    last: Dict[int, int] = {}
    t = 0
    for b, (q, _) in enumerate(lengths):
        for tile in range(t // block_t, (t + q - 1) // block_t + 1) if q else ():
            first.setdefault(tile, b)
            last[tile] = b
        t += q
    multi = gaps = 0
    for tile, b0 in first.items():
        b1 = last[tile]
        if b1 > b0:
            multi += 1
            gaps += any(q == 0 and k > 0 for q, k in lengths[b0 + 1 : b1])
    return multi, gaps


def coverage(results: List[dict]) -> dict:
    """How many batches hit each corner case the sweep is meant to cover."""
    return {
        "empty_sequences": sum(r["empty_seqs"] > 0 for r in results),
        "decode_q1_prefix_ge_16k": sum(
            r["max_q_len"] == 1 and r["max_kv_len"] >= 16384 for r in results
        ),
        "prefix_ge_32k_minus_64": sum(r["max_kv_len"] >= 32768 - 64 for r in results),
        "batch_ge_200_seqs": sum(r["batch_size"] >= 200 for r in results),
        "duplicate_pages": sum(bool(r["duplicate_pages"]) for r in results),
        "kv_split_path": sum(r["num_splits"] > 1 for r in results),
        "gluon_kernel": sum(r.get("kernel") == "gluon" for r in results),
        "gluon_kv_split_path": sum(
            r.get("kernel") == "gluon" and r["num_splits"] > 1 for r in results
        ),
        # 1-token split tiles: the pooled kernel (older result files lack block_t)
        "pooled_kv_split_path": sum(
            r["num_splits"] > 1 and pools_ranges(r.get("block_t"), r.get("kernel")) for r in results
        ),
        "ordered_tiles": sum(bool(r.get("ordered")) for r in results),
        # tiles that walk runs of several sequences (older result files lack the counts)
        "multi_sequence_tiles": sum(r.get("multi_seq_tiles", 0) > 0 for r in results),
        "run_gaps": sum(r.get("run_gap_tiles", 0) > 0 for r in results),
        "total_q_ge_8k": sum(r["total_q"] >= 8192 for r in results),
        "last_page_used": len(results),  # every batch maps some position to page num_pages - 1
    }


def _docstring_spans(text: str) -> List[Tuple[int, int, int, int]]:
    """(row, col, end_row, end_col) of every docstring: the first statement of the module, a class
    or a function when it is a string (positions are 1-based rows, 0-based columns)."""
    spans = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                spans.append(
                    (first.lineno, first.col_offset, first.end_lineno, first.end_col_offset)
                )
    return spans


def code_only(text: str) -> str:
    """``text`` without comments, docstrings and blank lines: what the interpreter runs. Found
    by position (Python's tokenizer for comments, its parser for docstrings), so the result is
    the same on every Python version."""
    lines = text.splitlines()
    for row, col, end_row, end_col in _docstring_spans(text):
        if row == end_row:
            lines[row - 1] = lines[row - 1][:col] + lines[row - 1][end_col:]
        else:
            lines[row - 1] = lines[row - 1][:col]
            for r in range(row, end_row - 1):
                lines[r] = ""
            lines[end_row - 1] = lines[end_row - 1][end_col:]
    for tok in tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            lines[row - 1] = lines[row - 1][:col]
    return "\n".join(line.rstrip() for line in lines if line.strip())


def kernel_sha256(folder: Optional[Path] = None) -> str:
    """Hash of the packed kernel sources' code (``code_only``): ties a result to the code that
    produced it, and editing prose (comments, docstrings) keeps the evidence valid."""
    h = hashlib.sha256()
    for f in sorted((folder or Path(__file__).parent / "kernel").glob("*.py")):
        h.update(f.name.encode() + b"\0" + code_only(f.read_text()).encode() + b"\0")
    return h.hexdigest()


def summarize(results: List[dict], n: int, seed: int, limits: dict, seconds: float) -> dict:
    return {
        "batches": len(results),
        "requested": n,
        "complete": len(results) == n,
        "failures": sum(not r["ok"] for r in results),
        "seed": seed,
        "seconds": round(seconds, 1),
        "limits": limits,
        "kernel_sha256": kernel_sha256(),
        "max_total_q": max((r["total_q"] for r in results), default=0),
        "max_batch_size": max((r["batch_size"] for r in results), default=0),
        "coverage": coverage(results),
        "results": results,
    }


def sweep(
    n: int,
    seed: int,
    device: str,
    max_tokens: int,
    max_q: int,
    max_prefix: int,
    done: Optional[List[dict]] = None,
    checkpoint: Optional[Callable[[dict], None]] = None,
    every: int = 25,
    seconds_before: float = 0.0,
    target: Optional[str] = None,
    path: str = "call",
) -> dict:
    """``n`` seeded random batches; the first ``len(done)`` are taken from an earlier, interrupted
    run (their shapes are still drawn, so the rest are the same batches as in one go)."""
    limits = {"max_tokens": max_tokens, "max_q": max_q, "max_prefix": max_prefix}
    rng = random.Random(seed)
    done = list(done or [])
    results, t0 = [], time.time()
    for i in range(n):
        batch = random_batch(rng, seed * 100003 + i, max_tokens, max_q, max_prefix)
        if i < len(done):
            if done[i].get("seed") != batch.seed:
                raise ValueError(
                    f"resume: result {i} has seed {done[i].get('seed')}, expected {batch.seed}"
                )
            results.append(done[i])
            continue
        if path == "plan":
            fn = planned_call(target)
        else:
            fn = solution_call() if target is None else None  # None: tiles planned for target
        res = check_batch(batch, device, fn=fn, target=target)
        res["seed"] = batch.seed
        if not res["ok"]:
            res["batch"] = asdict(batch)
            print(f"FAIL batch {i}: {res}", flush=True)
        results.append(res)
        if checkpoint and (i + 1) % every == 0:
            checkpoint(summarize(results, n, seed, limits, seconds_before + time.time() - t0))
    return summarize(results, n, seed, limits, seconds_before + time.time() - t0)


def solution_call():
    """The solution's ``run`` as flashinfer-bench calls it, twice: the first call of a layout
    is checked, planned and binds its launchers; the second (the one compared) calls them."""
    from mla_prefill.kernel.main import run

    def call(*args):
        out, lse = args[-2:]
        run(*args[:-2], torch.empty_like(out), torch.empty_like(lse))
        run(*args)

    return call


def planned_call(target: Optional[str] = None):
    """The serving path as a destination-passing call: a fresh ``MLAPrefillPlan`` planned on
    the batch (its index tensors copied into the plan's buffers), then ``run``."""
    from mla_prefill.serving import MLAPrefillPlan

    def call(q_nope, q_pe, ckv, kpe, qo_indptr, kv_indptr, kv_indices, sm_scale, out, lse):
        plan = MLAPrefillPlan(q_nope.device, target=target)
        plan.plan(qo_indptr, kv_indptr, kv_indices, sm_scale, total_q=q_nope.shape[0])
        plan.run(q_nope, q_pe, ckv, kpe, out, lse)
        plan.run(q_nope, q_pe, ckv, kpe, out, lse)  # the second run: the bound launchers

    return call


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mla_prefill.fuzz")
    p.add_argument("--n", type=int, default=200, help="random batches to check")
    p.add_argument("--seed", type=int, default=1, help="seed of the batch shapes and data")
    p.add_argument("--max-tokens", type=int, default=16384, help="tokens per batch, at most")
    p.add_argument("--max-q", type=int, default=8192, help="new tokens per sequence, at most")
    p.add_argument("--max-prefix", type=int, default=16384, help="cached prefix, at most")
    p.add_argument("--output", default=None, help="JSON results, rewritten every 25 batches")
    p.add_argument(
        "--target",
        default=None,
        help="plan the tiles for this GPU of kernel/targets.py (e.g. b200) and run them here",
    )
    p.add_argument(
        "--path",
        choices=("call", "plan"),
        default="call",
        help="call: the solution's run, twice per batch (the second takes the launchers the "
        "first bound; with --target, mla_paged_prefill with that GPU's tiles); plan: "
        "serving.MLAPrefillPlan's plan then run",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run recorded in --output (same seed, limits and kernel sources)",
    )
    a = p.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    limits = {"max_tokens": a.max_tokens, "max_q": a.max_q, "max_prefix": a.max_prefix}
    command = "python -m mla_prefill.fuzz " + " ".join(argv if argv is not None else sys.argv[1:])
    out = Path(a.output) if a.output else None
    done, seconds_before, commands = [], 0.0, []
    if a.resume:
        if out is None or not out.exists():
            p.error("--resume needs an existing --output file")
        prev = json.loads(out.read_text())
        for key, want in (
            ("seed", a.seed),
            ("limits", limits),
            ("kernel_sha256", kernel_sha256()),
            ("gpu", gpu),
            ("tiles_planned_for", a.target or gpu),
            ("path", a.path),
        ):
            if prev.get(key, "call" if key == "path" else None) != want:
                p.error(f"--resume: {out} has {key} = {prev.get(key)!r}, this run {want!r}")
        done, seconds_before = prev["results"][: a.n], prev.get("seconds", 0.0)
        commands = prev.get("commands", [])

    def finish(doc: dict) -> dict:
        doc.update(commands=commands + [command], gpu=gpu, tiles_planned_for=a.target or gpu,
                   path=a.path, triton=triton.__version__, torch=torch.__version__)  # fmt: skip
        return doc

    def checkpoint(doc: dict) -> None:
        if out:
            write_text_atomic(out, json.dumps(finish(doc), indent=1) + "\n")

    res = finish(
        sweep(
            a.n,
            a.seed,
            device,
            a.max_tokens,
            a.max_q,
            a.max_prefix,
            done,
            checkpoint,
            25,
            seconds_before,
            a.target,
            a.path,
        )
    )
    print(json.dumps({k: v for k, v in res.items() if k != "results"}))
    if out:
        write_text_atomic(out, json.dumps(res, indent=1) + "\n")
    return 0 if res["failures"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
