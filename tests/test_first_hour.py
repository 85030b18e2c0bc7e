"""A new user's first hour on a CPU machine, command by command: every command acts on the
checkout it is run in (or ``--root``), bundles stand on their own, and the outputs read right."""

import argparse
import json
import re
import shutil
from pathlib import Path

import pytest

from mla_prefill import io as mio
from mla_prefill.cli import build_parser
from mla_prefill.cli import main as cli_main
from mla_prefill.io import DEFINITION_NAME, iter_workload_lines, repo_root, workloads_path
from mla_prefill.report import build_rows, figures, info_for, load_traces

OURS = "mla_prefill_triton_hopper"
CHECKOUT_PARTS = ("definitions", "workloads", "blob", "small", "solutions", "leaderboard")


@pytest.fixture
def checkout(tmp_path):
    """A second checkout: the trace sets, solutions and package sources, without traces."""
    root = tmp_path / "second"
    for part in CHECKOUT_PARTS:
        shutil.copytree(repo_root() / part, root / part, ignore=shutil.ignore_patterns("traces"))
    shutil.copytree(repo_root() / "src", root / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))  # fmt: skip
    return root


def test_check_acts_on_the_checkout_it_runs_in(checkout, monkeypatch, capsys):
    wpath = workloads_path(checkout)
    lines = wpath.read_text().splitlines()
    lines[3] = lines[3].replace('"total_q"', '"total_q" 7', 1)
    wpath.write_text("\n".join(lines) + "\n")
    monkeypatch.chdir(
        checkout / "src"
    )  # any folder inside the checkout (small/ is a set of its own)
    # the commands never look at the checkout the package came from
    monkeypatch.setattr(mio, "repo_root", lambda: Path("/nonexistent"))
    assert cli_main(["check"]) == 1
    out = capsys.readouterr().out
    assert f"{wpath}:4:" in out and "not valid JSON" in out


def test_check_root_option_and_no_trace_set(checkout, tmp_path, monkeypatch, capsys):
    assert cli_main(["check", "--root", str(checkout)]) == 0
    assert f"{checkout}: OK" in capsys.readouterr().out
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="no trace set at or above .*pass --root"):
        cli_main(["check"])


def test_blobs_verify_sees_a_truncated_blob_in_this_checkout(checkout, monkeypatch, capsys):
    wl = next(iter_workload_lines(workloads_path(checkout)))
    blob = checkout / wl.workload["inputs"]["kv_indices"]["path"]
    blob.write_bytes(blob.read_bytes()[:-16])
    monkeypatch.chdir(checkout)
    assert cli_main(["blobs", "--verify"]) == 1
    assert str(blob) in capsys.readouterr().out
    monkeypatch.chdir(repo_root())
    assert cli_main(["blobs", "--verify", "--root", str(checkout)]) == 1
    assert cli_main(["blobs", "--root", str(checkout)]) == 0  # regenerated
    assert cli_main(["blobs", "--verify", "--root", str(checkout)]) == 0


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    """A checkout in which `mla-prefill run` replayed two small workloads on the CPU."""
    root = tmp_path_factory.mktemp("cpu") / "checkout"
    for part in CHECKOUT_PARTS:
        shutil.copytree(repo_root() / part, root / part, ignore=shutil.ignore_patterns("traces"))
    shutil.copytree(repo_root() / "src", root / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))  # fmt: skip
    argv = ["run", "--root", str(root / "small"), "--workload", "7b", "0c", "--solution", OURS]
    assert cli_main(argv) == 0
    return root


@pytest.mark.cpu_only
def test_report_after_a_cpu_run_shows_that_run(cpu_run, monkeypatch, capsys):
    monkeypatch.chdir(cpu_run)
    assert cli_main(["report"]) == 0
    out = capsys.readouterr().out
    assert "== CPU (Triton interpreter)" in out
    rows = [ln.split() for ln in out.splitlines() if ln.startswith(("7b", "0c"))]
    assert len(rows) == 2
    for row in rows:
        assert row[1].isdigit() and row[2] == OURS and row[3] == "PASSED", row
        assert float(row[7]) > 0, row  # x ref: a ratio, not 0.0
    paths = [cpu_run / "small" / "traces"]
    info = info_for(paths, cpu_run)
    rows = build_rows(load_traces(paths), info)
    assert all(r["total_q"] and r["tflops"] for r in rows)
    tflops = figures(rows, info)["tflops.png"].axes[0]
    assert any(len(line.get_xdata()) == 2 for line in tflops.get_lines())


