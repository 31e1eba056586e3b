"""The study switches (`vanilla-transformer ablate`'s Table 3 row B and lessons): each takes out exactly the piece it
names, and a model that uses none of them is the paper's, saved as before."""

import json
import math

import pytest
import torch
from torch import nn
from vanilla_transformer.configuration import STUDY_SWITCHES, SWITCHES
from vanilla_transformer.modeling.modeling_vanilla_transformer import (
    AddNorm,
    PositionwiseFeedForward,
)

from tests.conftest import greedy_steps, tiny_config, tiny_model
from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration

SOURCE = torch.tensor([[5, 6, 7, 8, 9, 10]])
TARGET = torch.tensor([[1, 11, 12, 13, 14]])


def parameter_shapes(model) -> dict:
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


def test_every_switch_is_the_papers_by_default_and_left_out_of_a_saved_configuration(tmp_path):
    config = tiny_config()
    assert {name: getattr(config, name) for name in SWITCHES} == {name: s.paper for name, s in SWITCHES.items()}
    assert STUDY_SWITCHES == {name: s.paper for name, s in SWITCHES.items() if not isinstance(s.paper, str)}
    assert config.changed_switches() == {}
    tiny_model().save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert not set(STUDY_SWITCHES) & set(saved)
    assert VanillaTransformerConfig.from_pretrained(tmp_path).changed_switches() == {}


def test_a_changed_switch_is_saved_and_loaded_with_the_model(tmp_path):
    model = tiny_model(residual=False, d_k=4)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert {name: saved[name] for name in STUDY_SWITCHES if name in saved} == {"residual": False, "d_k": 4}
    loaded = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path).eval()
    assert loaded.config.changed_switches() == {"residual": False, "d_k": 4}
    with torch.no_grad():
        assert torch.equal(
            loaded(SOURCE, decoder_input_ids=TARGET).logits, model(SOURCE, decoder_input_ids=TARGET).logits
        )


def test_a_bad_key_size_is_named():
    with pytest.raises(ValueError, match="d_k must be a positive integer or None, got 0"):
        tiny_config(d_k=0)


def test_without_residuals_a_sublayer_output_no_longer_contains_its_input():
    x = torch.randn(2, 3, 32)

    def zero(x):  # a sub-layer that adds nothing
        return torch.zeros_like(x)

    for norm_position in ("post", "pre"):
        with_residual = AddNorm(tiny_config(norm_position=norm_position)).eval()
        without = AddNorm(tiny_config(norm_position=norm_position, residual=False)).eval()
        assert not torch.allclose(with_residual(x, zero), torch.zeros_like(x))  # LayerNorm(x + 0), or x + 0
        assert torch.allclose(without(x, zero), torch.zeros_like(x))  # LayerNorm(0) and 0: nothing of x is left
        layer = nn.Linear(32, 32)
        if norm_position == "post":
            assert torch.allclose(without(x, layer), without.layer_norm(layer(x)))
        else:
            assert torch.allclose(without(x, layer), layer(without.layer_norm(x)))


def test_without_layer_norm_add_and_norm_is_the_sum_and_the_model_has_no_layer_norm():
    x, layer = torch.randn(2, 3, 32), nn.Linear(32, 32)
    block = AddNorm(tiny_config(norm_position="none")).eval()
    assert torch.equal(block(x, layer), x + layer(x))
    model = tiny_model(norm_position="none")
    assert not any(isinstance(module, nn.LayerNorm) for module in model.modules())
    assert model.config.changed_switches() == {"norm_position": "none"}
    paper = parameter_shapes(tiny_model())
    assert parameter_shapes(model) == {name: shape for name, shape in paper.items() if "layer_norm" not in name}
    assert tiny_config(norm_position="pre").changed_switches() == {}  # pre-norm is an option, not a study's switch


@pytest.mark.parametrize(
    "old, field, value",
    [
        ({"layer_norm": False, "norm_position": "pre"}, "norm_position", "none"),
        ({"layer_norm": False}, "norm_position", "none"),
        ({"positional_encoding": False}, "position_encoding", "none"),
        ({"ffn_activation": False}, "activation", "linear"),
        ({"layer_norm": True, "positional_encoding": True, "ffn_activation": True, "activation": "gelu"}, None, None),
    ],
)
def test_a_config_json_of_an_earlier_version_loads_as_the_same_model(tmp_path, old, field, value):
    """The boolean switches of earlier versions are values of the fields that hold them now; a True one is no
    change. Such a folder loads with every weight and gives the same outputs as a model built the new way."""
    new = {field: value} if field else {"activation": old["activation"]}
    model = tiny_model(**new)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**saved, **old}))
    loaded, info = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values())  # no weight missing, unexpected or mismatched
    assert not set(old) - {"activation", "norm_position"} & set(loaded.config.to_dict())
    if field:
        assert getattr(loaded.config, field) == value and loaded.config.changed_switches() == {field: value}
    with torch.no_grad():
        expected = model.eval()(SOURCE, decoder_input_ids=TARGET).logits
        assert torch.equal(loaded.eval()(SOURCE, decoder_input_ids=TARGET).logits, expected)


