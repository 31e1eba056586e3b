"""The `vanilla-transformer` command: train, evaluate, translate, serve, score, export, attention, demo, import,
plot, ablate.

Each command is a module of `vanilla_transformer.commands`, its parser beside its handler; this module builds the
top parser, registers them, and runs the one named. Library functions raise exceptions and the handlers turn the
failures they expect into a `CommandError`; `main` is the one place that turns it into `error: ...` on stderr and
an exit status: 1, the command could not finish (a training run stopped on purpose, a model folder that does not
load, a missing optional dependency); 2, bad input (flags, data, folders). Ctrl-C ends a command with 130 and
SIGTERM with 143, each with one line; a stdout whose reader went away (`| head`), quietly with 141. Anything else is
a bug and keeps its traceback."""

import argparse
import contextlib
import os
import signal
import sys
import threading
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
from .corpus.output import stdout_errors
from .errors import CommandError, ReaderGone
from .processes import Terminated, end_processes, terminate
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
    parser = argparse.ArgumentParser(prog="vanilla-transformer", description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--version", action="version", version=f"%(prog)s {version('vanilla-transformer')}")
    # every command's options are parsed by transformers' HfArgumentParser: train's and evaluate's come from the
    # training stack's argument dataclasses, with their defaults, types, choices and help lines
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    for command_parser in COMMANDS:
        command_parser(subparsers)
    return parser


@contextlib.contextmanager
def sigterm_interrupts():
    """Within the block, SIGTERM raises `Terminated`, so that a command stopped by kill cleans up as one stopped by
    Ctrl-C does (a start that wrote nothing leaves nothing). Not off the main thread, which alone can set a handler,
    nor on several processes: a process waiting in a collective runs no Python handler, and its launcher (torchrun)
    must be able to end it at once. A command with its own stop (serve, ablate) sets its own handler."""
    if threading.current_thread() is not threading.main_thread() or os.environ.get("WORLD_SIZE", "1") != "1":
        yield
        return
    previous = signal.signal(signal.SIGTERM, terminate(os.getpid()))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)  # None: set outside Python


def quiet_library_progress() -> None:
    """transformers' progress bars ("Loading weights", over as soon as it starts) off where stderr is not a terminal:
    a log or a pipe keeps its lines. The bars of steps that take time (datasets' tokenising, training) stay."""
    if sys.stderr is None or not sys.stderr.isatty():
        from transformers.utils import logging

        logging.disable_progress_bar()


def flush_stdout() -> None:
    """What is left of stdout written now, so that a reader gone or a full disk is found here (`stdout_errors`), not
    at the interpreter's exit."""
    with stdout_errors():
        if sys.stdout is not None:
            sys.stdout.flush()


def reader_gone() -> int:
    """The end of a command whose stdout's reader went away (`| head`): quiet, as Unix tools end. stdout now goes
    to /dev/null, so that the interpreter's last flush of what is left finds no broken pipe to complain of."""
    if sys.stdout is not None:
        with contextlib.suppress(OSError, ValueError):  # a stdout without a file (in tests): nothing to point
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
    return 128 + signal.SIGPIPE  # 141: what a shell reports of a Unix tool that a closed pipe ended (`cat | head`)


def main(argv: list[str] | None = None) -> int:
    """The command line: parse, run the command, and turn a `CommandError` into `error: ...` and its exit status."""
    args = build_parser().parse_args(argv)
    quiet_library_progress()
    try:
        with sigterm_interrupts():
            status = args.func(args)
            flush_stdout()
    except CommandError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:  # Ctrl-C: what the command writes is left whole or resumable, as its help says
        print(f"\n{args.command}: interrupted", file=sys.stderr)
        return 130
    except Terminated:  # SIGTERM: as Ctrl-C
        print(f"{args.command}: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except ReaderGone:  # a broken pipe of stdout's; any other is a bug's, and keeps its traceback
        return reader_gone()
    end_processes()  # several processes (torchrun, accelerate launch): their group ends before they exit
    return status


if __name__ == "__main__":
    sys.exit(main())
