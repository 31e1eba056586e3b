"""`vanilla-transformer score`: how likely the model finds given translations (forced decoding), one JSON line per
pair: the sentence's log-probability with and without the end of sentence, per token, and each token's."""

import argparse

from ..corpus.jobs import Layout, ScoreJob
from ..corpus.reading import Corpus, TextInput, translation_pair
from ..errors import CommandError
from ..training.options.arguments import PositiveInt
from .corpus import add_corpus_arguments, run_job
from .engine import add_engine_arguments, translator_for


def score_command_parser(subparsers) -> argparse.ArgumentParser:
    score = subparsers.add_parser("score", help="score given translations: log-probabilities per sentence and token")
    score.add_argument("--model", required=True, help="a model folder, an exported CTranslate2 folder or a Hub name")
    score.add_argument("--source-file", help="the sources, one per line")
    score.add_argument("--target-file", help="their translations, one per line, as many as the sources")
    score.add_argument(
        "--pairs", help="instead: a JSON-lines file in the datasets translation schema ({'translation': {...}})"
    )
    score.add_argument("--source-lang", help="with --pairs: the source side's key")
    score.add_argument("--target-lang", help="with --pairs: the target side's key")
    score.add_argument("--batch-size", type=PositiveInt, default=32, help="pairs per batch")
    add_engine_arguments(score)
    add_corpus_arguments(score, "scores")
    score.set_defaults(func=score_command)
    return score


def corpus_of(args: argparse.Namespace) -> Corpus:
    """The pairs to score, from --source-file and --target-file or from --pairs; a `CommandError` names the flag."""
    if args.pairs:
        if args.source_file or args.target_file or not (args.source_lang and args.target_lang):
            raise CommandError("--pairs needs --source-lang and --target-lang, and no --source/--target-file", 2)
        pairs = translation_pair(args.source_lang, args.target_lang)
        return Corpus([TextInput.file(args.pairs, "--pairs")], pairs, skip_invalid=args.skip_invalid)
    if args.source_lang or args.target_lang:
        raise CommandError("--source-lang and --target-lang name the keys of --pairs: give --pairs", exit_code=2)
    if not (args.source_file and args.target_file):
        raise CommandError("give --source-file and --target-file, or --pairs", exit_code=2)
    return Corpus([TextInput.file(args.source_file, "--source-file"),
                   TextInput.file(args.target_file, "--target-file")], skip_invalid=args.skip_invalid)  # fmt: skip


def score_command(args: argparse.Namespace) -> int:
    """One JSON line per pair, in input order, to stdout or --output; the pairs go through in windows (see
    `corpus`)."""
    corpus = corpus_of(args)
    layout = Layout(skip_invalid=args.skip_invalid, max_sentence_tokens=args.max_sentence_tokens)
    job = lambda: ScoreJob(translator_for(args), args.batch_size, layout, corpus.inputs)  # noqa: E731
    return run_job(args, corpus, job)
