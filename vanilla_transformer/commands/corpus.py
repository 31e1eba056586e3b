"""What `translate` and `score` share to go through a corpus of any size: the flags of its windows, output,
progress and bad lines, and the run itself, on one process or on each of those `accelerate launch` or `torchrun`
started."""

import argparse
import os

from ..corpus.output import Parts, StandardOutput, this_process
from ..corpus.progress import PROGRESS
from ..corpus.reading import STANDARD_STREAM, Corpus
from ..corpus.run import run_corpus
from ..errors import CommandError, warn
from ..folders import holds
from ..training.options.argument_types import at_most
from ..training.options.arguments import PositiveInt

READ_WINDOW = 2000  # lines a window holds by default
MOST_READ_WINDOW = 10**9
MAX_SENTENCE_TOKENS = 1024  # far above a sentence's tokens; a line of 250,000 asked for 2 TB of attention weights
# the flags that do not change the output, and the input files, whose contents the run's fingerprints (however their
# paths are spelled: a run resumed from another folder)
NOT_SETTINGS = {"func", "command", "output", "progress", "threads", "inter_threads", "input", "pairs", "source_file",
                "target_file", "prefix_file", "constraints_file"}  # fmt: skip


def file_or_stdout(path: str) -> str | None:
    """--output's value: a file, or None for stdout (`-`, as Unix tools take it)."""
    return None if path == STANDARD_STREAM else path


def add_corpus_arguments(command: argparse.ArgumentParser, what: str) -> None:
    corpus = command.add_argument_group("a corpus of any size (see docs/corpora.md)")
    corpus.add_argument(
        "--output",
        metavar="FILE",
        type=file_or_stdout,
        help=f"write the {what} to FILE (default, or -: stdout), through FILE.partial/: a run that is stopped, or "
        "killed, goes on from where it was when the same command is run again; FILE appears only once it is whole",
    )
    add_read_window(corpus, "input", "lines")
    corpus.add_argument(
        "--progress",
        choices=PROGRESS,
        default="auto",
        help="progress on stderr (lines, lines/s, target tokens/s, time left): auto shows it on a terminal only",
    )
    corpus.add_argument(
        "--skip-invalid",
        action="store_true",
        help="a line that is not UTF-8, is over the model's positions or over --max-sentence-tokens gets an empty "
        "output line (`null` for a score), counted at the end, instead of stopping the run",
    )
    corpus.add_argument(
        "--max-sentence-tokens",
        type=PositiveInt,
        default=MAX_SENTENCE_TOKENS,
        metavar="N",
        help="a sentence (or a --prefix-file line) of more tokens stops the run, naming its line (or is skipped "
        "with --skip-invalid): the memory a sentence takes grows with the square of its length",
    )


def add_read_window(group, what: str, unit: str, note: str = "") -> None:
    """--read-window: how much of the input memory holds at once (`translate`, `score`, `evaluate`)."""
    group.add_argument(
        "--read-window",
        type=at_most(PositiveInt, MOST_READ_WINDOW, "a window is read into memory whole"),
        default=READ_WINDOW,
        metavar="N",
        help=f"read the {what} N {unit} at a time, each window sorted by length and cut into batches; memory "
        f"holds one window, whatever the input's size{note}",
    )


def check_outside_model(output: str, model: str, flag: str = "--output") -> None:
    """A `CommandError` where the path `flag` names is one of the --model folder's (a new name there is fine)."""
    if os.path.isdir(model) and holds(model, output) and os.path.exists(output):
        raise CommandError(f"{flag} {output} is a file of the --model folder {model}: write it elsewhere", 2)


def output_for(args: argparse.Namespace, corpus: Corpus, share):
    """Where the output goes: stdout, or --output FILE (resumable), checked before any model loads."""
    if share.world > 1 and (args.output is None or not all(s.rereadable for s in corpus.inputs)):
        raise CommandError(f"{share.world} processes read files and write one: give --input FILE and --output FILE",
                           exit_code=2)  # fmt: skip
    if args.output is None:
        return StandardOutput()
    for source in corpus.inputs:
        if source.path is not None and os.path.realpath(source.path) == os.path.realpath(args.output):
            raise CommandError(f"--output {args.output} is {source.name}: write the output to another file", 2)
    check_outside_model(args.output, args.model)
    settings = {key: value for key, value in sorted(vars(args).items()) if key not in NOT_SETTINGS}
    settings["reads"] = [source.kind for source in corpus.inputs]  # which inputs, their files fingerprinted
    return Parts(args.output, share, corpus.fingerprints(args.read_window), settings)


def run_job(args: argparse.Namespace, corpus: Corpus, make_job) -> int:
    """The corpus through the job that `make_job()` makes (once the output is checked), into --output or stdout; a
    warning counts the lines left blank under --skip-invalid."""
    corpus.check()
    share = this_process()
    output = output_for(args, corpus, share)
    try:
        skipped = run_corpus(corpus, make_job(), output, args.read_window, share, args.progress)
    except BaseException:
        output.abandon()
        raise
    if skipped:
        warn(f"{skipped} lines could not be used and were left blank (--skip-invalid)")
    return 0
