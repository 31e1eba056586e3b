"""The numbers the source material teaches, checked against the modules that implement them."""

import torch
from vanilla_transformer.modeling.modeling_vanilla_transformer import (
    AddNorm,
    MultiHeadAttention,
    PositionwiseFeedForward,
    sinusoidal_table,
)

from vanilla_transformer import VanillaTransformerConfig

TOY = VanillaTransformerConfig(d_model=64, d_ff=256, num_heads=4, encoder_layers=2, decoder_layers=2, vocab_size=100)


def count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_toy_model_parameter_counts():
    assert count(PositionwiseFeedForward(TOY)) == 33_088  # 64*256 + 256 + 256*64 + 64
    assert count(AddNorm(TOY)) == 128  # gamma and beta of one LayerNorm
    assert count(MultiHeadAttention(TOY)) == 16_384  # W^Q, W^K, W^V, W^O without bias


def test_layer_norm_of_the_seed_example():
    add_norm = AddNorm(VanillaTransformerConfig(d_model=4, num_heads=1, vocab_size=10))
    x = torch.tensor([[4.0, 2.0, 0.0, -2.0]])
    # post-norm Add&Norm with a zero sub-layer output is LayerNorm(x)
    out = add_norm(x, torch.zeros_like)
    assert [round(v, 2) for v in out[0].tolist()] == [1.34, 0.45, -0.45, -1.34]


def test_feed_forward_is_linear_relu_linear():
    ffn = PositionwiseFeedForward(TOY)
    x = torch.randn(3, 5, 64)
    expected = torch.relu(x @ ffn.w_1.weight.T + ffn.w_1.bias) @ ffn.w_2.weight.T + ffn.w_2.bias
    torch.testing.assert_close(ffn(x), expected)
    assert ffn.w_1.out_features == 4 * 64


def test_sinusoidal_table_matches_section_3_5():
    d_model = 16
    table = sinusoidal_table(50, d_model)
    for pos in (0, 7, 49):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert abs(table[pos, 2 * i].item() - torch.sin(torch.tensor(angle)).item()) < 1e-5
            assert abs(table[pos, 2 * i + 1].item() - torch.cos(torch.tensor(angle)).item()) < 1e-5
