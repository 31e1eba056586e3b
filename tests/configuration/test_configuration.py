import json

import pytest
from transformers import AutoConfig

from vanilla_transformer import VanillaTransformerConfig


def test_defaults_are_the_paper_base_model():
    c = VanillaTransformerConfig()
    assert (c.d_model, c.num_heads, c.d_ff, c.encoder_layers, c.decoder_layers) == (512, 8, 2048, 6, 6)
    assert c.dropout == 0.1 and c.activation == "relu" and c.layer_norm_eps == 1e-5
    assert c.norm_position == "post" and c.position_encoding == "sinusoidal"
    assert c.scale_embedding and c.share_embeddings and c.tie_word_embeddings and not c.attention_bias
    assert c.is_encoder_decoder and c.model_type == "vanilla_transformer"


def test_attribute_map_gives_generic_names():
    c = VanillaTransformerConfig(d_model=64, num_heads=2, d_ff=128, encoder_layers=2, decoder_layers=3)
    assert (c.hidden_size, c.num_attention_heads, c.intermediate_size, c.num_hidden_layers) == (64, 2, 128, 3)


def test_tie_word_embeddings_follows_share_embeddings():
    assert VanillaTransformerConfig(share_embeddings=False).tie_word_embeddings is False
    assert VanillaTransformerConfig(share_embeddings=True, tie_word_embeddings=False).tie_word_embeddings is True


def test_round_trip_through_auto_config(tmp_path):
    c = VanillaTransformerConfig(d_model=64, num_heads=4, norm_position="pre", position_encoding="learned")
    c.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "vanilla_transformer"
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(loaded, VanillaTransformerConfig)
    assert loaded.to_diff_dict() | {"_name_or_path": ""} == c.to_diff_dict() | {"_name_or_path": ""}


@pytest.mark.parametrize(
    "kwargs, field, expected",
    [
        (dict(d_model=510, num_heads=8), "d_model", "divisible by num_heads"),
        (dict(d_model=0), "d_model", "positive"),
        (dict(num_heads=-1), "num_heads", "positive"),
        (dict(d_ff=0), "d_ff", "positive"),
        (dict(encoder_layers=0), "encoder_layers", "positive"),
        (dict(decoder_layers=-2), "decoder_layers", "positive"),
        (dict(vocab_size=0, pad_token_id=None), "vocab_size", "positive"),
        (dict(max_position_embeddings=0), "max_position_embeddings", "positive"),
        (dict(dropout=1.0), "dropout", "[0, 1)"),
        (dict(dropout=-0.1), "dropout", "[0, 1)"),
        (dict(attention_dropout=1.5), "attention_dropout", "[0, 1)"),
        (dict(activation_dropout=-1), "activation_dropout", "[0, 1)"),
        (dict(layer_norm_eps=0.0), "layer_norm_eps", "positive"),
        (dict(init_std=-1.0), "init_std", "positive"),
        (dict(layer_norm_eps=float("inf")), "layer_norm_eps", "finite"),
        (dict(init_std=float("nan")), "init_std", "finite"),
        (dict(eos_token_id=[]), "eos_token_id", "got []"),
        (dict(norm_position="middle"), "norm_position", "('post', 'pre', 'none')"),
        (dict(position_encoding="rotary"), "position_encoding", "('sinusoidal', 'learned', 'none')"),
        (dict(activation="tanh"), "activation", "('relu', 'gelu', 'silu', 'swish', 'linear')"),
        (dict(position_layout="rotated"), "position_layout", "('interleaved', 'halves', 'fairseq')"),
        (dict(position_layout="halves", d_model=9, num_heads=1), "position_layout", "even d_model"),
        (dict(target_vocab_size=0), "target_vocab_size", "positive"),
        (dict(target_vocab_size=40), "target_vocab_size", "share_embeddings=False"),
        (
            dict(vocab_size=50, target_vocab_size=10, share_embeddings=False, eos_token_id=12),
            "eos_token_id",
            "[0, target_vocab_size=10)",
        ),
        (dict(vocab_size=10, pad_token_id=10), "pad_token_id", "[0, vocab_size=10)"),
        (dict(vocab_size=10, bos_token_id=-1), "bos_token_id", "[0, vocab_size=10)"),
        (dict(vocab_size=10, eos_token_id=[2, 12]), "eos_token_id", "[0, vocab_size=10)"),
        (dict(vocab_size=10, decoder_start_token_id=99), "decoder_start_token_id", "[0, vocab_size=10)"),
        (dict(pad_token_id=None), "pad_token_id", "must be set"),
        (dict(decoder_start_token_id=None), "decoder_start_token_id", "must be set"),
    ],
)
def test_invalid_fields_raise_value_error_naming_the_field(kwargs, field, expected):
    with pytest.raises(ValueError) as error:
        VanillaTransformerConfig(**kwargs)
    assert field in str(error.value) and expected in str(error.value)


def test_config_json_of_another_model_type_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 32}))
    with pytest.raises(ValueError, match="bert"):
        VanillaTransformerConfig.from_pretrained(tmp_path)


def test_a_field_changed_after_the_configuration_was_made_is_checked_before_a_model_or_folder_is_made(tmp_path):
    from huggingface_hub.errors import StrictDataclassClassValidationError

    from vanilla_transformer import VanillaTransformerForConditionalGeneration

    sizes = dict(vocab_size=50, d_model=32, num_heads=4, d_ff=64, encoder_layers=1, decoder_layers=1)
    changed = VanillaTransformerConfig(**sizes)
    changed.num_heads = 3
    with pytest.raises(ValueError, match=r"d_model \(32\) must be divisible by num_heads \(3\)"):
        VanillaTransformerForConditionalGeneration(changed)
    model = VanillaTransformerForConditionalGeneration(VanillaTransformerConfig(**sizes))
    model.config.decoder_layers = 0
    with pytest.raises(StrictDataclassClassValidationError, match="decoder_layers must be a positive integer"):
        model.save_pretrained(tmp_path / "model")
    assert not (tmp_path / "model" / "config.json").exists()
