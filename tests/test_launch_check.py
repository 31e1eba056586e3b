"""`train` started by a launcher that was asked for several processes and started fewer stops with a one-line error
saying how to start them: `accelerate launch --cpu --num_processes N` runs one process (accelerate starts several
CPU processes only through MPI)."""

import os
import shutil
import subprocess
import sys

import pytest

from vanilla_transformer.commands.launch_check import asked_processes, check_launched_processes

ACCELERATE = [sys.executable, "/usr/local/bin/accelerate", "launch"]


@pytest.mark.parametrize(
    "command_line, asked",
    [
        ([*ACCELERATE, "--cpu", "--num_processes", "2", "-m", "vanilla_transformer.cli", "train"], 2),
        ([*ACCELERATE, "--num-processes=3", "-m", "vanilla_transformer.cli", "train"], 3),
        ([*ACCELERATE, "--cpu", "-m", "vanilla_transformer.cli", "train"], None),
        ([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"], None),
        ([], None),
        (
            [*ACCELERATE, "--num_processes", "²", "-m", "vanilla_transformer.cli", "train"],
            None,
        ),  # a digit int() refuses
    ],
)
def test_the_process_count_is_read_from_an_accelerate_launch_command_line(command_line, asked):
    assert asked_processes(command_line) == asked


def test_fewer_processes_than_asked_is_an_error_naming_torchrun(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(ValueError, match=r"started 1 process: .* torchrun --nproc_per_node 2 "):
        check_launched_processes([*ACCELERATE, "--cpu", "--num_processes", "2", "train.py"])
    monkeypatch.setenv("WORLD_SIZE", "2")
    check_launched_processes([*ACCELERATE, "--num_processes", "2", "train.py"])  # as many as asked: no error


def test_accelerate_launch_of_two_cpu_processes_stops_with_one_line(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    launch = [shutil.which("accelerate") or "accelerate", "launch"]  # the console script, as a user types it
    done = subprocess.run(
        [*launch, "--cpu", "--num_processes", "2", "-m", "vanilla_transformer.cli", "train", "--output-dir",
         str(tmp_path / "run"), "--max-steps", "1"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: accelerate launch --num_processes 2 started 1 process: it runs several CPU processes only through MPI; "
        "start 2 CPU processes with: torchrun --nproc_per_node 2 -m vanilla_transformer.cli train ... --cpu"
    ]
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
