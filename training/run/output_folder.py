"""The run's folder (--output-dir): refused where it holds another run or the user's files, cleared of an earlier
run only once the new run's data is read, and removed again when a run fails before it has written anything."""

import contextlib
import json
import os
import shutil
import tempfile

from ...folders import holds
from ...processes import is_first_process
from .checkpoints import CHECKPOINT_PATTERN, list_checkpoints, resolve_resume
from .state import RUN_MARKERS

LEFT_BY_A_FAILED_START = ("tokenizer",)  # what a start that failed before its first checkpoint may leave
SET_ASIDE = ".earlier-run"  # where an earlier run's files wait (--overwrite-output-dir) until the new run is set up


def prepare_output_dir(output_dir: str, overwrite: bool, resume_from: str | None, inputs: dict[str, str]) -> None:
    """Refuse to write into a folder that holds another run, unless asked to overwrite or resuming inside it; a
    folder of the user's files, which README.md and the tokenizer would replace, unless asked to overwrite; later
    checkpoints than the one resumed from inside the folder (another course of the run, which would outlive this
    one's), unless asked to remove them; or where one of the run's `inputs` (flag -> path: a data file, a tokenizer
    or model folder) lies among the files the run writes or clears (`among_run_files`)."""
    for flag, path in inputs.items():
        if path and os.path.exists(path) and among_run_files(output_dir, path):
            raise ValueError(
                f"--output-dir {output_dir} holds {flag} {path}: the run writes its files there; choose another folder."
            )
    foreign = not_a_runs(output_dir)
    if foreign:  # which --overwrite-output-dir would remove
        raise ValueError(f"--output-dir {output_dir} holds {', '.join(foreign)}, which no run of this package "
                         "writes, under the names a run's files have: choose another folder.")  # fmt: skip
    existing = [m for m in RUN_MARKERS if os.path.exists(os.path.join(output_dir, m))]
    resuming_here = resume_from and holds(output_dir, resume_from)
    if existing and not (overwrite or resuming_here):
        raise ValueError(
            f"--output-dir {output_dir} already holds a run ({', '.join(existing)}); pass "
            "--overwrite-output-dir to replace it, --resume-from to continue it, or choose another folder."
        )
    check_no_users_files(output_dir, overwrite or bool(existing))
    later = later_checkpoints(output_dir, resolve_resume(resume_from)) if resuming_here else []
    if later and not overwrite:
        raise ValueError(
            f"--output-dir {output_dir} holds checkpoints after {resume_from} "
            f"({', '.join(map(os.path.basename, later))}), from the course of the run after it: resume from the "
            "newest, or pass --overwrite-output-dir to remove them."
        )
    try:
        os.makedirs(output_dir, exist_ok=True)
        # a uniquely named file that removes itself: the processes of a distributed run check the folder at once
        with tempfile.TemporaryFile(dir=output_dir):
            pass
    except OSError as error:
        raise ValueError(f"--output-dir {output_dir}: cannot write there ({error.strerror or error}).") from error


def not_a_runs(output_dir: str) -> list[str]:
    """The entries of `output_dir` named as a run's files that a run of this package did not write: a config.json
    of another kind of model, a checkpoints/ folder of other than checkpoint-N folders, a tokenizer/ without a
    tokenizer's files (the user's own, which --overwrite-output-dir would remove with an earlier run)."""
    found = []
    config = os.path.join(output_dir, "config.json")
    if os.path.isfile(config):
        try:
            with open(config, encoding="utf-8") as handle:
                settings = json.load(handle)
        except (OSError, ValueError):
            settings = None
        if not isinstance(settings, dict) or settings.get("model_type", "vanilla_transformer") != "vanilla_transformer":
            found.append("config.json (not a vanilla_transformer model's)")
    checkpoints = os.path.join(output_dir, "checkpoints")
    if os.path.isdir(checkpoints):
        other = [n for n in os.listdir(checkpoints) if not CHECKPOINT_PATTERN.match(n) and not n.startswith(".")]
        found += [f"checkpoints/{name}" for name in sorted(other)[:3]]
    tokenizer = os.path.join(output_dir, "tokenizer")
    if (
        os.path.isdir(tokenizer)
        and os.listdir(tokenizer)
        and not {"tokenizer.json", "tokenizer_config.json"} & set(os.listdir(tokenizer))
    ):
        found.append("tokenizer/ (no tokenizer.json in it)")
    return found


def among_run_files(output_dir: str, path: str) -> bool:
    """Whether `path` is `output_dir`, or lies in it where a run writes: at its top, or in the folders it clears
    (`checkpoints`, `tokenizer`, and an earlier run's set aside); a file in a folder of the user's own (`data/`) is
    left alone."""
    if not holds(output_dir, path):
        return False
    inside = os.path.relpath(os.path.realpath(path), os.path.realpath(output_dir))
    return inside == "." or os.sep not in inside or inside.split(os.sep)[0] in ("checkpoints", "tokenizer", SET_ASIDE)


