"""The size presets of `vanilla-transformer train --preset`: the sizes and schedules a preset sets, each of which its
own flag can set instead."""

from dataclasses import dataclass

from ...configuration import VanillaTransformerConfig


@dataclass(frozen=True)
class Preset:
    """The options a preset sets; every one of them can be set by its own flag instead."""

    d_model: int
    num_heads: int
    d_ff: int
    encoder_layers: int
    decoder_layers: int
    dropout: float
    attention_dropout: float
    activation_dropout: float
    vocab_size: int
    max_tokens: int
    warmup_steps: int
    lr: float | None
    max_steps: int | None
    num_epochs: int | None
    eval_steps: int
    save_steps: int
    max_source_length: int
    max_target_length: int
    cooldown_steps: int = 0
    bpe_dropout: float = 0.0


PAPER = VanillaTransformerConfig()  # the paper's base model: the configuration's defaults
# the architecture's choices, the paper's in every preset: the default of each one's flag, which is None until `resolve`
# fills it in, so that a flag given can be told from its default (a run with --init-from checks it against the folder)
PAPER_CHOICES = {
    name: getattr(PAPER, name) for name in ("norm_position", "position_encoding", "activation", "share_embeddings")
}


# "numbers" trains the embedded task quickly on a CPU, "study" more quickly still, for the many runs of a study;
# "small" suits Multi30k-sized corpora; "tiny" is the
# Transformer-Tiny of Wu et al. (2021), the best text-only Multi30k model, with their learning rate and warm-up, and
# a schedule sized for a CPU run of the Multi30k recipe (two single-thread processes of 2048 tokens; its duration is
# in training/recipes/RESULTS.md); "base" is the paper's base model and schedule (§5.3).
# fmt: off
PRESETS = {
    # numbers: a 200-token BPE keeps the German pieces short ("▁zwei", "undvierzig"), so that a number held out of
    # training is composed of pieces seen in others, while "null" is still one piece
    "numbers": Preset(
        d_model=128, num_heads=4, d_ff=512, encoder_layers=2, decoder_layers=2,
        dropout=0.1, attention_dropout=0.0, activation_dropout=0.0,
        vocab_size=200, max_tokens=4096, warmup_steps=200, lr=2e-3, max_steps=600, num_epochs=None,
        eval_steps=300, save_steps=300, max_source_length=32, max_target_length=32,
    ),
    # study: the embedded task at a size whose run takes about a minute on one CPU core, for the many runs of
    # `vanilla-transformer ablate`; validation every 25 updates shows how fast each variant learns
    "study": Preset(
        d_model=64, num_heads=4, d_ff=256, encoder_layers=2, decoder_layers=2,
        dropout=0.1, attention_dropout=0.0, activation_dropout=0.0,
        vocab_size=200, max_tokens=1024, warmup_steps=100, lr=2e-3, max_steps=300, num_epochs=None,
        eval_steps=25, save_steps=0, max_source_length=32, max_target_length=32,
    ),
    "small": Preset(
        d_model=256, num_heads=4, d_ff=1024, encoder_layers=3, decoder_layers=3,
        dropout=0.3, attention_dropout=0.0, activation_dropout=0.0,
        vocab_size=8000, max_tokens=4096, warmup_steps=500, lr=1e-3, max_steps=None, num_epochs=10,
        eval_steps=1000, save_steps=1000, max_source_length=128, max_target_length=128,
    ),
    # Transformer-Tiny for Multi30k: also dropout 0.1 on the attention weights and after the FFN's ReLU, which raised
    # validation and test BLEU (the comparison is in training/recipes/RESULTS.md)
    "tiny": Preset(
        d_model=128, num_heads=4, d_ff=256, encoder_layers=4, decoder_layers=4,
        dropout=0.3, attention_dropout=0.1, activation_dropout=0.1,
        vocab_size=8000, max_tokens=4096, warmup_steps=2000, cooldown_steps=2000, lr=5e-3, max_steps=None,
        num_epochs=70, eval_steps=500, save_steps=120, max_source_length=128, max_target_length=128,
    ),
    # the paper's base model (Table 3) and schedule (§5.3): 25,000 tokens a batch, 4,000 warm-up steps, 100k updates
    "base": Preset(
        d_model=PAPER.d_model, num_heads=PAPER.num_heads, d_ff=PAPER.d_ff,
        encoder_layers=PAPER.encoder_layers, decoder_layers=PAPER.decoder_layers, dropout=PAPER.dropout,
        attention_dropout=PAPER.attention_dropout, activation_dropout=PAPER.activation_dropout,
        vocab_size=PAPER.vocab_size, max_tokens=25000, warmup_steps=4000, lr=None, max_steps=100_000,
        num_epochs=None, eval_steps=5000, save_steps=5000, max_source_length=256, max_target_length=256,
    ),
}
# fmt: on


def preset_values(preset: str, given: dict) -> dict:
    """The options `preset` sets that `given` (every option by name, None where no flag gave it) leaves unset; a
    --num-epochs given sizes the run instead of the preset's --max-steps (which would win over it)."""
    values = {name: value for name, value in vars(PRESETS[preset]).items() if given[name] is None}
    if given["num_epochs"] is not None:
        values.pop("max_steps", None)
    return values
