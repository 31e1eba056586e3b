"""`vanilla-transformer translate`: sentences from arguments, a file or stdin, through a model folder or an exported
CTranslate2 folder, one translation per line or an n-best list."""

import argparse
import io
import os
import sys

from ..errors import CommandError
from ..inference.options import Guards, SearchOptions
from ..inference.translators import UnsupportedError
from ..model_folder import card_languages
from ..serving.documents import split_document
from ..training.options.arguments import PositiveInt
from .engine import add_engine_arguments, translator_for


def translate_command_parser(subparsers) -> argparse.ArgumentParser:
    translate = subparsers.add_parser("translate", help="translate sentences from arguments, a file or stdin")
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
    add_guard_arguments(translate)
    translate.add_argument(
        "--n-best",
        type=PositiveInt,
        default=1,
        metavar="K",
        help="print the K best translations of each sentence, each with its score (K <= --num-beams), tab-separated",
    )
    translate.add_argument(
        "--prefix-file",
        help="a text file of target prefixes, one per input line (an empty line: none): each translation starts with "
        "its prefix and goes on from it",
    )
    add_constraint_arguments(translate)
    translate.add_argument(
        "--alignments",
        action="store_true",
        help="after each translation, a tab and its word alignment in Pharaoh format (source-target, 0-based), from "
        "the last decoder layer's cross-attention averaged over its heads, as fairseq's --print-alignment",
    )
    translate.add_argument(
        "--distinct",
        action="store_true",
        help="with --n-best: list each text once (two segmentations of one string are one), with its best score",
    )
    translate.add_argument(
        "--no-split",
        action="store_true",
        help="translate each line whole; by default a line of several sentences is split into its sentences (pysbd, "
        "in the rules of --source-lang), each translated, and put back together on one output line",
    )
    translate.add_argument(
        "--source-lang", help="the language whose sentence rules split the lines (default: the model card's, else en)"
    )
    add_engine_arguments(translate)
    translate.set_defaults(func=translate_command)
    return translate


def add_guard_arguments(translate: argparse.ArgumentParser) -> None:
    guards = translate.add_argument_group("guards on the output, as fairseq's and CTranslate2's")
    guards.add_argument(
        "--max-len-a",
        type=float,
        default=0.0,
        help="with --max-len-b: each sentence's limit is a * its source tokens (</s> included) + b new tokens, "
        "at most --max-length",
    )
    guards.add_argument("--max-len-b", type=int, help="see --max-len-a (default: --max-length alone)")
    guards.add_argument(
        "--no-repeat-ngram-size", type=int, help="no n-gram of this many tokens twice (default: the model's, else none)"
    )
    guards.add_argument(
        "--repetition-penalty",
        type=float,
        help="divide the probability of tokens already written by this (CTRL's; default: the model's, else 1)",
    )


def add_constraint_arguments(translate: argparse.ArgumentParser) -> None:
    translate.add_argument(
        "--constraints-file",
        help="a text file of terms, one line per input line, the terms of a line tab-separated (an empty line: "
        "none): each translation contains its line's terms (lexically constrained beam search, as fairseq's "
        "--constraints; the torch engine only)",
    )
    translate.add_argument(
        "--constraints-order",
        choices=("unordered", "ordered"),
        default="unordered",
        help="with --constraints-file: the terms in any order (default), or in the order given",
    )


def read_lines(path: str, flag: str) -> list[str]:
    """The lines of the file that `flag` names, or a `CommandError` naming the flag and the file (and the line of
    text that is not UTF-8)."""
    try:
        with open(path, "rb") as handle:
            return text_lines(handle.read(), f"{flag} {path}")
    except OSError as error:
        raise CommandError(f"{flag} {path}: {error.strerror}", exit_code=2) from error


