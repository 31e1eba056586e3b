"""What a study reports: each run's figures read from its folder (eval_results.json, metrics.jsonl, the weights), and
each variant's row, the mean and range of its runs, written as a Markdown table, CSV and JSON."""

import csv
import json
import math
import os
import statistics

from safetensors import SafetensorError, safe_open

from ...folders import replacing
from ..report.plots import read_metrics
from .runs import PlannedRun, read_record

GRADIENT_NAMES = ("encoder_first", "encoder_last", "decoder_first", "decoder_last")


def main_metric(options: dict) -> str:
    """The score a study compares, from its runs' options: exact match for the embedded task (whose one-word outputs
    BLEU cannot score), else BLEU (lowercased for a lowercasing tokenizer, as train reports it)."""
    if not (options["dataset_name"] or options["train_file"]):
        return "exact_match"
    return "bleu_lowercase" if options.get("lowercase") else "bleu"


def parameter_count(folder: str) -> int | None:
    """The model's parameters, each shared matrix once (as its safetensors file holds them); None where the file is
    gone (removed to save room: the run's scores still count) or cannot be read."""
    try:
        with safe_open(os.path.join(folder, "model.safetensors"), "pt") as weights:
            return sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())
    except (OSError, SafetensorError):
        return None


def read_results(folder: str) -> dict:
    """A finished run's eval_results.json; a ValueError naming the run where it is gone or cannot be read."""
    path = os.path.join(folder, "eval_results.json")
    try:
        with open(path, encoding="utf-8") as handle:
            results = json.load(handle)
    except (OSError, ValueError) as error:
        why = error.strerror if isinstance(error, OSError) else "not a JSON record"
        raise ValueError(f"{path}: {why}; the run finished without it is not counted: remove {folder} and run the "
                         "study again to train it anew") from None  # fmt: skip
    if not isinstance(results, dict):
        raise ValueError(f"{path}: not a record of scores; remove {folder} and run the study again to train it anew")
    return results


def run_figures(run: PlannedRun, metric: str) -> dict:
    """One run's figures: its status, validation and test scores (`metric`, and chrF) and cross-entropies (beam
    search, at the end), the mean gradient norms of the stacks' first and last layers over the updates that recorded
    them, the parameters, seconds per update, and its curves: the training loss and greedy validation score by
    update. A run that stopped has its curves only, and a split the data lacks no scores."""
    record = read_record(run.folder)
    records = read_metrics(run.folder) if os.path.isfile(os.path.join(run.folder, "metrics.jsonl")) else []
    figures = {"key": run.key, "seed": run.seed, "status": record["status"], "command": record["command"]}
    if record["status"] == "finished":
        results = read_results(run.folder)
        for split in ("validation", "test"):
            for name in (metric, "chrf", "cross_entropy"):
                figures[f"{split}_{name}"] = results.get(split, {}).get(name)
        figures["parameters"] = parameter_count(run.folder)
    figures["metric"] = metric
    validated = [(r["step"], r[f"validation_{metric}"]) for r in records if f"validation_{metric}" in r]
    for name in GRADIENT_NAMES:
        norms = [r[f"grad_norm_{name}"] for r in records if r.get(f"grad_norm_{name}") is not None]
        figures[f"grad_norm_{name}"] = statistics.fmean(norms) if norms else None
    seconds = [r["update_seconds"] for r in records if "update_seconds" in r]
    figures["seconds_per_update"] = statistics.fmean(seconds) if seconds else None
    figures["loss_curve"] = [(r["step"], r["loss"]) for r in records]
    figures["validation_curve"] = validated
    return figures


def reach(figures: dict, threshold: float | None) -> None:
    """Add the update at which the run's greedy validation score first reached `threshold` (None: never)."""
    reached = [step for step, score in figures["validation_curve"] if threshold is not None and score >= threshold]
    figures["updates_to_threshold"] = reached[0] if reached else None


def default_threshold(base_runs: list[dict]) -> float | None:
    """90% of the base runs' best greedy validation score (their mean): how fast a variant gets near where the base
    gets; None where the base was never validated."""
    bests = [max(score for _, score in run["validation_curve"]) for run in base_runs if run["validation_curve"]]
    return round(0.9 * statistics.fmean(bests), 2) if bests and statistics.fmean(bests) > 0 else None


COLUMNS = (  # (figure, heading, decimals)
    ("validation_{metric}", "validation {metric}", 1),
    ("test_{metric}", "test {metric}", 1),
    ("test_chrf", "test chrF", 1),
    ("test_cross_entropy", "test cross-entropy", 3),
    ("updates_to_threshold", "updates to {threshold}", 0),
    ("gradient_ratio_encoder", "encoder grad first/last", 2),
    ("gradient_ratio_decoder", "decoder grad first/last", 2),
    ("parameters", "parameters", 0),
    ("seconds_per_update", "s/update", 3),
)


