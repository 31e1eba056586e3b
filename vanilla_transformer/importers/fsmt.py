"""Import an FSMTForConditionalGeneration (fairseq's WMT19 models as transformers ports them): a folder written by
`FSMTForConditionalGeneration.save_pretrained`, or its Hub id. Post-norm, fairseq's sinusoids from padding_idx + 1,
separate source and target vocabularies, decoding from </s>."""

from ..configuration import VanillaTransformerConfig
from .mapping import (
    SourceWeights,
    activation,
    check_sinusoids,
    embeddings_and_output,
    layers,
    load_source_model,
    model_from_state,
    same,
    sharing,
    source_tokenizer,
    transformers_sizes,
)


def import_fsmt(source: str, trust_pickle: bool = False):
    """An FSMTForConditionalGeneration (fairseq's WMT19 models as transformers ports them): post-norm, fairseq's
    sinusoids from padding_idx + 1, separate source and target vocabularies, decoding from </s>."""
    from transformers import FSMTForConditionalGeneration

    fsmt = load_source_model(FSMTForConditionalGeneration, source, trust_pickle)
    c = fsmt.config
    same(c, source, **{"number of heads": ("encoder_attention_heads", "decoder_attention_heads")})
    same(c, source, **{"feed-forward size": ("encoder_ffn_dim", "decoder_ffn_dim")})
    weights = SourceWeights(fsmt.state_dict(), source)
    names = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")
    names += ("model.decoder.output_projection.weight",)
    config = VanillaTransformerConfig(
        **transformers_sizes(c, c.src_vocab_size, c.tgt_vocab_size),
        activation=activation(c.activation_function, "activation_function", source),
        position_layout="fairseq",
        scale_embedding=c.scale_embedding,
        bos_token_id=c.bos_token_id,
        **sharing(*(weights.tensors[name].detach().float() for name in names)),
    )
    rows = slice(c.pad_token_id + 1, None)  # fairseq's table starts with the rows of padding_idx and those before
    check_sinusoids(weights, "model.encoder.embed_positions.weight", config, rows)
    check_sinusoids(weights, "model.decoder.embed_positions.weight", config, rows)
    state = embeddings_and_output(*(weights.take(name) for name in names))
    state.update(layers(weights, "model.encoder", "model.encoder", c.encoder_layers, cross=False))
    state.update(layers(weights, "model.decoder", "model.decoder", c.decoder_layers, cross=True))
    return model_from_state(config, state, weights), with_target_side(source_tokenizer(source)), fsmt.generation_config


def with_target_side(tokenizer):
    """FSMT's tokenizer with its target side (`text_target` in the target language and dictionary)."""
    from transformers import FSMTTokenizer

    from ..tokenization_fairseq import FairseqTokenizer

    return FairseqTokenizer.from_fsmt(tokenizer) if type(tokenizer) is FSMTTokenizer else tokenizer
