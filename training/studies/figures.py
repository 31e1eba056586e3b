"""A study's figure: for each study, the compared score of every variant with its seeds' range, the training loss
curves overlaid, and the greedy validation score by update."""

import os
import statistics

from ...errors import MISSING_MATPLOTLIB, MissingDependencyError
from ...folders import replacing


def mean_curve(curves: list[list]) -> tuple[list, list]:
    """The mean over runs of curves given as (update, value) pairs, at the updates every run has."""
    by_step = {}
    for curve in curves:
        for step, value in curve:
            by_step.setdefault(step, []).append(value)
    steps = sorted(step for step, values in by_step.items() if len(values) == len(curves))
    return steps, [statistics.fmean(by_step[step]) for step in steps]


def draw_study(axes, rows: list[dict], runs: dict[str, list[dict]], metric: str, study: str) -> None:
    """One study's three panels: the test score per variant (each seed a dot, the mean a bar), the training loss and
    the validation score curves (mean over seeds)."""
    scores, losses, validation = axes
    shown = {"exact_match": "test exact match (%)", "bleu": "test BLEU", "bleu_lowercase": "test BLEU (lowercased)"}[
        metric
    ]
    for index, row in enumerate(rows):
        values = [run.get(f"test_{metric}") for run in runs[row["variant"]]]
        values = [value for value in values if value is not None]
        if values:
            scores.barh(index, statistics.fmean(values), color="#c6dbef")
            scores.plot(values, [index] * len(values), "o", color="#08519c", markersize=3)
        label = f"{row['row']}: {row['label']}" if row["row"] not in ("base", "lesson") else row["label"]
        steps, loss = mean_curve([run["loss_curve"] for run in runs[row["variant"]]])
        losses.plot(steps, loss, label=label, linewidth=1)
        steps, score = mean_curve([run["validation_curve"] for run in runs[row["variant"]]])
        validation.plot(steps, score, label=label, linewidth=1, marker=".", markersize=3)
    scores.set_yticks(range(len(rows)), [row["label"] for row in rows], fontsize=7)
    scores.invert_yaxis()
    scores.set_xlabel(shown)
    scores.set_title(f"{study}: each seed (dots), their mean (bar)", fontsize=9)
    losses.set_yscale("log")
    losses.set_xlabel("update")
    losses.set_title("training loss (label-smoothed), mean over seeds", fontsize=9)
    validation.set_xlabel("update")
    validation.set_title(f"greedy validation {shown.removeprefix('test ')}, mean over seeds", fontsize=9)
    validation.legend(fontsize=6, ncol=2)


def draw_studies(study_dir: str, tables: dict[str, list[dict]], runs: dict[str, list[dict]], metric: str) -> str:
    """results.png in `study_dir`: a line of panels per study; returns its path. `runs` holds each variant's runs'
    figures by variant key. Raises `MissingDependencyError` without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingDependencyError(MISSING_MATPLOTLIB) from None
    figure, axes = plt.subplots(len(tables), 3, figsize=(16, 5 * len(tables)), squeeze=False)
    for line, (study, rows) in zip(axes, tables.items()):
        draw_study(line, rows, runs, metric, study)
    figure.tight_layout()
    path = os.path.join(study_dir, "results.png")
    try:
        with replacing(path, binary=True) as handle:  # the old figure or the new one whole
            figure.savefig(handle, dpi=110, format="png")
    finally:
        plt.close(figure)
    return path


__all__ = ["draw_studies"]