def text_lines(data: bytes, name: str) -> list[str]:
    """UTF-8 bytes as lines, their ends (\\n, \\r\\n or \\r) removed; a `CommandError` names the line of `name` that is
    not UTF-8."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise CommandError(
            f"{name}, line {line}: not UTF-8 text (byte 0x{data[error.start]:02x}); save the file as UTF-8",
            exit_code=2,
        ) from error
    return [line.rstrip("\n") for line in io.StringIO(text, newline=None)]


def read_sentences(sentences: list[str], input_file: str | None) -> list[str]:
    """The sentences given as arguments, or the lines of --input, or of stdin."""
    if sentences and input_file:
        raise CommandError("give sentences as arguments or --input, not both", exit_code=2)
    if sentences:
        return sentences
    if input_file:
        return read_lines(input_file, "--input")
    return text_lines(sys.stdin.buffer.read(), "stdin")


def prefixes(path: str | None, count: int) -> list[str] | None:
    """The lines of --prefix-file, one per sentence; a `CommandError` where their numbers differ."""
    if path is None:
        return None
    lines = read_lines(path, "--prefix-file")
    if len(lines) != count:
        raise CommandError(f"--prefix-file {path} has {len(lines)} lines for {count} sentences: one per sentence", 2)
    return lines


def constraint_lists(path: str | None, count: int) -> list[list[str]] | None:
    """The terms of each line of --constraints-file, one line per sentence; a `CommandError` where their numbers
    differ or a line has an empty term."""
    if path is None:
        return None
    lines = read_lines(path, "--constraints-file")
    if len(lines) != count:
        raise CommandError(
            f"--constraints-file {path} has {len(lines)} lines for {count} sentences: one per sentence", 2
        )
    terms = [line.split("\t") if line else [] for line in lines]
    for number, row in enumerate(terms, start=1):
        if any(not term.strip() for term in row):
            raise CommandError(f"--constraints-file {path}, line {number}: an empty term (two tabs in a row?)", 2)
    return terms


def warn_at_limit(results) -> None:
    """A warning on stderr for each sentence whose translation the search stopped at its length limit."""
    for number, translations in enumerate(results, start=1):
        if translations and translations[0].at_limit:
            print(
                f"warning: sentence {number}: the translation stopped at its length limit before its end; raise "
                "--max-length (or --max-len-a/--max-len-b)",
                file=sys.stderr,
            )


def source_language(args: argparse.Namespace) -> str:
    languages = card_languages(args.model) if os.path.isdir(args.model) else None
    return args.source_lang or (languages[0] if languages else "en")


def search_options(args: argparse.Namespace, lines: list[str]) -> SearchOptions:
    """The search the flags ask for (with --prefix-file's and --constraints-file's lines); a `CommandError` names the
    flag of a value out of range."""
    if args.prefix_file and args.constraints_file:
        raise CommandError("--prefix-file and --constraints-file together: give one of them", exit_code=2)
    try:
        return SearchOptions(
            num_beams=args.num_beams, length_penalty=args.length_penalty, max_length=args.max_length,
            n_best=args.n_best, distinct=args.distinct, batch_size=args.batch_size, alignment=args.alignments,
            prefix=prefixes(args.prefix_file, len(lines)), terms=constraint_lists(args.constraints_file, len(lines)),
            ordered=args.constraints_order == "ordered",
            guards=Guards(args.max_len_a, args.max_len_b, args.no_repeat_ngram_size, args.repetition_penalty),
        )  # fmt: skip
    except ValueError as error:
        raise CommandError(f"--n-best/--num-beams: {error}", exit_code=2) from error


def translate_command(args: argparse.Namespace) -> int:
    """One translation per line (the line's sentences translated one by one, unless --no-split); with --n-best K,
    K lines per sentence: the sentence's number, the score and the translation, tab-separated, best first."""
    lines = read_sentences(args.sentences, args.input)
    translator = translator_for(args)
    options = search_options(args, lines)
    split = args.n_best == 1 and not (args.no_split or options.alignment or options.prefix or options.terms)
    documents = [split_document(line, source_language(args)) for line in lines] if split else None
    sentences = [sentence for document in documents for sentence in document.sentences] if split else lines
    try:
        results = translator.translate(sentences, options)
    except UnsupportedError as error:
        flag = {"alignments": "--alignments", "terms": "--constraints-file"}[error.capability]
        raise CommandError(f"{flag}: {error}", exit_code=2) from error
    except ValueError as error:
        flags = "--constraints-file" if options.terms else "--n-best/--num-beams"
        raise CommandError(f"{flags}: {error}", exit_code=2) from error
    warn_at_limit(results)
    if split:
        texts = iter(translations[0].text for translations in results)
        for document in documents:
            print(document.assemble([next(texts) for _ in document.sentences]))
        return 0
    if args.alignments:
        for translations in results:
            print(f"{translations[0].text}\t{translations[0].alignment.pharaoh()}")
        return 0
    for number, translations in enumerate(results):
        for translation in translations:
            if args.n_best == 1:
                print(translation.text)
            else:
                print(f"{number}\t{translation.score:.4f}\t{translation.text}")
    return 0