@contextlib.contextmanager
def removed_if_unstarted(output_dir: str):
    """--output-dir left as it was when the run fails before it has written any of a run's files: a folder that the
    run made is removed again (by the first process), with what it held (a tokenizer trained before the failure); an
    earlier run's files set aside (`set_aside`) are put back."""
    made = not os.path.exists(output_dir)
    left = os.path.exists(os.path.join(output_dir, SET_ASIDE))  # by a start killed before: not this run's to put back
    try:
        yield
    except BaseException:
        started = any(os.path.exists(os.path.join(output_dir, marker)) for marker in RUN_MARKERS)
        if is_first_process():
            if not left:  # gone once the run is set up: a failure later puts nothing back
                put_back(output_dir)
            if made and not started:
                shutil.rmtree(output_dir, ignore_errors=True)
        raise


def set_aside(paths: list[str], output_dir: str, accelerator) -> None:
    """Move `paths` (an earlier run's files, `earlier_files`) into output_dir/.earlier-run (one process; the others
    wait), to be removed once the new run is set up (`remove_earlier`), or put back should it fail before."""
    if accelerator.is_main_process and paths:
        aside = os.path.join(output_dir, SET_ASIDE)
        shutil.rmtree(aside, ignore_errors=True)  # one a killed start left: of the run that start replaced
        os.makedirs(aside)
        for path in paths:
            if os.path.lexists(path):
                os.replace(path, os.path.join(aside, os.path.basename(path)))
    accelerator.wait_for_everyone()


def put_back(output_dir: str) -> None:
    """The earlier run's files set aside moved back into `output_dir`, over what the failed start wrote there."""
    aside = os.path.join(output_dir, SET_ASIDE)
    if not os.path.isdir(aside):
        return
    for name in os.listdir(aside):
        target = os.path.join(output_dir, name)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)
        elif os.path.lexists(target):
            os.remove(target)
        os.replace(os.path.join(aside, name), target)
    os.rmdir(aside)


def check_no_users_files(output_dir: str, allowed: bool) -> None:
    """A ValueError where `output_dir` holds files of its own at its top, where a run writes its (README.md,
    tokenizer.json, ...), unless `allowed`. Folders are left alone: the user's data, a start's tokenizer or trackers."""
    if allowed or not os.path.isdir(output_dir):
        return
    found = sorted(entry.name for entry in os.scandir(output_dir) if not entry.is_dir())
    if found:
        shown = ", ".join(found[:3]) + (", ..." if len(found) > 3 else "")
        raise ValueError(
            f"--output-dir {output_dir} holds files ({shown}) and no run: the run writes README.md, tokenizer.json "
            "and more at its top; choose a new folder, one without files at its top, or pass --overwrite-output-dir."
        )


def later_checkpoints(output_dir: str, checkpoint: str) -> list[str]:
    """The checkpoints of `output_dir` after `checkpoint` (one of them, or another run's)."""
    match = CHECKPOINT_PATTERN.match(os.path.basename(os.path.normpath(checkpoint)))
    step = int(match.group(1)) if match else -1
    return [path for path in list_checkpoints(output_dir) if int(os.path.basename(path).split("-")[1]) > step]


def earlier_files(output_dir: str, overwrite: bool, resume_checkpoint: str | None) -> list[str]:
    """What --overwrite-output-dir removes: an earlier run's files (its tokenizer too, unless resuming, when the
    checkpoint has checked it); or, resuming inside the folder, the checkpoints after the one resumed from."""
    if not overwrite:
        return []
    if resume_checkpoint and holds(output_dir, resume_checkpoint):
        return later_checkpoints(output_dir, resume_checkpoint)
    names = RUN_MARKERS if resume_checkpoint else RUN_MARKERS + LEFT_BY_A_FAILED_START
    return [os.path.join(output_dir, name) for name in names]


def earlier_once_set_up(output_dir: str, earlier: list[str], resuming: bool) -> list[str]:
    """What goes once the run is set up, of the `earlier` files (`earlier_files`): a resume's later checkpoints, or
    the folder a new run set them aside in (none where it set nothing aside: one a killed start left is kept)."""
    if resuming:
        return earlier
    return [os.path.join(output_dir, SET_ASIDE)] if earlier else []


def remove_earlier(paths: list[str], accelerator) -> None:
    """Remove `paths` (`earlier_files`): one process removes them; the others wait for it."""
    if accelerator.is_main_process:
        for path in paths:
            if os.path.isdir(path):
                shutil.rmtree(path)
            elif os.path.exists(path):
                os.remove(path)
    accelerator.wait_for_everyone()
