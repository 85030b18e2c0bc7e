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
    """The checkout these sources sit in (for the tests, which run from a checkout). Commands
    never use it: they act on ``find_root``'s trace set."""
    return Path(__file__).resolve().parents[2]


def small_root() -> Path:
    """The small CPU trace set of ``repo_root`` (same definition, tiny caches)."""
    return repo_root() / "small"


def is_trace_set(path: Path) -> bool:
    return definition_path(path).is_file()


def find_root(explicit: Optional[str] = None) -> Path:
    """The trace set a command acts on: ``--root`` when given, else the nearest folder at or
    above the current directory that holds the definition (a checkout of this repository, an
    ``export`` bundle, or an official dataset clone). Never the checkout the package was
    installed from."""
    rel = definition_path(Path("."))
    if explicit:
        root = Path(explicit).resolve()
        if not is_trace_set(root):
            raise SystemExit(
                f"--root {explicit}: no {rel} there; pass a checkout of mla-prefill, an export "
                "bundle or a dataset clone"
            )
        return root
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if is_trace_set(folder):
            return folder
    raise SystemExit(
        f"no trace set at or above {here} (a folder holding {rel}): run the command from a "
        "checkout of mla-prefill, or pass --root"
    )


def small_set(root: Path) -> Optional[Path]:
    """``root/small``, the checkout's small CPU trace set, if it has one."""
    small = root / "small"
    return small if is_trace_set(small) else None


def is_checkout(root: Path) -> bool:
    """Whether ``root`` is a checkout of this repository (it has the package's sources), as
    opposed to an export bundle or a dataset clone."""
    return (root / "src" / "mla_prefill" / "kernel" / "main.py").is_file()


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


class TraceFileError(ValueError):
    """A JSONL line of a trace set that does not parse; the message says where."""


def iter_workload_lines(path: Path) -> Iterator[WorkloadLine]:
    """Parse a workloads/traces JSONL file; a bad line raises ``TraceFileError`` with
    ``path:line:column``."""
    with open(path) as f:
        for lineno, text in enumerate(f, start=1):
            if not text.strip():
                continue
            # without its newline: an error at the end of the line is at its last column + 1,
            # not at column 1 of a line after it
            text = text.rstrip("\r\n")
            try:
                record = json.loads(text)
            except json.JSONDecodeError as e:
                raise TraceFileError(
                    f"{path}:{lineno}:{e.colno}: not valid JSON ({e.msg} at column {e.colno})"
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


def missing_blob_advice(root: Path) -> str:
    """What to do about a missing blob under ``root``: a checkout regenerates its blobs; a bundle
    or a dataset clone must be given them."""
    if is_checkout(root):
        return "run `mla-prefill blobs` to regenerate it, or pass --dataset with the dataset clone"
    return (
        "this trace set is not a checkout, so it cannot regenerate blobs: copy the file from the "
        "checkout that wrote it (`mla-prefill export` copies the blobs of every exported "
        "workload), or pass --dataset with the dataset clone"
    )


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
                f"{root}; {missing_blob_advice(root)}"
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
