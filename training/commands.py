"""Using a trained model folder: `vanilla-transformer evaluate` and `vanilla-transformer translate`.

These functions raise `CommandError` (and `DataError`) for a bad folder, flag or input; `cli.main` reports them."""

import json
import sys

import torch
from accelerate import Accelerator
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from ..configuration.configuration_vanilla_transformer import (
    check_tokenizer_matches,
    position_limit,
    truncation_warning,
)
from .data import load_raw_datasets, tokenize_pairs
from .errors import CommandError, ModelFolderError
from .evaluation import evaluate_split, reference_cross_entropy


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
    model, tokenizer = load_model_folder(args.model)
    raw = load_raw_datasets(args, require_train=False)  # a DataError propagates: exit status 2
    if args.split not in raw:
        raise CommandError(f"--split {args.split}: the data has splits {sorted(raw)}", exit_code=2)
    max_new_tokens = args.max_target_length or model.generation_config.max_new_tokens or 256
    tokenized = tokenize_pairs(raw[args.split], tokenizer, args, max_length=position_limit(model.config))
    accelerator = Accelerator()
    model = accelerator.prepare(model)
    beam = {"length_penalty": args.length_penalty} if args.length_penalty is not None and args.num_beams > 1 else {}
    metrics, _ = evaluate_split(model, tokenizer, raw[args.split], tokenized, args, accelerator,
                                num_beams=args.num_beams, max_new_tokens=max_new_tokens, **beam)
    metrics.update(reference_cross_entropy(model, tokenizer, raw[args.split], tokenized, args, accelerator))
    if accelerator.is_main_process:
        print(json.dumps(metrics, indent=2))
        if args.output:
            with open(args.output, "w") as handle:
                json.dump(metrics, handle, indent=2)
    return 0


@torch.no_grad()
def translate_sentences(model, tokenizer, sentences: list[str], batch_size: int, num_beams: int, max_length: int):
    """Translations of `sentences`, `batch_size` at a time, of at most `max_length` tokens. A model with learned
    positions reads and writes at most max_position_embeddings tokens: a longer sentence is truncated, with a warning
    on stderr naming it, and translations stop there."""
    limit = position_limit(model.config)
    max_length = max_length if limit is None else min(max_length, limit)
    translations = []
    for start in range(0, len(sentences), batch_size):
        chunk = sentences[start : start + batch_size]
        if limit is not None:
            for sentence, ids in zip(chunk, tokenizer(chunk)["input_ids"]):
                if len(ids) > limit:
                    print(truncation_warning("warning", sentence, len(ids), limit), file=sys.stderr)
        batch = tokenizer(chunk, return_tensors="pt", padding=True, truncation=limit is not None, max_length=limit)
        generated = model.generate(**batch, num_beams=num_beams, max_new_tokens=max_length)
        translations += [t.strip() for t in tokenizer.batch_decode(generated, skip_special_tokens=True)]
    return translations


def translate_command(args) -> int:
    if args.sentences and args.input:
        raise CommandError("give sentences as arguments or --input, not both", exit_code=2)
    if args.sentences:
        sentences = args.sentences
    else:
        try:
            handle = open(args.input, encoding="utf-8") if args.input else sys.stdin
        except OSError as error:
            raise CommandError(f"--input {args.input}: {error.strerror}", exit_code=2) from error
        with handle:
            sentences = [line.rstrip("\n") for line in handle]
    model, tokenizer = load_model_folder(args.model)
    for translation in translate_sentences(model, tokenizer, sentences, args.batch_size, args.num_beams,
                                           args.max_length):
        print(translation)
    return 0
