"""Building what a run trains: the joint BPE tokenizer (trained here, reused from its cache, or --tokenizer-name's)
and a new model with its generation config, from the groups of arguments that set them."""

import dataclasses
import os
from collections.abc import Callable, Iterable

import datasets
from transformers import GenerationConfig

from ...configuration import VanillaTransformerConfig, position_limit
from ...modeling import VanillaTransformerForConditionalGeneration
from ..data.streaming import stream_bpe_texts, stream_identity
from ..data.tokenizer import (
    bpe_cache_folder,
    bpe_cache_path,
    load_tokenizer,
    save_whole,
    train_bpe_tokenizer,
    training_texts,
)
from ..data.tokenizing import trained_positions
from ..options.argument_types import ArgumentsError
from ..options.arguments import DataArguments, GenerationArguments, ModelArguments, TokenizerArguments
from .finetuning import DROPOUTS, model_from_folder


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
        return load_tokenizer(options.tokenizer_name)
    folder = os.path.join(output_dir, "tokenizer")
    cached = corpus.cache
    resuming = resuming and os.path.isfile(os.path.join(folder, "tokenizer.json"))
    if accelerator.is_main_process and not resuming:
        tokenizer = cached_tokenizer(cached)
        if tokenizer is None:
            texts, length = corpus.texts()
            tokenizer = train_bpe_tokenizer(texts, options.vocab_size, lowercase=options.lowercase, length=length)
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


def build_model(
    sizes: ModelArguments, data: DataArguments, generation: GenerationArguments, tokenizer, switches: dict | None = None
) -> VanillaTransformerForConditionalGeneration:
    """A new model of these sizes for `tokenizer` (with --init-from: the folder's model), its positions covering
    `data`'s length limits, and its generation config the evaluation's beam search; `switches`, the study switches
    changed (`SwitchArguments.changed`), take the new model's architecture apart."""
    if sizes.init_from:
        model = model_from_folder(sizes.init_from, {name: getattr(sizes, name) for name in DROPOUTS}, tokenizer)
        limit, needed = position_limit(model.config), trained_positions(data)
        if limit is not None and needed > limit:
            raise ArgumentsError(
                f"--max-source-length/--max-target-length: {needed} positions, but the learned positions of "
                f"--init-from {sizes.init_from} cover {limit}"
            )
        model.generation_config = generation_config(generation, data.max_target_length, model.config)
        return model
    config = VanillaTransformerConfig(
        vocab_size=len(tokenizer),
        d_model=sizes.d_model,
        num_heads=sizes.num_heads,
        d_ff=sizes.d_ff,
        encoder_layers=sizes.encoder_layers,
        decoder_layers=sizes.decoder_layers,
        dropout=sizes.dropout,
        attention_dropout=sizes.attention_dropout,
        activation_dropout=sizes.activation_dropout,
        norm_position=sizes.norm_position,
        position_encoding=sizes.position_encoding,
        share_embeddings=sizes.share_embeddings,
        max_position_embeddings=position_table_size(sizes.position_encoding, data),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
        **(switches or {}),
    )
    model = VanillaTransformerForConditionalGeneration(config)
    model.generation_config = generation_config(generation, data.max_target_length, config)
    return model


def position_table_size(position_encoding: str, data: DataArguments) -> int:
    """`max_position_embeddings` of a new model. Learned positions end where training ends (`trained_positions`).
    The sinusoids of §3.5 read any length, and the ecosystem reads this field as the model's limit (transformers'
    translation example refuses a source length above it): they state the configuration's own default, 1024, or
    the trained length if longer."""
    if position_encoding == "learned":
        return trained_positions(data)
    return max(VanillaTransformerConfig().max_position_embeddings, trained_positions(data))


def generation_config(generation: GenerationArguments, max_new_tokens: int, config) -> GenerationConfig:
    # early_stopping=False (the library's default): beam search ends when no running beam can still beat the finished
    # ones. With True it ends as soon as num_beams hypotheses have finished, and a confident model's beams finish a
    # short wrong translation (a dropped word) before the right, longer one ends.
    beams = generation.num_beams
    beam = {"length_penalty": generation.length_penalty, "early_stopping": False} if beams > 1 else {}
    return GenerationConfig(
        decoder_start_token_id=config.decoder_start_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        num_beams=beams,
        max_new_tokens=max_new_tokens,
        **beam,
    )
