"""`vanilla-transformer attention`: the attention heatmaps of a model for one sentence, as PNG files."""

import argparse
import os

from ..corpus.output import check_output_folder
from ..errors import CommandError, WriteError, first_few
from ..folders import holds
from ..inference.checks import is_blank
from ..model_folder import load_model_folder
from ..training.options.argument_types import BeamSize
from ..training.options.arguments import PositiveInt


def attention_command_parser(subparsers) -> argparse.ArgumentParser:
    attention = subparsers.add_parser("attention", help="draw attention heatmaps of a model for one sentence")
    attention.add_argument("--model", required=True, help="a model folder (or Hub name)")
    attention.add_argument("--source", required=True, help="the sentence to translate")
    attention.add_argument("--target", help="force-decode this translation instead of generating one")
    attention.add_argument("--out", required=True, help="folder for the PNG files")
    attention.add_argument("--num-beams", type=BeamSize, default=5, help="beam size; 1 is greedy search")
    attention.add_argument("--max-length", type=PositiveInt, default=64, help="most new tokens")
    attention.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the figures in --out (and remove those of layers this model has not)",
    )
    attention.set_defaults(func=attention_command)
    return attention


def attention_command(args: argparse.Namespace) -> int:
    from ..demo.attention_maps import (
        NotDrawable,
        attention_maps,
        earlier_figures,
        figure_paths,
        write_attention_figures,
    )

    check_output_folder("--out", args.out)
    if os.path.isdir(args.model) and holds(args.model, args.out):
        raise CommandError(
            f"--out {args.out} is inside the --model folder {args.model}: write the figures elsewhere", 2
        )
    if is_blank(args.source):  # a blank sentence is not searched (docs/errors.md): it has no attention to draw
        raise CommandError("--source is blank; expected the sentence to translate", 2)
    model, tokenizer = load_model_folder(args.model, f"--model {args.model}")
    try:
        maps = attention_maps(
            model, tokenizer, args.source, args.target, num_beams=args.num_beams, max_new_tokens=args.max_length
        )
    except NotDrawable as error:
        flag = {"source": "--source", "target": "--target", "max_new_tokens": "--max-length"}[error.argument]
        raise CommandError(f"{flag}{str(error).removeprefix(error.argument)}", 2) from error
    taken = [os.path.basename(path) for path in figure_paths(maps, args.out) if os.path.lexists(path)]
    earlier = earlier_figures(maps, args.out) if os.path.isdir(args.out) else []
    if (taken or earlier) and not args.overwrite:
        names = first_few(taken or [os.path.basename(path) for path in earlier])
        raise CommandError(f"--out {args.out} holds {names} already: pass --overwrite to replace them", 2)
    try:
        paths = write_attention_figures(maps, args.out)
        for path in earlier:  # another sentence's (another model's deeper layers): not to be read as this one's
            os.remove(path)
    except OSError as error:
        raise WriteError.of(f"--out {args.out}", error) from error
    print(f"{args.source} -> {maps['translation']}")
    print(f"{len(paths)} figures in {args.out}")
    return 0
