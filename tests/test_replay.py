"""`mla-prefill run` on the CPU path: traces, resume, atomic writes, failures, SIGKILL."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mla_prefill.cli import main as cli_main
from mla_prefill.io import DEFINITION_NAME, repo_root, small_root
from mla_prefill.pack import solution_path
from mla_prefill.replay import read_traces, trace_file, write_atomic

OURS = "mla_prefill_triton_hopper"


def python_solution(name: str, body: str) -> dict:
    return {
        "name": name,
        "definition": DEFINITION_NAME,
        "author": "tests",
        "spec": {
            "language": "python",
            "target_hardware": ["CPU"],
            "entry_point": "main.py::run",
            "dependencies": ["torch"],
            "destination_passing_style": True,
        },
        "sources": [{"path": "main.py", "content": body}],
    }


@pytest.fixture
def root(tmp_path):
    """A copy of the small trace set with our solution and extra test solutions."""
    r = tmp_path / "set"
    shutil.copytree(small_root(), r, ignore=shutil.ignore_patterns("traces"))
    sol_dir = r / "solutions" / "mla_paged" / DEFINITION_NAME
    sol_dir.mkdir(parents=True)
    shutil.copy(solution_path(repo_root()), sol_dir / f"{OURS}.json")
    return r


def add_solution(root: Path, record: dict) -> None:
    path = root / "solutions" / "mla_paged" / DEFINITION_NAME / f"{record['name']}.json"
    path.write_text(json.dumps(record))


def n_workloads(root: Path) -> int:
    return sum(1 for _ in open(root / "workloads" / "mla_paged" / f"{DEFINITION_NAME}.jsonl"))


@pytest.mark.cpu_only  # the traces name the interpreter as their hardware
def test_run_writes_traces_then_resumes_with_no_work(root, capsys):
    assert cli_main(["run", "--root", str(root), "--workload", "7b", "0c"]) == 0
    first = read_traces(trace_file(root, OURS))
    assert [t["evaluation"]["status"] for t in first] == ["PASSED", "PASSED"]
    assert first[0]["evaluation"]["environment"]["hardware"] == "CPU (Triton interpreter)"
    capsys.readouterr()
    assert cli_main(["run", "--root", str(root), "--workload", "7b", "0c"]) == 0
    assert "0 pair(s) to run, 2 already traced" in capsys.readouterr().out
    assert read_traces(trace_file(root, OURS)) == first


def test_failing_solution_gives_failed_trace_not_stopped_run(root):
    add_solution(
        root, python_solution("broken", "def run(*args):\n    raise RuntimeError('boom')\n")
    )
    assert cli_main(["run", "--root", str(root), "--workload", "7b"]) == 0
    (bad,) = read_traces(trace_file(root, "broken"))
    assert bad["evaluation"]["status"] == "RUNTIME_ERROR"
    assert "boom" in bad["evaluation"]["log"]
    (good,) = read_traces(trace_file(root, OURS))
    assert good["evaluation"]["status"] == "PASSED"


def test_wrong_answer_is_incorrect_numerical(root):
    body = "def run(*args):\n    args[-2].fill_(0.5)\n    args[-1].fill_(0.0)\n"
    add_solution(root, python_solution("wrong", body))
    assert cli_main(["run", "--root", str(root), "--workload", "7b", "--solution", "wrong"]) == 0
    (t,) = read_traces(trace_file(root, "wrong"))
    assert t["evaluation"]["status"] == "INCORRECT_NUMERICAL"


def test_interrupted_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "t.jsonl"
    write_atomic(path, [{"a": 1}])

    class Boom:
        def __iter__(self):
            yield {"a": 2}
            raise KeyboardInterrupt  # Ctrl-C in the middle of writing

    with pytest.raises(KeyboardInterrupt):
        write_atomic(path, Boom())
    assert path.read_text() == '{"a": 1}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["t.jsonl"]  # no temporary file left


@pytest.mark.cpu_only  # the kill must land mid-run: timed for the interpreter's pace
def test_sigkill_mid_run_leaves_parseable_traces_and_resume_completes(root):
    body = (
        "import time\n"
        "from mla_prefill.kernel.main import run as _run\n"
        "def run(*args):\n"
        "    time.sleep(0.4)\n"
        "    _run(*args)\n"
    )
    add_solution(root, python_solution("slow", body))
    env = {**os.environ, "PYTHONPATH": str(repo_root() / "src")}
    cmd = [sys.executable, "-m", "mla_prefill.cli", "run", "--root", str(root)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    slow_file = trace_file(root, "slow")
    deadline = time.time() + 120
    while time.time() < deadline and not (slow_file.exists() and read_traces(slow_file)):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = len(read_traces(slow_file))
    assert 1 <= done < n_workloads(root), "kill landed outside the run; make the solution slower"
    for f in (root / "traces").rglob("*.jsonl"):
        read_traces(f)  # every line parses
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for name in ("slow", OURS):
        traces = read_traces(trace_file(root, name))
        assert len(traces) == n_workloads(root)
        assert len({t["workload"]["uuid"] for t in traces}) == n_workloads(root)
        assert all(t["evaluation"]["status"] == "PASSED" for t in traces)
