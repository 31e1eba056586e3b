"""The training step as `vanilla-transformer train` takes it on the CPU, timed and profiled in a fresh process
(`python -m bench speed --command-step ...`): the command's own process settings (`apply_cpu_process_settings`:
freed memory kept mapped, float32 denormals flushed to zero), its criterion (`TranslationCriterion`: label smoothing
0.1, the logits' gradient written over them, the loss over the batch's target tokens), clipping and fused Adam.

The suite's own training step compares the two models as libraries, in a process as Python starts it; this one shows
what the command reaches with the same model and batch. It runs in a process of its own because the settings are
the whole process's and cannot be taken back."""

import json
import statistics
import subprocess
import sys

import torch

from ..common import models, report
from ..common.measure import TrainStep, seconds_per_call, training_batch
from ..common.step_profile import profile_step

LABEL_SMOOTHING = 0.1  # the training command's default (§5.4)


class CommandStep(TrainStep):
    """The suite's `TrainStep` (clipping, fused Adam with the command's defaults) with the training command's loss:
    its criterion's label-smoothed sum over the target tokens, divided by their number, as its loop does."""

    def __init__(self, model, batch):
        from vanilla_transformer.training.optim.criterion import TranslationCriterion

        super().__init__(model, batch)
        self.criterion = TranslationCriterion(LABEL_SMOOTHING)

    def loss(self) -> torch.Tensor:
        loss, sample_size, _ = self.criterion(self.model, self.batch)
        return loss / sample_size


def command_step_row(args, size_name: str, attn: str, flops: int, peak: float, repeats: int, calls: int) -> dict:
    """The command's step at one size, measured by `command_step_probe` in a fresh process: its time per step (the
    median over `repeats` of `calls` steps) and its profile (`peak`: the one its GEMM-only ceiling is a share of)."""
    flags = ["--command-step", size_name, attn, str(flops), str(peak), "--device", args.device]
    flags += ["--repeats", str(repeats), "--steps", str(calls), *(["--quick"] if args.quick else [])]
    done = subprocess.run(
        report.probe_command(sys.executable, "speed", *flags),
        capture_output=True,
        text=True,
        check=True,
        cwd=report.ROOT,
    )
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    return {"size": size_name, "attn": attn, "flops": flops, **measured}


def command_step_probe(args, size_name: str, attn: str, flops: int, peak: float) -> None:
    """Prints, as one JSON line, the command's step time (seconds, the median over `args.repeats` of `args.steps`
    calls) and the step's profile (two steps under torch.profiler)."""
    from vanilla_transformer.commands.process_settings import apply_cpu_process_settings

    apply_cpu_process_settings(cpu=True)
    size, shape = models.SIZES[size_name], (models.QUICK_BATCHES if args.quick else models.BATCHES)[size_name]
    step = CommandStep(models.build("vanilla", size, attn, args.device), training_batch(size, shape, args.device))
    step()
    step()  # the optimizer's state made, the allocator's pages mapped
    step_seconds = statistics.median(seconds_per_call(step, args.steps, args.device) for _ in range(args.repeats))
    profiled = profile_step(step, args.device, 2, flops, peak)
    print(json.dumps({"step": step_seconds, "profile": profiled.as_dict()}))
