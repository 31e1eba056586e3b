"""What runs a model for `translate`, `evaluate` and `score`: the `--engine`, `--device`, `--dtype`,
`--compute-type`, `--threads` and `--inter-threads` flags, and the translator they choose (the torch engine for a
model folder, CTranslate2 for an exported one), with every error naming its flag."""

import argparse
import os

from ..errors import CommandError, ModelFolderError, one_line
from ..exports.ctranslate2 import import_ctranslate2
from ..inference.devices import DEVICE_HELP, DTYPE_HELP, DTYPES, Placement, PlacementError
from ..inference.options import ENGINES
from ..inference.translators import engine_of, load_translator
from ..training.options.arguments import PositiveInt
from .process_settings import apply_decoding_process_settings


def add_engine_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--engine",
        choices=ENGINES,
        default="auto",
        help="what runs the model: 'auto' uses CTranslate2 for a folder written by `export --to ctranslate2`, torch "
        "for a model folder",
    )
    add_device_arguments(command)
    command.add_argument(
        "--compute-type",
        default="default",
        help="the CTranslate2 engine's precision, in its names (default: the export's; on CUDA float16 or "
        "int8_float16)",
    )
    command.add_argument(
        "--threads", type=PositiveInt, help="CPU threads on each batch (default: the engine's own choice)"
    )
    command.add_argument(
        "--inter-threads",
        type=PositiveInt,
        default=1,
        metavar="K",
        help="CTranslate2 only: translate K batches at once, each on --threads threads; for many sentences on N "
        "cores, K=N with --threads 1 is the faster layout in BENCHMARKS.md for int8 and for larger models",
    )


def add_device_arguments(command: argparse.ArgumentParser) -> None:
    """--device and --dtype: where a torch model runs and in what precision (also the demo's)."""
    command.add_argument("--device", default="auto", help=DEVICE_HELP)
    command.add_argument("--dtype", choices=("auto", *DTYPES), default="auto", help=DTYPE_HELP)


def placement_of(args: argparse.Namespace) -> Placement:
    """The flags' placement; on one of several processes (`accelerate launch`, `torchrun`), its own GPU."""
    try:
        placement = Placement(args.device, args.dtype, args.compute_type, args.threads, args.inter_threads)
    except PlacementError as error:
        raise flag_error(error) from error
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return placement.for_process(int(os.environ.get("LOCAL_RANK", "0")))
    return placement


def flag_error(error: PlacementError) -> CommandError:
    """A `PlacementError` as the command line says it: the flag, the value, and why."""
    return CommandError(f"--{error.option.replace('_', '-')} {error.value}: {error.reason}", exit_code=2)


def engine_for(args: argparse.Namespace) -> str:
    """The engine that runs --model ("torch" or "ctranslate2"), its flags checked against it; a `CommandError`
    naming the flag otherwise. The process then takes the decoding commands' setting for that engine
    (`apply_decoding_process_settings`), before anything loads."""
    placement = placement_of(args)
    engine = checked_engine(args.model, args.engine, placement)
    apply_decoding_process_settings(engine, placement)
    return engine


def checked_engine(model: str, engine: str, placement: Placement) -> str:
    """The engine that runs `model`, with `placement` checked against it before anything loads: a `CommandError`
    naming the flag (--engine, --device, --dtype, --compute-type, --inter-threads) otherwise."""
    try:
        engine = engine_of(model, engine)
    except ValueError as error:
        raise CommandError(f"--engine {engine}: {error}", exit_code=2) from error
    try:
        if engine == "torch":
            placement.check_torch()
            placement.torch_dtype(placement.torch_device())
        else:
            placement.check_ctranslate2()
            ctranslate2 = import_ctranslate2()
            placement.check_compute_type(ctranslate2, placement.ctranslate2_device(ctranslate2)[0])
    except PlacementError as error:
        raise flag_error(error) from error
    return engine


def translator_for(args: argparse.Namespace):
    """The translator of --model with the engine flags, or a `CommandError` naming the flag."""
    engine = engine_for(args)
    try:
        return load_translator(args.model, engine, placement_of(args))
    except PlacementError as error:
        raise flag_error(error) from error
    except ModelFolderError as error:  # already names the folder and what is wrong with it
        raise ModelFolderError(f"--model {error} (--engine {engine})") from error
    except (OSError, ValueError) as error:
        message = f"--model {args.model}: could not load it for --engine {engine}: {one_line(error)}"
        raise ModelFolderError(message) from error
