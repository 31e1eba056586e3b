"""The `vanilla-transformer` command: train, evaluate, translate, export, attention, demo, import, plot.

The commands that use a trained model (translate, export, attention, demo) and import are this package's
(`commands.py`); train, evaluate and plot are the training stack's, which only this module imports, when it builds
their options and runs them. Library functions raise exceptions; `main` is the one place that turns them into
`error: ...` and an exit status."""

import argparse
import sys

from .errors import CommandError
from .training.arguments import (
    TRAIN_ARGUMENT_GROUPS,
    ArgumentParser,
    DataArguments,
    GenerationArguments,
    PositiveInt,
)


def add_train_command(commands) -> None:
    train = commands.add_parser(
        "train",
        dataclass_types=TRAIN_ARGUMENT_GROUPS,
        help="train a tokenizer and a model, evaluate it, save it",
        description="Train a joint BPE tokenizer and the model on a parallel corpus with Accelerate, evaluate it "
        "with beam search and write a model folder. Sizes left unset come from --preset.",
    )
    train.set_defaults(refuse=train.error)  # flags that cannot go together end with train's usage and status 2


def add_evaluate_command(commands) -> None:
    evaluate = commands.add_parser(
        "evaluate",
        dataclass_types=(DataArguments, GenerationArguments),
        help="BLEU, chrF, exact match and cross-entropy of a model folder on a split",
    )
    evaluate.add_argument("--model", required=True, help="a model folder (or Hub name)")
    evaluate.add_argument("--split", default="test", help="the split to score")
    evaluate.add_argument("--seed", type=int, default=42, help="seed of the embedded task")
    evaluate.add_argument("--output", help="write the results as JSON here")
    add_backend_arguments(evaluate)


def add_translate_command(commands) -> None:
    translate = commands.add_parser("translate", help="translate sentences from arguments, a file or stdin")
    translate.add_argument(
        "--model", required=True, help="a model folder, an exported CTranslate2 folder or a Hub name"
    )
    translate.add_argument("sentences", nargs="*", help="sentences to translate; none means read --input or stdin")
    translate.add_argument("--input", help="a text file, one sentence per line")
    translate.add_argument("--batch-size", type=PositiveInt, default=32, help="sentences per batch")
    translate.add_argument("--num-beams", type=PositiveInt, default=5, help="beam size; 1 is greedy search")
    translate.add_argument(
        "--length-penalty",
        type=float,
        help="beam score = log p / length^alpha (default: the model's generation config)",
    )
    translate.add_argument("--max-length", type=PositiveInt, default=256, help="most new tokens per sentence")
    translate.add_argument(
        "--n-best",
        type=PositiveInt,
        default=1,
        metavar="K",
        help="print the K best translations of each sentence, each with its score (K <= --num-beams), tab-separated",
    )
    add_backend_arguments(translate)


def add_backend_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--backend",
        choices=["auto", "pytorch", "ctranslate2"],
        default="auto",
        help="what runs the model: 'auto' uses CTranslate2 for a folder written by `export --to ctranslate2`, "
        "PyTorch for a model folder",
    )
    command.add_argument(
        "--threads", type=PositiveInt, help="CPU threads on each batch (default: the backend's own choice)"
    )
    command.add_argument(
        "--inter-threads",
        type=PositiveInt,
        default=1,
        metavar="K",
        help="CTranslate2 only: translate K batches at once, each on --threads threads; for many sentences on N "
        "cores, K=N with --threads 1 is the faster layout in BENCHMARKS.md for int8 and for larger models",
    )


def add_export_command(commands) -> None:
    export = commands.add_parser(
        "export", help="export a model folder to CTranslate2 for fast translation, or as a Space running the demo"
    )
    export.add_argument("--model", required=True, help="a model folder (or Hub name)")
    export.add_argument(
        "--to",
        required=True,
        choices=["ctranslate2", "space"],
        help="ctranslate2: a CTranslate2 model folder; space: a Hugging Face Space folder running `demo`",
    )
    export.add_argument("--out", required=True, help="the folder to write (new or empty)")
    export.add_argument(
        "--quantization",
        choices=["int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32"],
        help="ctranslate2 only: the weights' type (default: float32, as trained)",
    )
    export.add_argument("--overwrite", action="store_true", help="replace --out if it holds files")


def add_attention_command(commands) -> None:
    attention = commands.add_parser("attention", help="draw attention heatmaps of a model for one sentence")
    attention.add_argument("--model", required=True, help="a model folder (or Hub name)")
    attention.add_argument("--source", required=True, help="the sentence to translate")
    attention.add_argument("--target", help="force-decode this translation instead of generating one")
    attention.add_argument("--out", required=True, help="folder for the PNG files")
    attention.add_argument("--num-beams", type=PositiveInt, default=5, help="beam size; 1 is greedy search")
    attention.add_argument("--max-length", type=PositiveInt, default=64, help="most new tokens")


