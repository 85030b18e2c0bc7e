"""report / compare / export on fixture traces (a frozen subset of earlier H200 traces of this repository)."""

from pathlib import Path

import pytest

from mla_prefill.cli import main as cli_main
from mla_prefill.io import repo_root
from mla_prefill.report import build_rows, load_traces, workload_info

FIXTURE = Path(__file__).parent / "fixtures" / "traces_h200_subset.jsonl"


def committed_hardware() -> str:
    """The GPU the committed traces (``traces/``) were measured on."""
    traces = load_traces([repo_root() / "traces"])
    assert traces, "no committed traces"
    (hw,) = {t["evaluation"]["environment"]["hardware"] for t in traces}
    return hw


@pytest.fixture(scope="module")
def rows():
    return build_rows(load_traces([FIXTURE]), workload_info(repo_root()))


def test_report_rows(rows):
    ours = {r["uuid"][:8]: r for r in rows if r["solution"] == "mla_prefill_triton_hopper"}
    assert set(ours) == {"d30e4c23", "053a88a3", "a06f2653"}
    big = ours["a06f2653"]
    # 4674.9 GFLOP from the exact causal pair count (16384 queries over 16387 keys)
    assert abs(big["tflops"] * big["latency_ms"] - 4674.9) < 1
    assert abs(big["ceiling_pct"] - 100 * big["tflops"] / 790) < 1e-9
    fi = [
        r
        for r in rows
        if r["solution"] == "flashinfer_wrapper_plan_inside" and r["uuid"] == big["uuid"]
    ][0]
    assert abs(big["vs_flashinfer"] - fi["latency_ms"] / big["latency_ms"]) < 1e-9
    broken = [r for r in rows if r["solution"] == "broken_solution"][0]
    assert broken["status"] == "RUNTIME_ERROR" and broken["latency_ms"] is None


def test_report_markdown_and_plots(tmp_path, capsys):
    assert (
        cli_main(["report", "--traces", str(FIXTURE), "--markdown", "--plots", str(tmp_path)]) == 0
    )
    out = capsys.readouterr().out
    assert "#### NVIDIA H200" in out
    assert "| a06f2653 | 16384 | mla_prefill_triton_hopper | PASSED |" in out
    assert "geomean" in out
    for name in ("latency.png", "tflops.png", "roofline.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_on_committed_traces(capsys):
    """`mla-prefill report` works on a clean CPU machine from what the repository holds."""
    assert cli_main(["report"]) == 0
    out = capsys.readouterr().out
    assert out.count("mla_prefill_triton_hopper") >= 38


def test_report_without_traces_says_what_to_do(tmp_path, capsys):
    assert cli_main(["report", "--traces", str(tmp_path / "none")]) == 1
    assert "mla-prefill run" in capsys.readouterr().out


def test_compare_on_committed_traces(capsys):
    """The committed traces and leaderboard: 053a88a3 shows the 85.28 ms B200 entry beside ours."""
    assert cli_main(["compare", "--workload", "053a88a3"]) == 0
    out = capsys.readouterr().out
    assert "85.2845" in out and f"== {committed_hardware()}" in out


def test_export_bundle_loads_back(tmp_path, capsys):
    out = tmp_path / "bundle"
    assert cli_main(["export", str(out), "--hardware", committed_hardware()]) == 0
    assert "loads back with flashinfer-bench" in capsys.readouterr().out
    assert (out / "solutions" / "mla_paged").exists()
    with pytest.raises(SystemExit, match="exists"):
        cli_main(["export", str(out)])