def attention_weights(model) -> torch.Tensor:
    with torch.no_grad():
        out = model(SOURCE, decoder_input_ids=TARGET, output_attentions=True)
    return out.encoder_attentions[0]  # (batch, h, src_len, src_len)


def by_hand(model, scale: float) -> torch.Tensor:
    """softmax(Q K^T * scale) of the first encoder layer, from its projections."""
    attention = model.model.encoder.layers[0].self_attn
    with torch.no_grad():
        x = model.model.encoder.embed(SOURCE, None)
        query, key, _ = attention.split_heads(attention.in_proj(x), attention.sizes)
        return torch.softmax(query @ key.transpose(-1, -2) * scale, dim=-1)


def test_without_scaling_the_scores_are_not_divided_by_sqrt_d_k():
    paper, unscaled = tiny_model(attn_implementation="eager"), tiny_model(attention_scaling=False)
    unscaled.set_attn_implementation("eager")
    d_k = 32 // 4
    assert torch.allclose(attention_weights(paper), by_hand(paper, 1 / math.sqrt(d_k)), atol=1e-6)
    assert torch.allclose(attention_weights(unscaled), by_hand(unscaled, 1.0), atol=1e-6)
    assert not torch.allclose(attention_weights(unscaled), attention_weights(paper), atol=1e-3)
    sdpa = tiny_model(attention_scaling=False, attn_implementation="sdpa")  # the fused kernel is given scale 1
    with torch.no_grad():
        fused, written_out = (m(SOURCE, decoder_input_ids=TARGET).logits for m in (sdpa, unscaled))
    assert torch.allclose(fused, written_out, atol=1e-5)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_a_smaller_key_size_shrinks_the_queries_and_keys_only(implementation):
    model = tiny_model(d_k=2, attn_implementation=implementation)
    paper = parameter_shapes(tiny_model())
    changed = {name for name, shape in parameter_shapes(model).items() if shape != paper[name]}
    assert changed and all(name.endswith("in_proj.weight") for name in changed)
    assert all(parameter_shapes(model)[name] == (2 * 4 * 2 + 32, 32) for name in changed)  # h d_k, h d_k, d_model
    attention = model.model.encoder.layers[0].self_attn
    query, key, value = attention.split_heads(torch.randn(1, 3, 48), attention.sizes)
    assert (query.shape[-1], key.shape[-1], value.shape[-1]) == (2, 2, 8)
    # decoding step by step through the cache gives the logits of the whole forward pass
    batch = {"input_ids": SOURCE, "attention_mask": torch.ones_like(SOURCE)}
    steps = torch.cat(greedy_steps(model, batch, TARGET[:, :1], 4), dim=1)
    tokens = torch.cat([TARGET[:, :1], steps.argmax(-1)[:, :-1]], dim=1)
    with torch.no_grad():
        whole = model(**batch, decoder_input_ids=tokens).logits
    assert torch.allclose(steps, whole, atol=1e-5)


