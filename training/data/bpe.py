"""The joint source+target byte-pair vocabulary (§5.1 of the paper): what it is trained on (a sample of the training
split, or of a stream), training it with the `tokenizers` library, keeping it beside the datasets cache so that a run
on the same corpus reuses it, and the run's tokenizer (trained here, reused, or --tokenizer-name's)."""

import dataclasses
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable

import datasets
import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from ...errors import one_line
from ...model_folder import text_as_text
from ..options.arguments import DataArguments, TokenizerArguments
from .streaming import stream_bpe_texts, stream_identity

SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
BPE_RECIPE = (
    "joint-bpe-metaspace-punctuation-1"  # change when train_bpe_tokenizer changes: cached BPEs are then retrained
)
PROGRESS_FROM = 200_000  # texts: below this, training the BPE takes seconds and shows no progress bar


def train_bpe_tokenizer(
    texts, vocab_size: int, lowercase: bool = False, length: int | None = None
) -> PreTrainedTokenizerFast:
    """BPE over source and target text together. Ids: <pad>=0, <s>=1, </s>=2, <unk>=3.

    Encoding appends </s>; the decoder's start token <s> is added by shifting the labels right. The text of a special
    token in a sentence is read as text (`text_as_text`, saved with the tokenizer). With `lowercase`
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
    return text_as_text(PreTrainedTokenizerFast(tokenizer_object=tokenizer, **SPECIAL_TOKENS))


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
    """The tokenizer of a folder or Hub name (reading a special token's text as text: `text_as_text`); a `ValueError`
    naming `what` (the flag, or which tokenizer) if not."""
    try:
        return text_as_text(AutoTokenizer.from_pretrained(name_or_path))
    except Exception as error:
        where = "folder" if os.path.isdir(name_or_path) else "name"
        message = f"{what} {name_or_path!r}: could not load a tokenizer from this {where}: {one_line(error)}"
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


@dataclasses.dataclass(frozen=True)
class BpeCorpus:
    """What the joint BPE is trained on: `texts()` gives the (sampled) texts and their count; `cache` is the folder
    where a BPE trained on them with the run's settings is kept (None: not kept)."""

    texts: Callable[[], tuple[Iterable[str], int]]
    cache: str | None


def bpe_corpus(
    data: DataArguments, options: TokenizerArguments, seed: int, raw, stream: tuple | None = None
) -> BpeCorpus:
    """The BPE's corpus: a sample of the training split, or with `stream` (`train_stream_source`'s opener and name)
    a sample drawn from the stream, its BPE kept in the datasets cache under the file's or Hub dataset's identity.
    `seed` draws the sample."""
    if stream is not None:
        settings = bpe_settings(data, options, seed, options.bpe_sample_size + 1)  # an unknown count: the seed counts
        cache = bpe_cache_path(datasets.config.HF_DATASETS_CACHE, stream_identity(data), settings)
        return BpeCorpus(lambda: stream_bpe_texts(*stream, data, seed, options.bpe_sample_size), cache)
    pairs = len(raw["train"])
    return BpeCorpus(
        lambda: (
            training_texts(raw, data.source_lang, data.target_lang, options.bpe_sample_size, seed),
            2 * min(pairs, options.bpe_sample_size),
        ),
        bpe_cache_folder(raw["train"], bpe_settings(data, options, seed, pairs)),
    )


def build_tokenizer(options: TokenizerArguments, output_dir: str, resuming: bool, corpus: BpeCorpus, accelerator):
    """--tokenizer-name's tokenizer, or the joint BPE: the run folder's when `resuming`, else one trained here, or
    reused from beside the datasets cache when the same data and settings trained it before."""
    if options.tokenizer_name:
        tokenizer = load_tokenizer(options.tokenizer_name)
        if tokenizer.pad_token_id is None:  # the model's configuration takes its padding from the tokenizer
            raise ValueError(f"{options.tokenizer_name} (--tokenizer-name, or --init-from's folder): the tokenizer "
                             "has no pad token, which a translation model needs")  # fmt: skip
        return tokenizer
    folder = os.path.join(output_dir, "tokenizer")
    cached = corpus.cache
    resuming = resuming and os.path.isfile(os.path.join(folder, "tokenizer.json"))
    if accelerator.is_main_process and not resuming:
        tokenizer = cached_tokenizer(cached)
        if tokenizer is None:
            texts, length = corpus.texts()
            tokenizer = train_bpe_tokenizer(texts, options.vocab_size, lowercase=options.lowercase, length=length)
            if note := vocabulary_note(tokenizer, options.vocab_size):
                accelerator.print(note)
            if cached is not None:
                save_whole(tokenizer, cached)
        else:
            accelerator.print(f"Reusing the BPE trained on the same data with the same settings: {cached}")
        tokenizer.save_pretrained(folder)
    accelerator.wait_for_everyone()
    # from the cache where this process sees it (a resume too: the checkpoint's record guards the vocabulary): the
    # same tokenizer at the same place lets datasets reuse the tokenised corpus of an earlier run
    here = cached is not None and os.path.isfile(os.path.join(cached, "tokenizer.json"))
    return load_tokenizer(cached if here else folder, "the run's tokenizer")


def vocabulary_note(tokenizer, vocab_size: int) -> str | None:
    """A warning where the BPE has more types than --vocab-size asked: it keeps every character it saw and the
    special tokens, whatever the size asked."""
    if len(tokenizer) <= vocab_size:
        return None
    return (f"warning: --vocab-size {vocab_size} is below the training data's characters and the special tokens: "
            f"the vocabulary has {len(tokenizer)} types")  # fmt: skip


def cached_tokenizer(cached: str | None):
    """The BPE kept in `cached`, or None when there is none or it cannot be read (it is then trained again)."""
    if cached is None or not os.path.isfile(os.path.join(cached, "tokenizer.json")):
        return None
    try:
        return load_tokenizer(cached)
    except ValueError:
        return None


def bpe_settings(data: DataArguments, options: TokenizerArguments, seed: int, pairs: int) -> dict:
    """What a trained BPE depends on, besides the training pairs (the seed only when it draws a sample of them)."""
    settings = {
        "source_lang": data.source_lang,
        "target_lang": data.target_lang,
        "vocab_size": options.vocab_size,
        "lowercase": options.lowercase,
        "bpe_sample_size": options.bpe_sample_size,
    }
    return {**settings, "seed": seed} if pairs > options.bpe_sample_size else settings
