"""Reading the trace set: the definition, workload lines (with ``path:line`` in errors) and blobs."""

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import torch

DEFINITION_NAME = "mla_paged_prefill_causal_h16_ckv512_kpe64_ps1"
OP_TYPE = "mla_paged"
INDEX_INPUTS = ("qo_indptr", "kv_indptr", "kv_indices")
# the definition's inputs, in its order (the positional order of `run` and of the reference)
INPUTS = ("q_nope", "q_pe", "ckv_cache", "kpe_cache", *INDEX_INPUTS, "sm_scale")
DATASET_ENV = "FIB_DATASET_PATH"


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a reader (or a crash) sees the old or the new file
    whole: temporary file beside it, fsync, rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def repo_root() -> Path:
    """The trace-set root this package lives in (the repository root)."""
    return Path(__file__).resolve().parents[2]


def small_root() -> Path:
    """Root of the small CPU trace set (same definition, tiny caches)."""
    return repo_root() / "small"


def definition_path(root: Path) -> Path:
    return root / "definitions" / OP_TYPE / f"{DEFINITION_NAME}.json"


def workloads_path(root: Path) -> Path:
    return root / "workloads" / OP_TYPE / f"{DEFINITION_NAME}.jsonl"


def solutions_dir(root: Path) -> Path:
    return root / "solutions" / OP_TYPE / DEFINITION_NAME


def traces_dir(root: Path) -> Path:
    return root / "traces" / OP_TYPE / DEFINITION_NAME


def load_definition_json(root: Path) -> dict:
    with open(definition_path(root)) as f:
        return json.load(f)


def reference_fn(root: Optional[Path] = None):
    """The definition's ``reference`` ``run``, executed from the JSON (never retyped)."""
    definition = load_definition_json(root or repo_root())
    namespace: Dict[str, object] = {}
    exec(compile(definition["reference"], f"<{DEFINITION_NAME}.reference>", "exec"), namespace)
    return namespace["run"]


@dataclass
class WorkloadLine:
    """One workload line with where it came from."""

    path: Path
    line: int
    record: dict

    @property
    def workload(self) -> dict:
        return self.record["workload"]

    @property
    def uuid(self) -> str:
        return self.workload.get("uuid", "?")

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line} (workload {self.uuid[:8]})"


def iter_workload_lines(path: Path) -> Iterator[WorkloadLine]:
    """Parse a workloads/traces JSONL file; a bad line raises with ``path:line``."""
    with open(path) as f:
        for lineno, text in enumerate(f, start=1):
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(
                    f"{path}:{lineno}: not valid JSON ({e.msg} at column {e.colno})"
                ) from e
            yield WorkloadLine(path, lineno, record)


def load_workloads(root: Path) -> List[WorkloadLine]:
    return list(iter_workload_lines(workloads_path(root)))


def dataset_override(dataset: Optional[str]) -> Optional[Path]:
    """``--dataset PATH`` or ``FIB_DATASET_PATH``: an official dataset clone whose blobs win."""
    value = dataset or os.environ.get(DATASET_ENV)
    return Path(value) if value else None


def resolve_blob(root: Path, rel_path: str, dataset: Optional[Path] = None) -> Path:
    """A blob path from a workload line, relative to the trace-set root (or the official clone)."""
    if dataset is not None:
        official = dataset / rel_path
        if official.exists():
            return official
    return root / rel_path


def load_index_tensors(
    root: Path, workload: dict, dataset: Optional[Path] = None
) -> Dict[str, torch.Tensor]:
    """The safetensors inputs of a workload (``qo_indptr``, ``kv_indptr``, ``kv_indices``)."""
    import safetensors.torch as st

    tensors: Dict[str, torch.Tensor] = {}
    cache: Dict[Path, Dict[str, torch.Tensor]] = {}
    for name, spec in workload["inputs"].items():
        if spec.get("type") != "safetensors":
            continue
        path = resolve_blob(root, spec["path"], dataset)
        if not path.exists():
            raise FileNotFoundError(
                f"workload {workload.get('uuid', '?')[:8]}: blob {spec['path']} not found under "
                f"{root}; run `mla-prefill blobs` to regenerate it, or pass --dataset with the "
                "official dataset clone"
            )
        if path not in cache:
            cache[path] = st.load_file(str(path))
        if spec["tensor_key"] not in cache[path]:
            raise KeyError(
                f"{path}: has no tensor '{spec['tensor_key']}' (wanted for input {name})"
            )
        tensors[name] = cache[path][spec["tensor_key"]]
    return tensors


def sequence_lengths(qo_indptr: torch.Tensor, kv_indptr: torch.Tensor) -> List[tuple]:
    """``[(q_len, kv_len), ...]`` per sequence."""
    qo = qo_indptr.tolist()
    kv = kv_indptr.tolist()
    return [(qo[i + 1] - qo[i], kv[i + 1] - kv[i]) for i in range(len(qo) - 1)]
