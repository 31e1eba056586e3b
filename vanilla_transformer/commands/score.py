"""`vanilla-transformer score`: how likely the model finds given translations (forced decoding), one JSON line per
pair: the sentence's log-probability with and without the end of sentence, per token, and each token's."""

import argparse
import json
import sys

from ..errors import CommandError
from ..training.options.arguments import PositiveInt
from .engine import add_engine_arguments, translator_for
from .translate import read_lines


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
    score.set_defaults(func=score_command)
    return score


def read_pairs(path: str, source_lang: str, target_lang: str) -> tuple[list[str], list[str]]:
    sources, targets = [], []
    for number, line in enumerate(read_lines(path, "--pairs"), 1):
        if not line.strip():
            continue
        try:
            pair = json.loads(line)["translation"]
            sources.append(pair[source_lang])
            targets.append(pair[target_lang])
        except (ValueError, KeyError, TypeError) as error:
            raise CommandError(
                f'--pairs {path}, line {number}: expected {{"translation": {{"{source_lang}": ..., '
                f'"{target_lang}": ...}}}} ({type(error).__name__}: {error})',
                exit_code=2,
            ) from error
    return sources, targets


def pairs_of(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The pairs to score, from --source-file and --target-file or from --pairs; a `CommandError` names the flag."""
    if args.pairs:
        if args.source_file or args.target_file or not (args.source_lang and args.target_lang):
            raise CommandError("--pairs needs --source-lang and --target-lang, and no --source/--target-file", 2)
        return read_pairs(args.pairs, args.source_lang, args.target_lang)
    if not (args.source_file and args.target_file):
        raise CommandError("give --source-file and --target-file, or --pairs", exit_code=2)
    sources, targets = read_lines(args.source_file, "--source-file"), read_lines(args.target_file, "--target-file")
    if len(sources) != len(targets):
        raise CommandError(
            f"--source-file {args.source_file} has {len(sources)} lines and --target-file {args.target_file} "
            f"{len(targets)}: expected one translation per source line",
            exit_code=2,
        )
    return sources, targets


def score_command(args: argparse.Namespace) -> int:
    sources, targets = pairs_of(args)
    translator = translator_for(args)
    for score in translator.score(sources, targets, batch_size=args.batch_size):
        print(json.dumps(score.as_dict(), ensure_ascii=False))
    sys.stdout.flush()
    return 0
