import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration  # noqa: E402

torch.set_num_threads(min(2, torch.get_num_threads()))


def tiny_config(**overrides) -> VanillaTransformerConfig:
    """A model small enough for unit tests: d_model 32, 4 heads, 2+2 layers, 50 tokens, no dropout."""
    values = dict(
        vocab_size=50, d_model=32, num_heads=4, d_ff=64, encoder_layers=2, decoder_layers=2, dropout=0.0,
        max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
    )
    values.update(overrides)
    return VanillaTransformerConfig(**values)


def tiny_model(seed: int = 0, **overrides) -> VanillaTransformerForConditionalGeneration:
    torch.manual_seed(seed)
    return VanillaTransformerForConditionalGeneration(tiny_config(**overrides)).eval()


@pytest.fixture
def model():
    return tiny_model()
