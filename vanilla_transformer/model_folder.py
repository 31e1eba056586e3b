"""A model folder and its tokenizer: loading them (one tokenizer rule for every caller), and encoding text within the
model's positions (one truncation rule, with its warning, for every caller)."""

import sys

from .configuration import check_tokenizer_matches
from .errors import ModelFolderError


def load_model_folder(path: str, where: str | None = None):
    """The model (in evaluation mode) and tokenizer of a model folder or Hub name, checked against each other by
    `check_tokenizer_matches`. Raises `ModelFolderError`, its message starting with `where` (default: the path), if
    the folder cannot be loaded or its tokenizer does not belong to its model."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    import vanilla_transformer  # noqa: F401  (registers the model type)

    where = where or str(path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForSeq2SeqLM.from_pretrained(path).eval()
    except (OSError, ValueError) as error:
        raise ModelFolderError(f"{where}: could not load a model folder: {error}") from error
    try:
        check_tokenizer_matches(model.config, tokenizer, where)
    except ValueError as error:
        raise ModelFolderError(str(error)) from error
    return model, tokenizer


def truncation_warning(where: str, text: str, length: int, limit: int) -> str:
    """One line about a sentence cut to the learned positions: where, the sentence (its start if long), the numbers."""
    shown = text if len(text) <= 60 else text[:57] + "..."
    return (
        f"{where}: {shown!r} has {length} tokens, more than the model's max_position_embeddings={limit} learned "
        f"positions; truncated to {limit} tokens."
    )


def encode_within(tokenizer, texts: list[str], limit: int | None, where="warning", target: bool = False, warn=None):
    """The token ids of each text (as targets with `target`), each cut to `limit` tokens as the tokenizer truncates
    (the end-of-sentence token kept) when longer; None means no limit (sinusoidal positions). Each text that is cut
    is named in a warning: `where` is its label, or a function of the text's index giving one; `warn(index, line)`
    receives it (default: printed on stderr). Texts are encoded once; only those too long are encoded again."""
    texts = list(texts)
    key = "text_target" if target else "text"
    ids = tokenizer(**{key: texts})["input_ids"]
    long = [i for i, row in enumerate(ids) if limit is not None and len(row) > limit]
    if not long:
        return ids
    for i in long:
        label = where(i) if callable(where) else where
        line = truncation_warning(label, texts[i], len(ids[i]), limit)
        warn(i, line) if warn else print(line, file=sys.stderr)
    cut = tokenizer(**{key: [texts[i] for i in long]}, truncation=True, max_length=limit)["input_ids"]
    for i, row in zip(long, cut):
        ids[i] = row
    return ids


__all__ = ["load_model_folder", "encode_within", "truncation_warning"]
