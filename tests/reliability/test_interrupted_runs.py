"""Faults during training: a run killed with SIGKILL at any moment (also in the middle of writing a checkpoint)
resumes to exactly the run it would have been, a failed write keeps the previous checkpoint, and the same seed gives
the same model."""

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file
from vanilla_transformer.training.run.checkpoints import STATE_FILE, TEMPORARY_PREFIX, WEIGHTS_FILE, list_checkpoints

from vanilla_transformer.cli import main

from ..training.conftest import TINY_MODEL_FLAGS, data_flags, pairs, write_jsonl

FAULTS = os.path.join(os.path.dirname(__file__), "run_with_faults.py")
STEPS = 12


@pytest.fixture
def data_files(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    return {
        "train": write_jsonl(folder / "train.jsonl", pairs(range(100, 400))),
        "validation": write_jsonl(folder / "validation.jsonl", pairs(range(20, 30))),
        "test": write_jsonl(folder / "test.jsonl", pairs(range(40, 50))),
    }


def train_flags(data_files, out):
    return [
        "train",
        *data_flags(data_files),
        "--output-dir",
        str(out),
        "--max-steps",
        str(STEPS),
        "--save-steps",
        "2",
        "--keep-checkpoints",
        "3",
        "--eval-steps",
        "0",
        "--dropout",
        "0.2",
        "--seed",
        "7",
        *TINY_MODEL_FLAGS,
    ]


def start(args, tmp_path, name):
    log = open(tmp_path / f"{name}.stderr", "w")
    # the same number of threads as this process: a different count changes the order of float sums
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(torch.get_num_threads())}
    return subprocess.Popen([sys.executable, FAULTS, *args], stdout=subprocess.PIPE, stderr=log, text=True, env=env)


def logged_steps(out) -> int:
    try:
        return sum(1 for _ in open(out / "metrics.jsonl"))
    except FileNotFoundError:
        return 0


def losses(out) -> dict[int, float]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records]
    assert steps == sorted(set(steps)), f"each step is logged once, in order: {steps}"
    return {r["step"]: r["loss"] for r in records}


def assert_checkpoints_whole(out):
    """Every checkpoint the run would resume from is complete; an interrupted write is only a temporary folder."""
    for path in list_checkpoints(str(out)):
        assert os.path.isfile(os.path.join(path, STATE_FILE)), path
        load_file(os.path.join(path, WEIGHTS_FILE))  # readable, not truncated


