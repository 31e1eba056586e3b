"""The studies of `vanilla-transformer ablate`, each a list of variants of one base run. A variant changes the base's
training options in one respect the paper or the texts make a claim about, and says the claim; `ablate` trains every
variant with several seeds and puts the rows side by side.

- `table3`: the rows of the paper's Table 3 (§6.2) at the base run's scale: (A) the number of heads h at constant
  d_model, (B) a smaller query and key size d_k, (C) depth N, width d_model and the feed-forward size d_ff, halved
  and doubled, (D) P_drop and label smoothing off and doubled, (E) learned positions instead of the sinusoids.
- `lessons`: the claims the architecture is taught by, each tested by taking its piece out (the study switches of
  `vanilla-transformer train`, which no other run uses), and pre-norm against the paper's post-norm.

To study something else, add a `Variant` to a list, or a list to `STUDIES`. A variant's `change` gives the options
it changes (train's option names: `num_heads`, `dropout`, `residual`, ...), from the base's options where it scales
one of them; it returns None where it does not apply to the base (8 heads of a 12-wide model), and a variant whose
options are the base's is the base run itself.
"""

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Variant:
    """One row of a study: `key` names its runs' folder, `row` is its group (Table 3's letter, or "lesson"), `label`
    its name in the table, `claim` what the texts say the change does."""

    key: str
    row: str
    label: str
    claim: str
    change: Callable[[dict], dict | None]

    def options(self, base: dict) -> dict | None:
        """The training options this variant changes, given the base run's options; None where it does not apply."""
        return self.change(base)


def fixed(**options) -> Callable[[dict], dict]:
    """A change to these values, whatever the base."""
    return lambda base: dict(options)


RATES = ("dropout", "label_smoothing")  # probabilities: below 1


def scaled(name: str, factor: float) -> Callable[[dict], dict | None]:
    """A change of one size or rate by `factor` (halved, doubled), or None where it does not apply (a rate of 0, or
    one that would reach 1; a d_model that the heads do not divide)."""

    def change(base: dict) -> dict | None:
        value = base[name] * factor
        value = int(value) if isinstance(base[name], int) else round(value, 6)
        if (name == "d_model" and value % base["num_heads"]) or (name in RATES and value >= 1):
            return None
        return {name: value} if value != base[name] and value > 0 else None

    return change


def heads(count: int) -> Callable[[dict], dict | None]:
    """h heads at the base's d_model: d_k = d_v = d_model / h, so that the computation stays the same (row A); not
    for a base with a d_k of its own."""
    return lambda base: {"num_heads": count} if base["d_model"] % count == 0 and base["d_k"] is None else None


