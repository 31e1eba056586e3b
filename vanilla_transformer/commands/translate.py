"""`vanilla-transformer translate`: sentences from arguments, a file or stdin, through a model folder or an exported
CTranslate2 folder, one translation per line or an n-best list."""

import argparse
import os

from ..corpus.jobs import Layout, TranslateJob
from ..corpus.reading import STANDARD_STREAM, Corpus, TextInput
from ..errors import CommandError
from ..inference.options import Guards, OptionError, SearchOptions
from ..inference.translators import UnsupportedError
from ..model_folder import card_languages
from ..training.options.argument_types import BeamSize, LengthPenalty, NonNegativeFloat, PositiveFloat, PositiveInt
from .corpus import add_corpus_arguments, run_job
from .engine import add_engine_arguments, translator_for


def translate_command_parser(subparsers) -> argparse.ArgumentParser:
    translate = subparsers.add_parser("translate", help="translate sentences from arguments, a file or stdin")
    translate.add_argument(
        "--model", required=True, help="a model folder, an exported CTranslate2 folder or a Hub name"
    )
    translate.add_argument("sentences", nargs="*", help="sentences to translate; none (or -): --input or stdin")
    translate.add_argument("--input", help="a text file, one sentence per line (-: stdin)")
    translate.add_argument("--batch-size", type=PositiveInt, default=32, help="sentences per batch, at most")
    translate.add_argument(
        "--max-tokens",
        type=PositiveInt,
        metavar="N",
        help="source tokens per batch, at most, padding included (fairseq's; default: --batch-size alone)",
    )
    translate.add_argument("--num-beams", type=BeamSize, default=5, help="beam size; 1 is greedy search")
    translate.add_argument(
        "--length-penalty",
        type=LengthPenalty,
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
        "in the rules of --source-lang), each translated, and put back together on one output line, except with "
        "--n-best above 1, --alignments, --prefix-file or --constraints-file, which read each line whole",
    )
    translate.add_argument(
        "--source-lang", help="the language whose sentence rules split the lines (default: the model card's, else en)"
    )
    add_engine_arguments(translate)
    add_corpus_arguments(translate, "translations")
    translate.set_defaults(func=translate_command)
    return translate


def add_guard_arguments(translate: argparse.ArgumentParser) -> None:
    guards = translate.add_argument_group("guards on the output, as fairseq's and CTranslate2's")
    guards.add_argument(
        "--max-len-a",
        type=NonNegativeFloat,
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
        type=PositiveFloat,
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
        help="with --constraints-file: the terms in any order (the default), or in the order given",
    )


def corpus_of(args: argparse.Namespace) -> Corpus:
    """The sentences (arguments, --input or stdin) and, line by line beside them, --prefix-file's or
    --constraints-file's lines; a `CommandError` names a flag that cannot go with another or a file that cannot be
    read."""
    if args.sentences and args.input:
        raise CommandError("give sentences as arguments or --input, not both", exit_code=2)
    if args.prefix_file and args.constraints_file:
        raise CommandError("--prefix-file and --constraints-file together: give one of them", exit_code=2)
    if args.constraints_order and not args.constraints_file:
        raise CommandError("--constraints-order orders the terms of --constraints-file: give that file", exit_code=2)
    if args.sentences and args.sentences != [STANDARD_STREAM]:
        sentences = TextInput.arguments(args.sentences)
    else:  # `-` alone, as Unix tools take it: stdin
        sentences = TextInput.file(args.input, "--input") if args.input else TextInput.stdin()
    extra = [TextInput.file(path, flag) for path, flag in ((args.prefix_file, "--prefix-file"),
             (args.constraints_file, "--constraints-file")) if path]  # fmt: skip
    return Corpus([sentences, *extra], skip_invalid=args.skip_invalid)


def source_language(args: argparse.Namespace) -> str:
    languages = card_languages(args.model) if os.path.isdir(args.model) else None
    return args.source_lang or (languages[0] if languages else "en")


def search_options(args: argparse.Namespace) -> SearchOptions:
    """The search the flags ask for; a `CommandError` names the flag of a value out of range."""
    try:
        return SearchOptions(
            num_beams=args.num_beams, length_penalty=args.length_penalty, max_length=args.max_length,
            n_best=args.n_best, distinct=args.distinct, batch_size=args.batch_size, max_tokens=args.max_tokens,
            alignment=args.alignments, ordered=args.constraints_order == "ordered",
            guards=Guards(args.max_len_a, args.max_len_b, args.no_repeat_ngram_size, args.repetition_penalty),
        )  # fmt: skip
    except OptionError as error:
        raise flags_error(error) from error


def layout_of(args: argparse.Namespace) -> Layout:
    """How lines are read and written: split into sentences unless --no-split, an n-best list, alignments, a
    prefix or terms ask for each line whole."""
    extra = "prefix" if args.prefix_file else "terms" if args.constraints_file else None
    whole = args.no_split or args.n_best > 1 or args.alignments or extra
    return Layout(None if whole else source_language(args), extra, args.skip_invalid, args.max_sentence_tokens)


def translate_command(args: argparse.Namespace) -> int:
    """One translation per line (the line's sentences translated one by one, unless --no-split); with --n-best K,
    K lines per sentence: the line's number (from 0), the score and the translation, tab-separated, best first. The
    input goes through in windows (see `corpus`), to stdout or --output."""
    corpus, options, layout = corpus_of(args), search_options(args), layout_of(args)
    try:
        return run_job(args, corpus, lambda: TranslateJob(translator_for(args), options, layout, corpus.inputs))
    except UnsupportedError as error:
        flag = {"alignments": "--alignments", "terms": "--constraints-file"}[error.capability]
        raise CommandError(f"{flag}: {error}", exit_code=2) from error
    except OptionError as error:
        raise flags_error(error) from error


def flags_error(error: OptionError) -> CommandError:
    """An `OptionError` as the command line says it: the flags of its options (`SearchOptions`' fields), and why."""
    flags = "/".join("--" + option.replace("_", "-") for option in error.options)
    return CommandError(f"{flags}: {error}", exit_code=2)
