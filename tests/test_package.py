"""The trace set, the blobs, the packed solutions and `mla-prefill check`."""

import hashlib
import json
import shutil
import subprocess
import sys

import pytest
import safetensors.torch as st
import torch

from mla_prefill.blobs import SMALL_CASES, verify_all
from mla_prefill.check import FUZZ_EVIDENCE, check_trace_set
from mla_prefill.cli import main as cli_main
from mla_prefill.fuzz import kernel_sha256
from mla_prefill.io import (
    definition_path,
    load_index_tensors,
    load_workloads,
    repo_root,
    small_root,
    workloads_path,
)
from mla_prefill.pack import SOLUTIONS, build_solution, render, solution_path, stale_sources

# sha256 of the upstream files (flashinfer-bench's flashinfer_trace/definitions/mla_paged/), verbatim
UPSTREAM_DEFINITION_SHA256 = "8205a6805bc532cdce2d8353e5ab875c387a1c3a387e5cfdeaf1163751ba27ba"
UPSTREAM_WORKLOADS_SHA256 = "e84e3d377b3560f0bc79cecc2db820f4306e28d6d3174e2b5b2b95a058177183"


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_definition_and_workloads_are_upstream_verbatim():
    assert sha256(definition_path(repo_root())) == UPSTREAM_DEFINITION_SHA256
    assert sha256(workloads_path(repo_root())) == UPSTREAM_WORKLOADS_SHA256
    assert definition_path(small_root()).read_bytes() == definition_path(repo_root()).read_bytes()


def test_traceset_loads_one_definition_and_38_workloads():
    from flashinfer_bench import TraceSet

    ts = TraceSet.from_path(str(repo_root()))
    assert len(ts.definitions) == 1
    (name,) = ts.definitions
    assert len(ts.workloads[name]) == 38
    definition = ts.definitions[name]
    for wl in ts.workloads[name]:
        w = wl.workload
        shapes = dict(zip(definition.inputs, definition.get_input_shapes(w.axes)))
        tensors = load_index_tensors(repo_root(), w.model_dump(mode="json"))
        for key, t in tensors.items():
            assert list(t.shape) == shapes[key], (w.uuid, key)
            assert t.dtype == torch.int32
    assert {s.name for s in ts.solutions[name]} == set(SOLUTIONS)
    # the committed GPU traces load too (what `flashinfer-bench run --local .` reads first)
    traces = ts.traces.get(name, [])
    assert {t.solution for t in traces} == set(SOLUTIONS)
    assert all(t.evaluation.status.value == "PASSED" for t in traces)
    assert len(traces) == 38 * len(SOLUTIONS)


def test_small_set_is_separate():
    from flashinfer_bench import TraceSet

    ts = TraceSet.from_path(str(small_root()))
    (name,) = ts.definitions
    assert len(ts.workloads[name]) == len(SMALL_CASES)


def test_blobs_regenerate_byte_for_byte():
    assert verify_all(repo_root()) == []


def test_check_passes_on_repo(capsys):
    assert cli_main(["check"]) == 0
    assert "OK" in capsys.readouterr().out


@pytest.mark.parametrize("root", [repo_root(), small_root()], ids=["upstream", "small"])
def test_reference_runs_on_cpu(root):
    """The definition's reference runs on every small workload (and on the smallest upstream ones)."""
    from mla_prefill.io import reference_fn

    ref = reference_fn(root)
    lines = load_workloads(root)
    if root == repo_root():
        lines = [wl for wl in lines if wl.workload["axes"]["total_q"] <= 8][:3]
    for wl in lines:
        w = wl.workload
        idx = load_index_tensors(root, w)
        T, P = w["axes"]["total_q"], min(w["axes"]["num_pages"], 1 << 20)
        g = torch.Generator().manual_seed(0)
        out, lse = ref(
            torch.randn(T, 16, 512, generator=g).bfloat16(),
            torch.randn(T, 16, 64, generator=g).bfloat16(),
            torch.randn(P, 1, 512, generator=g).bfloat16(),
            torch.randn(P, 1, 64, generator=g).bfloat16(),
            idx["qo_indptr"],
            idx["kv_indptr"],
            idx["kv_indices"],
            w["inputs"]["sm_scale"]["value"],
        )
        assert out.shape == (T, 16, 512) and lse.shape == (T, 16)
        assert not out.isnan().any()


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_packed_solution_in_sync_with_sources(name):
    """Fails when kernel/ changed without `mla-prefill pack`."""
    path = solution_path(repo_root(), name)
    assert stale_sources(path, repo_root()) == [], "run `mla-prefill pack` and commit the result"
    assert path.read_text() == render(build_solution(SOLUTIONS[name], repo_root()))


# --- `check` must fail, precisely, on broken trace sets ----------------------------------------


@pytest.fixture
def tmp_set(tmp_path):
    """A checkout to break: the small trace set, the packed solutions and their sources."""
    root = tmp_path / "set"
    shutil.copytree(small_root(), root, ignore=shutil.ignore_patterns("traces"))
    shutil.copytree(repo_root() / "solutions", root / "solutions")
    shutil.copytree(repo_root() / "src", root / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))  # fmt: skip
    return root


def _first_blob(root):
    (wl,) = [w for w in load_workloads(root) if "unaligned_multi" in json.dumps(w.workload)]
    path = root / wl.workload["inputs"]["qo_indptr"]["path"]
    return wl, path, st.load_file(str(path))


def _messages(root):
    return [str(p) for p in check_trace_set(root)]


