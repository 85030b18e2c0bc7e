"""``mla-prefill portability``: compile every kernel launch a call would make, for each target GPU,
with the installed Triton, on any machine (no GPU needed).

For each target (``kernel/targets.py``) and each shape (the upstream workloads and a seeded grid
that reaches every branch of the tile chooser), the call's launches are planned by the shipped
code itself: ``kernel.plan.plan_launches`` plans them and ``kernel.main.execute`` runs the plan on
meta tensors with a recording launcher, so the
kernels, grids, arguments and options are exactly those of a real call. Each launch is then
specialised by Triton's own binder (``create_function_from_signature``, as ``JITFunction.run``
does) for the target's backend and compiled with ``triton.compile``; ``ptxas -v`` (Triton's
bundled one, for the target's architecture, with the launch's ``ptx_options``) reports registers
and spills.

A launch fails when it does not compile, needs more shared memory than the target gives a block,
or spills registers. An attention kernel that needs more shared memory than the chooser's
estimate (``config.shared_estimate``) is reported as a warning: the fit rule is unsound there for
GPUs outside the table, though every table target is checked against its limit.

Each row of ``--json`` holds what is needed to recompile the launch independently:
``kernel`` (``module:function``), ``signature`` (runtime arguments' types), ``constants``
(constexpr values, Triton's specialised ones included), ``divisible_by_16``, ``num_warps``,
``num_stages`` and ``options``; ``recompile`` does exactly that.
"""

import argparse
import importlib
import json
import os
import random
import re
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

SEED = 2026
NUM_PAGES = 989_669  # the upstream workloads' cache


@dataclass(frozen=True)
class Shape:
    label: str  # the upstream workload's uuid, or a grid label
    total_q: int
    batch: int
    num_kv: int
    num_pages: int = NUM_PAGES


def upstream_shapes(root: Path) -> List[Shape]:
    """The workloads of ``root``'s trace set (their axes: total_q, len_indptr, num_kv_indices)."""
    from mla_prefill.io import iter_workload_lines, workloads_path

    out = []
    for wl in iter_workload_lines(workloads_path(root)):
        axes = wl.workload["axes"]
        out.append(
            Shape(
                wl.uuid,
                axes["total_q"],
                axes["len_indptr"] - 1,
                axes["num_kv_indices"],
                axes.get("num_pages", NUM_PAGES),
            )
        )
    return out


def grid_shapes(seed: int = SEED) -> List[Shape]:
    """Hand-placed shapes for each branch of ``choose_config`` on every target, then seeded
    random ones: 1 to 32K tokens, 1 to 256 sequences, with and without a dominant prefix."""
    fixed = [
        Shape("one-token", 1, 1, 1),
        Shape("short-single", 16, 1, 16),
        Shape("one-wave-short", 64, 8, 128),
        Shape("one-wave-long", 100, 1, 3000),
        Shape("two-waves", 300, 3, 300),
        Shape("decode-pooled", 64, 64, 64 * 16384),
        Shape("decode-pooled-1k", 1024, 256, 1024 * 300),
        Shape("wide", 2048, 4, 2048),
        Shape("wide-split", 400, 1, 4000),
        Shape("wide-split-64", 2000, 2, 200_000),
        Shape("ordered-prefixes", 3298, 24, 21882),
        Shape("single-32k", 32768, 1, 32768),
        Shape("offsets-64bit", 512, 2, 1024, num_pages=5_000_000),
    ]
    rng = random.Random(seed)
    rand = []
    for i in range(16):
        total_q = max(1, int(2 ** rng.uniform(0, 15)))
        batch = rng.randint(1, min(256, total_q))
        prefix = 0 if rng.random() < 0.4 else int(2 ** rng.uniform(4, 15)) * batch
        rand.append(Shape(f"seed{seed}-{i}", total_q, batch, min(total_q + prefix, 2**20)))
    return fixed + rand