@pytest.mark.cpu_only
def test_export_bundle_checks_and_replays_on_its_own(cpu_run, tmp_path, monkeypatch, capsys):
    bundle = tmp_path / "bundle"
    assert cli_main(["export", str(bundle), "--root", str(cpu_run / "small")]) == 0
    monkeypatch.chdir(tmp_path)
    assert cli_main(["check", "--root", str(bundle)]) == 0
    assert f"{bundle}: OK" in capsys.readouterr().out
    # no blob advice that cannot apply: a bundle cannot regenerate its blobs
    wl = next(iter_workload_lines(workloads_path(bundle)))
    (bundle / wl.workload["inputs"]["qo_indptr"]["path"]).unlink()
    assert cli_main(["check", "--root", str(bundle)]) == 1
    out = capsys.readouterr().out
    assert "not a checkout" in out and "mla-prefill blobs" not in out
    shutil.rmtree(bundle)
    assert cli_main(["export", str(bundle), "--root", str(cpu_run / "small")]) == 0
    assert cli_main(["run", "--root", str(bundle), "--force", "--workload", "7b"]) == 0
    traces = [t for f in (bundle / "traces").rglob("*.jsonl") for t in load_traces([f])]
    assert traces and all(t["evaluation"]["status"] == "PASSED" for t in traces)


def test_plots_have_titles_and_no_stray_line():
    fixture = Path(__file__).parent / "fixtures" / "traces_h200_subset.jsonl"
    info = info_for([fixture], repo_root())
    figs = figures(build_rows(load_traces([fixture]), info), info)
    for name, fig in figs.items():
        assert fig.axes[0].get_title(), f"{name} has no title"
    (line,) = figs["roofline.png"].axes[0].get_lines()  # the roofline and nothing else
    assert len(line.get_xdata()) > 10 and "roofline" in line.get_label()


def test_compare_groups_by_hardware_with_ratios_inside_each(capsys):
    assert cli_main(["compare", "--workload", "053a88a3", "a06f2653"]) == 0
    out = capsys.readouterr().out
    ours_hw = {
        t["evaluation"]["environment"]["hardware"] for t in load_traces([repo_root() / "traces"])
    }
    assert len(ours_hw) == 1 and "B200" not in next(iter(ours_hw))
    b200 = out.index("== NVIDIA B200")
    hopper = out.index(f"== {ours_hw.pop()}")
    b200_part = out[b200:hopper] if b200 < hopper else out[b200:]
    # the leaderboard's own entries against FlashInfer on B200, beside ours on the Hopper GPU
    assert re.search(
        r"ako4x_triton_iter5_b200_2026-05: \d+\.\d\dx flashinfer_wrapper_b200", b200_part
    )
    assert "mla_prefill_triton_hopper" not in b200_part
    assert "not comparable" in out.lower() or "compared only within one hardware group" in out
    assert "CUPTI" in out


def test_report_ratio_is_not_confusable_with_the_kernel_ratio(capsys):
    assert cli_main(["report"]) == 0
    out = capsys.readouterr().out
    assert "x FI+plan" in out and "x FlashInfer" not in out.split("\n\n")[0]
    assert "plan() inside every call" in out and "not `mla-prefill bench`'s" in out


def _options(parser: argparse.ArgumentParser, path=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, (*path, name))
        elif not isinstance(action, argparse._HelpAction):
            yield " ".join(path) or "mla-prefill", action


def test_every_option_of_every_command_has_help():
    missing = [f"{cmd} {a.option_strings or a.dest}" for cmd, a in _options(build_parser())
               if not a.help]  # fmt: skip
    assert missing == []


def test_readme_two_commands_section_shows_two_commands():
    text = (repo_root() / "README.md").read_text()
    section = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    commands = [ln for ln in block.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert len(commands) == 2, commands


def test_bad_json_line_reports_its_column(tmp_path):
    path = tmp_path / "w.jsonl"
    path.write_text('{"a": 1}\n{"a":\n')
    with pytest.raises(ValueError, match=r"w\.jsonl:2:6: not valid JSON .* at column 6"):
        list(iter_workload_lines(path))


def test_run_with_an_unknown_solution_lists_the_valid_names(monkeypatch):
    monkeypatch.chdir(repo_root())
    with pytest.raises(SystemExit) as e:
        cli_main(["run", "--solution", "bogus", "--workload", "7b"])
    assert "bogus" in str(e.value) and OURS in str(e.value)
    assert "flashinfer_wrapper_plan_inside" in str(e.value)


def test_definition_name_is_the_upstream_one():
    assert json.loads(mio.definition_path(repo_root()).read_text())["name"] == DEFINITION_NAME
