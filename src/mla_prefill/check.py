"""``mla-prefill check``: validate a trace set and report every problem by file, workload and field."""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import torch

from mla_prefill.io import (
    DEFINITION_NAME,
    INDEX_INPUTS,
    definition_path,
    is_checkout,
    iter_workload_lines,
    missing_blob_advice,
    resolve_blob,
    traces_dir,
    workloads_path,
)
from mla_prefill.kernel.validate import index_data_problems
from mla_prefill.pack import SOLUTIONS, stale_sources

RESULTS = "benchmarks/results"  # committed GPU evidence, relative to a checkout
# the committed GPU fuzz results (scripts/release_check.sh writes them) and the paths they cover,
# as fuzz arguments: the solution's call with the GPU's own tiles, with the B200's tiles (its
# launch plans run on whatever GPU ran the fuzz; the GPU is recorded in each file), the serving plan
FUZZ_EVIDENCE = (
    ("fuzz-call.json", ""),
    ("fuzz-b200-tiles.json", " --target b200"),
    ("fuzz-plan.json", " --path plan"),
)


@dataclass
class Problem:
    file: str
    field: str
    message: str
    uuid: Optional[str] = None

    def __str__(self) -> str:
        where = self.file + (f" [workload {self.uuid[:8]}]" if self.uuid else "")
        return f"{where} {self.field}: {self.message}"


def _check_definition(root: Path, problems: List[Problem]):
    from flashinfer_bench import Definition

    path = definition_path(root)
    if not path.exists():
        problems.append(
            Problem(str(path), "definition", "missing; copy the upstream definition JSON here")
        )
        return None
    try:
        definition = Definition.model_validate(json.loads(path.read_text()))
    except Exception as e:  # pydantic's message names the field
        problems.append(Problem(str(path), "definition", f"does not match the schema: {e}"))
        return None
    if definition.name != DEFINITION_NAME:
        problems.append(
            Problem(str(path), "name", f"expected {DEFINITION_NAME!r}, got {definition.name!r}")
        )
    return definition


def _check_workload(root: Path, definition, wl, dataset: Optional[Path], problems: List[Problem]):
    from flashinfer_bench import Workload

    where, uuid = f"{wl.path}:{wl.line}", wl.uuid

    def bad(field: str, message: str) -> None:
        problems.append(Problem(where, field, message, uuid))

    if wl.record.get("definition") != DEFINITION_NAME:
        bad("definition", f"expected {DEFINITION_NAME!r}, got {wl.record.get('definition')!r}")
    try:
        workload = Workload.model_validate(wl.workload)
    except Exception as e:
        bad("workload", f"does not match the schema: {e}")
        return
    var_axes = [n for n, a in definition.axes.items() if a.type == "var"]
    missing = [a for a in var_axes if a not in workload.axes]
    if missing:
        bad("axes", f"missing {missing}; every var axis of the definition needs a value")
        return
    missing_inputs = [n for n in definition.inputs if n not in workload.inputs]
    if missing_inputs:
        bad("inputs", f"missing {missing_inputs}")
        return
    shapes = dict(zip(definition.inputs, definition.get_input_shapes(workload.axes)))
    tensors = {}
    for name in INDEX_INPUTS:
        spec = workload.inputs[name]
        if spec.type != "safetensors":
            bad(
                f"inputs.{name}",
                f"must be a safetensors blob (a random int32 input is drawn from [-1024, 1024)), got {spec.type}",
            )
            continue
        path = resolve_blob(root, spec.path, dataset)
        if not path.exists():
            bad(
                f"inputs.{name}",
                f"blob {spec.path} not found; {missing_blob_advice(root)}",
            )
            continue
        import safetensors.torch as st

        try:
            blob = st.load_file(str(path))
        except Exception as e:
            bad(f"inputs.{name}", f"{spec.path} is not a readable safetensors file: {e}")
            continue
        if spec.tensor_key not in blob:
            bad(f"inputs.{name}", f"{spec.path} has no tensor {spec.tensor_key!r}")
            continue
        t = blob[spec.tensor_key]
        if t.dtype != torch.int32:
            bad(f"inputs.{name}", f"expected dtype int32, got {t.dtype}")
            continue
        if list(t.shape) != shapes[name]:
            bad(
                f"inputs.{name}",
                f"expected shape {shapes[name]} from the axes, got {list(t.shape)}",
            )
            continue
        tensors[name] = t
    if len(tensors) != len(INDEX_INPUTS):
        return
    for arg, message in index_data_problems(
        tensors["qo_indptr"], tensors["kv_indptr"], tensors["kv_indices"],
        workload.axes["total_q"], workload.axes["num_pages"],
    ):  # fmt: skip
        bad(f"inputs.{arg}", message)


