"""The serve suite's shortest setting, run once so that it cannot rot (its figures are not asserted: the targets'
verdicts live in BENCHMARKS.md). It writes its section after the others and keeps them."""

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


@pytest.mark.parametrize("generator", ["hey", "python"])
def test_the_shortest_serve_run_writes_its_section_with_a_verdict_per_target(generator, tmp_path):
    if generator == "hey" and not (shutil.which("hey") and (os.cpu_count() or 1) >= 2):
        pytest.skip("hey is not installed (Debian: apt-get install hey), or the machine has one core")
    out = tmp_path / "BENCHMARKS.md"
    out.write_text("# Benchmarks\n\nthe speed suite's report\n")
    command = [sys.executable, "-m", "bench", "serve", "--engines", "torch", "--duration", "2", "--soak", "2"]
    command += ["--generator", generator]
    done = subprocess.run(
        [*command, "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = out.read_text()
    assert report.startswith("# Benchmarks\n\nthe speed suite's report\n")
    assert report.count("<!-- serve: written by python -m bench serve -->") == 1
    assert f"- command: `python -m bench serve --engines torch --duration 2 --soak 2 --generator {generator}`" in report
    assert ("Debian's `hey`" in report) == (generator == "hey")
    names = ("| 1 client", "| 8 clients", "| 32 clients")
    loads = [line.split(" | ")[0] for line in report.splitlines() if line.startswith(names)]
    assert loads == ["| 1 client", "| 8 clients", "| 32 clients"]
    verdicts = [line.rsplit(" | ", 1)[1] for line in report.splitlines() if line.startswith("| concurrency")]
    assert len(verdicts) == 4 and all(v.startswith(("met", "missed")) for v in verdicts)
    assert "| SIGTERM: exit status 0 | 0 | met |" in report