def add_demo_command(commands) -> None:
    demo = commands.add_parser("demo", help="a Gradio app: translate and watch each stage of the Transformer")
    demo.add_argument("--model", required=True, help="a model folder (or Hub name)")
    demo.add_argument("--port", type=PositiveInt, help="the local port (default: Gradio's, 7860 or the next free)")
    demo.add_argument("--host", default="127.0.0.1", help="the address to serve on (0.0.0.0: every interface)")
    demo.add_argument("--share", action="store_true", help="also serve on a temporary public gradio.live link")


def add_import_command(commands) -> None:
    imports = commands.add_parser(
        "import",
        help="bring in a trained Marian (OPUS-MT), FSMT or fairseq Transformer as a model folder of this type",
        description="Import the weights of another implementation of the same architecture, exactly: a folder "
        "written by MarianMTModel or FSMTForConditionalGeneration (or its Hub id), or a fairseq checkpoint with its "
        "dict.*.txt and bpecodes beside it. Needs: pip install 'vanilla-transformer[import]'.",
    )
    imports.add_argument("--from", dest="kind", required=True, choices=["marian", "fsmt", "fairseq"], help="the source")
    imports.add_argument("source", help="the source's folder, Hub id, or fairseq checkpoint file")
    imports.add_argument("--out", required=True, help="the model folder to write (new or empty)")
    imports.add_argument(
        "--trust-pickle",
        action="store_true",
        help="read pickled weights (a fairseq checkpoint, a pytorch_model.bin), which can run code when loaded",
    )
    imports.add_argument("--overwrite", action="store_true", help="replace --out if it holds files")


def add_plot_command(commands) -> None:
    plot = commands.add_parser("plot", help="draw the training curves of a run folder (also while it runs)")
    plot.add_argument("run_dir", help="a training run's folder (its metrics.jsonl)")
    plot.add_argument("--out", help="PNG path (default: RUN_DIR/training_curves.png)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vanilla-transformer", description=__doc__.split("\n")[0])
    # every command's options are parsed by transformers' HfArgumentParser: train's and evaluate's come from the
    # training stack's argument dataclasses, with their defaults, types, choices and help lines
    commands = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    for add_command in (
        add_train_command,
        add_evaluate_command,
        add_translate_command,
        add_export_command,
        add_attention_command,
        add_demo_command,
        add_import_command,
        add_plot_command,
    ):
        add_command(commands)
    return parser


def apply_cpu_process_settings(args) -> None:
    """The training command's own process-wide settings for the CPU (see `keep_freed_memory_mapped` and
    `flush_denormals`); the library itself changes no process setting on import or on `train()`."""
    import torch

    from .training.loop import flush_denormals, keep_freed_memory_mapped

    if args.optimisation.cpu or not torch.cuda.is_available():  # the device Accelerator(cpu=args.cpu) trains on is the CPU
        keep_freed_memory_mapped()
        flush_denormals()


def train_command(args) -> int:
    from .training.loop import train

    apply_cpu_process_settings(args)
    train(args)
    return 0


def plot_command(args) -> int:
    from .training.plots import plot_run

    print(plot_run(args.run_dir, args.out))
    return 0


def dispatch(command: str):
    """The function that runs `command`: the training stack's for train, evaluate and plot."""
    if command == "train":
        return train_command
    if command == "evaluate":
        from .training.evaluation import evaluate_command

        return evaluate_command
    if command == "plot":
        return plot_command
    from . import commands

    return getattr(commands, f"{command}_command")


def exit_status(command: str, error: Exception) -> int | None:
    """The exit status for an expected failure of `command`, or None for anything else (a bug keeps its traceback).
    1: the command could not finish (a training run stopped on purpose, a model folder that does not load, a missing
    optional dependency); 2: bad input (flags, data, folders)."""
    if isinstance(error, CommandError):
        return error.exit_code
    if command == "train":
        from .training.loop import TrainingStopped

        if isinstance(error, TrainingStopped):
            return 1
    if isinstance(error, ValueError) and command in ("train", "plot"):
        return 2
    if command == "evaluate":
        from .training.data import DataError

        if isinstance(error, DataError):
            return 2
    return None


def parse(argv: list[str] | None):
    """The parsed command line; for train, the resolved `TrainArguments` (bad flags end here, with status 2)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command != "train":
        return args
    from .training.arguments import TrainArguments, resolve

    try:
        return resolve(TrainArguments.from_namespace(args))
    except ValueError as error:
        args.refuse(str(error))


def main(argv: list[str] | None = None) -> int:
    """The command line: parse, run, and turn the library's exceptions into `error: ...` and an exit status."""
    args = parse(argv)
    command = getattr(args, "command", "train")  # TrainArguments: the train command's
    try:
        return dispatch(command)(args)
    except Exception as error:
        status = exit_status(command, error)
        if status is None:
            raise
        print(f"error: {error}", file=sys.stderr)
        return status


if __name__ == "__main__":
    sys.exit(main())
