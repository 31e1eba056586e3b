"""The data-pipeline suite end to end on a tiny corpus, so that the suite cannot rot (its figures are not asserted:
the targets live in BENCHMARKS.md). Its section replaces an older one in a copy of BENCHMARKS.md, up to the next
suite's marker, and the speed and serving suites keep it when they rewrite their parts."""

import json
import math
import os
import re
import subprocess
import sys

from vanilla_transformer.training.tasks.numbers import english, german

from bench.common import report

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
TINY = "--d-model 32 --num-heads 4 --d-ff 64 --encoder-layers 1 --decoder-layers 1 --vocab-size 120 --max-tokens 512"


def fake_multi30k(folder) -> str:
    """300 training and 20 validation pairs of number words in Multi30k's layout (with a language to drop)."""
    folder.mkdir()
    numbers = [n * 7919 % 1_000_000 for n in range(320)]
    for name, part in (("train.jsonl", numbers[:300]), ("validation.jsonl", numbers[300:])):
        with open(folder / name, "w", encoding="utf-8") as handle:
            for n in part:
                pair = {"en": english(n), "de": german(n), "fr": f"nombre {n}"}
                handle.write(json.dumps({"translation": pair}, ensure_ascii=False) + "\n")
    return str(folder)


def run_data(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "data", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_tiny_corpora_write_their_section_and_leave_the_rest_of_the_report(tmp_path):
    original = open(os.path.join(ROOT, "BENCHMARKS.md"), encoding="utf-8").read()
    if report.DATA_MARKER in original:  # the repository's report without its own data section
        original = original[: original.index(report.DATA_MARKER)].rstrip("\n") + "\n"
    later = "<!-- later: written by python -m bench later -->\n\nits section\n"
    out = tmp_path / "BENCHMARKS.md"
    out.write_text(original + "\n" + report.DATA_MARKER + "\n\nan older data section\n\n" + later, encoding="utf-8")
    raw, data = tmp_path / "results.json", fake_multi30k(tmp_path / "multi30k")
    sizes = ["--sizes", "2000", "4000", "--warm-size", "4000", "--streaming-sizes", "4000", "--train-args", TINY]
    run_data("--multi30k", data, *sizes, "--work", str(tmp_path / "work"), "--out", str(out), "--json", str(raw))

    results = json.loads(raw.read_text())
    assert [(r["pairs"], r["mode"], r["cache"]) for r in results["runs"]] == [
        (2000, "map", "cold"),
        (4000, "map", "cold"),
        (4000, "map", "warm"),
        (4000, "streaming", "cold"),
        (4000, "streaming", "warm"),
    ]
    for r in results["runs"]:
        assert r["first_update_s"] > 0 and r["peak_tree_mib"] > 0 and r["peak_main_mib"] > 0
        assert r["peak_tree_mib"] >= r["peak_main_mib"] * 0.9  # the sampled tree sum against the exact peak
        assert 0 < r["peak_tree_pss_mib"] <= r["peak_tree_mib"] * 1.01  # shared pages divided, not repeated
        assert 0 < r["peak_main_anon_mib"] <= r["peak_main_mib"]  # of the main process's peak, what no file backs
        assert r["phases"]["training"] is not None and r["phases"]["training"] <= r["first_update_s"]
    assert results["bpe_reused"] is True
    assert [r["bpe_reused"] for r in results["runs"]] == [False, False, True, False, True]
    # the slope of two tiny sizes is start-up noise, so its sign is not asserted
    assert math.isfinite(results["slope"]["seconds_per_million"])
    assert [(s["from"], s["to"], s["pairs_ratio"]) for s in results["doublings"]] == [(2000, 4000, 2.0)]
    assert results["targets"]["cold_s"]["verdict"].startswith("not measured")  # no run at 4.35 million pairs
    assert re.fullmatch(r"met|missed by [\d.]+%", results["targets"]["doubling"]["verdict"])
    assert results["command"].startswith("python -m bench data --multi30k DIR --sizes 2000 4000")

    # the section replaced the older one, up to the next suite's marker; the rest is byte-identical
    text = out.read_text(encoding="utf-8")
    assert text.startswith(original + "\n" + report.DATA_MARKER + "\n") and text.endswith("\n" + later)
    section = text[len(original) + 1 : -len(later) - 1]
    assert "an older data section" not in section and str(tmp_path) not in section
    assert (
        "| 4,000 | map | warm |" in section
        and "| 4,000 | streaming | cold |" in section
        and "--multi30k DIR" in section
    )

    # written again from the raw results into the repository's report: appended, the rest byte-identical
    fresh = tmp_path / "fresh.md"
    fresh.write_text(original, encoding="utf-8")
    run_data("--report-from", str(raw), "--out", str(fresh))
    assert fresh.read_text(encoding="utf-8") == original.rstrip("\n") + "\n\n" + section

    # the speed and serving suites rewriting their parts keep it
    report.replace_section("# a new report\n", str(fresh))
    assert fresh.read_text(encoding="utf-8").endswith("\n" + section)
    report.replace_section(report.SERVING_MARKER + "\n\nnew serving figures\n", str(fresh), report.SERVING_MARKER)
    assert fresh.read_text(encoding="utf-8") == (
        "# a new report\n\n" + report.SERVING_MARKER + "\n\nnew serving figures\n\n" + section
    )