def spread(values: list) -> dict | None:
    """Mean and range of the values given (None ones left out), with how many there were."""
    values = [value for value in values if value is not None]
    if not values:
        return None
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values), "count": len(values)}


def variant_row(study: str, variant, runs: list[dict]) -> dict:
    """A variant's row: each figure's mean and range over its runs, and how many runs ended each way."""
    for run in runs:
        for stack in ("encoder", "decoder"):
            first, last = run[f"grad_norm_{stack}_first"], run[f"grad_norm_{stack}_last"]
            run[f"gradient_ratio_{stack}"] = first / last if first is not None and last else None
    names = {name.format(metric=runs[0]["metric"]) for name, _, _ in COLUMNS} | {"validation_cross_entropy"}
    names |= {"validation_chrf"}
    names |= {f"grad_norm_{name}" for name in GRADIENT_NAMES}
    row = {"study": study, "row": variant.row, "variant": variant.key, "label": variant.label, "claim": variant.claim}
    row["runs"] = len(runs)
    row["stopped"] = [f"seed {run['seed']}: {run['status']}" for run in runs if run["status"] != "finished"]
    row["never_reached"] = sum(run["updates_to_threshold"] is None for run in runs)
    row["figures"] = {name: spread([run.get(name) for run in runs]) for name in sorted(names)}
    row["commands"] = [run["command"] for run in runs]
    return row


def format_figure(figure: dict | None, decimals: int) -> str:
    if figure is None:
        return "-"
    mean = f"{figure['mean']:,.{decimals}f}"
    if figure["min"] == figure["max"]:
        return mean
    return f"{mean} ({figure['min']:,.{decimals}f}-{figure['max']:,.{decimals}f})"


def headings(metric: str, threshold: float | None) -> list[str]:
    shown = {"exact_match": "exact match %", "bleu": "BLEU", "bleu_lowercase": "BLEU (lowercased)"}[metric]
    reach = f"{threshold:g} {shown}" if threshold is not None else "threshold"
    return [heading.format(metric=shown, threshold=reach) for _, heading, _ in COLUMNS]


def markdown_table(rows: list[dict], metric: str, threshold: float | None) -> str:
    """One study's rows as a Markdown table: each figure's mean over the seeds and, in brackets, its range."""
    lines = ["| row | variant | " + " | ".join(headings(metric, threshold)) + " |"]
    lines.append("|" + "---|" * (len(COLUMNS) + 2))
    for row in rows:
        cells = []
        for name, _, decimals in COLUMNS:
            cell = format_figure(row["figures"].get(name.format(metric=metric)), decimals)
            if name == "updates_to_threshold" and row["never_reached"]:
                cell = f"{cell}; never in {row['never_reached']} of {row['runs']}"
            cells.append(cell)
        label = row["label"] + (f" ({len(row['stopped'])} of {row['runs']} stopped)" if row["stopped"] else "")
        lines.append(f"| {row['row']} | {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_results(study_dir: str, tables: dict[str, list[dict]], metric: str, threshold: float | None) -> list[str]:
    """results.md (a table per study, with each variant's claim), results.csv and results.json; returns the paths."""
    markdown = []
    for study, rows in tables.items():
        markdown += [f"## {study}", "", markdown_table(rows, metric, threshold), ""]
        markdown += [f"- {row['label']}: {row['claim']}" for row in rows] + [""]
        markdown += [f"- {row['label']}, {stop}" for row in rows for stop in row["stopped"]]
    paths = [os.path.join(study_dir, name) for name in ("results.md", "results.csv", "results.json")]
    with replacing(paths[0]) as handle:  # each the old table or the new one whole
        handle.write("\n".join(markdown).rstrip() + "\n")
    with replacing(paths[1], newline="") as handle:  # csv writes its own line ends
        write_csv(handle, tables)
    with replacing(paths[2]) as handle:
        json.dump({"metric": metric, "threshold": threshold, "studies": tables}, handle, indent=1)
    return paths


def write_csv(handle, tables: dict[str, list[dict]]) -> None:
    """One line per variant and figure: its mean, minimum, maximum and the number of runs that gave it."""
    writer = csv.writer(handle)
    writer.writerow(["study", "row", "variant", "figure", "mean", "min", "max", "runs"])
    for study, rows in tables.items():
        for row in rows:
            for name, figure in row["figures"].items():
                if figure is not None:
                    writer.writerow([study, row["row"], row["variant"], name, figure["mean"], figure["min"],
                                     figure["max"], figure["count"]])  # fmt: skip


__all__ = ["run_figures", "reach", "default_threshold", "variant_row", "write_results", "markdown_table", "main_metric"]
