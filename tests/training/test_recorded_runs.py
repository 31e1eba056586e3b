"""The Multi30k figures that RESULTS.md and the README state are those of the recorded runs: each run's row holds its
commit and the scores in its `eval_results.json` (training/recipes/runs/DIRECTION[_published]_seedN_COMMIT_...)."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "training" / "recipes" / "runs"
RESULTS = (ROOT / "training" / "recipes" / "RESULTS.md").read_text(encoding="utf-8")
README = (ROOT / "README.md").read_text(encoding="utf-8")
NAME = re.compile(r"(?P<pair>en_de|en_fr)(?P<published>_published)?_seed(?P<seed>\d+)_(?P<commit>[0-9a-f]{7})_eval")
RECORDED = sorted(RUNS.glob("*_seed*_eval_results.json"))


def test_there_are_recorded_runs_of_both_budgets():
    names = [NAME.match(p.name) for p in RECORDED]
    assert all(names) and {bool(n["published"]) for n in names} == {False, True}


@pytest.mark.parametrize("path", RECORDED, ids=[p.name for p in RECORDED])
def test_results_states_each_recorded_run_as_recorded(path):
    name, recorded = NAME.match(path.name), json.loads(path.read_text())
    direction = {"en_de": "En->De", "en_fr": "En->Fr"}[name["pair"]]
    rows = [line for line in RESULTS.splitlines() if line.startswith(f"| {direction}, seed {name['seed']} | ")]
    rows = [row for row in rows if f"| {name['commit']} |" in row]
    assert len(rows) == 1, f"one row for {path.name} in RESULTS.md"
    cells = [cell.strip().strip("*") for cell in rows[0].strip("|").split("|")]
    scores = [recorded["validation"]["bleu_lowercase"], recorded["test"]["bleu_lowercase"]]
    scores += [recorded["test"]["chrf_lowercase"], recorded["length_penalty"]]
    for score in scores:
        assert any(float(cell) == score for cell in cells if re.fullmatch(r"\d+(\.\d+)?", cell)), score
    if name["published"]:
        search = recorded["averaging_search"]
        assert search["chosen"] in cells and f"{search['last_update']['validation_bleu_lowercase']:.2f}" in cells
        # the README states the run's test score, in bold, and its commit
        assert f"**{recorded['test']['bleu_lowercase']:.2f}**" in README and name["commit"] in README
