"""Pack ``src/mla_prefill/kernel/`` into a FlashInfer-Bench solution JSON (never hand-edited)."""

import json
from pathlib import Path
from typing import List, Optional

from mla_prefill import __version__
from mla_prefill.io import DEFINITION_NAME, repo_root, solutions_dir

SOLUTION_NAME = "mla_prefill_triton_hopper"
AUTHOR = "mla-prefill"
TARGET_HARDWARE = ["NVIDIA H200"]
ENTRY_POINT = "main.py::run"


def kernel_dir() -> Path:
    return Path(__file__).resolve().parent / "kernel"


def kernel_sources() -> List[dict]:
    """Top-level ``*.py`` of ``kernel/``, sorted; the builder imports them as one package."""
    files = sorted(p for p in kernel_dir().glob("*.py"))
    return [{"path": p.name, "content": p.read_text()} for p in files]


def build_solution(name: str = SOLUTION_NAME) -> dict:
    """The solution as a dict, validated by flashinfer-bench's ``Solution`` model."""
    from flashinfer_bench import Solution

    record = {
        "name": name,
        "definition": DEFINITION_NAME,
        "author": AUTHOR,
        "spec": {
            "language": "triton",
            "target_hardware": TARGET_HARDWARE,
            "entry_point": ENTRY_POINT,
            "dependencies": ["torch", "triton>=3.6"],
            "destination_passing_style": True,
        },
        "sources": kernel_sources(),
        "description": (
            f"mla-prefill {__version__}: Triton MLA paged causal prefill, heads packed into MMA "
            "rows, one gathered KV tile for QK^T and PV, base-2 online softmax, split-KV for "
            "decode-like batches."
        ),
    }
    Solution.model_validate(record)
    return record


def solution_path(root: Optional[Path] = None, name: str = SOLUTION_NAME) -> Path:
    return solutions_dir(root or repo_root()) / f"{name}.json"


def render(record: dict) -> str:
    return json.dumps(record, indent=2) + "\n"


def pack(root: Optional[Path] = None) -> Path:
    path = solution_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(build_solution()))
    return path


def stale_sources(path: Path) -> List[str]:
    """Source files whose packed content differs from ``kernel/`` (or that exist on one side only)."""
    with open(path) as f:
        packed = {s["path"]: s["content"] for s in json.load(f).get("sources", [])}
    current = {s["path"]: s["content"] for s in kernel_sources()}
    return sorted(p for p in packed.keys() | current.keys() if packed.get(p) != current.get(p))
