"""The GPU suite's smoke setting, run once on whatever device the machine has through bench/gpu/checks.sh, the one
command a GPU machine runs, so that neither can rot (the figures are not asserted, and off a GPU they mean nothing).
The suite replaces its section of BENCHMARKS.md and keeps the other suites' sections."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.common.report import GPU_MARKER, replace_section
from bench.gpu.step import CHANGES

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
REPORT = os.path.join(ROOT, "BENCHMARKS.md")


@pytest.fixture(scope="module")
def checks(tmp_path_factory):
    """bench/gpu/checks.sh, the one command a GPU machine runs, in the smoke setting on this machine, once: the run,
    its output folder, and the repository's BENCHMARKS.md before it."""
    before = open(REPORT, encoding="utf-8").read()
    out = tmp_path_factory.mktemp("checks") / "gpu-results"
    command = ["bash", "bench/gpu/checks.sh", str(out), "--smoke", "--compile-backend", "aot_eager"]
    env = {**os.environ, "PYTHON": sys.executable, "WHEELS": str(out.parent / "no-wheels")}
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done, out, before


def test_smoke_setting_replaces_its_section_and_keeps_the_other_suites_sections(checks):
    _, out, before = checks
    report = (out / "BENCHMARKS.md").read_text(encoding="utf-8")
    start = before.index(GPU_MARKER)
    end = before.index("<!-- ", start + len(GPU_MARKER))  # the next suite's section
    assert report.startswith(before[:start]) and report.endswith(before[end:]) and report.count(GPU_MARKER) == 1
    assert before[start:end] not in report  # the earlier run's section is gone
    assert "- command: `python -m bench gpu --smoke --compile-backend aot_eager`" in report
    assert "- base, compiled: MFU at least 40%: not measured (no compiled base row in this run)" in report
    assert "- base, compiled: MFU against the GEMM-only ceiling at least 0.8x: not measured (no compiled" in report
    assert "| smoke | eager | ours |" in report and "| smoke | compiled | Marian |" in report  # the profile table
    results = json.loads((out / "gpu.json").read_text())
    # measured in the order a lent machine's few minutes want: compiled training, the changes, eager, generation
    assert [(r["size"], r["mode"]) for r in results["train"]] == [("smoke", "compiled"), ("smoke", "eager")]
    logged = [json.loads(line) for line in (out / "gpu-bench.log").read_text().splitlines() if line.startswith("{")]
    kinds = [row.get("mode") if "ours_ms" in row else "change" if "change" in row else "other" for row in logged]
    assert kinds == ["compiled", *["change"] * len(CHANGES), "eager", "other", "other"]  # then generate's two
    assert [r["beams"] for r in results["generate"]] == [1, 5]
    for row in results["train"]:
        assert row["ours_tok_s"] > 0 and row["theirs_tok_s"] > 0 and 0 < row["ours_mfu"] and 0 < row["theirs_mfu"]
        assert row["ours_profile"]["groups"]["GEMM and attention"] > 0 and row["ours_of_ceiling"] > 0
    # each candidate change to our step, against the plain step, with its profile
    changes = [row["change"] for row in results["changes"]]
    assert changes == [change.name for change in CHANGES.values()] and "| smoke | compiled | all three |" in report
    for row in results["changes"]:
        assert row["speed_up"] > 0 and row["profile"]["groups"]["GEMM and attention"] > 0
    assert results["changes"][-1]["batch"] == [8, 8, 8]  # twice the plain batch's 4 sentences


def test_the_section_goes_before_the_suites_that_follow_it_and_is_replaced_when_written_again(tmp_path):
    out = tmp_path / "BENCHMARKS.md"
    earlier = "# Benchmarks\n\nthe speed suite's report\n\n"
    earlier += "<!-- data: written by python -m bench data -->\n\n## Data\n\nits figures\n"
    later = "<!-- engines: written by python -m bench engines -->\n\n## Engines\n\ntheirs\n"
    out.write_text(earlier + "\n" + later)
    replace_section(f"{GPU_MARKER}\n\nold figures\n", str(out), GPU_MARKER)
    assert out.read_text() == earlier + f"\n{GPU_MARKER}\n\nold figures\n\n" + later
    replace_section(f"{GPU_MARKER}\n\nnew figures\n", str(out), GPU_MARKER)
    assert out.read_text() == earlier + f"\n{GPU_MARKER}\n\nnew figures\n\n" + later


def test_the_gpu_checks_script_runs_the_gpu_tests_and_the_benchmark_into_its_folder(checks):
    """The gpu-marked tests run (skipped with their reason off CUDA), the benchmark writes its section into a copy of
    BENCHMARKS.md in the output folder, and the repository's BENCHMARKS.md is left as it was."""
    done, out, before = checks
    assert "gpu-marked tests: exit status 0; python -m bench gpu: exit status 0" in done.stdout
    assert f"torch {torch.__version__}" in (out / "machine.txt").read_text()
    tests = (out / "gpu-tests.log").read_text()
    expected = "passed" if torch.cuda.is_available() else "skipped"
    assert f" {expected}" in tests and " failed" not in tests and " error" not in tests
    # the modules that hold gpu tests, and only those, collected
    ran = {line.split("::")[0] for line in tests.splitlines() if line.startswith("tests/") and "::" in line}
    marked = re.compile(r"^\s*@pytest\.mark\.gpu\b", re.MULTILINE)
    tests_folder = Path(ROOT, "tests")
    holding = {str(p.relative_to(ROOT)) for p in tests_folder.rglob("test_*.py") if marked.search(p.read_text())}
    assert ran == holding and "tests/inference/test_devices.py" in ran
    copy = (out / "BENCHMARKS.md").read_text(encoding="utf-8")
    assert copy.count(GPU_MARKER) == 1
    assert "- command: `python -m bench gpu --smoke --compile-backend aot_eager`" in copy
    assert [r["size"] for r in json.loads((out / "gpu.json").read_text())["train"]] == ["smoke", "smoke"]
    assert open(REPORT, encoding="utf-8").read() == before


def test_a_translate_run_that_fails_is_a_row_saying_why_and_the_suite_goes_on():
    from bench.gpu.suite import seconds_cell, timed_command

    seconds, error = timed_command([sys.executable, "-c", "print('done')"])
    assert seconds > 0 and error is None
    failing = "import sys; print('loading', file=sys.stderr); sys.exit('error: --device cuda: no such library')"
    seconds, error = timed_command([sys.executable, "-c", failing])
    assert seconds is None and error == "error: --device cuda: no such library"
    row = {"device_s": None, "device_error": error, "cpu_s": 12.25, "cpu_error": None}
    assert seconds_cell(row, "device") == "failed: error: --device cuda: no such library"
    assert seconds_cell(row, "cpu") == "12.2"
