"""The runs of a study: planned from the base run's options and the studies' variants (one `vanilla-transformer train`
command line per variant and seed), trained a few at a time as separate processes, each in its own folder, and
skipped when a folder already holds its finished run, so that an interrupted study resumes where it stopped."""

import contextlib
import dataclasses
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from ...configuration import fold_switches
from ...folders import replacing, signals_held
from ..options.argument_types import ArgumentsError, flag_name
from ..options.arguments import TrainArguments, default_options, resolve
from .variants import Variant

RECORD = "study_run.json"  # in each run's folder: the options it was trained with, and how it ended
RUN_OVERRIDES = {"overwrite_output_dir": True, "report_to": ["none"], "show_samples": 0, "push_to_hub": False}
NOT_COMPARED = {"output_dir", "log_steps", "show_samples", "report_to"}  # where a run is, what it prints or logs to
DIVERGED = "the loss became"  # the message of a run stopped by a non-finite loss (loop.py's `train_update`)


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    """One training run of a study: a variant (its `key` names the folder) with one seed, and its options."""

    key: str
    seed: int
    options: dict  # every option of the train command, as the run resolves them
    folder: str

    def flags(self) -> list[str]:
        """The train command's flags for these options: each one that differs from train's default."""
        return train_flags(self.options)

    def command_line(self) -> str:
        """The run as a reader would type it."""
        return shlex.join(["vanilla-transformer", "train", *self.flags()])


def train_flags(options: dict) -> list[str]:
    """`vanilla-transformer train` flags giving `options` (by name), those at train's defaults left out."""
    flags = []
    for name, default in default_options().items():
        value = options[name]
        if value == default or value is None:
            continue
        if isinstance(value, bool):
            flags.append(flag_name(name) if value else "--no-" + name.replace("_", "-"))
        elif isinstance(value, list):
            flags += [flag_name(name), *map(str, value)]
        else:
            flags += [flag_name(name), str(value)]
    return flags


def plan_runs(base: dict, studies: dict[str, tuple[Variant, ...]], seeds: int, study_dir: str) -> dict:
    """Each study's variants with their runs: {study: [(variant, [PlannedRun per seed] or None), ...]}, from the base
    run's options as train resolves them (`resolve(...).options()`). A variant that does not apply to the base gets
    None; one whose options are the base's shares the base's runs. The seeds are the base's --seed and the next
    ones. Raises `ArgumentsError` naming a variant whose options cannot train."""
    planned, by_options = {}, {}
    for study, variants in studies.items():
        planned[study] = []
        for variant in variants:
            changes = variant.options(base)
            if changes is None:
                planned[study].append((variant, None))
                continue
            identity = json.dumps({**base, **changes}, sort_keys=True, default=str)
            if identity not in by_options:
                seeded = range(base["seed"], base["seed"] + seeds)
                by_options[identity] = [planned_run(variant, {**base, **changes}, seed, study_dir) for seed in seeded]
            planned[study].append((variant, by_options[identity]))
    return planned


def planned_run(variant: Variant, options: dict, seed: int, study_dir: str) -> PlannedRun:
    """One variant's run (its `options`) with one seed, the options resolved as the train command resolves them."""
    folder = os.path.join(study_dir, "runs", variant.key, f"seed-{seed}")
    try:
        arguments = TrainArguments.from_options(**{**options, "seed": seed, "output_dir": folder, **RUN_OVERRIDES})
        options = resolve(arguments).options()
    except (ArgumentsError, ValueError) as error:
        raise ArgumentsError(f"the variant {variant.key!r} cannot train: {error}") from None
    return PlannedRun(variant.key, seed, options, folder)


def read_record(folder: str) -> dict | None:
    """The study's record of a run folder: None where the run never finished (or never started)."""
    try:
        with open(os.path.join(folder, RECORD)) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def check_finished_run(run: PlannedRun, record: dict) -> None:
    """A finished run in the folder must be this run: the same options, else the study would mix two bases."""
    wanted = json.loads(json.dumps(run.options))
    # a record of an earlier version: the folded switches as booleans, and no option that came since (its default)
    recorded = {**default_options(), **fold_switches(record["options"])}
    differ = sorted(name for name in wanted if name not in NOT_COMPARED and recorded.get(name) != wanted[name])
    if differ:
        raise ArgumentsError(
            f"{run.folder} holds a run trained with other options ({', '.join(differ)}); give another --study-dir, "
            "or the flags the study was started with"
        )


def unique_runs(planned: dict) -> list[PlannedRun]:
    """Every run of the plan once, in the order of the studies and their variants."""
    runs = {}
    for variants in planned.values():
        for _, seeded in variants:
            for run in seeded or ():
                runs.setdefault(run.folder, run)
    return list(runs.values())