def test_check_copy_is_clean(tmp_set):
    assert _messages(tmp_set) == []


def test_check_reports_blob_with_wrong_shape(tmp_set):
    wl, path, blob = _first_blob(tmp_set)
    blob["kv_indices"] = blob["kv_indices"][:-1].clone()
    st.save_file(blob, str(path))
    msgs = _messages(tmp_set)
    assert any(
        wl.uuid[:8] in m and "inputs.kv_indices" in m and "expected shape" in m for m in msgs
    ), msgs


def test_check_reports_non_monotonic_indptr(tmp_set):
    wl, path, blob = _first_blob(tmp_set)
    qo = blob["qo_indptr"].clone()
    qo[2] = qo[1] - 1
    blob["qo_indptr"] = qo
    st.save_file(blob, str(path))
    msgs = _messages(tmp_set)
    assert any(wl.uuid[:8] in m and "qo_indptr" in m and "never decrease" in m for m in msgs), msgs


def test_check_reports_index_past_num_pages(tmp_set):
    wl, path, blob = _first_blob(tmp_set)
    idx = blob["kv_indices"].clone()
    num_pages = wl.workload["axes"]["num_pages"]
    idx[3] = num_pages
    blob["kv_indices"] = idx
    st.save_file(blob, str(path))
    msgs = _messages(tmp_set)
    want = f"kv_indices[3] = {num_pages} is outside [0, num_pages = {num_pages})"
    assert any(wl.uuid[:8] in m and want in m for m in msgs), msgs


def test_check_reports_stale_solution(tmp_set):
    path = solution_path(tmp_set)
    record = json.loads(path.read_text())
    record["sources"][0]["content"] += "\n# edited by hand\n"
    path.write_text(json.dumps(record))
    msgs = _messages(tmp_set)
    assert any("out of sync" in m and "mla-prefill pack" in m for m in msgs), msgs


def test_check_reports_bad_json_line(tmp_set):
    wpath = workloads_path(tmp_set)
    wpath.write_text(wpath.read_text() + "{not json\n")
    msgs = _messages(tmp_set)
    assert any(f":{len(SMALL_CASES) + 1}:2: not valid JSON" in m for m in msgs), msgs


def test_check_reports_fuzz_results_of_other_kernel_sources(tmp_set):
    """Committed GPU fuzz results that describe other kernel sources make `check` fail."""
    results = tmp_set / "benchmarks" / "results"
    results.mkdir(parents=True)
    fuzz = json.loads((repo_root() / "benchmarks" / "results" / "fuzz-call.json").read_text())
    fuzz["kernel_sha256"] = kernel_sha256()
    (results / "fuzz-call.json").write_text(json.dumps(fuzz))
    assert _messages(tmp_set) == []  # the file describes the checkout's sources
    kernel = tmp_set / "src" / "mla_prefill" / "kernel" / "main.py"
    kernel.write_text(kernel.read_text().replace("LOG2E", "LOG_2E"))
    assert any("kernel_sha256" in m and "re-run" in m for m in _messages(tmp_set))


def test_committed_gpu_evidence_describes_the_kernel():
    """Both committed fuzz files ran the kernel as it is (`mla-prefill check` in CI too)."""
    for name, _ in FUZZ_EVIDENCE:
        d = json.loads((repo_root() / "benchmarks" / "results" / name).read_text())
        assert d["kernel_sha256"] == kernel_sha256(), name
        assert d["complete"] and d["batches"] >= 1000 and d["failures"] == 0, name


def test_release_check_writes_the_fuzz_files_check_reads():
    """scripts/release_check.sh runs each committed fuzz with the arguments `check` names."""
    script = (repo_root() / "scripts" / "release_check.sh").read_text()
    for name, args in FUZZ_EVIDENCE:
        assert f'$fuzz{args} --output "$OUT/{name}"' in script, name


def test_quick_kernel_tests_select_each_group():
    """Every alternative of scripts/quick_kernel_tests.k (the GPU scripts' first, stop-on-failure
    step) names some test of tests/test_kernel.py: a renamed test cannot drop out of it."""
    expr = (repo_root() / "scripts" / "quick_kernel_tests.k").read_text().strip()
    names = [
        line.split("::")[-1]
        for line in subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
             str(repo_root() / "tests" / "test_kernel.py")],
            capture_output=True, text=True, check=True, cwd=repo_root(),
        ).stdout.splitlines()
        if "::" in line
    ]  # fmt: skip
    for term in expr.split(" or "):
        assert any(term in n for n in names), term


def test_kernel_hash_ignores_comments_but_not_code(tmp_path):
    """Evidence stays tied to the code: a comment, docstring or blank-line edit keeps the hash,
    any code change alters it."""
    import shutil

    from mla_prefill.fuzz import kernel_sha256

    kernel = repo_root() / "src" / "mla_prefill" / "kernel"
    copy = tmp_path / "kernel"
    shutil.copytree(kernel, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert kernel_sha256(copy) == kernel_sha256()
    main = copy / "main.py"
    text = main.read_text()
    main.write_text(text.replace("import functools\n", "import functools  # a comment\n\n", 1))
    assert kernel_sha256(copy) == kernel_sha256()
    main.write_text(text.replace('"""Entry point', '"""The entry point', 1))
    assert kernel_sha256(copy) == kernel_sha256()
    main.write_text(text.replace('"config: "', '"configuration: "', 1))
    assert kernel_sha256(copy) != kernel_sha256()
