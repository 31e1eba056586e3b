"""`vanilla-transformer export`: a model folder as a CTranslate2 folder for fast translation, or as a Hugging Face
Space folder running the demo."""

import argparse
import os

from ..errors import CommandError, ModelFolderError, WriteError
from ..exports.ctranslate2 import ExportError, export_ctranslate2
from ..folders import holds
from .corpus import check_outside_model


def export_command_parser(subparsers) -> argparse.ArgumentParser:
    export = subparsers.add_parser(
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
    export.set_defaults(func=export_command)
    return export


def export_command(args: argparse.Namespace) -> int:
    if os.path.exists(args.model) and holds(args.out, args.model):  # before the model loads
        raise CommandError(f"--out {args.out} holds --model {args.model}: write to another folder", exit_code=2)
    check_outside_model(args.out, args.model, "--out")
    try:
        if args.to == "space":
            return export_space(args.model, args.out, args.quantization, args.overwrite)
        out = ctranslate2_export(args)
    except ExportError as error:
        raise CommandError(f"export --to {args.to}: {error}", exit_code=2) from error
    except WriteError as error:  # a full disk: the folder named by its flag
        raise CommandError(f"--out {error}") from error
    print(f"Exported {args.model} to {args.to} in {out}" + (f" ({args.quantization})" if args.quantization else ""))
    return 0


def ctranslate2_export(args: argparse.Namespace) -> str:
    """`export --to ctranslate2` of the folder, not of its model: --out is checked before the model loads, and the
    export records the seed the model was trained with."""
    try:
        return export_ctranslate2(args.model, args.out, quantization=args.quantization, overwrite=args.overwrite)
    except ModelFolderError as error:  # named by its flag
        raise CommandError(f"--model {error}", exit_code=error.exit_code) from error


def export_space(model: str, out: str, quantization: str | None, overwrite: bool) -> int:
    """`export --to space`: a Space folder whose app.py runs the demo on the model."""
    from ..exports.space import SpaceExportError
    from ..exports.space import export_space as write_space

    if quantization:
        raise CommandError("--quantization applies to --to ctranslate2, not to a Space", exit_code=2)
    try:
        out = write_space(model, out, overwrite=overwrite)
    except SpaceExportError as error:
        raise CommandError(f"export --to space: {error}", exit_code=2) from error
    except ModelFolderError as error:  # its message starts with the folder: named by its flag, as the other's
        raise ModelFolderError(f"--model {error}") from error
    print(f"Exported {model} as a Space in {out}: `python {os.path.join(out, 'app.py')}` runs it here")
    return 0
