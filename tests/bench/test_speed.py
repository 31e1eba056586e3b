"""The speed suite's smallest setting, run once so that the suite cannot rot (its figures are not asserted: speed
targets live in BENCHMARKS.md, not in tests)."""

import json
import os
import subprocess
import sys

from bench.generation_split.suite import split

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def test_smallest_benchmark_setting_writes_its_report(tmp_path):
    out, plot, raw = tmp_path / "BENCHMARKS.md", tmp_path / "scaling.png", tmp_path / "results.json"
    quick = ["--quick", "--sizes", "numbers", "--attn", "sdpa", "--repeats", "1", "--steps", "1"]
    run_bench(*quick, "--out", str(out), "--plot", str(plot), "--json", str(raw), timeout=900)
    report = out.read_text()
    for heading in (
        "## Training step",
        "## Generation",
        "## Peak memory",
        "## Hardware utilisation",
        "## Scaling",
        "## Where the time goes",
    ):
        assert heading in report
    results = json.loads(raw.read_text())
    assert [r["size"] for r in results["train"]] == ["numbers"]
    assert {(r["beams"], r["compiled"]) for r in results["generate"]} == {(1, False), (5, False), (1, True), (5, True)}
    greedy_compiled = [r for r in results["generate"] if r["compiled"] and r["beams"] == 1]
    assert greedy_compiled[0]["ours_compiled"] and greedy_compiled[0]["theirs_compiled"]
    assert all(r["ours"] > 0 and r["theirs"] > 0 and r["ratio"] > 0 for r in results["train"] + results["generate"])
    # the library's step in this process and the training command's in its own, the same FLOPs, each profiled
    (library,), (command,) = results["utilisation"], results["command_step"]
    assert library["flops"] > 0 and command["flops"] == library["flops"]
    for row in (library, command):
        # the profiled step's share of the peak stays under its GEMM-only ceiling (its GEMMs take part of its time);
        # the timed step's share is measured apart, and on a loaded machine can come out either side of it
        profiled_share = row["flops"] / (row["profile"]["step_ms"] / 1e3) / results["matmul_peak"]
        assert 0 < row["fraction"] and 0 < profiled_share <= row["profile"]["gemm_ceiling"], row
        assert row["profile"]["groups"]["GEMM and attention"] > 0 and row["profile"]["groups"]["loss"] > 0
    assert "| numbers | sdpa | library |" in report and "| numbers | sdpa | training command |" in report
    assert {r["task"] for r in results["memory"]} == {"train", "beam5"}
    for r in results["memory"]:  # the task's own memory is part of the peak, and a training step needs some
        assert r["probes"] == 1 and 0 < r["ours_added"] < r["ours"] and 0 < r["theirs_added"] < r["theirs"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # the report can be written again from the raw results, measuring nothing; output file names are not part of
    # the recorded command
    # into a file that holds the serving suite's section: the section is kept, after the new report
    again = tmp_path / "again.md"
    serving = "<!-- serving: written by python -m bench serving -->\n\n## Serving\n\nits figures\n"
    again.write_text("# an older report\n\n" + serving)
    run_bench("--report-from", str(raw), "--out", str(again), "--plot", str(plot), timeout=300)
    assert again.read_text() == report + "\n" + serving
    assert "- command: `python -m bench speed --quick --sizes numbers --attn sdpa --repeats 1 --steps 1`" in report


def run_bench(*args: str, timeout: int) -> None:
    """Run the speed suite as its documented command does, from the repository root, and check that it succeeded."""
    done = subprocess.run(
        [sys.executable, "-m", "bench", "speed", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_generation_split_accounts_for_the_whole_generate_call():
    result = split("numbers", num_beams=2, repeats=1)
    for parts in result.values():
        # the encoder and decoder are timed inside the generate() call, so they take part, not all, of its time
        assert 0 < parts["encoder"] < parts["total"] and 0 < parts["decoder"] < parts["total"]
        assert parts["search"] > 0
