"""What the model must do whatever its weights are: causality, padding invariance, use of the source."""

import pytest
import torch

from tests.conftest import tiny_model

IMPLEMENTATIONS = ["eager", "sdpa"]


def with_implementation(implementation, **overrides):
    model = tiny_model(**overrides)
    model.config._attn_implementation = implementation
    return model


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_decoder_is_causal(implementation, norm_position):
    model = with_implementation(implementation, norm_position=norm_position)
    src = torch.randint(3, 50, (2, 7))
    tgt = torch.randint(3, 50, (2, 6))
    changed = tgt.clone()
    changed[:, 4] = (changed[:, 4] + 1 - 3) % 47 + 3  # change position 4 only
    with torch.no_grad():
        a = model(input_ids=src, decoder_input_ids=tgt).logits
        b = model(input_ids=src, decoder_input_ids=changed).logits
    torch.testing.assert_close(a[:, :4], b[:, :4], atol=0, rtol=0)
    assert not torch.allclose(a[:, 4:], b[:, 4:])


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("position_encoding", ["sinusoidal", "learned"])
def test_padding_changes_nothing_for_real_tokens(implementation, position_encoding):
    model = with_implementation(implementation, position_encoding=position_encoding)
    src = torch.randint(3, 50, (2, 5))
    tgt = torch.randint(3, 50, (2, 4))
    padded_src = torch.cat([src, torch.zeros(2, 3, dtype=torch.long)], dim=1)
    src_mask = torch.cat([torch.ones(2, 5), torch.zeros(2, 3)], dim=1).long()
    padded_tgt = torch.cat([tgt, torch.zeros(2, 2, dtype=torch.long)], dim=1)
    tgt_mask = torch.cat([torch.ones(2, 4), torch.zeros(2, 2)], dim=1).long()
    with torch.no_grad():
        plain = model(input_ids=src, decoder_input_ids=tgt).logits
        padded = model(
            input_ids=padded_src,
            attention_mask=src_mask,
            decoder_input_ids=padded_tgt,
            decoder_attention_mask=tgt_mask,
        ).logits
    torch.testing.assert_close(padded[:, :4], plain, atol=1e-5, rtol=1e-5)


def test_all_padding_row_gives_finite_outputs():
    model = tiny_model()
    src = torch.randint(3, 50, (2, 5))
    src[1] = 0
    mask = (src != 0).long()
    tgt = torch.randint(3, 50, (2, 4))
    for implementation in IMPLEMENTATIONS:
        model.config._attn_implementation = implementation
        with torch.no_grad():
            out = model(input_ids=src, attention_mask=mask, decoder_input_ids=tgt, output_attentions=True)
        assert torch.isfinite(out.logits).all()
        assert all(torch.isfinite(a).all() for a in out.encoder_attentions + out.cross_attentions)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_source_matters(implementation):
    model = with_implementation(implementation)
    src = torch.randint(3, 50, (2, 7))
    other = src.clone()
    other[:, 3] = (other[:, 3] + 5 - 3) % 47 + 3
    tgt = torch.randint(3, 50, (2, 5))
    with torch.no_grad():
        a = model(input_ids=src, decoder_input_ids=tgt).logits
        b = model(input_ids=other, decoder_input_ids=tgt).logits
    assert (a - b).abs().amax(dim=-1).min() > 1e-4  # every target position sees the change


