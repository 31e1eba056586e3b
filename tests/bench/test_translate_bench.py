"""The translate suite's smallest setting, run once so that it cannot rot (its figures are not asserted: the targets'
verdicts live in BENCHMARKS.md). It writes its section after the others and keeps them, and `--report-from` writes the
same section again from the results that `--json` saved. It runs one round (each round starts every engine's processes
again); how several rounds are reported is checked on its results, with the rounds written in."""

import json
import os
import subprocess
import sys

from bench.translate.suite import fastest_round

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
MARKER = "<!-- translate: written by python -m bench translate -->"
ROWS = (
    "`translate`, torch engine",
    "MarianMTModel `generate()` loop",
    "`translate`, CTranslate2 engine",
    "CTranslate2 `translate_file`",
    "`translate`, torch engine, 2 processes",
)


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench", "translate", *args], cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip


def test_the_smallest_translate_run_writes_its_section_with_a_row_per_engine_and_a_verdict_per_target(tmp_path):
    out, raw = tmp_path / "BENCHMARKS.md", tmp_path / "translate.json"
    out.write_text(f"# Benchmarks\n\nthe speed suite's report\n\n{MARKER}\n\nan earlier run's section\n")
    flags = "--quick --sizes tiny --sentences 100 --beams 1"
    done = bench(*flags.split(), "--out", str(out), "--json", str(raw))
    assert done.returncode == 0, done.stderr[-3000:]
    report = out.read_text()
    assert report.startswith("# Benchmarks\n\nthe speed suite's report\n")
    assert report.count(MARKER) == 1 and "an earlier run's section" not in report
    assert f"- command: `python -m bench translate {flags}`" in report
    assert "rounds" not in report  # one round
    assert "### tiny: 100 sentences" in report
    assert "`--read-window 100` (`50` on 2 processes)" in report  # one window on one process, a share each on two
    assert "gave the same text on 16 of 16 sentences" in report
    search = "greedy"
    rows = [line.split(" | ")[0][2:] for line in report.splitlines() if f" | {search} | " in line]
    assert rows[:5] == list(ROWS)
    verdicts = [line[:-2].rsplit(" | ", 1)[1] for line in report.splitlines() if line.startswith(f"| {search}: ")]
    assert len(verdicts) == 3 and all(v.startswith(("met", "missed")) for v in verdicts[:2])
    assert verdicts[2] == "no target"
    assert "| peak RSS flat in the input's size: 100 against 10 sentences <= 1.1x |" in report
    results = json.loads(raw.read_text())
    assert set(results["sizes"]["tiny"]["rows"]) == {"greedy"}
    rows = results["sizes"]["tiny"]["rows"]["greedy"].values()
    assert all(
        len(row["rounds"]) == 1 and abs(row["seconds"] - row["startup"] - row["rounds"][0]) < 0.01 for row in rows
    )
    again = tmp_path / "again.md"
    assert bench("--report-from", str(raw), "--out", str(again)).returncode == 0
    assert again.read_text() == report[report.index(MARKER) :]
    results["settings"]["repeats"] = 2  # as a run of two rounds records it
    raw.write_text(json.dumps(results))
    assert bench("--report-from", str(raw), "--out", str(again)).returncode == 0
    assert (
        "measured in 2 rounds, every engine once a round in turn, and each row gives its fastest" in again.read_text()
    )


def test_each_row_keeps_its_fastest_round_without_its_start_up():
    rows = [{"seconds": 9.0}, {"seconds": 8.5}, {"seconds": 7.0}]
    times = [(9.0 - 3.0, 3.0, rows[0]), (8.5 - 7.0, 7.0, rows[1]), (7.0 - 4.0, 4.0, rows[2])]
    assert fastest_round(times) == times[1]  # not the shortest process nor the quickest start
