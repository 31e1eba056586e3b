"""`vanilla-transformer train`: a joint BPE tokenizer and a model trained with Accelerate, evaluated and saved as a
model folder. Its flags are the training stack's argument dataclasses (`TRAIN_ARGUMENT_GROUPS`), read by
`HfArgumentParser`; flags that cannot go together end with train's usage and status 2."""

import argparse

from ..training.options.arguments import TRAIN_ARGUMENT_GROUPS, TrainArguments, resolve
from .failures import reported_as
from .launch_check import check_launched_processes
from .process_settings import apply_cpu_process_settings


def train_command_parser(subparsers) -> argparse.ArgumentParser:
    train = subparsers.add_parser(
        "train",
        dataclass_types=TRAIN_ARGUMENT_GROUPS,
        help="train a tokenizer and a model, evaluate it, save it",
        description="Train a joint BPE tokenizer and the model on a parallel corpus with Accelerate, evaluate it "
        "with beam search and write a model folder. Sizes left unset come from --preset.",
    )
    train.set_defaults(func=train_command, refuse=train.error)
    return train


def train_command(namespace: argparse.Namespace) -> int:
    """Resolve the flags (a bad combination: train's usage and status 2), set the process up and train; a run that
    stopped on purpose exits with 1, bad input (data, folders) with 2."""
    try:
        args = resolve(TrainArguments.from_namespace(namespace))
    except ValueError as error:
        namespace.refuse(str(error))
    from ..training.run.loop import TrainingStopped, train

    apply_cpu_process_settings(args.optimisation.cpu)
    with reported_as(1, TrainingStopped), reported_as(2, ValueError):
        check_launched_processes()
        train(args)
    return 0
