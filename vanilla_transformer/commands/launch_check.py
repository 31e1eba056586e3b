"""What `train` checks of how it was launched: a launcher that was asked for several processes and started fewer.

`accelerate launch --cpu --num_processes N` starts one process whatever N is (accelerate launches several CPU
processes only through MPI); the run would train alone and say so only in eval_results.json. Linux only: the
launcher's command line is read from /proc."""

import os
import re

NUM_PROCESSES = re.compile(r"^--num[_-]processes(?:=([0-9]+))?$")


def asked_processes(command_line: list[str]) -> int | None:
    """The process count an `accelerate launch` command line asks for (--num_processes N), else None."""
    head = command_line[:4]  # `accelerate launch`, `python .../accelerate launch`, `python -m accelerate... launch`
    if not any("accelerate" in part for part in head) or not any(part.endswith("launch") for part in head):
        return None
    for index, part in enumerate(command_line):
        found = NUM_PROCESSES.match(part)
        if found:
            value = found.group(1) or (command_line[index + 1] if index + 1 < len(command_line) else "")
            return int(value) if value.isascii() and value.isdigit() else None  # not "²", which int() refuses
    return None


def parent_command_line() -> list[str]:
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as handle:
            return [part.decode(errors="replace") for part in handle.read().split(b"\0") if part]
    except OSError:
        return []


def check_launched_processes(command_line: list[str] | None = None) -> None:
    """A `ValueError` saying how to start N CPU processes, where `accelerate launch` was asked for N and this run
    has fewer (WORLD_SIZE, 1 without a distributed launcher)."""
    asked = asked_processes(parent_command_line() if command_line is None else command_line)
    running = int(os.environ.get("WORLD_SIZE", "1"))
    if asked is not None and asked > running:
        raise ValueError(
            f"accelerate launch --num_processes {asked} started {running} process"
            f"{'es' if running != 1 else ''}: it runs several CPU processes only through MPI; start {asked} CPU "
            f"processes with: torchrun --nproc_per_node {asked} -m vanilla_transformer.cli train ... --cpu"
        )
