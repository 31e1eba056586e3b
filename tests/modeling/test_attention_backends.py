"""Attention through the library's interface: every implementation the machine offers gives the outputs of the
paper's eager attention (padded batches, the causal mask, cross-attention, decoding with a cache), with masks from
`transformers.masking_utils`, and the attention weights recorded the library's way."""

import math

import pytest
import torch
from transformers.utils import is_flash_attn_2_available, is_flash_attn_3_available
from vanilla_transformer.modeling.modeling_vanilla_transformer import source_mask, target_mask

from tests.conftest import greedy_steps, tiny_model


def fused_backends(device: str) -> list[str]:
    """The implementations besides eager that run on `device` here (flex attention is tested on its own: it compiles
    its kernels, for about a minute on a CPU)."""
    found = ["sdpa"]
    if device == "cuda" and is_flash_attn_2_available():
        found.append("flash_attention_2")
    if device == "cuda" and is_flash_attn_3_available():
        found.append("flash_attention_3")
    return found


def padded_batch(device: str) -> dict:
    """Three sentence pairs of different lengths, padded on the right: sources of 9, 6 and 4 tokens, targets of 7, 5
    and 3."""
    torch.manual_seed(1)
    src, tgt = torch.randint(3, 50, (3, 9)), torch.randint(3, 50, (3, 7))
    src_mask = (torch.arange(9)[None] < torch.tensor([[9], [6], [4]])).long()
    tgt_mask = (torch.arange(7)[None] < torch.tensor([[7], [5], [3]])).long()
    batch = dict(
        input_ids=src.masked_fill(src_mask == 0, 0),
        attention_mask=src_mask,
        decoder_input_ids=tgt.masked_fill(tgt_mask == 0, 0),
        decoder_attention_mask=tgt_mask,
    )
    return {key: value.to(device) for key, value in batch.items()}


def pair_of_models(implementation: str, device: str, dtype=torch.float32, **sizes):
    """The same weights twice: with eager attention, and with `implementation`."""
    eager = tiny_model(attn_implementation="eager", **sizes).to(device, dtype)
    other = tiny_model(attn_implementation=implementation, **sizes).to(device, dtype)
    assert other.config._attn_implementation == implementation
    return eager, other


def decode_with_cache(model, batch: dict, steps: int) -> torch.Tensor:
    """Logits of `steps` decoding steps, one token at a time through the cache, greedy."""
    return torch.cat(greedy_steps(model, batch, batch["decoder_input_ids"][:, :1], steps), dim=1)


def assert_same_outputs(eager, other, batch: dict, atol: float) -> None:
    with torch.no_grad():
        expected = eager(**batch).logits
        found = other(**batch).logits
        torch.testing.assert_close(found, expected, atol=atol, rtol=atol)
        # no target mask: the causal mask alone, which fused kernels apply themselves
        plain = {key: value for key, value in batch.items() if key != "decoder_attention_mask"}
        torch.testing.assert_close(other(**plain).logits, eager(**plain).logits, atol=atol, rtol=atol)
    torch.testing.assert_close(
        decode_with_cache(other, batch, 4), decode_with_cache(eager, batch, 4), atol=atol, rtol=atol
    )


@pytest.mark.parametrize("implementation", fused_backends("cpu"))
def test_every_backend_gives_the_outputs_of_eager_attention(implementation):
    eager, other = pair_of_models(implementation, "cpu")
    assert_same_outputs(eager, other, padded_batch("cpu"), atol=1e-5)


def test_flex_attention_gives_the_outputs_of_eager_attention():
    # flex attention compiles its kernels on first use (tens of seconds on a CPU): one case, the whole of it
    eager, flex = pair_of_models("flex_attention", "cpu")
    assert_same_outputs(eager, flex, padded_batch("cpu"), atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("implementation", [*fused_backends("cuda"), "flex_attention"])
def test_every_backend_gives_the_outputs_of_eager_attention_on_cuda(implementation):
    # flash attention runs in half precision only
    dtype = torch.bfloat16 if implementation.startswith("flash") else torch.float32
    # flex attention's CUDA kernels take heads of d_k >= 16 only (the tiny model's are 8)
    sizes = {"d_model": 64} if implementation == "flex_attention" else {}
    eager, other = pair_of_models(implementation, "cuda", dtype, **sizes)
    assert_same_outputs(eager, other, padded_batch("cuda"), atol=2e-2 if dtype == torch.bfloat16 else 1e-4)


def test_attention_weights_are_recorded_whatever_the_implementation():
    """The fused kernels return no weights: asked for them, a call runs eager attention, and the library records
    every layer's weights from the attention modules."""
    eager, sdpa = pair_of_models("sdpa", "cpu")
    batch = padded_batch("cpu")
    with torch.no_grad():
        expected = eager(**batch, output_attentions=True)
        found = sdpa(**batch, output_attentions=True)
    for name in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
        assert len(getattr(found, name)) == 2  # one per layer
        for weights, reference in zip(getattr(found, name), getattr(expected, name)):
            torch.testing.assert_close(weights, reference)
    assert found.cross_attentions[0].shape == (3, 4, 7, 9)  # (batch, h, tgt_len, src_len)
    # the source padding gets no weight, and the decoder none above the diagonal nor on its padding
    assert torch.all(found.cross_attentions[0][1, :, :, 6:] == 0)
    assert torch.all(found.decoder_attentions[0][2, :, :, 3:] == 0)
    assert torch.equal(found.decoder_attentions[0], torch.tril(found.decoder_attentions[0]))


def test_masks_come_from_masking_utils_in_the_form_each_implementation_takes():
    config = tiny_model().config  # sdpa, the default
    x = torch.zeros(2, 3, 32)
    padding = torch.tensor([[1, 1, 1], [1, 1, 0]])
    may_see = padding.bool()[:, None, None, :].expand(2, 1, 3, 3)
    # SDPA: boolean, True where a query may see a key
    assert torch.equal(source_mask(config, "sdpa", x, padding), may_see)
    # eager: the paper's additive mask, -inf before the softmax where a query may not look (§3.2.3)
    hidden = torch.zeros(2, 1, 3, 3).masked_fill(~may_see, -math.inf)
    assert torch.equal(source_mask(config, "eager", x, padding), hidden)
    future = torch.zeros(3, 3).masked_fill(torch.ones(3, 3, dtype=torch.bool).triu(1), -math.inf)
    assert torch.equal(target_mask(config, "eager", x, None, None), future.expand(2, 1, 3, 3))
    # a query that may see no key at all (an all-padding source) sees every key instead of turning into NaN
    assert torch.equal(source_mask(config, "eager", x, torch.tensor([[1, 1, 1], [0, 0, 0]]))[1], torch.zeros(1, 3, 3))
    # nothing to hide: no mask at all, and SDPA applies causality itself
    assert source_mask(config, "sdpa", x, torch.ones(2, 3, dtype=torch.long)) is None
    assert target_mask(config, "sdpa", x, None, None) is None
    # on an accelerator the padding mask is not read to drop it (that would wait for the device): it is kept. The
    # meta device, whose values cannot be read at all, stands in for one
    kept = source_mask(config, "sdpa", x.to("meta"), torch.ones(2, 3, dtype=torch.long, device="meta"))
    assert kept is not None and kept.shape == (2, 1, 3, 3)
