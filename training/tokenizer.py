"""A joint source+target byte-pair vocabulary (§5.1 of the paper), trained with the `tokenizers` library."""

import os

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


def train_bpe_tokenizer(texts, vocab_size: int, lowercase: bool = False) -> PreTrainedTokenizerFast:
    """BPE over source and target text together. Ids: <pad>=0, <s>=1, </s>=2, <unk>=3.

    Encoding appends </s>; the decoder's start token <s> is added by shifting the labels right. With `lowercase`
    the tokenizer's normalizer lowercases every text it encodes (training pairs and, later, inputs to translate).
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
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    eos = SPECIAL_TOKENS["eos_token"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {eos}", pair=f"$A {eos} $B {eos}", special_tokens=[(eos, tokenizer.token_to_id(eos))]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **SPECIAL_TOKENS)


def load_tokenizer(name_or_path: str):
    try:
        return AutoTokenizer.from_pretrained(name_or_path)
    except Exception as error:
        where = "folder" if os.path.isdir(name_or_path) else "name"
        message = f"--tokenizer-name {name_or_path!r}: could not load a tokenizer from this {where}: {error}"
        raise ValueError(message) from error


def training_texts(raw, source_lang: str, target_lang: str):
    """Source and target sentences of the training split, for the joint vocabulary."""
    for pair in raw["train"]["translation"]:
        yield pair[source_lang]
        yield pair[target_lang]
