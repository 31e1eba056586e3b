"""The stages of Figure 1 that the demo shows are the model's own numbers, recorded from its real forward pass."""

import math

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
from vanilla_transformer.modeling.modeling_vanilla_transformer import sinusoidal_table

from vanilla_transformer.demo.stages import position_stats, trace_stages, zero_share

SOURCE = "three hundred twelve"


@pytest.fixture(scope="module")
def trained(trained_folder):
    model = AutoModelForSeq2SeqLM.from_pretrained(trained_folder).eval()
    return model, AutoTokenizer.from_pretrained(trained_folder)


@pytest.fixture(scope="module")
def stages(trained):
    return trace_stages(*trained, SOURCE)


def pre_norm_model(trained_folder):
    model = AutoModelForSeq2SeqLM.from_pretrained(trained_folder)
    config = model.config
    config.norm_position = "pre"
    torch.manual_seed(0)
    pre = type(model)(config).eval()
    pre.generation_config = model.generation_config
    return pre


def test_inside_each_layer_norm_every_position_has_mean_0_and_std_1_before_the_scale_and_shift(stages):
    assert len(stages.sublayers) == 2 * 1 + 3 * 1  # one encoder layer (2 sub-layers), one decoder layer (3)
    for record in stages.sublayers:
        mean, std = position_stats(record.normalised)
        assert torch.allclose(mean, torch.zeros_like(mean), atol=1e-5), record.title
        assert torch.allclose(std, torch.ones_like(std), atol=1e-3), record.title
        before_mean, before_std = position_stats(record.norm_input)
        assert not torch.allclose(before_std, torch.ones_like(before_std), atol=1e-2), record.title


def test_the_norm_output_is_the_normalised_values_times_gamma_plus_beta(trained, stages):
    model, _ = trained
    for record in stages.sublayers:
        stack = model.get_encoder() if record.stack == "encoder" else model.get_decoder()
        layer = stack.layers[record.layer - 1]
        norm = {"feed-forward": layer.ffn_norm, "cross-attention": getattr(layer, "cross_attn_norm", None)}.get(
            record.name, layer.self_attn_norm
        )
        expected = record.normalised * norm.layer_norm.weight + norm.layer_norm.bias
        assert torch.allclose(record.norm_output, expected.detach(), atol=1e-5), record.title


def test_post_norm_add_and_norm_is_layernorm_of_x_plus_sublayer_x(stages):
    for record in stages.sublayers:
        assert not record.pre_norm
        assert torch.allclose(record.residual_sum, record.x + record.output, atol=1e-5), record.title
        assert torch.equal(record.norm_input, record.residual_sum)
    encoder = [r for r in stages.sublayers if r.stack == "encoder"]
    assert torch.allclose(encoder[1].x, encoder[0].norm_output)  # each sub-layer reads the previous Add&Norm's output


def test_pre_norm_normalises_x_and_adds_the_sublayer_output_to_it(trained_folder, trained):
    stages = trace_stages(pre_norm_model(trained_folder), trained[1], SOURCE)
    for record in stages.sublayers:
        assert record.pre_norm
        assert torch.equal(record.norm_input, record.x)
        assert torch.allclose(record.residual_sum, record.x + record.output, atol=1e-5), record.title


def test_the_recorded_pass_is_the_models_own(trained, stages):
    model, tokenizer = trained
    encoded = tokenizer([SOURCE], return_tensors="pt")
    decoder_input_ids = torch.tensor([tokenizer.convert_tokens_to_ids(stages.decoder_input_tokens)])
    with torch.no_grad():
        out = model(**encoded, decoder_input_ids=decoder_input_ids)
    last_encoder = [r for r in stages.sublayers if r.stack == "encoder"][-1]
    assert torch.allclose(last_encoder.norm_output, out.encoder_last_hidden_state[0], atol=1e-5)
    assert torch.allclose(stages.logits, out.logits[0], atol=1e-4)
    assert stages.translation == tokenizer.decode(model.generate(**encoded, num_beams=5)[0], skip_special_tokens=True)
    # the recorder's hooks are gone afterwards (the library's output-recording hooks, installed once for
    # output_attentions, stay: they record only while a call asks for attentions or hidden states)
    hooks = [hook for module in model.modules() for hook in module._forward_hooks.values()]
    assert not [hook for hook in hooks if hook.__qualname__.startswith("Recorder.")]


