"""Import a MarianMTModel (the OPUS-MT models): a folder written by transformers' `MarianMTModel.save_pretrained`,
or its Hub id. Post-norm, sinusoids laid out [sin | cos] from position 0, an output bias, SiLU in OPUS-MT; a shared
vocabulary, or separate ones (`decoder_vocab_size`)."""

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


def import_marian(source: str, trust_pickle: bool = False):
    """A MarianMTModel (OPUS-MT): post-norm, [sin | cos] positions from 0, an output bias, SiLU in OPUS-MT."""
    from transformers import MarianMTModel

    marian = load_source_model(MarianMTModel, source, trust_pickle)
    c = marian.config
    same(c, source, **{"number of heads": ("encoder_attention_heads", "decoder_attention_heads")})
    same(c, source, **{"feed-forward size": ("encoder_ffn_dim", "decoder_ffn_dim")})
    weights = SourceWeights(marian.state_dict(), source)
    config = VanillaTransformerConfig(
        **transformers_sizes(c, c.vocab_size, c.decoder_vocab_size or c.vocab_size),
        activation=activation(c.activation_function, "activation_function", source),
        position_layout="halves",
        scale_embedding=c.scale_embedding,
        output_bias=True,
        bos_token_id=c.bos_token_id,
        **sharing(*marian_matrices(weights, peek=True)),
    )
    check_sinusoids(weights, "model.encoder.embed_positions.weight", config, slice(None))
    check_sinusoids(weights, "model.decoder.embed_positions.weight", config, slice(None))
    state = embeddings_and_output(*marian_matrices(weights))
    state["lm_head.bias"] = weights.take("final_logits_bias").reshape(-1)
    state.update(layers(weights, "model.encoder", "model.encoder", c.encoder_layers, cross=False))
    state.update(layers(weights, "model.decoder", "model.decoder", c.decoder_layers, cross=True))
    return model_from_state(config, state, weights), source_tokenizer(source), marian.generation_config


def marian_matrices(weights: SourceWeights, peek: bool = False):
    """The source and target embeddings and the output projection of a MarianMTModel (its shared matrix included
    when the encoder and decoder share one)."""
    names = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight")
    matrices = [weights.tensors[name].detach().float() if peek else weights.take(name) for name in names]
    if not peek:
        weights.drop("model.shared.weight")
    return matrices
