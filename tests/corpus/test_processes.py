"""A corpus through real processes: killed (kill -9) and resumed, on two processes under torchrun (one of them
killed), and with memory that does not grow with the input. The same bytes as one uninterrupted run each time."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import psutil
import pytest
from vanilla_transformer.training.tasks.numbers import english

from tests.conftest import two_processes

WINDOW = ["--read-window", "100", "--num-beams", "2", "--max-length", "8"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """1,200 number words a line, and one process's uninterrupted translation of them."""
    folder = tmp_path_factory.mktemp("corpus")
    numbers = random.Random(0)
    (folder / "in.txt").write_text("".join(english(numbers.randrange(1, 1000)) + "\n" for _ in range(1200)))
    return folder


@pytest.fixture(scope="module")
def uninterrupted(trained_folder, corpus) -> bytes:
    subprocess.run(command(trained_folder, corpus, corpus / "whole.txt"), check=True, capture_output=True)
    return (corpus / "whole.txt").read_bytes()


def command(model, corpus, output, module=True) -> list[str]:
    head = [sys.executable, "-m", "vanilla_transformer.cli"] if module else ["-m", "vanilla_transformer.cli"]
    return [*head, "translate", "--model", str(model), "--input", str(corpus / "in.txt"), *WINDOW,
            "--output", str(output)]  # fmt: skip


def windows_done(output, rank: int = 0) -> int:
    try:
        journal = output.parent / f"{output.name}.partial" / f"process-{rank}.json"
        return len(json.loads(journal.read_text())["lengths"])
    except (OSError, ValueError):
        return 0


def kill_when(process: subprocess.Popen, ready, victim=None) -> None:
    """SIGKILL the process `victim()` names (default `process`) once `ready()`; then wait for `process` to end."""
    deadline = time.monotonic() + 240
    while not ready() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.poll() is None, "the run ended before it could be killed"
    os.kill(victim() if victim else process.pid, signal.SIGKILL)
    process.wait(timeout=120)


def test_a_killed_run_resumes_to_the_same_bytes(trained_folder, corpus, uninterrupted):
    output = corpus / "resumed.txt"
    process = subprocess.Popen(command(trained_folder, corpus, output), stderr=subprocess.DEVNULL)
    kill_when(process, lambda: windows_done(output) >= 2)
    assert not output.exists() and 2 <= windows_done(output) < 12
    done = subprocess.run(command(trained_folder, corpus, output), capture_output=True, text=True, check=True)
    assert output.read_bytes() == uninterrupted, done.stderr


def test_two_processes_write_one_processs_bytes(trained_folder, corpus, uninterrupted):
    output = corpus / "two.txt"
    two_processes(29611, *command(trained_folder, corpus, output, module=False), check=True)
    assert output.read_bytes() == uninterrupted and not (corpus / "two.txt.partial").exists()


def test_two_processes_resume_after_one_of_them_was_killed(trained_folder, corpus, uninterrupted):
    output = corpus / "two-killed.txt"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29612"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([*torchrun, *command(trained_folder, corpus, output, module=False)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    workers = lambda: psutil.Process(process.pid).children()  # noqa: E731
    kill_when(process, lambda: windows_done(output, 1) >= 1, victim=lambda: workers()[-1].pid)  # torchrun: the other
    assert not output.exists() and windows_done(output, 1) >= 1
    two_processes(29613, *command(trained_folder, corpus, output, module=False), check=True)
    assert output.read_bytes() == uninterrupted


PEAK = """
import resource, sys
from vanilla_transformer.cli import main
status = main(sys.argv[1:])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def test_memory_does_not_grow_with_the_input(trained_folder, tmp_path):
    """Peak RSS translating 20,000 and 200,000 lines: one in a hundred is a number word, the others blank (answered
    without the model), so that the reading, windows and output run at full size in a few seconds."""
    peaks = {}
    for lines in (20_000, 200_000):
        path = tmp_path / f"in-{lines}.txt"
        path.write_text("".join((english(i % 999 + 1) if i % 100 == 0 else "") + "\n" for i in range(lines)))
        argv = ["translate", "--model", str(trained_folder), "--input", str(path), "--num-beams", "1",
                "--max-length", "8", "--output", str(tmp_path / f"out-{lines}.txt")]  # fmt: skip
        done = subprocess.run([sys.executable, "-c", PEAK, *argv], capture_output=True, text=True, check=True)
        peaks[lines] = int(done.stdout.split()[-1])
        assert len((tmp_path / f"out-{lines}.txt").read_text().splitlines()) == lines
    assert peaks[200_000] <= 1.1 * peaks[20_000], peaks
