"""Building the model a run trains: a new model of the run's sizes (or --init-from's), its positions covering the
run's length limits, and its generation config the evaluation's beam search."""

from transformers import GenerationConfig

from ...configuration import VanillaTransformerConfig, position_limit
from ...modeling import VanillaTransformerForConditionalGeneration
from ..data.tokenizing import trained_positions
from ..options.argument_types import ArgumentsError
from ..options.arguments import DataArguments, GenerationArguments, ModelArguments
from .finetuning import DROPOUTS, model_from_folder


def build_model(
    sizes: ModelArguments, data: DataArguments, generation: GenerationArguments, tokenizer, switches: dict | None = None
) -> VanillaTransformerForConditionalGeneration:
    """A new model of these sizes for `tokenizer` (with --init-from: the folder's model), its positions covering
    `data`'s length limits, and its generation config the evaluation's beam search; `switches`, the study switches
    changed (`SwitchArguments.changed`), take the new model's architecture apart."""
    if sizes.init_from:
        overrides = {name: getattr(sizes, name) for name in (*DROPOUTS, "residual_in_fp32")}
        model = model_from_folder(sizes.init_from, overrides, tokenizer)
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
        activation=sizes.activation,
        share_embeddings=sizes.share_embeddings,
        residual_in_fp32=sizes.residual_in_fp32,
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