def plan(shape: Shape, target, gluon_api: bool) -> Tuple[object, List[dict]]:
    """(config, launches) of a call of ``shape`` on ``target``: the shipped dispatch on meta
    tensors, recording each launch (kernel, grid, args, constexprs, options)."""
    import torch

    from mla_prefill.kernel.config import choose_config
    from mla_prefill.kernel.main import config_problems, execute
    from mla_prefill.kernel.plan import TENSOR_SLOTS, CallShape, plan_launches, table_launch
    from mla_prefill.kernel.validate import HEAD_DIM_CKV, HEAD_DIM_KPE, NUM_QO_HEADS

    T, B, N = shape.total_q, shape.batch, shape.num_kv
    meta = dict(device="meta")
    bf16 = dict(dtype=torch.bfloat16, **meta)
    H, D, R = NUM_QO_HEADS, HEAD_DIM_CKV, HEAD_DIM_KPE
    t = dict(
        q_nope=torch.empty(T, H, D, **bf16),
        q_pe=torch.empty(T, H, R, **bf16),
        ckv_cache=torch.empty(shape.num_pages, 1, D, **bf16),
        kpe_cache=torch.empty(shape.num_pages, 1, R, **bf16),
        qo_indptr=torch.empty(B + 1, dtype=torch.int32, **meta),
        kv_indptr=torch.empty(B + 1, dtype=torch.int32, **meta),
        kv_indices=torch.empty(N, dtype=torch.int32, **meta),
        output=torch.empty(T, H, D, **bf16),
        lse=torch.empty(T, H, dtype=torch.float32, **meta),
    )
    config = choose_config(T, B, N, target, gluon_api=gluon_api)
    bad = config_problems(config, T, B, target, False)
    if bad:
        raise ValueError(f"{shape.label} on {target.name}: {'; '.join(bad)}")
    call = CallShape.of(t["q_nope"], t["q_pe"], t["ckv_cache"], t["kpe_cache"], t["output"],
                        t["lse"], B, N)  # fmt: skip
    launches = []

    def record(fn, grid, args, consts, **options):
        launches.append(dict(fn=fn, grid=grid, args=args, consts=consts, options=options))

    tensors = [t[k] for k in TENSOR_SLOTS]
    # a solution call, and a serving plan's run (its table written by the plan: the attention
    # launch does not wait for a table kernel); equal launches compile once
    for table_ready in (False, True) if table_launch(config, T, B, True) else (False,):
        execute(plan_launches(call, config, target.capability, False, table_ready), tensors,
                t["output"], t["lse"], 0.1352, record)  # fmt: skip
    return config, launches


def _kernel_path(fn) -> str:
    inner = getattr(fn, "fn", fn)
    return f"{inner.__module__}:{inner.__name__}"


def specialise(launch: dict, capability: int) -> dict:
    """The launch as Triton specialises it for ``capability``: a recompile spec (JSON-able)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    fn = launch["fn"]
    backend = make_backend(GPUTarget("cuda", capability, 32))
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    kwargs = dict(launch["consts"], **launch["options"])
    bound, specialization, options = binder(*launch["args"], **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(
        backend, kwargs, bound, specialization, options
    )
    names = [p.name for p in fn.params]
    constants = {names[path[0]]: _plain(v) for path, v in constexprs.items()}
    divisible = sorted(
        names[path[0]]
        for path, a in attrs.items()
        if any(k == "tt.divisibility" and v == 16 for k, v in a)
    )
    extra = {
        k: _plain(v) for k, v in launch["options"].items() if k not in ("num_warps", "num_stages")
    }
    return dict(
        kernel=_kernel_path(fn),
        capability=capability,
        signature={k: v for k, v in signature.items() if v != "constexpr"},
        constants=constants,
        divisible_by_16=divisible,
        num_warps=options.num_warps,
        num_stages=options.num_stages,
        options=extra,
    )


def _plain(v):
    return v if isinstance(v, (bool, int, float, str, type(None))) else str(v)


def ptxas_command(spec: dict) -> List[str]:
    """Triton's bundled ptxas for the spec's architecture, with the launch's own
    ``ptx_options`` (Triton passes them to ptxas too); the PTX file and output follow."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    capability = spec["capability"]
    try:
        ptxas = get_ptxas(capability).path  # Triton 3.6 and later: one per architecture
    except TypeError:
        ptxas = get_ptxas().path  # Triton 3.5
    extra = (spec.get("options", {}).get("ptx_options") or "").split()
    return [ptxas, *extra, f"--gpu-name={sm_arch_from_capability(capability)}"]


def _ptxas(ptx: str, spec: dict) -> Tuple[Optional[int], Optional[int], str]:
    """(registers, spill bytes stored + loaded, report) from ``ptxas -v`` (``ptxas_command``)."""
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    try:
        r = subprocess.run(
            [*ptxas_command(spec), "-v", f.name, "-o", os.devnull],
            capture_output=True, text=True,
        )  # fmt: skip
    finally:
        Path(f.name).unlink()
    regs = re.search(r"Used (\d+) registers", r.stderr)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", r.stderr)
    return (
        int(regs.group(1)) if regs else None,
        int(spill.group(1)) + int(spill.group(2)) if spill else None,
        r.stderr.strip(),
    )


