"""`vanilla-transformer import`: a trained Marian (OPUS-MT), FSMT or fairseq Transformer, weight by weight, as a model
folder of this type. (`import` is a keyword, hence the module's name.)"""

import argparse

from ..errors import CommandError, WriteError
from ..importers import KINDS


def import_command_parser(subparsers) -> argparse.ArgumentParser:
    imports = subparsers.add_parser(
        "import",
        help="bring in a trained Marian (OPUS-MT), FSMT or fairseq Transformer as a model folder of this type",
        description="Import the weights of another implementation of the same architecture, exactly: a folder "
        "written by MarianMTModel or FSMTForConditionalGeneration (or its Hub id), or a fairseq checkpoint with its "
        "dict.*.txt and bpecodes beside it. Needs: pip install 'vanilla-transformer[import]'.",
    )
    imports.add_argument("--from", dest="kind", required=True, choices=list(KINDS), help="the source")
    imports.add_argument("source", help="the source's folder, Hub id, or fairseq checkpoint file")
    imports.add_argument("--out", required=True, help="the model folder to write (new or empty)")
    imports.add_argument(
        "--trust-pickle",
        action="store_true",
        help="read pickled weights (a fairseq checkpoint, a pytorch_model.bin), which can run code when loaded",
    )
    imports.add_argument("--overwrite", action="store_true", help="replace --out if it holds files")
    imports.add_argument(
        "--languages",
        nargs=2,
        metavar=("SRC", "TGT"),
        help="fairseq: the source and target language, for a checkpoint trained without --source-lang and "
        "--target-lang whose data folder is no longer where the checkpoint says",
    )
    imports.set_defaults(func=import_command)
    return imports


def import_command(args: argparse.Namespace) -> int:
    from ..importing import CheckpointImportError, import_checkpoint

    try:
        model, _ = import_checkpoint(
            args.source,
            args.kind,
            out=args.out,
            trust_pickle=args.trust_pickle,
            overwrite=args.overwrite,
            languages=args.languages,
        )
    except CheckpointImportError as error:
        raise CommandError(f"import --from {args.kind}: {error}", exit_code=2) from error
    except WriteError as error:  # a full disk: the folder named by its flag
        raise CommandError(f"--out {error}") from error
    print(f"Imported {args.source} ({args.kind}, {model.num_parameters():,} parameters) into {args.out}")
    return 0