def key_size(divisor: int) -> Callable[[dict], dict | None]:
    """A query and key size d_k of the base's (d_model / h, or its own d_k) / divisor; the values keep d_v (row B)."""

    def change(base: dict) -> dict | None:
        d_k = (base["d_k"] or base["d_model"] // base["num_heads"]) // divisor
        return {"d_k": d_k} if d_k >= 1 else None

    return change


def layers(factor: float) -> Callable[[dict], dict | None]:
    """N times `factor`, in both stacks (row C)."""

    def change(base: dict) -> dict | None:
        encoder, decoder = int(base["encoder_layers"] * factor), int(base["decoder_layers"] * factor)
        return {"encoder_layers": encoder, "decoder_layers": decoder} if min(encoder, decoder) >= 1 else None

    return change


BASE = Variant("base", "base", "base", "the base run: the paper's architecture at this scale", fixed())

TABLE3 = (
    BASE,
    Variant("heads-1", "A", "h = 1", "single-head attention is worse than the best setting (0.9 BLEU)", heads(1)),
    Variant("heads-2", "A", "h = 2", "quality varies with the number of heads at constant computation", heads(2)),
    Variant("heads-4", "A", "h = 4", "quality varies with the number of heads at constant computation", heads(4)),
    Variant("heads-8", "A", "h = 8", "the paper's base: 8 heads of d_model / 8", heads(8)),
    Variant("heads-16", "A", "h = 16", "quality also drops off with too many heads", heads(16)),
    Variant("d_k-half", "B", "d_k / 2", "a smaller key size d_k hurts quality", key_size(2)),
    Variant("d_k-quarter", "B", "d_k / 4", "a smaller key size d_k hurts quality", key_size(4)),
    Variant("layers-half", "C", "N / 2", "bigger models are better: fewer layers are worse", layers(0.5)),
    Variant("layers-double", "C", "N x 2", "bigger models are better", layers(2)),
    Variant(
        "d_model-half", "C", "d_model / 2", "bigger models are better: a narrower one is worse", scaled("d_model", 0.5)
    ),
    Variant("d_model-double", "C", "d_model x 2", "bigger models are better", scaled("d_model", 2)),
    Variant("d_ff-half", "C", "d_ff / 2", "bigger models are better: a smaller FFN is worse", scaled("d_ff", 0.5)),
    Variant("d_ff-double", "C", "d_ff x 2", "bigger models are better", scaled("d_ff", 2)),
    Variant("dropout-off", "D", "P_drop = 0", "dropout is very helpful in avoiding over-fitting", fixed(dropout=0.0)),
    Variant(
        "dropout-double",
        "D",
        "P_drop x 2",
        "dropout regularises (0.2 was no worse for the base model)",
        scaled("dropout", 2),
    ),
    Variant(
        "smoothing-off",
        "D",
        "eps_ls = 0",
        "label smoothing hurts perplexity but improves BLEU",
        fixed(label_smoothing=0.0),
    ),
    Variant(
        "smoothing-double", "D", "eps_ls x 2", "more smoothing: perplexity rises further", scaled("label_smoothing", 2)
    ),
    Variant(
        "learned-positions",
        "E",
        "learned positions",
        "nearly identical results to the sinusoids",
        fixed(position_encoding="learned"),
    ),
)

LESSONS = (
    BASE,
    Variant(
        "no-residual",
        "lesson",
        "no residual",
        "the residual connections carry the gradient to the early layers (§3.1)",
        fixed(residual=False),
    ),
    Variant(
        "no-layer-norm",
        "lesson",
        "no LayerNorm",
        "LayerNorm keeps each sub-layer's input on one scale (§3.1)",
        fixed(norm_position="none"),
    ),
    Variant(
        "pre-norm",
        "lesson",
        "pre-norm",
        "Add&Norm before the sub-layer trains as well as after it, more stably",
        fixed(norm_position="pre"),
    ),
    Variant(
        "no-scaling",
        "lesson",
        "no 1/sqrt(d_k)",
        "unscaled scores push the softmax into regions of tiny gradients (§3.2.1)",
        fixed(attention_scaling=False),
    ),
    Variant(
        "no-positions",
        "lesson",
        "no positions",
        "without positional encoding the encoder sees a bag of words (§3.5)",
        fixed(position_encoding="none"),
    ),
    Variant(
        "no-decoder-mask",
        "lesson",
        "no decoder mask",
        "a decoder that sees the future learns to copy it: the loss falls, generation fails (§3.2.3)",
        fixed(decoder_mask=False),
    ),
    Variant(
        "no-feed-forward",
        "lesson",
        "no FFN",
        "the position-wise feed-forward networks add capacity attention lacks (§3.3)",
        fixed(feed_forward=False),
    ),
    Variant(
        "no-ffn-relu",
        "lesson",
        "FFN without ReLU",
        "without its non-linearity the FFN is one linear map (§3.3)",
        fixed(activation="linear"),
    ),
)

STUDIES = {"table3": TABLE3, "lessons": LESSONS}

__all__ = ["STUDIES", "Variant", "BASE", "TABLE3", "LESSONS"]