def compile_spec(spec: dict):
    """``triton.compile`` of a spec (a row of ``--json``) for its capability: the compiled kernel
    (``.asm["ptx"]``, ``.metadata``). Raises what Triton raises."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    module, name = spec["kernel"].split(":")
    fn = getattr(importlib.import_module(module), name)
    source_cls = ASTSource
    if type(fn).__name__ == "GluonJITFunction":
        from triton.experimental.gluon._runtime import GluonASTSource as source_cls
    names = fn.arg_names
    signature = {n: "constexpr" if n in spec["constants"] else spec["signature"][n] for n in names}
    constants = {(names.index(n),): v for n, v in spec["constants"].items()}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in spec["divisible_by_16"]}
    options = dict(spec.get("options", {}), num_warps=spec["num_warps"])
    options["num_stages"] = spec["num_stages"]
    return triton.compile(
        source_cls(fn, signature, constants, attrs),
        target=GPUTarget("cuda", spec["capability"], 32),
        options=options,
    )


def recompile(spec: dict) -> dict:
    """Compile a spec (a row of ``--json``) with ``triton.compile``: shared bytes, registers,
    spills. Needs no GPU; anyone can run it on a row to check the figures."""
    try:
        k = compile_spec(spec)
    except Exception as e:  # a launch that does not compile is a finding, not a crash
        return dict(error=f"{type(e).__name__}: {str(e).strip()[:2000]}")
    ptx = k.asm["ptx"]
    regs, spills, report = _ptxas(ptx, spec)
    out = dict(shared_bytes=k.metadata.shared, registers=regs, spills=spills)
    # instruction facts a kernel's design relies on: asynchronous warpgroup MMAs (Hopper),
    # 16-byte global stores (the Gluon kernel's staged output), cp.async and the named barriers,
    # "id:threads" (threads "all" without a count) -> instructions
    barriers = Counter(
        f"{bar_id}:{threads or 'all'}"
        for bar_id, threads in re.findall(
            r"\b(?:bar|barrier)(?:\.cta)?(?:\.sync|\.arrive)?(?:\.aligned)?\s+(\d+)"
            r"(?:\s*,\s*(\d+))?\s*;",
            ptx,
        )
    )
    out["ptx_counts"] = {
        "wgmma": len(re.findall(r"wgmma\.mma_async", ptx)),
        "st_global_v4": len(re.findall(r"st\.global\.v4\.b32", ptx)),
        # asynchronous global -> shared copies: Triton's pipeliner turned the KV gathers into
        # cp.async (none: every gather is a synchronous load, then a store to shared memory)
        "cp_async": len(re.findall(r"cp\.async\.c[ag]\.shared\.global", ptx)),
        "named_barriers": dict(barriers),
    }
    if regs is None or spills is None:
        out["error"] = "ptxas -v: " + report[-2000:]
    return out


def _spec_key(spec: dict) -> str:
    return json.dumps(spec, sort_keys=True)


def rows_for(targets, shapes: List[Shape], gluon_api: bool) -> List[dict]:
    """One row per launch (target x shape x kernel), before compiling."""
    from mla_prefill.kernel.config import shared_estimate

    rows = []
    for target in targets:
        for shape in shapes:
            config, launches = plan(shape, target, gluon_api)
            for launch in launches:
                spec = specialise(launch, target.capability)
                consts = launch["consts"]
                estimate = None
                if spec["kernel"].endswith(("_mla_prefill_kernel", "_mla_pooled_split_kernel")):
                    block_t = consts.get("BLOCK_T", 1)
                    estimate = shared_estimate(
                        block_t, consts["BLOCK_N"], spec["num_stages"], target.capability
                    )
                rows.append(
                    dict(
                        target=target.name,
                        workload=shape.label,
                        total_q=shape.total_q,
                        batch=shape.batch,
                        num_kv=shape.num_kv,
                        grid=list(launch["grid"]),
                        tiles=dict(
                            kernel=config.kernel,
                            block_t=config.block_t,
                            block_n=config.block_n,
                            num_splits=config.num_splits,
                        ),
                        **spec,
                        shared_limit=target.max_shared,
                        shared_estimate=estimate,
                    )
                )
    return rows


def _spec_of(row: dict) -> dict:
    keys = ("kernel", "capability", "signature", "constants", "divisible_by_16", "num_warps",
            "num_stages", "options")  # fmt: skip
    return {k: row[k] for k in keys}


def problems_of(row: dict) -> List[str]:
    if row.get("error"):
        return [row["error"].splitlines()[0][:300]]
    bad = []
    if row["shared_bytes"] > row["shared_limit"]:
        bad.append(f"shared {row['shared_bytes']} > limit {row['shared_limit']}")
    if row["spills"]:
        bad.append(f"{row['spills']} bytes of register spills")
    return bad


# Triton-path attention kernels whose KV gathers Triton's pipeliner is to turn into cp.async
# (num_stages >= 2 on sm_80 and later)
PIPELINED_GATHERS = ("_mla_prefill_kernel", "_mla_pooled_split_kernel")


def warnings_of(row: dict) -> List[str]:
    """Findings that do not fail a launch:

    - the chooser's estimate below the compiled figure (its fit rule could then pick a tile
      that does not fit some GPU; the limit check above still holds for every target checked).
      Seen with Triton 3.9 only: 1-token tiles at 32-key steps take 83,968 B against an estimate
      of 74,752.
    - a Triton attention kernel whose KV gathers compiled without cp.async: every block is then
      a synchronous load and a store to shared memory. Seen with Triton 3.7.1, 3.8.0 and 3.9.0 on
      every pooled split launch (docs/design.md, Triton versions)."""
    out = []
    est = row.get("shared_estimate")
    if est is not None and row.get("shared_bytes", 0) > est:
        out.append(f"shared {row['shared_bytes']} > the chooser's estimate {est}")
    counts = row.get("ptx_counts") or {}
    if (
        row.get("kernel", "").split(":")[-1] in PIPELINED_GATHERS
        and row.get("num_stages", 1) >= 2
        and row.get("capability", 0) >= 80
        and counts.get("cp_async") == 0
    ):
        out.append("KV gathers not pipelined (no cp.async)")
    return out


def run(targets, shapes: List[Shape], gluon_api: bool, jobs: int) -> List[dict]:
    rows = rows_for(targets, shapes, gluon_api)
    row_keys = [_spec_key(_spec_of(row)) for row in rows]
    specs: Dict[str, dict] = {}
    for key, row in zip(row_keys, rows):
        specs.setdefault(key, _spec_of(row))
    keys = list(specs)
    if jobs > 1 and len(keys) > 1:
        with ProcessPoolExecutor(jobs) as pool:
            results = dict(zip(keys, pool.map(recompile, [specs[k] for k in keys])))
    else:
        results = {k: recompile(specs[k]) for k in keys}
    for key, row in zip(row_keys, rows):
        row.update(results[key])
        row["problems"] = problems_of(row)
        row["warnings"] = warnings_of(row)
    return rows


def _table(rows: List[dict]) -> str:
    head = ("target", "workload", "kernel", "tiles", "warps", "stages", "shared/limit", "regs",
            "spills", "status")  # fmt: skip
    lines = ["  ".join(head)]
    for r in rows:
        t = r["tiles"]
        tiles = f"{t['block_t']}x{r['constants'].get('BLOCK_N', '-')}/{t['num_splits']}"
        status = "; ".join(r["problems"]) or "; ".join(["ok", *r["warnings"]])
        shared = f"{r.get('shared_bytes', '?')}/{r['shared_limit']}"
        lines.append(
            f"{r['target']:8} {r['workload'][:16]:16} {r['kernel'].split(':')[1]:26} {tiles:9} "
            f"{r['num_warps']:2} {r['num_stages']:2} {shared:>15} {str(r.get('registers')):>4} "
            f"{str(r.get('spills')):>5}  {status}"
        )
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from mla_prefill.kernel.targets import TARGETS

    p.add_argument("--target", nargs="*", default=None, metavar="NAME",
                   help=f"GPUs to check (default: all of {', '.join(TARGETS)})")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print a JSON list, one row per launch")
    p.add_argument("--root", default=None,
                   help="checkout whose workloads to plan (default: the current directory's)")  # fmt: skip
    p.add_argument("--grid-only", action="store_true", help="only the seeded grid of shapes")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="compiles in parallel (processes)")  # fmt: skip


def cmd_portability(args: argparse.Namespace) -> int:
    """Compile every launch for each target GPU (no GPU needed); exit 1 on any failure."""
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        print("portability: unset TRITON_INTERPRET (interpreted kernels cannot be compiled)",
              file=sys.stderr)  # fmt: skip
        return 2
    import triton
    from triton.runtime.jit import JITFunction

    if not hasattr(JITFunction, "_pack_args"):  # how ``specialise`` reads Triton's specialisation
        print(f"portability: needs Triton 3.5 or later to plan the launches, found "
              f"{triton.__version__}", file=sys.stderr)  # fmt: skip
        return 2

    from mla_prefill.io import repo_root
    from mla_prefill.kernel.main import gluon_available
    from mla_prefill.kernel.targets import TARGETS, target_named

    try:
        targets = [target_named(n) for n in (args.target or TARGETS)]
    except ValueError as e:
        print(f"portability: {e}", file=sys.stderr)
        return 2
    shapes = grid_shapes()
    if not args.grid_only:
        shapes = upstream_shapes(Path(args.root) if args.root else repo_root()) + shapes
    rows = run(targets, shapes, gluon_available(), max(1, args.jobs))
    failed = [r for r in rows if r["problems"]]
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(_table(rows))
    print(
        f"portability: triton {triton.__version__}, {len(rows)} launches on "
        f"{', '.join(t.name for t in targets)}: "
        + (f"{len(failed)} FAILED" if failed else "all compile, fit and do not spill")
        + f" ({sum(bool(r['warnings']) for r in rows)} with warnings)",
        file=sys.stderr,
    )
    return 1 if failed else 0
