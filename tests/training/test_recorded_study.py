"""The recorded study (training/studies/RESULTS.md): its tables are those `ablate` wrote from its runs, stated as
written, and the figures the README and RESULTS.md quote are in them."""

import json
import re
from pathlib import Path

from vanilla_transformer.training.studies.results import markdown_table
from vanilla_transformer.training.studies.variants import STUDIES

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "training" / "studies" / "recorded" / "numbers-en-de"
RESULTS = (ROOT / "training" / "studies" / "RESULTS.md").read_text(encoding="utf-8")
README = (ROOT / "README.md").read_text(encoding="utf-8")
WRITTEN = json.loads((RECORDED / "results.json").read_text())


def test_the_recorded_study_ran_both_studies_with_three_seeds_a_variant():
    assert set(WRITTEN["studies"]) == set(STUDIES)
    for study, rows in WRITTEN["studies"].items():
        assert [row["variant"] for row in rows] == [
            variant.key for variant in STUDIES[study] if variant.key in {row["variant"] for row in rows}
        ]
        assert all(row["runs"] >= 3 for row in rows)
        assert all(len(set(row["commands"])) == row["runs"] for row in rows)  # one seed a run


def test_results_md_holds_the_tables_ablate_makes_from_results_json():
    written = (RECORDED / "results.md").read_text()
    for rows in WRITTEN["studies"].values():
        assert markdown_table(rows, WRITTEN["metric"], WRITTEN["threshold"]) in written


def test_results_states_the_tables_as_written_and_the_wall_time_of_the_log():
    for line in (RECORDED / "results.md").read_text().splitlines():
        if line.startswith("|"):
            assert line in RESULTS, line
    total = 0.0
    for name in ("ablate.log", "ablate-resume.log"):  # the study, and the same command run again
        log = (RECORDED / name).read_text()
        assert "78 runs (3 seeds of each variant) in studies/numbers-en-de, 2 at a time" in log
        minutes, seconds = re.search(r"^real\s+(\d+)m([\d.]+)s$", log, re.MULTILINE).groups()
        assert f"{int(minutes)} min {round(float(seconds))} s" in RESULTS
        total += 60 * int(minutes) + float(seconds)
    assert f"{int(total // 60)} min {round(total % 60)} s in all" in RESULTS and total < 90 * 60
    assert "vanilla-transformer ablate --jobs 2" in RESULTS


def test_every_figure_the_readme_quotes_is_in_the_recorded_tables():
    section = README[README.index("### What the recorded study found") :]
    section = section[: section.index("\n## ")]
    assert "training/studies/RESULTS.md" in section and "in 56 min 32 s" in section
    cells = {cell.strip() for line in (RECORDED / "results.md").read_text().splitlines() for cell in line.split("|")}
    cells |= {part for cell in set(cells) for part in re.split(r"[ ()]+", cell) if part}  # a mean, or a range's ends
    quoted = re.findall(r"(?<![\w.])(\d+\.\d+)(?![\w.])", section)
    assert len(quoted) >= 15
    for number in quoted:
        assert number in cells, number


def test_the_folded_switches_train_the_recorded_rows_weights_byte_for_byte_and_results_says_so():
    """rerun.json: two rows trained again, each seed at the recording's commit and at the last commit before the
    boolean switches were folded (old flag), and on the folded code (new flag): one model, one set of scores."""
    rerun = json.loads((RECORDED / "rerun.json").read_text())
    section = RESULTS[RESULTS.index("## Trained again, seed for seed") :]
    labels = {"no-layer-norm": "no LayerNorm", "no-positions": "no positions"}
    for variant, row in rerun["rows"].items():
        old, new = row["old_flag"], row["new_flag"]
        for seed, versions in row["runs"].items():
            assert set(versions) == {f"217a506 {old}", f"f54e0eb {old}", f"this tree {new}"}
            figures = list(versions.values())
            assert len(figures) == 3 and all(f == figures[0] for f in figures), (variant, seed)
            test, validation = figures[0]["test_exact_match"], figures[0]["validation_exact_match"]
            assert f"| {labels[variant]} | {seed} | the same bytes in all three | {test} | {validation} |" in section