def test_killed_runs_resume_to_the_same_losses_and_weights(tmp_path, data_files):
    reference = tmp_path / "reference"
    assert main(train_flags(data_files, reference)) == 0

    out = tmp_path / "killed"
    # 1. SIGKILL at a random moment after the first checkpoint
    kill_after = random.Random(0).randint(3, STEPS - 3)
    process = start(train_flags(data_files, out), tmp_path, "first")
    deadline = time.time() + 300
    while logged_steps(out) < kill_after and process.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL
    assert_checkpoints_whole(out)
    assert not (out / "model.safetensors").exists()

    # 2. resume, and SIGKILL it in the middle of writing a later checkpoint: files written, not yet renamed
    hang_step = int(os.path.basename(list_checkpoints(str(out))[-1]).split("-")[1]) + 4
    process = start(
        ["--hang-in-checkpoint-write", str(hang_step), *train_flags(data_files, out), "--resume-from", str(out)],
        tmp_path,
        "second",
    )
    line = process.stdout.readline()
    while line and not line.startswith("WRITING"):
        line = process.stdout.readline()
    assert line.startswith("WRITING"), (tmp_path / "second.stderr").read_text()[-2000:]
    process.send_signal(signal.SIGKILL)
    process.wait()
    partial = out / "checkpoints" / f"{TEMPORARY_PREFIX}{hang_step}"
    assert partial.is_dir()  # the interrupted write left its temporary folder...
    assert f"checkpoint-{hang_step}" not in [os.path.basename(p) for p in list_checkpoints(str(out))]  # ...only
    assert_checkpoints_whole(out)

    # 3. resume to the end
    assert main([*train_flags(data_files, out), "--resume-from", str(out)]) == 0
    assert not partial.exists()
    a, b = losses(reference), losses(out)
    assert list(b) == list(range(1, STEPS + 1))
    assert a == b
    wa, wb = load_file(reference / "model.safetensors"), load_file(out / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_a_killed_streamed_run_resumes_with_the_data_it_would_have_seen(tmp_path, data_files, capsys):
    """--streaming: the checkpoint keeps the stream's position, so the resumed run reads the batches the killed one
    would have read next, across pools and into the next pass over the file."""
    steps = 2 * STEPS  # about one and a half passes over the 300 pairs

    def flags(out):
        stream = ["--streaming", "--stream-pool-pairs", "40", "--save-steps", "3"]
        return [*train_flags(data_files, out), *stream, "--max-steps", str(steps)]

    reference = tmp_path / "reference"
    assert main(flags(reference)) == 0
    assert max(json.loads(line)["epoch"] for line in (reference / "metrics.jsonl").read_text().splitlines()) == 1
    out = tmp_path / "killed"
    for kill_after in sorted(random.Random(1).sample(range(4, steps - 2), 2)):
        process = start(flags(out) + (["--resume-from", str(out)] if out.exists() else []), tmp_path, "run")
        deadline = time.time() + 300
        while logged_steps(out) < kill_after and process.poll() is None and time.time() < deadline:
            time.sleep(0.005)
        process.send_signal(signal.SIGKILL)
        process.wait()
        assert process.returncode == -signal.SIGKILL, (tmp_path / "run.stderr").read_text()[-2000:]
    assert main([*flags(out), "--resume-from", str(out)]) == 0
    assert losses(reference) == losses(out)
    wa, wb = load_file(reference / "model.safetensors"), load_file(out / "model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    # the checkpoint says how it orders the data: resuming it without --streaming is refused, naming the flag
    plain = [f for f in train_flags(data_files, out) if f != "--overwrite-output-dir"]
    assert main([*plain, "--max-steps", str(steps + 3), "--resume-from", str(out)]) != 0
    assert "written by a run with --streaming" in capsys.readouterr().err


def digest(folder) -> dict[str, str]:
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in sorted(os.listdir(folder))}


def test_a_failed_checkpoint_write_keeps_the_previous_one(tmp_path, data_files):
    out = tmp_path / "run"
    flags = train_flags(data_files, out)
    flags[flags.index("--max-steps") + 1] = "2"
    assert main(flags) == 0
    kept = out / "checkpoints" / "checkpoint-2"
    before = digest(kept)
    limit = min(os.path.getsize(kept / name) for name in ("model.safetensors", "optimizer.bin")) - 1
    # continue with files limited below a checkpoint's size, as on a full disk: the step-4 checkpoint cannot be written
    process = start(
        ["--file-size-limit", str(limit), *train_flags(data_files, out), "--resume-from", str(kept)], tmp_path, "full"
    )
    process.wait(timeout=300)
    stderr = (tmp_path / "full.stderr").read_text()
    assert process.returncode == 1, stderr[-2000:]
    assert "could not write the step-4 checkpoint" in stderr and "File too large" in stderr
    assert f"The last complete checkpoint is {kept}; it is untouched" in stderr
    assert digest(kept) == before
    assert [os.path.basename(p) for p in list_checkpoints(str(out))] == ["checkpoint-2"]
    assert not [n for n in os.listdir(out / "checkpoints") if n.startswith(TEMPORARY_PREFIX)]


def test_an_output_folder_that_cannot_be_written_is_named(tmp_path, data_files, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert main(train_flags(data_files, blocker / "run")) == 2
    assert f"--output-dir {blocker / 'run'}: cannot write there" in capsys.readouterr().err
    assert blocker.read_text() == "not a folder"


def test_the_same_seed_gives_the_same_model_and_another_seed_does_not(tmp_path, data_files):
    runs = {}
    for name, seed in (("a", "7"), ("b", "7"), ("c", "8")):
        flags = train_flags(data_files, tmp_path / name)
        flags[flags.index("--max-steps") + 1] = "3"
        flags[flags.index("--seed") + 1] = seed
        assert main(flags) == 0
        runs[name] = load_file(tmp_path / name / "model.safetensors")
    assert all(torch.equal(runs["a"][k], runs["b"][k]) for k in runs["a"])
    assert not all(torch.equal(runs["a"][k], runs["c"][k]) for k in runs["a"])
