"""What the installed environment weighs, per distribution, and whether a CPU install pulled in
CUDA-only packages. CI runs it after the README's CPU install.

    python tools/install_footprint.py [--max-gb-without-torch 1.2] [--top 12]

Fails (exit 1) when a CUDA-only distribution is installed (NVIDIA's CUDA wheels, FlashInfer,
CUTLASS's DSL) or when everything but torch weighs more than the bound. torch is counted apart:
the user brings it (a CPU build on a CPU machine), and the CPU build alone is ~0.72 GB.
"""

import argparse
import importlib.metadata as md
import re
import sys
from pathlib import Path

CUDA_ONLY = re.compile(r"^(nvidia-.*|nccl.*|flashinfer-python|flashinfer-cubin|cuda-.*|cupti.*)$")


def footprint() -> dict:
    """Bytes on disk per installed distribution (the files its RECORD lists)."""
    sizes = {}
    for dist in md.distributions():
        name = dist.metadata["Name"].lower()
        total = 0
        for f in dist.files or []:
            p = Path(dist.locate_file(f))
            if p.is_file():
                total += p.stat().st_size
        sizes[name] = sizes.get(name, 0) + total
    return sizes


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-gb-without-torch", type=float, default=None,
                   help="fail when everything but torch weighs more (GB, 1e9 bytes)")  # fmt: skip
    p.add_argument("--top", type=int, default=12, help="how many of the largest to list")
    args = p.parse_args(argv)
    sizes = footprint()
    total = sum(sizes.values())
    torch_bytes = sizes.get("torch", 0)
    for name, size in sorted(sizes.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{size / 1e6:9.1f} MB  {name}")
    print(f"total {total / 1e9:.2f} GB; without torch {(total - torch_bytes) / 1e9:.2f} GB")
    failed = False
    cuda = sorted(n for n in sizes if CUDA_ONLY.match(n))
    if cuda:
        print(f"CUDA-only packages in a CPU install: {', '.join(cuda)}")
        failed = True
    bound = args.max_gb_without_torch
    if bound is not None and (total - torch_bytes) / 1e9 > bound:
        print(f"the install without torch exceeds {bound} GB")
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
