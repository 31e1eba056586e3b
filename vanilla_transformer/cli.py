"""The `vanilla-transformer` command: train, evaluate, translate, serve, score, export, attention, demo, import,
plot, ablate.

Each command is a module of `vanilla_transformer.commands`, its parser beside its handler; this module builds the
top parser, registers them, and runs the one named. Library functions raise exceptions and the handlers turn the
failures they expect into a `CommandError`; `main` is the one place that turns it into `error: ...` on stderr and
an exit status: 1, the command could not finish (a training run stopped on purpose, a model folder that does not
load, a missing optional dependency); 2, bad input (flags, data, folders). Anything else is a bug and keeps its
traceback."""

import argparse
import sys
from importlib.metadata import version

from .commands.ablate import ablate_command_parser
from .commands.attention import attention_command_parser
from .commands.demo import demo_command_parser
from .commands.evaluate import evaluate_command_parser
from .commands.export import export_command_parser
from .commands.import_model import import_command_parser
from .commands.plot import plot_command_parser
from .commands.score import score_command_parser
from .commands.serve import serve_command_parser
from .commands.train import train_command_parser
from .commands.translate import translate_command_parser
from .errors import CommandError
from .processes import end_processes
from .training.options.arguments import ArgumentParser

COMMANDS = (
    train_command_parser,
    evaluate_command_parser,
    translate_command_parser,
    serve_command_parser,
    score_command_parser,
    export_command_parser,
    attention_command_parser,
    demo_command_parser,
    import_command_parser,
    plot_command_parser,
    ablate_command_parser,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vanilla-transformer", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {version('vanilla-transformer')}")
    # every command's options are parsed by transformers' HfArgumentParser: train's and evaluate's come from the
    # training stack's argument dataclasses, with their defaults, types, choices and help lines
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    for command_parser in COMMANDS:
        command_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The command line: parse, run the command, and turn a `CommandError` into `error: ...` and its exit status."""
    args = build_parser().parse_args(argv)
    try:
        status = args.func(args)
    except CommandError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:  # Ctrl-C: what the command writes is left whole or resumable, as its help says
        print(f"\n{args.command}: interrupted", file=sys.stderr)
        return 130
    end_processes()  # several processes (torchrun, accelerate launch): their group ends before they exit
    return status


if __name__ == "__main__":
    sys.exit(main())
