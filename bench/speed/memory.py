"""The speed suite's peak memory: each model doing one task (a training step or beam-5 generation) in fresh
processes, `python -m bench speed --memory-probe ...`, whose peak resident set (CPU) or allocation (CUDA) is kept."""

import contextlib
import statistics
import subprocess
import sys

import torch

from ..common import memory, models, report
from ..common.measure import TrainStep, synchronize, training_batch


def peak_memory(size_name: str, task: str, attn: str, quick: bool, device: str, probes: int) -> dict:
    """Memory in MiB of each model doing one task, each probe in a fresh process (CPU: the process's peak RSS, and
    how much the task added to the RSS it started from; CUDA: max allocated). The two models' probes alternate, and
    the medians over `probes` processes are kept: one process's peak RSS varies by several MiB from run to run."""
    samples = {"vanilla": [], "marian": []}
    for probe in range(probes):
        for kind in ("vanilla", "marian") if probe % 2 == 0 else ("marian", "vanilla"):
            samples[kind].append(probe_memory(kind, size_name, task, attn, quick, device))
    median = lambda kind, i: statistics.median(sample[i] for sample in samples[kind])  # noqa: E731
    return {
        "size": size_name,
        "task": task,
        "probes": probes,
        "ours": median("vanilla", 0),
        "theirs": median("marian", 0),
        "ours_added": median("vanilla", 1),
        "theirs_added": median("marian", 1),
    }


def probe_memory(kind: str, size_name: str, task: str, attn: str, quick: bool, device: str) -> tuple[float, float]:
    """The peak and the memory the task added, measured by `memory_probe` in a fresh process."""
    args = report.probe_command(
        sys.executable, "speed", "--memory-probe", kind, size_name, task, attn, "--device", device
    )
    if quick:
        args.append("--quick")
    done = subprocess.run(args, capture_output=True, text=True, check=True, cwd=report.ROOT)
    peak, added = map(float, done.stdout.strip().splitlines()[-1].split())
    return peak, added


def memory_probe(kind: str, size_name: str, task: str, attn: str, quick: bool, device: str) -> None:
    """Prints the peak and how much the task added to the memory in use once the model and its inputs were built."""
    fn = probed_task(kind, size_name, task, attn, quick, device)
    start, setup_peak, task_peak = cuda_task_memory(fn, device) if device.startswith("cuda") else cpu_task_memory(fn)
    print(max(setup_peak, task_peak), task_peak - start)


def probed_task(kind: str, size_name: str, task: str, attn: str, quick: bool, device: str):
    """One model's training step ("train") or beam-5 generation, built with its inputs."""
    size = models.SIZES[size_name]
    model = models.build(kind, size, attn, device)
    shape = (models.QUICK_BATCHES if quick else models.BATCHES)[size_name]
    if task == "train":
        return TrainStep(model, training_batch(size, shape, device))
    return models.Generate(model, training_batch(size, (32, shape[1], 1), device)["input_ids"], 5, shape[2])


def cuda_task_memory(fn, device: str) -> tuple[float, float, float]:
    """MiB allocated before `fn` runs twice, the peak until then, and the peak while it runs."""
    synchronize(device)
    start, setup_peak = torch.cuda.memory_allocated() / 2**20, torch.cuda.max_memory_allocated() / 2**20
    torch.cuda.reset_peak_memory_stats()
    fn()
    fn()
    synchronize(device)
    return start, setup_peak, torch.cuda.max_memory_allocated() / 2**20


def cpu_task_memory(fn) -> tuple[float, float, float]:
    """The process's RSS in MiB before `fn` runs twice, its peak until then, and its peak while `fn` runs."""
    start, setup_peak = memory.current_rss_mib(), memory.peak_rss_mib()
    # Linux: start the high-water mark afresh, so that what the task added is not hidden by a higher peak reached
    # while importing and building
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")
    fn()
    fn()
    return start, setup_peak, memory.peak_rss_mib()