@dataclasses.dataclass(frozen=True)
class Launch:
    """How the runs start: `jobs` at once, each as `launcher` + `train` + its flags (`python -m vanilla_transformer`,
    or an `accelerate launch ... -m vanilla_transformer`). The CPU cores are shared out among the jobs; with as many
    GPUs as jobs (`gpus`: those CUDA_VISIBLE_DEVICES shows) and the default launcher, each job trains on a GPU of its
    own."""

    jobs: int = 1
    launcher: tuple[str, ...] = (sys.executable, "-m", "vanilla_transformer")
    gpus: int = 0

    def command(self, run: PlannedRun) -> list[str]:
        return [*self.launcher, "train", *run.flags()]

    def environment(self, slot: int) -> dict[str, str]:
        """The environment of the run in job slot `slot` (0 .. jobs - 1)."""
        threads = str(max(1, (os.cpu_count() or 1) // self.jobs))
        env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
        if self.jobs > 1 and self.gpus >= self.jobs and self.launcher == Launch.launcher:
            shown = os.environ.get("CUDA_VISIBLE_DEVICES")
            env["CUDA_VISIBLE_DEVICES"] = shown.split(",")[slot].strip() if shown else str(slot)
        return env


def start_run(run: PlannedRun, launch: Launch, slot: int, log_dir: str) -> tuple[subprocess.Popen, float]:
    """Start the run's train command as a process of its own, in a session of its own (so that stopping it stops
    whatever a launcher started), its output in the study's logs folder."""
    os.makedirs(log_dir, exist_ok=True)
    with open(os.path.join(log_dir, f"{run.key}-seed-{run.seed}.log"), "w") as log:
        try:
            process = subprocess.Popen(
                launch.command(run), stdout=log, stderr=subprocess.STDOUT, env=launch.environment(slot),
                start_new_session=True,
            )  # fmt: skip
        except FileNotFoundError as error:
            raise RuntimeError(f"the runs' launcher {launch.launcher[0]!r} was not found: {error}") from error
    return process, time.time()


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def stop_runs(processes: list[subprocess.Popen]) -> None:
    """Stop the runs under way, each with all it started: SIGTERM, then SIGKILL to any not gone in 30 seconds."""
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def end_run(run: PlannedRun, returncode: int, seconds: float, log_dir: str) -> dict:
    """The record of a run that ended: finished (0), or stopped by a non-finite loss (status 1 and the training
    command's own message, a result of the study). Anything else (bad input, a checkpoint that could not be written,
    a crash) raises, naming the log."""
    log = os.path.join(log_dir, f"{run.key}-seed-{run.seed}.log")
    stopped = last_error_line(log) if returncode == 1 else None  # the command's own `error: ...` line
    if returncode != 0 and not (stopped and stopped.startswith(DIVERGED)):
        raise RuntimeError(f"the run {run.folder} failed (exit status {returncode}); its output is in {log}")
    status = "finished" if returncode == 0 else "stopped: " + stopped
    record = {"options": run.options, "status": status, "seconds": round(seconds, 1), "command": run.command_line()}
    os.makedirs(run.folder, exist_ok=True)
    with replacing(os.path.join(run.folder, RECORD)) as handle:
        json.dump(record, handle, indent=1)
    return record


def last_error_line(log: str) -> str | None:
    """The message of the command's `error: ...` line in a run's output, if it printed one."""
    with open(log, errors="replace") as handle:
        lines = [line.strip() for line in handle.read().replace("\r", "\n").splitlines() if line.startswith("error:")]
    return lines[-1].removeprefix("error:").strip() if lines else None


def train_runs(runs: list[PlannedRun], launch: Launch, log_dir: str, report: Callable[[PlannedRun, dict, bool], None]):
    """Train the runs not finished yet, `launch.jobs` at a time, calling `report(run, record, trained)` as each one
    ends. Runs already recorded as ended are skipped (after checking they are these runs), and reported first."""
    waiting = []
    for run in runs:
        record = read_record(run.folder)
        if record is None:
            waiting.append(run)
        else:
            check_finished_run(run, record)
            report(run, record, False)
    running, free = {}, list(range(launch.jobs))  # job slots
    try:
        while waiting or running:
            while waiting and free:
                run, slot = waiting.pop(0), free.pop(0)
                with signals_held(STOP_SIGNALS):  # a run's process, once started, is one that a stop stops
                    running[slot] = (run, *start_run(run, launch, slot, log_dir))
            time.sleep(0.5)
            for slot, (run, process, started) in list(running.items()):
                if process.poll() is not None:
                    del running[slot]
                    free.append(slot)
                    report(run, end_run(run, process.returncode, time.time() - started, log_dir), True)
    finally:  # interrupted: the unfinished runs are trained again on resume
        stop_runs([process for _, process, _ in running.values()])


__all__ = ["Launch", "PlannedRun", "plan_runs", "train_runs", "unique_runs", "read_record", "train_flags", "RECORD"]