def _check_solutions(root: Path, problems: List[Problem]) -> None:
    from flashinfer_bench import Solution

    for path in sorted((root / "solutions").rglob("*.json")):
        try:
            record = json.loads(path.read_text())
            Solution.model_validate(record)
        except Exception as e:
            problems.append(Problem(str(path), "solution", f"does not match the schema: {e}"))
            continue
        if record.get("name") in SOLUTIONS and is_checkout(root):
            stale = stale_sources(path, root)
            if stale:
                problems.append(
                    Problem(
                        str(path),
                        "sources",
                        f"out of sync with its sources in src/mla_prefill/ ({', '.join(stale)}); "
                        "run `mla-prefill pack` and commit the result",
                    )
                )


def _check_traces(root: Path, problems: List[Problem]) -> None:
    from flashinfer_bench import Trace

    for path in sorted(traces_dir(root).rglob("*.jsonl")) if traces_dir(root).exists() else []:
        try:
            for wl in iter_workload_lines(path):
                Trace.model_validate(wl.record)
        except Exception as e:
            problems.append(Problem(str(path), "trace", str(e)))


def _check_gpu_evidence(root: Path, problems: List[Problem]) -> None:
    """The committed GPU fuzz results must describe the checkout's kernel sources as they are."""
    from mla_prefill.fuzz import kernel_sha256

    if not is_checkout(root):
        return
    current = kernel_sha256(root / "src" / "mla_prefill" / "kernel")
    for name, target in FUZZ_EVIDENCE:
        path = root / RESULTS / name
        if not path.exists():
            continue
        recorded = json.loads(path.read_text()).get("kernel_sha256")
        if recorded != current:
            problems.append(
                Problem(
                    str(path),
                    "kernel_sha256",
                    f"recorded {str(recorded)[:12]}..., the kernel sources hash to "
                    f"{current[:12]}...: the GPU fuzz describes other code; re-run "
                    f"`python -m mla_prefill.fuzz --n 1000{target} --output {RESULTS}/{name}` "
                    "on a GPU (scripts/gpu_check.sh) and commit it with the kernel change",
                )
            )


def check_trace_set(root: Path, dataset: Optional[Path] = None) -> List[Problem]:
    """Every problem found under ``root``; an empty list means the trace set is valid."""
    problems: List[Problem] = []
    definition = _check_definition(root, problems)
    wpath = workloads_path(root)
    if definition is not None:
        if not wpath.exists():
            problems.append(Problem(str(wpath), "workloads", "missing"))
        else:
            seen = {}
            try:
                lines = list(iter_workload_lines(wpath))
            except ValueError as e:
                problems.append(Problem(str(wpath), "workloads", str(e)))
                lines = []
            for wl in lines:
                if wl.uuid in seen:
                    problems.append(
                        Problem(
                            f"{wpath}:{wl.line}",
                            "uuid",
                            f"duplicate of line {seen[wl.uuid]}",
                            wl.uuid,
                        )
                    )
                seen[wl.uuid] = wl.line
                _check_workload(root, definition, wl, dataset, problems)
    _check_solutions(root, problems)
    _check_traces(root, problems)
    _check_gpu_evidence(root, problems)
    return problems
