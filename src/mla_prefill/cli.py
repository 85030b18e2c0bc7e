"""``mla-prefill``: one command per step of the loop (check, blobs, pack, run, bench, ...)."""

import argparse
import logging
import sys
from pathlib import Path
from typing import List, Optional

from mla_prefill.io import dataset_override, repo_root, small_root


def cmd_check(args: argparse.Namespace) -> int:
    """Validate the trace set(s); print every problem; exit 1 if any."""
    from mla_prefill.blobs import verify_all
    from mla_prefill.check import check_trace_set

    roots = [Path(args.root)] if args.root else [repo_root(), small_root()]
    dataset = dataset_override(args.dataset)
    failed = False
    for root in roots:
        problems = check_trace_set(root, dataset)
        for p in problems:
            print(f"ERROR {p}")
        print(f"{root}: {'OK' if not problems else f'{len(problems)} problem(s)'}")
        failed |= bool(problems)
    if not args.root and not dataset:
        stale = verify_all()
        for path in stale:
            print(f"ERROR {path}: differs from a fresh regeneration; run `mla-prefill blobs`")
        failed |= bool(stale)
    return 1 if failed else 0


def cmd_blobs(args: argparse.Namespace) -> int:
    """Regenerate the index blobs and the small trace set (or verify them byte for byte)."""
    from mla_prefill.blobs import verify_all, write_all

    if args.verify:
        stale = verify_all()
        for path in stale:
            print(f"stale: {path}")
        print("blobs: all reproduce byte for byte" if not stale else f"blobs: {len(stale)} differ")
        return 1 if stale else 0
    written = write_all()
    print(f"wrote {len(written)} files")
    return 0


def cmd_pack(args: argparse.Namespace) -> int:
    """Pack the solution sources (ours and the FlashInfer baseline) into solution JSONs."""
    from mla_prefill.pack import pack

    for path in pack():
        print(f"packed {path.relative_to(repo_root())}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from mla_prefill.bench import run_bench

    return run_bench(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mla-prefill",
        description="FlashInfer-Bench solution package for mla_paged_prefill_causal_h16_ckv512_kpe64_ps1",
    )
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("check", help=cmd_check.__doc__)
    c.add_argument("--root", default=None, help="trace-set root (default: the repo and small/)")
    c.add_argument("--dataset", default=None, help="official dataset clone whose blobs to check")
    c.set_defaults(func=cmd_check)

    b = sub.add_parser("blobs", help=cmd_blobs.__doc__)
    b.add_argument("--verify", action="store_true", help="compare with the committed files only")
    b.set_defaults(func=cmd_blobs)

    k = sub.add_parser("pack", help=cmd_pack.__doc__)
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
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
