"""Pack solution sources into FlashInfer-Bench solution JSONs (generated, never hand-edited).

Two solutions: ours (``src/mla_prefill/kernel/``) and FlashInfer's wrapper as a baseline
(``src/mla_prefill/baselines/flashinfer_wrapper/``). A solution's top-level ``*.py`` files are its
sources; flashinfer-bench writes them into one package, so relative imports between them work.
"""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from mla_prefill import __version__
from mla_prefill.io import DEFINITION_NAME, is_checkout, solutions_dir

AUTHOR = "mla-prefill"
_PKG = Path(__file__).resolve().parent


@dataclass(frozen=True)
class SolutionSpec:
    name: str
    source_dir: Path  # relative to the package folder (``src/mla_prefill`` in a checkout)
    author: str
    language: str
    target_hardware: List[str]
    dependencies: List[str]
    description: str


OURS = SolutionSpec(
    name="mla_prefill_triton_hopper",
    source_dir=Path("kernel"),
    author=AUTHOR,
    language="triton",
    # run on: H200 (and H100, the same sm_90a chip); B200: every launch compiles for sm_100a,
    # fits and does not spill (``mla-prefill portability``, in CI), never run
    target_hardware=["NVIDIA H200", "NVIDIA H100", "NVIDIA B200"],
    # every launch compiles under Triton 3.5.1 to 3.9 (CI); the Gluon kernel is enabled under
    # 3.6, under 3.7-3.9 with MLA_PREFILL_UNRUN_TRITON=1; an older Triton is refused with what to
    # install
    dependencies=["torch", "triton>=3.5"],
    description=(
        f"mla-prefill {__version__}: Triton MLA paged causal prefill; heads packed into MMA rows, "
        "one gathered KV tile for QK^T and PV, base-2 online softmax, split-KV for decode-like "
        "batches; on Hopper, 64-row tiles run a warp-specialised Gluon kernel (a cp.async loader "
        "warpgroup and a softmax warpgroup, each computing half of P.V); elsewhere (B200, A100) "
        "2-token tiles planned from the GPU's SM count and shared memory."
    ),
)
FLASHINFER = SolutionSpec(
    name="flashinfer_wrapper_plan_inside",
    source_dir=Path("baselines") / "flashinfer_wrapper",
    author="flashinfer (baseline, packed by mla-prefill)",
    language="python",
    target_hardware=["NVIDIA H200", "NVIDIA H100"],
    dependencies=["torch", "flashinfer-python"],
    description="FlashInfer BatchMLAPagedAttentionWrapper (backend auto, fa3 on Hopper), plan inside run.",
)
SOLUTIONS: Dict[str, SolutionSpec] = {s.name: s for s in (OURS, FLASHINFER)}
SOLUTION_NAME = OURS.name


def source_folder(spec: SolutionSpec, root: Optional[Path] = None) -> Path:
    """The solution's sources: those of the checkout ``root`` when it is one, else this
    installed package's."""
    base = root / "src" / "mla_prefill" if root is not None and is_checkout(root) else _PKG
    return base / spec.source_dir


def sources(spec: SolutionSpec, root: Optional[Path] = None) -> List[dict]:
    files = sorted(source_folder(spec, root).glob("*.py"))
    return [{"path": p.name, "content": p.read_text()} for p in files if p.read_text().strip()]


def build_solution(spec: SolutionSpec = OURS, root: Optional[Path] = None) -> dict:
    """The solution as a dict, validated by flashinfer-bench's ``Solution`` model."""
    from flashinfer_bench import Solution

    record = {
        "name": spec.name,
        "definition": DEFINITION_NAME,
        "author": spec.author,
        "spec": {
            "language": spec.language,
            "target_hardware": spec.target_hardware,
            "entry_point": "main.py::run",
            "dependencies": spec.dependencies,
            "destination_passing_style": True,
        },
        "sources": sources(spec, root),
        "description": spec.description,
    }
    Solution.model_validate(record)
    return record


def solution_path(root: Path, name: str = SOLUTION_NAME) -> Path:
    return solutions_dir(root) / f"{name}.json"


def render(record: dict) -> str:
    return json.dumps(record, indent=2) + "\n"


def pack(root: Path) -> List[Path]:
    """Write every solution JSON of ``root`` from its sources (``source_folder``)."""
    written = []
    for spec in SOLUTIONS.values():
        path = solution_path(root, spec.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(build_solution(spec, root)))
        written.append(path)
    return written


def stale_sources(path: Path, root: Optional[Path] = None) -> List[str]:
    """Source files whose packed content differs from the solution's source folder."""
    with open(path) as f:
        record = json.load(f)
    spec = SOLUTIONS.get(record.get("name"))
    if spec is None:
        return []
    packed = {s["path"]: s["content"] for s in record.get("sources", [])}
    current = {s["path"]: s["content"] for s in sources(spec, root)}
    return sorted(p for p in packed.keys() | current.keys() if packed.get(p) != current.get(p))