def test_eager_equals_sdpa_with_masks():
    eager = with_implementation("eager")
    sdpa = with_implementation("sdpa")
    src = torch.randint(3, 50, (3, 8))
    mask = torch.ones_like(src)
    mask[0, 5:] = 0
    tgt = torch.randint(3, 50, (3, 6))
    tgt_mask = torch.ones_like(tgt)
    tgt_mask[2, 4:] = 0
    with torch.no_grad():
        for kwargs in ({}, {"decoder_attention_mask": tgt_mask}):
            a = eager(input_ids=src, attention_mask=mask, decoder_input_ids=tgt, **kwargs).logits
            b = sdpa(input_ids=src, attention_mask=mask, decoder_input_ids=tgt, **kwargs).logits
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_labels_give_cross_entropy_on_shifted_inputs():
    model = tiny_model()
    src = torch.randint(3, 50, (2, 6))
    labels = torch.randint(3, 50, (2, 5))
    labels[1, 3:] = -100
    with torch.no_grad():
        out = model(input_ids=src, labels=labels)
        decoder_input_ids = torch.cat([torch.full((2, 1), 1), labels[:, :-1]], dim=1).masked_fill(
            torch.cat([torch.zeros(2, 1, dtype=torch.bool), labels[:, :-1] == -100], dim=1), 0
        )
        logits = model(input_ids=src, decoder_input_ids=decoder_input_ids).logits
    expected = torch.nn.functional.cross_entropy(logits.reshape(-1, 50), labels.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(out.loss, expected)
    torch.testing.assert_close(out.logits, logits)


def test_outputs_hold_attentions_and_hidden_states():
    model = tiny_model()  # sdpa by default; asking for attentions computes them explicitly
    src = torch.randint(3, 50, (2, 7))
    tgt = torch.randint(3, 50, (2, 5))
    with torch.no_grad():
        out = model(input_ids=src, decoder_input_ids=tgt, output_attentions=True, output_hidden_states=True)
    assert len(out.encoder_attentions) == len(out.decoder_attentions) == len(out.cross_attentions) == 2
    assert out.encoder_attentions[0].shape == (2, 4, 7, 7)
    assert out.decoder_attentions[0].shape == (2, 4, 5, 5)
    assert out.cross_attentions[0].shape == (2, 4, 5, 7)
    assert len(out.encoder_hidden_states) == len(out.decoder_hidden_states) == 3  # embeddings + one per layer
    assert out.encoder_hidden_states[-1].shape == (2, 7, 32)
    for weights in out.encoder_attentions + out.decoder_attentions + out.cross_attentions:
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
    for weights in out.decoder_attentions:  # masked self-attention: nothing above the diagonal
        assert torch.equal(weights, torch.tril(weights))
    with torch.no_grad():
        as_tuple = model(input_ids=src, decoder_input_ids=tgt, return_dict=False)
    assert isinstance(as_tuple, tuple)
    torch.testing.assert_close(as_tuple[0], out.logits)


def test_bad_inputs_raise_value_errors():
    model = tiny_model()
    src = torch.randint(3, 50, (2, 5))
    tgt = torch.randint(3, 50, (2, 4))
    with pytest.raises(ValueError, match=r"input_ids holds token id 50, outside the vocabulary \[0, 50\)"):
        model(input_ids=torch.full((1, 3), 50), decoder_input_ids=tgt[:1])
    with pytest.raises(ValueError, match="decoder_input_ids holds token id -3"):
        model(input_ids=src, decoder_input_ids=torch.full((2, 3), -3))
    with pytest.raises(ValueError, match="batch size 3"):
        model(input_ids=src, attention_mask=torch.ones(3, 5), decoder_input_ids=tgt)
    with pytest.raises(ValueError, match="labels have batch size 1, but the source has 2"):
        model(input_ids=src, labels=tgt[:1])
    with pytest.raises(ValueError, match=r"labels \(4,\): expected \(batch, target length\)"):
        model(input_ids=src[:1], labels=tgt[0])
    with pytest.raises(ValueError, match=r"labels \(2, 4\), decoder_input_ids \(2, 3\): expected"):
        model(input_ids=src, labels=tgt, decoder_input_ids=tgt[:, :3])
    learned = tiny_model(position_encoding="learned")  # learned positions end at their table; the sinusoids never do
    with pytest.raises(ValueError, match="reaches position 65, beyond max_position_embeddings=64"):
        learned(input_ids=torch.randint(3, 50, (1, 65)), decoder_input_ids=tgt[:1])
    with pytest.raises(ValueError, match="reaches position 65, beyond max_position_embeddings=64"):
        learned(input_ids=src[:1], decoder_input_ids=torch.randint(3, 50, (1, 65)))


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_a_mask_without_padding_equals_no_mask(implementation):
    from vanilla_transformer.modeling.modeling_vanilla_transformer import source_mask, target_mask

    model = tiny_model(attn_implementation=implementation)
    src, tgt = torch.randint(3, 50, (2, 5)), torch.randint(3, 50, (2, 4))
    with torch.no_grad():
        masked = model(
            input_ids=src,
            attention_mask=torch.ones_like(src),
            decoder_input_ids=tgt,
            decoder_attention_mask=torch.ones_like(tgt),
        ).logits
        unmasked = model(input_ids=src, decoder_input_ids=tgt).logits
    torch.testing.assert_close(masked, unmasked)
    # no padding, on the CPU: no mask tensor is built, so the fused kernels run unmasked (SDPA applies causality)
    config, x = tiny_model(attn_implementation="sdpa").config, torch.zeros(2, 5, 32)
    assert source_mask(config, "sdpa", x, torch.ones(2, 5, dtype=torch.long)) is None
    assert target_mask(config, "sdpa", x[:, :4], torch.ones(2, 4, dtype=torch.long), None) is None
    assert source_mask(config, "sdpa", x[:1, :3], torch.tensor([[1, 1, 0]])) is not None


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_dropout_keeps_one_minus_p_scales_and_is_the_identity_in_eval(p):
    from vanilla_transformer.modeling.modeling_vanilla_transformer import Dropout

    dropout = Dropout(p)
    x = torch.rand(401, 499) + 1.0  # no zeros of its own; an odd count of elements
    x.requires_grad_(True)
    torch.manual_seed(0)
    y = dropout(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 0.005  # 200k draws: the standard error is about 0.001
    torch.testing.assert_close(y[kept], x[kept] / (1 - p))
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept.float() / (1 - p))
    torch.manual_seed(0)
    assert torch.equal(dropout(x), y)  # the global seed decides the mask
    assert not torch.equal(dropout(x), y)
    assert dropout.eval()(x) is x
    assert isinstance(dropout, torch.nn.Dropout)


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_dropout_keeps_one_minus_p_of_bfloat16_inputs_too(p):
    """The keep rate does not depend on the input's precision (a bfloat16 uniform draw, rounded near p, kept
    0.898 for p = 0.1): 4M draws, whose standard error is below 0.00025."""
    from vanilla_transformer.modeling.modeling_vanilla_transformer import Dropout

    torch.manual_seed(0)
    kept = Dropout(p)(torch.ones(2000, 2000, dtype=torch.bfloat16)) != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 0.001


def test_dropout_draws_a_cpu_inputs_mask_on_the_cpu_whatever_the_default_device():
    from vanilla_transformer.modeling.modeling_vanilla_transformer import Dropout

    x = torch.ones(5, 7)
    with torch.device("meta"):  # as `torch.set_default_device` makes it for tensors made without a device
        y = Dropout(0.5)(x)
    assert y.device.type == "cpu" and set(y.unique().tolist()) <= {0.0, 2.0}
