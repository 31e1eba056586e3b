"""The Multi30k figures that RESULTS.md and the README state are those of the recorded runs: each run's row holds its
commit and the scores in its `eval_results.json` (training/recipes/runs/DIRECTION[_gpu][_BUDGET]_seedN_COMMIT_...);
the README's table gives each direction and budget as the mean and range of its runs, in bold the budget whose
validation mean is higher. Runs on a GPU are their own budgets, marked GPU."""

import json
import re
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "training" / "recipes" / "runs"
RESULTS = (ROOT / "training" / "recipes" / "RESULTS.md").read_text(encoding="utf-8")
README = (ROOT / "README.md").read_text(encoding="utf-8")
NAME = re.compile(
    r"(?P<pair>en_de|en_fr)(?P<gpu>_gpu)?(?:_(?P<budget>published|reference))?_seed(?P<seed>\d+)_(?P<commit>[0-9a-f]{7})_eval"
)
BUDGETS = {None: "current recipe", "published": "published budget", "reference": "reference settings"}
RECORDED = sorted(RUNS.glob("*_seed*_eval_results.json"))
DIRECTIONS = {"en_de": "En->De", "en_fr": "En->Fr"}


def test_there_are_recorded_runs_of_both_budgets():
    names = [NAME.match(p.name) for p in RECORDED]
    assert all(names) and {n["budget"] for n in names} == set(BUDGETS)


def budget(name: re.Match) -> str:
    """The README's name for a run's budget: "published budget", "reference settings, GPU", ..."""
    return BUDGETS[name["budget"]] + (", GPU" if name["gpu"] else "")


def run_label(name: re.Match) -> str:
    """The run's label in RESULTS.md: "En->De, seed 42", or "En->De, seed 42, GPU, reference settings"."""
    label = f"{DIRECTIONS[name['pair']]}, seed {name['seed']}"
    return label + (f", GPU, {BUDGETS[name['budget']]}" if name["gpu"] else "")


@pytest.mark.parametrize("path", RECORDED, ids=[p.name for p in RECORDED])
def test_results_states_each_recorded_run_as_recorded(path):
    name, recorded = NAME.match(path.name), json.loads(path.read_text())
    rows = [line for line in RESULTS.splitlines() if line.startswith(f"| {run_label(name)} | ")]
    rows = [row for row in rows if f"| {name['commit']} |" in row]
    assert len(rows) == 1, f"one row for {path.name} in RESULTS.md"
    cells = [cell.strip().strip("*") for cell in rows[0].strip("|").split("|")]
    scores = [recorded["validation"]["bleu_lowercase"], recorded["test"]["bleu_lowercase"]]
    scores += [recorded["test"]["chrf_lowercase"], recorded["length_penalty"]]
    for score in scores:
        assert any(float(cell) == score for cell in cells if re.fullmatch(r"\d+(\.\d+)?", cell)), score
    if name["budget"] == "published":
        search = recorded["averaging_search"]
        assert search["chosen"] in cells and f"{search['last_update']['validation_bleu_lowercase']:.2f}" in cells
    assert name["commit"] in README  # the README names the commit of every run its table summarises


def recorded_groups() -> dict[tuple[str, str], list[dict]]:
    """The recorded runs by direction and budget: {("En->De", "published budget"): [eval_results, ...], ...}."""
    groups = {}
    for path in RECORDED:
        name = NAME.match(path.name)
        groups.setdefault((DIRECTIONS[name["pair"]], budget(name)), []).append(json.loads(path.read_text()))
    return groups


GROUPS = recorded_groups()


def readme_row(direction: str, budget: str) -> list[str]:
    rows = [line for line in README.splitlines() if line.startswith(f"| {direction} | {budget} | ")]
    assert len(rows) == 1, f"one README row for {direction} at the {budget}"
    return [cell.strip() for cell in rows[0].strip("|").split("|")]


def near(cell: str, value: float) -> bool:
    return abs(float(cell) - value) <= 0.005 + 1e-9  # the figure is `value` rounded to two decimals


@pytest.mark.parametrize("key", sorted(GROUPS), ids=" at the ".join)
def test_the_readme_states_each_budget_as_the_mean_and_range_of_its_recorded_runs(key):
    runs, cells = GROUPS[key], readme_row(*key)
    assert cells[2].startswith(f"{len(runs)} (seed")
    for split, cell in zip(("validation", "test"), cells[3:5]):
        scores = [run[split]["bleu_lowercase"] for run in runs]
        figures = re.fullmatch(r"(\*\*)?(\d+\.\d\d)(\*\*)?(?: \((\d+\.\d\d)-(\d+\.\d\d)\))?", cell)
        assert figures and near(figures[2], statistics.mean(scores)), (split, cell)
        if len(runs) > 1:  # the range
            assert near(figures[4], min(scores)) and near(figures[5], max(scores)), (split, cell)


@pytest.mark.parametrize("direction", sorted({direction for direction, _ in GROUPS}))
def test_the_readme_headline_is_the_budget_validation_prefers(direction):
    groups = {budget: runs for (d, budget), runs in GROUPS.items() if d == direction}
    validation = {
        budget: statistics.mean(r["validation"]["bleu_lowercase"] for r in runs) for budget, runs in groups.items()
    }
    bold = [budget for budget in groups if readme_row(direction, budget)[4].startswith("**")]
    assert bold == [max(validation, key=validation.get)]