def test_the_embedding_is_tokens_times_sqrt_d_model_plus_sinusoids(trained, stages):
    model, tokenizer = trained
    ids = tokenizer([SOURCE])["input_ids"][0]
    d_model = model.config.d_model
    parts = stages.embeddings["encoder"]
    tokens = model.get_input_embeddings()(torch.tensor(ids)) * math.sqrt(d_model)
    assert torch.allclose(parts.scaled_tokens, tokens.detach(), atol=1e-4)
    assert torch.allclose(parts.positions, sinusoidal_table(len(ids), d_model), atol=1e-6)
    assert torch.allclose(parts.sum, parts.scaled_tokens + parts.positions, atol=1e-5)
    assert stages.embeddings["decoder"].sum.shape == (len(stages.decoder_input_tokens), d_model)


def test_attention_rows_sum_to_1_and_the_decoder_self_attention_is_lower_triangular(stages):
    for kind, maps in stages.attentions.items():
        for layer in maps:
            assert torch.allclose(layer.sum(dim=-1), torch.ones(layer.shape[:-1]), atol=1e-5), kind
    for layer in stages.attentions["decoder_self"]:
        assert torch.all(layer.triu(diagonal=1) == 0)
        assert torch.all(layer.diagonal(dim1=-2, dim2=-1) > 0)
    assert stages.attentions["cross"][0].shape[1:] == (len(stages.target_tokens), len(stages.source_tokens))


def test_the_feed_forward_zero_share_counts_units_relu_cuts(trained, stages):
    model, _ = trained
    record = next(r for r in stages.sublayers if r.stack == "encoder" and r.name == "feed-forward")
    ffn = model.get_encoder().layers[0].ffn
    hidden = ffn.w_1(record.x).detach()  # the ffn's pre-activation, from its recorded input
    assert stages.activation == "relu"
    assert torch.allclose(stages.active_units[("encoder", 1)], hidden.clamp(min=0), atol=1e-5)
    share = zero_share(stages.active_units[("encoder", 1)])
    assert torch.allclose(share, (hidden <= 0).float().mean(dim=-1), atol=1e-3)
    assert 0 < share.mean() < 1


def test_the_final_softmax_top_tokens_rank_the_produced_token_first_under_greedy_search(trained):
    stages = trace_stages(*trained, SOURCE, num_beams=1)
    assert len(stages.top_tokens) == len(stages.target_tokens)
    for produced, top in zip(stages.target_tokens, stages.top_tokens):
        probabilities = [p for _, p in top]
        assert top[0][0] == produced
        assert probabilities == sorted(probabilities, reverse=True) and sum(probabilities) <= 1 + 1e-6


def test_a_model_loaded_from_the_folders_own_code_is_traced_the_same(trained_folder, trained, stages):
    """What trust_remote_code loads where the package is not installed: the class from the folder's flat code."""
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    class_ref = trained[0].config.auto_map["AutoModelForSeq2SeqLM"]
    remote = get_class_from_dynamic_module(class_ref, trained_folder).from_pretrained(trained_folder).eval()
    assert type(remote).__module__.startswith("transformers_modules")
    traced = trace_stages(remote, trained[1], SOURCE)
    assert traced.translation == stages.translation
    for ours, theirs in zip(stages.sublayers, traced.sublayers):
        assert torch.allclose(ours.norm_output, theirs.norm_output, atol=1e-6)


def test_a_model_a_study_took_apart_is_not_traced_as_figure_1():
    from tests.conftest import tiny_model

    with pytest.raises(ValueError, match=r"the model changes Figure 1 \(\{'feed_forward': False\}"):
        trace_stages(tiny_model(feed_forward=False), None, "forty-two")
