"""`vanilla-transformer ablate`: test the paper's claims with one command. A study (Table 3's rows, the lessons of
the architecture) trains variants of a base run, each changing one thing, with several seeds each; then it writes
the table of their scores beside the claims, and a figure. Its flags are train's, which set the base run (the
embedded task with `--preset study` unless given), and the study's own (`StudyArguments`)."""

import argparse
import dataclasses
import json
import os
import shlex
import signal

from ..corpus.output import check_output_folder
from ..errors import MISSING_MATPLOTLIB, MissingDependencyError
from ..processes import terminate, usable_cores
from ..training.options.argument_types import MOST_SEED
from ..training.options.arguments import TRAIN_ARGUMENT_GROUPS, TrainArguments, resolve
from ..training.studies.arguments import StudyArguments
from .failures import reported_as

NOT_FOR_A_STUDY = {  # train's options a study sets for each run itself, and what to give instead
    "output_dir": "--study-dir",
    "resume_from": "ablate again with the same --study-dir (finished runs are kept)",
    "overwrite_output_dir": "another --study-dir",
    "push_to_hub": "vanilla-transformer train --push-to-hub for the run you want to share",
    "report_to": "each run's metrics.jsonl, which the study reads (its runs log to no tracker)",
    "show_samples": "vanilla-transformer translate on a run's folder (its runs show none)",
}
STUDY_LAYER_GRADIENTS = 50  # the early updates whose layer gradient norms a study reports, unless --layer-gradients


def ablate_command_parser(subparsers) -> argparse.ArgumentParser:
    ablate = subparsers.add_parser(
        "ablate",
        dataclass_types=(StudyArguments, *TRAIN_ARGUMENT_GROUPS),
        help="run a study of the paper's claims: variants of a base run, several seeds each, one table",
        description="Train variants of a base run that each change one thing (Table 3's rows: heads, d_k, size, "
        "regularisation, positions; the lessons: no residual, no LayerNorm, pre-norm, no scaling, no positions, no "
        "decoder mask, no FFN or no ReLU), several seeds each, and write the table of their scores and a figure. "
        "Train's flags set the base run: the embedded task with --preset study unless given.",
    )
    ablate.set_defaults(func=ablate_command, refuse=ablate.error)
    return ablate


def base_options(namespace: argparse.Namespace, study: StudyArguments) -> dict:
    """The base run's options as train resolves them: the embedded task at --preset study unless a preset or data
    is given, and the layer gradients of the first 50 updates recorded unless --layer-gradients says otherwise.
    Raises `ValueError` naming a flag a study sets, or flags that cannot go together in a study."""
    args = TrainArguments.from_namespace(namespace)
    defaults = TrainArguments().options()
    from ..training.studies.runs import RUN_OVERRIDES  # the command line's parsers load the flags alone

    for name, instead in NOT_FOR_A_STUDY.items():  # what a run shows: the study's own value is no change
        quiet = RUN_OVERRIDES[name] if name in ("report_to", "show_samples") else defaults[name]
        if args.options()[name] not in (defaults[name], quiet):
            raise ValueError(f"--{name.replace('_', '-')}: a study sets it for each of its runs; use {instead}")
    if args.data.train_file and not (args.data.validation_file and args.data.test_file):
        raise ValueError(
            "--train-file: a study scores every run on validation and test; give --validation-file and --test-file"
        )
    if study.launcher:
        try:
            shlex.split(study.launcher)
        except ValueError as error:
            raise ValueError(f"--launcher {study.launcher}: {error}; expected a command as a shell writes it") from None
    if study.launcher and study.jobs > 1:
        raise ValueError("--launcher with --jobs > 1: launched runs train one at a time (they would share a port)")
    workers = usable_workers()
    if study.jobs > workers:
        raise ValueError(f"--jobs {study.jobs}: more runs at once than this machine has CPU cores or GPUs "
                         f"({workers}); expected at most that")  # fmt: skip
    if args.run.seed + study.seeds - 1 > MOST_SEED:
        raise ValueError(f"--seed {args.run.seed} --seeds {study.seeds}: the last run's seed would pass {MOST_SEED}")
    if args.run.preset is None and args.data.uses_embedded_task:
        args = args.replace(preset="study")
    if args.checkpoints.layer_gradients == 0:
        args = args.replace(layer_gradients=STUDY_LAYER_GRADIENTS)
    return resolve(args).options()


def study_folder(study: StudyArguments, base: dict) -> StudyArguments:
    """The study with its folder: --study-dir, else studies/<task> beside the runs/ of train."""
    if study.study_dir:
        return study
    task = os.path.basename(os.path.normpath(base["output_dir"]))
    return dataclasses.replace(study, study_dir=os.path.join("studies", task))


def usable_workers() -> int:
    """How many runs can train at once here: one per CPU core this process may use, or per GPU if there are more."""
    import torch

    return max(usable_cores(), torch.cuda.device_count())


RESULT_FILES = ("results.md", "results.csv", "results.json", "results.png")  # what a study writes beside runs/


def check_study_folder(study_dir: str) -> None:
    """The study's folder can be written and is no model folder, nor inside one: the study would write its runs and
    tables among the model's files. A folder with files under the names of a study's tables but no study's runs/
    holds files of the user's, which the tables would replace. Raises `ValueError` naming it."""
    check_output_folder("--study-dir", study_dir)
    if not os.path.isdir(os.path.join(study_dir, "runs")):
        taken = [name for name in RESULT_FILES if os.path.lexists(os.path.join(study_dir, name))]
        if taken:
            raise ValueError(f"--study-dir {study_dir} holds {', '.join(taken)} but no study's runs/: a study would "
                             "replace them; give a folder of the study's own")  # fmt: skip
    folder = os.path.abspath(study_dir)
    while True:
        if is_model_folder(folder):
            where = "is the model folder" if folder == os.path.abspath(study_dir) else "is inside the model folder"
            raise ValueError(f"--study-dir {study_dir} {where} {folder}: give a folder of its own")
        if os.path.dirname(folder) == folder:
            return
        folder = os.path.dirname(folder)


def is_model_folder(folder: str) -> bool:
    """Whether `folder` holds a model's config.json (a JSON object naming its model_type)."""
    try:
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and "model_type" in config


def check_matplotlib() -> None:
    """The study ends in its figure: without matplotlib, say so before any run trains (not after the last)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MissingDependencyError(f"the study's figure (results.png): {MISSING_MATPLOTLIB}") from None


def ablate_command(namespace: argparse.Namespace) -> int:
    """Resolve the flags (a bad combination: ablate's usage and status 2), then run the study: a run that fails
    for a reason other than its own training stopping ends the study with status 1."""
    try:
        study = StudyArguments.from_namespace(namespace)
        base = base_options(namespace, study)
        study = study_folder(study, base)
        check_study_folder(study.study_dir)
    except ValueError as error:
        namespace.refuse(str(error))
    check_matplotlib()
    from ..training.studies.study import run_study

    # stopped by SIGTERM (kill, a job scheduler), as by Ctrl-C, the study stops its runs ("ablate: terminated", status
    # 143), whatever WORLD_SIZE the job's environment sets; they train again on resume
    signal.signal(signal.SIGTERM, terminate(os.getpid()))
    with reported_as(1, RuntimeError), reported_as(2, ValueError):
        for path in run_study(base, study):
            print(path)
    return 0
