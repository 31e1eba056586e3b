"""With the same weights, the model computes what `torch.nn.Transformer` (post-norm, ReLU) computes."""

import pytest
import torch
from torch import nn

from tests.conftest import tiny_model


def copy_into_torch_transformer(model, norm_first: bool = False) -> nn.Transformer:
    """`model`'s layer weights in a `torch.nn.Transformer` of its sizes (ReLU). Post-norm: its final LayerNorms are
    identities, the paper's stacks having none; pre-norm (`norm_first`): the caller loads them."""
    c = model.config
    reference = nn.Transformer(
        d_model=c.d_model,
        nhead=c.num_heads,
        num_encoder_layers=c.encoder_layers,
        num_decoder_layers=c.decoder_layers,
        dim_feedforward=c.d_ff,
        dropout=0.0,
        activation="relu",
        layer_norm_eps=c.layer_norm_eps,
        batch_first=True,
        norm_first=norm_first,
    ).eval()
    if not norm_first:  # the paper's post-norm stacks have no final LayerNorm, nn.Transformer always adds one
        reference.encoder.norm = nn.Identity()
        reference.decoder.norm = nn.Identity()

    def attention(ref: nn.MultiheadAttention, ours):
        ref.in_proj_weight.copy_(ours.in_proj.weight)
        ref.in_proj_bias.copy_(ours.in_proj.bias)
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)

    def norm(ref: nn.LayerNorm, ours):
        ref.load_state_dict(ours.layer_norm.state_dict())

    def ffn(ref_layer, ours):
        ref_layer.linear1.load_state_dict(ours.w_1.state_dict())
        ref_layer.linear2.load_state_dict(ours.w_2.state_dict())

    with torch.no_grad():
        for ref, ours in zip(reference.encoder.layers, model.model.encoder.layers):
            attention(ref.self_attn, ours.self_attn)
            norm(ref.norm1, ours.self_attn_norm)
            ffn(ref, ours.ffn)
            norm(ref.norm2, ours.ffn_norm)
        for ref, ours in zip(reference.decoder.layers, model.model.decoder.layers):
            attention(ref.self_attn, ours.self_attn)
            norm(ref.norm1, ours.self_attn_norm)
            attention(ref.multihead_attn, ours.cross_attn)
            norm(ref.norm2, ours.cross_attn_norm)
            ffn(ref, ours.ffn)
            norm(ref.norm3, ours.ffn_norm)
    return reference


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_matches_torch_nn_transformer(attn_implementation):
    model = tiny_model(attention_bias=True)
    model.config._attn_implementation = attn_implementation
    with torch.no_grad():  # give LayerNorms non-trivial parameters so that they are really compared
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                p.uniform_(0.5, 1.5)
    reference = copy_into_torch_transformer(model)

    torch.manual_seed(1)
    src = torch.randint(3, 50, (3, 9))
    tgt = torch.randint(3, 50, (3, 6))
    src_mask = torch.ones_like(src)
    src_mask[1, 6:] = 0  # padding on one row
    src[1, 6:] = 0

    with torch.no_grad():
        ours = model.model(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt).last_hidden_state
        src_emb = model.model.encoder.embed(src, None)
        tgt_emb = model.model.decoder.embed(tgt, None)
        theirs = reference(
            src_emb,
            tgt_emb,
            tgt_mask=nn.Transformer.generate_square_subsequent_mask(tgt.shape[1]),
            src_key_padding_mask=src_mask == 0,
            memory_key_padding_mask=src_mask == 0,
        )
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-4)
