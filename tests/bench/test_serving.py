"""The serving suite's smallest setting, run once so that the suite cannot rot (its figures are not asserted: the
targets live in BENCHMARKS.md). It writes its section after the speed suite's report and keeps that report."""

import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def test_smallest_serving_setting_writes_its_section_after_the_main_report(tmp_path):
    out = tmp_path / "BENCHMARKS.md"
    out.write_text("# Benchmarks\n\nthe speed suite's report\n")
    command = [
        sys.executable,
        "-m",
        "bench",
        "serving",
        "--sizes",
        "numbers",
        "--threads",
        "2",
        "--repeats",
        "1",
        "--out",
        str(out),
    ]
    for _ in range(2):  # a second run replaces the section, it does not add another
        done = subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True, timeout=900, env={**os.environ, "HF_HUB_OFFLINE": "1"}
        )
        assert done.returncode == 0, done.stderr[-3000:]
    report = out.read_text()
    assert report.startswith("# Benchmarks\n\nthe speed suite's report\n")
    assert report.count("<!-- serving: written by python -m bench serving -->") == 1
    rows = [line for line in report.splitlines() if line.startswith("| ours-") or line.startswith("| marian-")]
    assert [row.split(" | ")[0] for row in rows] == [
        "| ours-ct2-float32",
        "| ours-ct2-int8",
        "| ours-generate",
        "| marian-generate",
        "| marian-ct2-float32",
        "| marian-ct2-int8",
        "| ours-ct2-float32-parallel",  # at 2 threads, the CTranslate2 engines again with a batch per thread
        "| ours-ct2-int8-parallel",
        "| marian-ct2-float32-parallel",
        "| marian-ct2-int8-parallel",
    ]
    assert "MarianMTLoader" in report
    parallel = next(row for row in rows if row.startswith("| ours-ct2-int8-parallel")).split(" | ")
    assert parallel[-2].endswith("x") and parallel[-1].endswith("x |")  # compared with Marian's in the same layout
