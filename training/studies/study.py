"""A study from end to end: plan its runs from the base run's options, train those not finished yet (printing the
progress), then read every run, write the tables and draw the figure."""

import dataclasses
import functools
import os
import shlex
import time

from ..options.argument_types import ArgumentsError
from .arguments import StudyArguments
from .figures import draw_studies
from .results import default_threshold, main_metric, reach, run_figures, variant_row, write_results
from .runs import Launch, PlannedRun, plan_runs, train_runs, unique_runs


class Progress:
    """A line for each run that ends: which, how, and the study's time so far and left (estimated from the runs
    trained in this session; runs that ended before it count as done)."""

    def __init__(self, total: int, write):
        self.total, self.done, self.trained, self.started, self.write = total, 0, 0, time.time(), write

    def report(self, run: PlannedRun, record: dict, trained: bool) -> None:
        self.done, self.trained = self.done + 1, self.trained + trained
        elapsed = time.time() - self.started
        left = elapsed / self.trained * (self.total - self.done) if self.trained else 0.0
        when = f"in {record['seconds']:.0f} s" if trained else "before"
        self.write(
            f"[{self.done}/{self.total}] {run.key} seed {run.seed}: {record['status']} {when}; "
            f"study {elapsed / 60:.1f} min so far, about {left / 60:.0f} min left"
        )


def run_study(base: dict, study: StudyArguments, studies: dict | None = None, write=None) -> list[str]:
    """Train the study's runs not finished yet and write its results; returns the paths written. `base` holds the
    base run's options as train resolves them; `studies` ({name: variants}) replaces --study and --variants."""
    studies = studies or study.studies()
    write = write or functools.partial(print, flush=True)  # each line as it comes, also into a file
    planned = plan_runs(base, studies, study.seeds, study.study_dir)
    report_inapplicable(planned, study, write)
    runs = unique_runs(planned)
    write(f"{len(runs)} runs ({study.seeds} seeds of each variant) in {study.study_dir}, {study.jobs} at a time")
    train_runs(runs, launch(study), os.path.join(study.study_dir, "logs"), Progress(len(runs), write).report)
    return tabulate(planned, study)


def report_inapplicable(planned: dict, study: StudyArguments, write) -> None:
    """A line for each variant that does not apply to the base run (8 heads of a 12-wide model), left out of the
    tables; an `ArgumentsError` where none of those --variants named applies."""
    chosen = {variant.key: seeded for variants in planned.values() for variant, seeded in variants}  # once each
    left_out = [key for key, seeded in chosen.items() if seeded is None]
    for key in left_out:
        write(f"{key}: does not apply to the base run (its sizes or rates); left out of the study")
    if study.variants is not None and set(chosen) - {"base"} <= set(left_out):
        raise ArgumentsError(f"--variants {' '.join(study.variants)}: none applies to the base run (its sizes or "
                             "rates); choose a larger or other base")  # fmt: skip


def launch(study: StudyArguments) -> Launch:
    """How the study's runs start: --jobs at once, with --launcher or as `python -m vanilla_transformer`."""
    import torch

    given = {"launcher": tuple(shlex.split(study.launcher))} if study.launcher else {}
    return Launch(jobs=study.jobs, gpus=torch.cuda.device_count(), **given)


def tabulate(planned: dict, study: StudyArguments) -> list[str]:
    """The tables (results.md, .csv, .json) and the figure (results.png) of the planned runs, all of them ended."""
    metric = main_metric(unique_runs(planned)[0].options)
    figures = {run.folder: run_figures(run, metric) for run in unique_runs(planned)}
    bases = (seeded for variants in planned.values() for variant, seeded in variants if variant.key == "base")
    base_runs = next(bases, None)
    threshold = study.threshold
    if threshold is None and base_runs is not None:
        threshold = default_threshold([figures[run.folder] for run in base_runs])
    for run in figures.values():
        reach(run, threshold)
    tables, by_variant = {}, {}
    for name, variants in planned.items():
        tables[name] = []
        for variant, seeded in variants:
            if seeded is None:  # not applicable to this base (8 heads of a 12-wide model)
                continue
            if seeded is base_runs and variant.key != "base":
                variant = dataclasses.replace(variant, label=f"{variant.label} (the base)")
            by_variant[variant.key] = [figures[run.folder] for run in seeded]
            tables[name].append(variant_row(name, variant, by_variant[variant.key]))
    try:
        paths = write_results(study.study_dir, tables, metric, threshold)
        return paths + [draw_studies(study.study_dir, tables, by_variant, metric)]
    except OSError as error:  # a full disk, a folder in a table's place: the runs stay, and tabulate again
        where = error.filename2 or error.filename  # a rename's target, else the file
        raise RuntimeError(
            f"--study-dir {study.study_dir}: its results cannot be written ({where}: "
            f"{error.strerror}); the runs are kept: run the same command again"
        ) from error


__all__ = ["run_study", "tabulate", "Progress"]
