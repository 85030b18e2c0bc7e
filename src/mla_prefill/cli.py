"""``mla-prefill``: one command per step of the loop (check, blobs, pack, run, bench, ...)."""

import argparse
import logging
import sys
from pathlib import Path
from typing import List, Optional

from mla_prefill.io import TraceFileError, dataset_override, find_root, is_checkout, small_set

FLASHINFER_BENCH_MISSING = (
    "flashinfer-bench is not installed. On a CPU machine: pip install --no-deps "
    "flashinfer-bench==0.1.2 (its light dependencies come with mla-prefill; without --no-deps it "
    "pulls ~1.7 GB of CUDA-only packages). On a GPU machine: pip install 'mla-prefill[gpu]'"
)
ROOT_HELP = (
    "trace set to act on: a checkout of mla-prefill, an export bundle or a dataset clone "
    "(default: the nearest one at or above the current directory)"
)


def add_root_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", default=None, help=ROOT_HELP)


def cmd_check(args: argparse.Namespace) -> int:
    """Validate the trace set (and a checkout's small/ set); print every problem; exit 1 if any."""
    from mla_prefill.blobs import verify_all
    from mla_prefill.check import check_trace_set

    root = find_root(args.root)
    roots = [root] + ([small_set(root)] if small_set(root) else [])
    dataset = dataset_override(args.dataset)
    failed = False
    for r in roots:
        problems = check_trace_set(r, dataset)
        for p in problems:
            print(f"ERROR {p}")
        print(f"{r}: {'OK' if not problems else f'{len(problems)} problem(s)'}")
        failed |= bool(problems)
    if is_checkout(root) and not dataset:
        stale = verify_all(root)
        for path in stale:
            print(f"ERROR {path}: differs from a fresh regeneration; run `mla-prefill blobs`")
        failed |= bool(stale)
    return 1 if failed else 0


def _checkout(args: argparse.Namespace, command: str) -> Path:
    root = find_root(args.root)
    if not is_checkout(root):
        raise SystemExit(
            f"{command}: {root} is not a checkout of mla-prefill (no src/mla_prefill/kernel/); "
            "run it in a checkout or pass --root"
        )
    return root


def cmd_blobs(args: argparse.Namespace) -> int:
    """Regenerate the index blobs and the small trace set (or verify them byte for byte)."""
    from mla_prefill.blobs import verify_all, write_all

    root = _checkout(args, "blobs")
    if args.verify:
        stale = verify_all(root)
        for path in stale:
            print(f"stale: {path}")
        print(
            f"{root}: blobs all reproduce byte for byte"
            if not stale
            else f"{root}: {len(stale)} blob file(s) differ; run `mla-prefill blobs`"
        )
        return 1 if stale else 0
    written = write_all(root)
    print(f"wrote {len(written)} files under {root}")
    return 0


def cmd_pack(args: argparse.Namespace) -> int:
    """Pack the solution sources (ours and the FlashInfer baseline) into solution JSONs."""
    from mla_prefill.pack import pack

    root = _checkout(args, "pack")
    for path in pack(root):
        print(f"packed {path.relative_to(root)}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from mla_prefill.bench import run_bench

    return run_bench(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mla-prefill",
        description="FlashInfer-Bench solution package for mla_paged_prefill_causal_h16_ckv512_kpe64_ps1",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log what each step does")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("check", help=cmd_check.__doc__)
    add_root_argument(c)
    c.add_argument("--dataset", default=None, help="official dataset clone whose blobs to check")
    c.set_defaults(func=cmd_check)

    b = sub.add_parser("blobs", help=cmd_blobs.__doc__)
    add_root_argument(b)
    b.add_argument("--verify", action="store_true", help="compare with the committed files only")
    b.set_defaults(func=cmd_blobs)

    k = sub.add_parser("pack", help=cmd_pack.__doc__)
    add_root_argument(k)
    k.set_defaults(func=cmd_pack)

    from mla_prefill.bench import add_arguments as bench_arguments
    from mla_prefill.export import add_arguments as export_arguments
    from mla_prefill.export import cmd_export
    from mla_prefill.portability import add_arguments as portability_arguments
    from mla_prefill.portability import cmd_portability
    from mla_prefill.replay import add_arguments as run_arguments
    from mla_prefill.replay import cmd_run
    from mla_prefill.report import (
        add_compare_arguments,
        add_report_arguments,
        cmd_compare,
        cmd_report,
    )

    for name, help_text, add_arguments, func in (
        ("bench", "time our run vs FlashInfer's kernel (GPU)", bench_arguments, cmd_bench),
        ("run", "replay workloads x solutions and write traces", run_arguments, cmd_run),
        (
            "report",
            "tables and plots from the committed traces (no GPU needed)",
            add_report_arguments,
            cmd_report,
        ),
        (
            "compare",
            "our traces beside leaderboard entries, per workload",
            add_compare_arguments,
            cmd_compare,
        ),
        (
            "portability",
            "compile every launch for each target GPU, no GPU needed (shared memory, spills)",
            portability_arguments,
            cmd_portability,
        ),
        (
            "export",
            "a FlashInfer-Bench submission bundle (solution + traces)",
            export_arguments,
            cmd_export,
        ),
    ):
        sp = sub.add_parser(name, help=help_text)
        add_arguments(sp)
        sp.set_defaults(func=func)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s"
    )
    try:
        return args.func(args)
    except TraceFileError as e:
        print(f"mla-prefill {args.command}: {e}", file=sys.stderr)
        return 1
    except ModuleNotFoundError as e:
        if e.name != "flashinfer_bench":
            raise
        print(f"mla-prefill {args.command}: {FLASHINFER_BENCH_MISSING}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
