"""Using a trained model folder: `vanilla-transformer evaluate`, `translate` and `export`; evaluate and translate
also run a folder exported to CTranslate2.

These functions raise `CommandError` (and `DataError`) for a bad folder, flag or input; `cli.main` reports them."""

import json
import os
import sys

import torch
from accelerate import Accelerator
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from ..configuration.configuration_vanilla_transformer import (
    check_tokenizer_matches,
    position_limit,
)
from ..ctranslate2_export import ExportError, export_ctranslate2
from ..translators import load_translator, uses_ctranslate2
from .data import load_raw_datasets, tokenize_pairs
from .errors import CommandError, ModelFolderError
from .evaluation import cross_entropy_figures, evaluate_split, reference_cross_entropy, split_metrics


def load_model_folder(path: str):
    """The model and tokenizer of a model folder (or Hub name); raises `ModelFolderError` if it cannot be loaded or
    its tokenizer does not match its config.json."""
    import vanilla_transformer  # noqa: F401  (registers the model type)

    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForSeq2SeqLM.from_pretrained(path).eval()
    except (OSError, ValueError) as error:
        raise ModelFolderError(f"--model {path}: could not load a model folder: {error}") from error
    try:
        check_tokenizer_matches(model.config, tokenizer, f"--model {path}")
    except ValueError as error:
        raise ModelFolderError(str(error)) from error
    return model, tokenizer


def evaluate_command(args) -> int:
    metrics = evaluate_pytorch(args) if runs_on_pytorch(args) else evaluate_exported(args)
    if metrics is not None:  # None on the processes other than the main one
        print(json.dumps(metrics, indent=2))
        if args.output:
            with open(args.output, "w") as handle:
                json.dump(metrics, handle, indent=2)
    return 0


def evaluation_split(args, raw):
    if args.split not in raw:
        raise CommandError(f"--split {args.split}: the data has splits {sorted(raw)}", exit_code=2)
    return raw[args.split]


def evaluate_pytorch(args) -> dict | None:
    """Scores of a model folder through `generate()`, data-parallel over the processes Accelerate starts."""
    model, tokenizer = load_model_folder(args.model)
    if args.threads:
        torch.set_num_threads(args.threads)
    raw = load_raw_datasets(args, require_train=False)  # a DataError propagates: exit status 2
    split = evaluation_split(args, raw)
    max_new_tokens = args.max_target_length or model.generation_config.max_new_tokens or 256
    tokenized = tokenize_pairs(split, tokenizer, args, max_length=position_limit(model.config))
    accelerator = Accelerator()
    model = accelerator.prepare(model)
    beam = {"length_penalty": args.length_penalty} if args.length_penalty is not None and args.num_beams > 1 else {}
    metrics, _ = evaluate_split(
        model,
        tokenizer,
        split,
        tokenized,
        args,
        accelerator,
        num_beams=args.num_beams,
        max_new_tokens=max_new_tokens,
        **beam,
    )
    metrics.update(reference_cross_entropy(model, tokenizer, split, tokenized, args, accelerator))
    return metrics if accelerator.is_main_process else None


def evaluate_exported(args) -> dict:
    """The same scores from a folder exported to CTranslate2, with the same arguments."""
    translator = translator_for(args)
    raw = load_raw_datasets(args, require_train=False)
    split = evaluation_split(args, raw)
    sources = [pair[args.source_lang] for pair in split["translation"]]
    references = [pair[args.target_lang] for pair in split["translation"]]
    max_length = args.max_target_length or translator.generation_config.max_new_tokens or 256
    translations = translator.translate(
        sources,
        num_beams=args.num_beams,
        length_penalty=args.length_penalty,
        max_length=max_length,
        batch_size=args.eval_batch_size,
    )
    metrics = split_metrics([best.text for best, *_ in translations], references, split)
    log_probs = translator.reference_log_probs(sources, references, batch_size=args.eval_batch_size)
    total = -sum(sum(row) for row in log_probs)
    metrics.update(cross_entropy_figures(total, sum(len(row) for row in log_probs), references))
    return metrics


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
    except (OSError, ValueError) as error:
        raise ModelFolderError(
            f"--model {args.model}: could not load it for --backend {args.backend}: {error}"
        ) from error


def export_command(args) -> int:
    if args.to == "space":
        return export_space_command(args)
    try:
        out = export_ctranslate2(args.model, args.out, quantization=args.quantization, overwrite=args.overwrite)
    except ExportError as error:
        raise CommandError(f"export --to {args.to}: {error}", exit_code=2) from error
    except (OSError, ValueError) as error:
        raise ModelFolderError(f"--model {args.model}: could not load a model folder: {error}") from error
    print(f"Exported {args.model} to {args.to} in {out}" + (f" ({args.quantization})" if args.quantization else ""))
    return 0


def export_space_command(args) -> int:
    from ..space_export import SpaceExportError, export_space

    if args.quantization:
        raise CommandError("--quantization applies to --to ctranslate2, not to a Space", exit_code=2)
    try:
        out = export_space(args.model, args.out, overwrite=args.overwrite)
    except SpaceExportError as error:
        raise CommandError(f"export --to space: {error}", exit_code=2) from error
    print(f"Exported {args.model} as a Space in {out}: `python {os.path.join(out, 'app.py')}` runs it here")
    return 0


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