def encoder_output(model, source: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.get_encoder()(source).last_hidden_state


def test_without_positions_the_encoder_reads_a_bag_of_tokens():
    order = torch.tensor([3, 0, 5, 1, 4, 2])
    shuffled = SOURCE[:, order]
    bag = tiny_model(position_encoding="none")
    assert torch.allclose(encoder_output(bag, shuffled), encoder_output(bag, SOURCE)[:, order], atol=1e-5)
    paper = tiny_model()
    assert not torch.allclose(encoder_output(paper, shuffled), encoder_output(paper, SOURCE)[:, order], atol=1e-3)
    assert parameter_shapes(bag) == parameter_shapes(paper)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_without_the_decoder_mask_earlier_positions_see_later_ones(implementation):
    later = TARGET.clone()
    later[0, -1] = 20  # only the last decoder input differs
    for decoder_mask, sees_the_future in ((True, False), (False, True)):
        model = tiny_model(decoder_mask=decoder_mask, attn_implementation=implementation)
        with torch.no_grad():
            before = model(SOURCE, decoder_input_ids=TARGET).logits[:, :-1]
            after = model(SOURCE, decoder_input_ids=later).logits[:, :-1]
        assert torch.allclose(before, after, atol=1e-6) != sees_the_future


def test_without_feed_forward_each_layer_is_its_attention_sublayers():
    model = tiny_model(feed_forward=False)
    assert not any(isinstance(module, PositionwiseFeedForward) for module in model.modules())
    paper = parameter_shapes(tiny_model())
    assert parameter_shapes(model) == {
        name: s for name, s in paper.items() if ".ffn." not in name and "ffn_norm" not in name
    }
    layer, x = model.model.encoder.layers[0], torch.randn(1, 4, 32)
    with torch.no_grad():
        attended = layer.self_attn_norm(x, lambda x: layer.self_attn(x)[0])
        assert torch.equal(layer(x, None), attended)


def test_without_its_activation_the_feed_forward_network_is_linear():
    ffn = PositionwiseFeedForward(tiny_config(activation="linear"))
    x, y = torch.randn(3, 32), torch.randn(3, 32)
    with torch.no_grad():
        assert torch.allclose(ffn(x), ffn.w_2(ffn.w_1(x)), atol=1e-6)
        zero = ffn(torch.zeros(1, 32))
        assert torch.allclose(ffn(x + y), ffn(x) + ffn(y) - zero, atol=1e-5)  # affine: A x + c
    relu = PositionwiseFeedForward(tiny_config())
    relu.load_state_dict(ffn.state_dict())
    with torch.no_grad():
        assert not torch.allclose(relu(x), ffn(x), atol=1e-3)


@pytest.mark.parametrize("switch", [name for name in SWITCHES if name != "d_k"])
def test_each_switch_changes_the_models_output(switch):
    """None is a no-op: every switch changes what the model computes from the same weights where it keeps them."""
    paper, changed = tiny_model(), tiny_model(**{switch: SWITCHES[switch].off})
    assert changed.config.changed_switches() == {switch: SWITCHES[switch].off}
    changed.load_state_dict(paper.state_dict(), strict=False)
    with torch.no_grad():
        a = paper(SOURCE, decoder_input_ids=TARGET).logits
        b = changed(SOURCE, decoder_input_ids=TARGET).logits
    assert not torch.allclose(a, b, atol=1e-4)


def test_a_decoder_without_its_mask_generates_by_reading_the_whole_prefix_at_every_step():
    """As it was trained: every decoder position sees every other, so generate() recomputes the prefix (no cache)."""
    model = tiny_model(decoder_mask=False)
    with torch.no_grad():
        tokens = TARGET[:, :1]
        for _ in range(4):  # greedy search, the whole prefix through the decoder each time
            logits = model(SOURCE, decoder_input_ids=tokens).logits[:, -1]
            tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], dim=1)
        generated = model.generate(SOURCE, max_new_tokens=4, num_beams=1, do_sample=False, use_cache=True)
    assert torch.equal(generated, tokens)
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=8)
    with pytest.raises(ValueError, match="takes no fixed-size"):
        model(SOURCE, decoder_input_ids=TARGET[:, :1], cache=cache, use_cache=True)


def test_the_papers_own_key_size_is_no_change_and_a_smaller_one_is_refused_by_flash_attention():
    assert tiny_config(d_k=8).d_k is None and tiny_config(d_k=8).changed_switches() == {}  # 32 / 4 heads
    # refused when the model is built with flash attention, or switched to it; checked once, not in every forward
    refusal = "d_k=4 makes the queries and keys smaller .* attn_implementation='sdpa'"
    with pytest.raises(ValueError, match=refusal):
        VanillaTransformerForConditionalGeneration(tiny_config(d_k=4, attn_implementation="flash_attention_2"))
    model = VanillaTransformerForConditionalGeneration(tiny_config(d_k=4))
    with pytest.raises(ValueError, match=refusal):
        model.set_attn_implementation("flash_attention_2")
    assert model.config._attn_implementation == "sdpa"


def test_a_configuration_class_of_an_earlier_version_names_its_folded_switches_as_changed():
    """A folder loaded with its own remote code of an earlier version keeps `layer_norm=False` and the like: the
    checks that refuse a study's model (the export, the demo, the stages) still see it as changed."""
    from types import SimpleNamespace

    from vanilla_transformer.configuration import changed_switches

    earlier = SimpleNamespace(norm_position="post", layer_norm=False, positional_encoding=True, ffn_activation=False)
    assert changed_switches(earlier) == {"norm_position": "none", "activation": "linear"}
    assert changed_switches(SimpleNamespace(norm_position="pre", layer_norm=True)) == {}
