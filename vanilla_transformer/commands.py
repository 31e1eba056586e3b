"""The commands that use a trained model: `vanilla-transformer translate`, `export`, `attention` and `demo`, and
`import`, which brings one in. Each turns its parsed flags into calls of the library (translators, exports, attention
maps, the demo, the import).

They raise `CommandError` for a bad folder, flag or input; `cli.main` reports it."""

import os
import sys

from .ctranslate2_export import ExportError, export_ctranslate2
from .errors import CommandError, ModelFolderError
from .model_folder import load_model_folder
from .translators import load_translator, uses_ctranslate2


def runs_on_pytorch(args) -> bool:
    """Whether --model runs on PyTorch; a `CommandError` if a flag asks for what only CTranslate2 does."""
    if uses_ctranslate2(args.model, args.backend):
        return False
    if args.inter_threads != 1:
        raise CommandError(
            f"--inter-threads {args.inter_threads}: batches in parallel need a CTranslate2 folder "
            f"(export --to ctranslate2), and --model {args.model} runs on PyTorch",
            exit_code=2,
        )
    return True


def translator_for(args):
    """The translator of --model with --backend, --threads and --inter-threads, or a `CommandError` naming the
    flag."""
    runs_on_pytorch(args)  # checks the flags
    try:
        return load_translator(args.model, backend=args.backend, threads=args.threads, inter_threads=args.inter_threads)
    except ModelFolderError as error:  # already names the folder and what is wrong with it
        raise ModelFolderError(f"--model {error} (--backend {args.backend})") from error
    except (OSError, ValueError) as error:
        raise ModelFolderError(
            f"--model {args.model}: could not load it for --backend {args.backend}: {error}"
        ) from error


def read_sentences(args) -> list[str]:
    if args.sentences and args.input:
        raise CommandError("give sentences as arguments or --input, not both", exit_code=2)
    if args.sentences:
        return args.sentences
    try:
        handle = open(args.input, encoding="utf-8") if args.input else sys.stdin
    except OSError as error:
        raise CommandError(f"--input {args.input}: {error.strerror}", exit_code=2) from error
    with handle:
        return [line.rstrip("\n") for line in handle]


def translate_command(args) -> int:
    """One translation per line; with --n-best K, K lines per sentence: the sentence's number, the score and the
    translation, tab-separated, best first."""
    sentences = read_sentences(args)
    translator = translator_for(args)
    try:
        results = translator.translate(
            sentences,
            num_beams=args.num_beams,
            length_penalty=args.length_penalty,
            max_length=args.max_length,
            n_best=args.n_best,
            batch_size=args.batch_size,
        )
    except ValueError as error:
        raise CommandError(f"--n-best/--num-beams: {error}", exit_code=2) from error
    for number, translations in enumerate(results):
        for translation in translations:
            if args.n_best == 1:
                print(translation.text)
            else:
                print(f"{number}\t{translation.score:.4f}\t{translation.text}")
    return 0


def export_command(args) -> int:
    if args.to == "space":
        return export_space_command(args)
    model, tokenizer = load_model_folder(args.model, f"--model {args.model}")
    try:
        out = export_ctranslate2(
            model, args.out, quantization=args.quantization, tokenizer=tokenizer, overwrite=args.overwrite
        )
    except ExportError as error:
        raise CommandError(f"export --to {args.to}: {error}", exit_code=2) from error
    print(f"Exported {args.model} to {args.to} in {out}" + (f" ({args.quantization})" if args.quantization else ""))
    return 0


def export_space_command(args) -> int:
    from .space_export import SpaceExportError, export_space

    if args.quantization:
        raise CommandError("--quantization applies to --to ctranslate2, not to a Space", exit_code=2)
    try:
        out = export_space(args.model, args.out, overwrite=args.overwrite)
    except SpaceExportError as error:
        raise CommandError(f"export --to space: {error}", exit_code=2) from error
    print(f"Exported {args.model} as a Space in {out}: `python {os.path.join(out, 'app.py')}` runs it here")
    return 0


def attention_command(args) -> int:
    from .attention_maps import attention_maps, write_attention_figures

    model, tokenizer = load_model_folder(args.model, f"--model {args.model}")
    maps = attention_maps(
        model, tokenizer, args.source, args.target, num_beams=args.num_beams, max_new_tokens=args.max_length
    )
    paths = write_attention_figures(maps, args.out)
    print(f"{args.source} -> {maps['translation']}")
    print(f"{len(paths)} figures in {args.out}")
    return 0


def demo_command(args) -> int:
    from .demo import launch

    launch(args.model, port=args.port, share=args.share, host=args.host, where=f"--model {args.model}")
    return 0


def import_command(args) -> int:
    from .importing import CheckpointImportError, import_checkpoint

    try:
        model, _ = import_checkpoint(
            args.source, args.kind, out=args.out, trust_pickle=args.trust_pickle, overwrite=args.overwrite
        )
    except CheckpointImportError as error:
        raise CommandError(f"import --from {args.kind}: {error}", exit_code=2) from error
    print(f"Imported {args.source} ({args.kind}, {model.num_parameters():,} parameters) into {args.out}")
    return 0
