"""A joint source+target byte-pair vocabulary (§5.1 of the paper), trained with the `tokenizers` library."""

import hashlib
import json
import os
import shutil

import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
BPE_RECIPE = (
    "joint-bpe-metaspace-punctuation-1"  # change when train_bpe_tokenizer changes: cached BPEs are then retrained
)
PROGRESS_FROM = 200_000  # texts: below this, training the BPE takes seconds and shows no progress bar


def train_bpe_tokenizer(
    texts, vocab_size: int, lowercase: bool = False, length: int | None = None
) -> PreTrainedTokenizerFast:
    """BPE over source and target text together. Ids: <pad>=0, <s>=1, </s>=2, <unk>=3.

    Encoding appends </s>; the decoder's start token <s> is added by shifting the labels right. With `lowercase`
    the tokenizer's normalizer lowercases every text it encodes (training pairs and, later, inputs to translate).
    `length`, the number of texts, shows the training's progress when it is large (a million texts take minutes).
    """
    specials = list(SPECIAL_TOKENS.values())
    tokenizer = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk_token"]))
    tokenizer.normalizer = (
        normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase()]) if lowercase else (normalizers.NFC())
    )
    # words start with "▁", as in SentencePiece, and punctuation stands alone as in Moses tokenization, so that
    # "dog" and "dog." share one token; decoding joins the pieces and turns "▁" back into spaces, losing nothing
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Metaspace(), pre_tokenizers.Punctuation("isolated")]
    )
    tokenizer.decoder = decoders.Metaspace()
    progress = length is not None and length >= PROGRESS_FROM
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=progress)
    tokenizer.train_from_iterator(texts, trainer=trainer, length=length)
    eos = SPECIAL_TOKENS["eos_token"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {eos}", pair=f"$A {eos} $B {eos}", special_tokens=[(eos, tokenizer.token_to_id(eos))]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **SPECIAL_TOKENS)


def bpe_cache_folder(train, settings: dict) -> str | None:
    """Where a BPE trained on the `train` split with these settings is kept, beside the datasets library's cache of
    that split, so that a second run on the same corpus skips training it; None for data that has no cache files
    (an in-memory corpus such as the embedded task)."""
    if not train.cache_files:
        return None
    return bpe_cache_path(os.path.dirname(train.cache_files[0]["filename"]), train._fingerprint, settings)


def bpe_cache_path(base: str, data: str | dict, settings: dict) -> str:
    """The folder in `base` for a BPE trained on the corpus that `data` identifies, with these settings."""
    key = json.dumps({"data": data, "code": BPE_RECIPE, **settings}, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return os.path.join(base, f"vanilla_transformer_bpe_{digest}")


def save_whole(tokenizer, folder: str) -> bool:
    """Save into `folder` (replacing what is there) through a temporary folder renamed into place, so that a reader
    sees all of it or none; returns whether it could (a cache that cannot be written is only a cache)."""
    temporary = f"{folder}.tmp-{os.getpid()}"
    try:
        tokenizer.save_pretrained(temporary)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(temporary, folder)
    except OSError:
        shutil.rmtree(temporary, ignore_errors=True)
        return False
    return True


def load_tokenizer(name_or_path: str, what: str = "--tokenizer-name"):
    """The tokenizer of a folder or Hub name; a `ValueError` naming `what` (the flag, or which tokenizer) if not."""
    try:
        return AutoTokenizer.from_pretrained(name_or_path)
    except Exception as error:
        where = "folder" if os.path.isdir(name_or_path) else "name"
        message = f"{what} {name_or_path!r}: could not load a tokenizer from this {where}: {error}"
        raise ValueError(message) from error


def bpe_sample(train, sample_size: int | None, seed: int = 0):
    """The training pairs the BPE learns from: all of them, or `sample_size` drawn at random (in corpus order)."""
    if sample_size is None or train.num_rows <= sample_size:
        return train
    rows = np.random.default_rng(seed).choice(train.num_rows, size=sample_size, replace=False)
    return train.select(np.sort(rows))


def training_texts(raw, source_lang: str, target_lang: str, sample_size: int | None = None, seed: int = 0):
    """Source and target sentences of the training split (or of `sample_size` of its pairs), for the joint
    vocabulary, read in batches."""
    pairs = bpe_sample(raw["train"], sample_size, seed).select_columns(["translation"])
    for batch in pairs.iter(batch_size=10_000):
        for pair in batch["translation"]:
            yield pair[source_lang]
            yield pair[target_lang]
