"""Configuration of the original Transformer (Vaswani et al. 2017, "Attention Is All You Need").

Every default is the paper's base model (Table 3, row "base"). Where the paper leaves a choice open, the field says
what it picks; nothing differs from the paper silently:

- `max_position_embeddings`: the sinusoidal encoding of §3.5 has no length limit: this many positions are precomputed,
  and longer inputs get theirs on demand. Learned positions need a fixed size, and this is their limit.
- `attention_dropout` and `activation_dropout` are 0.0: the paper applies dropout (P_drop) only to the output of each
  sub-layer and to the sums of embeddings and positional encodings (§5.4).
- `vocab_size=37000`: the paper's shared source-target byte-pair vocabulary for English-German (§5.1).
- Weight initialisation is not given in the paper; the model uses Xavier-uniform linear layers and N(0, d_model^-0.5)
  embeddings (the tensor2tensor and fairseq choice), see `init_std`.

Some fields exist so that models trained by other implementations of the same architecture can be imported exactly
(`vanilla_transformer.import_checkpoint`): `position_layout`, `output_bias`, `target_vocab_size`,
`share_decoder_embeddings`, and the "silu" activation. Their defaults are the paper's.

The study switches take the architecture apart, for the studies of `vanilla-transformer ablate` (Table 3's smaller
d_k, and the lessons: no residual connections, no LayerNorm, no 1/sqrt(d_k), no positional encoding, no decoder mask,
no feed-forward network or no ReLU in it), each declared once in `SWITCHES`. Three are values of the fields above
(`norm_position="none"`, `position_encoding="none"`, `activation="linear"`); the others are fields of their own, which
a saved configuration holds only where a model changed them (`STUDY_SWITCHES`), so that every other model's
config.json is as it was. A config.json of an earlier version, with `layer_norm`, `positional_encoding` or
`ffn_activation` false, loads as the same model (`fold_switches`).
"""

import math
from dataclasses import dataclass

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig

NORM_POSITIONS = ("post", "pre", "none")  # none: a study without LayerNorm
POSITION_ENCODINGS = ("sinusoidal", "learned", "none")  # none: a study without positions
ACTIVATIONS = ("relu", "gelu", "silu", "swish", "linear")  # swish is SiLU under Marian's name; linear: a study
POSITION_LAYOUTS = ("interleaved", "halves", "fairseq")


@dataclass(frozen=True)
class StudySwitch:
    """A way to take the architecture apart for a study: the configuration field, the paper's value, the value that
    takes the part out (`off`; None for a size), what it is and what the `off` value leaves. `SWITCHES` declares each
    once; the configuration's docstring, `train`'s flag and the manual's table of the switches are made from it.

    A switch is either a field of its own, only for studies (`residual=False`), or one value of a field that also
    holds the options of the architecture (`norm_position="none"` beside "post" and "pre")."""

    paper: bool | str | None
    off: bool | str | None
    what: str
    otherwise: str

    @property
    def own_field(self) -> bool:
        """Whether the field exists for the studies alone: then a saved configuration leaves it out where it is the
        paper's, and `train` has a flag of its own for it."""
        return not isinstance(self.paper, str)

    def changes(self, value) -> bool:
        """Whether a model with this field's `value` is taken apart by the switch."""
        return value != self.paper if self.off is None else value == self.off


SWITCHES = {
    "d_k": StudySwitch(
        None,
        None,
        "the size of each head's queries and keys (Table 3, row B); None (or d_model / h itself) is d_model / h",
        "smaller queries and keys; the values keep d_v = d_model / h, and flash attention refuses it",
    ),
    "residual": StudySwitch(
        True, False, "the residual connection around every sub-layer (§3.1)", "LayerNorm(Sublayer(x))"
    ),
    "norm_position": StudySwitch(
        "post", "none", "the LayerNorm of every Add&Norm (§3.1) and pre-norm's final one", "x + Sublayer(x)"
    ),
    "attention_scaling": StudySwitch(
        True, False, "dividing the attention scores by sqrt(d_k) (§3.2.1)", "softmax(Q K^T) V"
    ),
    "position_encoding": StudySwitch(
        "sinusoidal",
        "none",
        "the positional encoding added to the embeddings (§3.5)",
        "the embeddings alone: the encoder reads a bag of tokens",
    ),
    "decoder_mask": StudySwitch(
        True,
        False,
        "hiding the future positions from the decoder's self-attention (§3.2.3)",
        "training reads the token it is asked to predict",
    ),
    "feed_forward": StudySwitch(
        True, False, "the position-wise feed-forward sub-layer (§3.3)", "attention sub-layers only"
    ),
    "activation": StudySwitch(
        "relu", "linear", "the feed-forward network's ReLU (§3.3)", "the network is one linear map"
    ),
}
# the fields that exist for the studies alone, with their paper values: left out of a saved configuration that keeps
# them (`to_dict`)
STUDY_SWITCHES = {name: switch.paper for name, switch in SWITCHES.items() if switch.own_field}
# the boolean fields of earlier versions, each now a value of an option's field: read from old config.json files
FOLDED_SWITCHES = {
    "layer_norm": "norm_position",
    "positional_encoding": "position_encoding",
    "ffn_activation": "activation",
}


def folded_values(read) -> dict:
    """What the boolean switches of an earlier version set now, by field: `layer_norm=False` is
    `norm_position="none"`, `positional_encoding=False` is `position_encoding="none"`, `ffn_activation=False` is
    `activation="linear"`; a True (or absent) one sets nothing. `read(old)` gives each old switch's value."""
    return {field: SWITCHES[field].off for old, field in FOLDED_SWITCHES.items() if read(old) is False}


def fold_switches(settings: dict) -> dict:
    """`settings` (a saved configuration or its record) with the boolean switches of earlier versions folded into the
    fields that hold them now (`folded_values`)."""
    kept = {name: value for name, value in settings.items() if name not in FOLDED_SWITCHES}
    return {**kept, **folded_values(settings.get)}


@strict
class VanillaTransformerConfig(PreTrainedConfig):
    r"""
    Configuration of [`VanillaTransformerModel`] and [`VanillaTransformerForConditionalGeneration`].

    Args:
        vocab_size: size of the joint source/target vocabulary.
        d_model: model width, the size of every sub-layer output and of the embeddings (§3.1).
        num_heads: number of attention heads h; each head has d_k = d_v = d_model / h (§3.2.2).
        d_ff: inner size of the position-wise feed-forward network (§3.3).
        encoder_layers: number N of identical encoder layers.
        decoder_layers: number N of identical decoder layers.
        dropout: P_drop, applied to each sub-layer output before the residual add and to embedding + position sums.
        attention_dropout: dropout on the attention probabilities (0.0 in the paper).
        activation_dropout: dropout after the feed-forward activation (0.0 in the paper).
        activation: "relu" (the paper), "gelu", or "silu" (also written "swish", as Marian's OPUS-MT models do);
            "linear" (none) is a study's.
        layer_norm_eps: epsilon of every LayerNorm.
        max_position_embeddings: with sinusoidal positions, how many are precomputed; longer sequences are encoded
            all the same (§3.5), so it limits nothing. With learned positions, the size of their table and the longest
            sequence the model can read or write (see `position_limit`).
        norm_position: "post" (the paper: LayerNorm(x + Dropout(Sublayer(x)))) or "pre"
            (x + Dropout(Sublayer(LayerNorm(x))), with a final LayerNorm closing each stack); "none" (no LayerNorm,
            x + Dropout(Sublayer(x))) is a study's.
        position_encoding: "sinusoidal" (§3.5, a fixed table, not saved with the weights) or "learned"; "none" (the
            embeddings alone) is a study's.
        position_layout: the layout of the sinusoids: "interleaved" (§3.5: sin and cos alternate, PE(pos, 2i) and
            PE(pos, 2i+1)); "halves" (Marian's: the same frequencies, all sines, then all cosines); "fairseq" (fairseq's
            and FSMT's: sines then cosines with frequencies 10000^(-i / (d_model/2 - 1)), positions counted from
            pad_token_id + 1). Learned positions ignore it.
        scale_embedding: multiply embeddings by sqrt(d_model) (§3.4).
        share_embeddings: one matrix for the source embedding, the target embedding and the pre-softmax projection
            (§3.4). When False the source and target embeddings are separate, and so is the pre-softmax projection
            unless `share_decoder_embeddings`. `tie_word_embeddings` always follows these two fields.
        share_decoder_embeddings: with `share_embeddings=False`, the target embedding and the pre-softmax projection
            still share one matrix (Marian's separate vocabularies, fairseq's --share-decoder-input-output-embed).
        target_vocab_size: size of a separate target vocabulary (decoder embedding and output projection); None means
            `vocab_size`. Another size needs `share_embeddings=False`.
        output_bias: a bias in the pre-softmax projection (Marian's `final_logits_bias`; the paper has none).
        attention_bias: biases in the attention projections W^Q, W^K, W^V, W^O (the paper's formulas have none).
        init_std: standard deviation of the embedding initialisation; None means d_model ** -0.5.
        use_cache: reuse keys and values of previous decoding steps in `generate()`.
        residual_in_fp32: under autocast, the residual stream (the embeddings with their positions, every Add&Norm's
            output) stays float32, as autocast leaves LayerNorm's output. False carries it in autocast's dtype
            (bf16): each LayerNorm still computes in float32 and casts its output, so no sub-layer's input is cast
            again (Mamba's field of this name, Megatron's `fp32_residual_connection`). Without autocast it changes
            nothing.

    The study switches (`vanilla-transformer ablate`; every one the paper's by default), as `SWITCHES` declares them:
    the fields of their own are left out of a saved configuration unless changed; the others are values of the
    fields above.
    """

    model_type = "vanilla_transformer"
    # outputs the Trainer leaves out of its predictions: the cache, under its names before and since transformers 5.24
    keys_to_ignore_at_inference = ["cache", "past_key_values"]
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "num_heads",
        "num_hidden_layers": "decoder_layers",  # the layers that keep keys/values in generate(): caches are sized by it
        "intermediate_size": "d_ff",
    }

    vocab_size: int = 37000
    d_model: int = 512
    num_heads: int = 8
    d_ff: int = 2048
    encoder_layers: int = 6
    decoder_layers: int = 6
    dropout: float | int = 0.1
    attention_dropout: float | int = 0.0
    activation_dropout: float | int = 0.0
    activation: str = "relu"
    layer_norm_eps: float = 1e-5
    max_position_embeddings: int = 1024
    norm_position: str = "post"
    position_encoding: str = "sinusoidal"
    position_layout: str = "interleaved"
    scale_embedding: bool = True
    share_embeddings: bool = True
    share_decoder_embeddings: bool = False
    target_vocab_size: int | None = None
    output_bias: bool = False
    attention_bias: bool = False
    init_std: float | None = None
    use_cache: bool = True
    residual_in_fp32: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    decoder_start_token_id: int | None = 1
    is_encoder_decoder: bool = True
    tie_word_embeddings: bool = True
    d_k: int | None = SWITCHES["d_k"].paper
    residual: bool = SWITCHES["residual"].paper
    attention_scaling: bool = SWITCHES["attention_scaling"].paper
    decoder_mask: bool = SWITCHES["decoder_mask"].paper
    feed_forward: bool = SWITCHES["feed_forward"].paper

    def __post_init__(self, **kwargs):
        model_type = kwargs.pop("model_type", self.model_type)
        if model_type != self.model_type:
            raise ValueError(
                f"This configuration has model_type {model_type!r}; VanillaTransformerConfig reads only "
                f"model_type {self.model_type!r}."
            )
        # an earlier version's switches, as their fields hold them now
        for field, value in folded_values(lambda old: kwargs.pop(old, None)).items():
            setattr(self, field, value)
        self.tie_word_embeddings = self.share_embeddings or self.share_decoder_embeddings
        if self.d_k is not None and self.num_heads > 0 and self.d_k * self.num_heads == self.d_model:
            self.d_k = None  # the paper's own size: not a change
        self.validate_fields()
        super().__post_init__(**kwargs)

    def to_dict(self) -> dict:
        """The configuration as a dictionary, without the study switches that are the paper's (`STUDY_SWITCHES`)."""
        output = super().to_dict()
        for name, paper in STUDY_SWITCHES.items():
            if output.get(name, paper) == paper:
                output.pop(name, None)
        return output

    def changed_switches(self) -> dict:
        """The study switches this model changes from the paper's, by name (`changed_switches`)."""
        return changed_switches(self)

    def validate_fields(self) -> None:
        """Raise a `ValueError` naming the first invalid field and what it accepts. Run when the configuration is made,
        when a model is built of it, and by `@strict`'s `validate()`, which `save_pretrained` calls (and which wraps
        the error in huggingface_hub's `StrictDataclassClassValidationError`): a field changed after the
        configuration was made is checked before a model or a folder is made of it."""
        for name in (
            "vocab_size",
            "d_model",
            "num_heads",
            "d_ff",
            "encoder_layers",
            "decoder_layers",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if value <= 0:
                raise ValueError(f"VanillaTransformerConfig.{name} must be a positive integer, got {value}.")
        if self.d_model % self.num_heads != 0:
            raise ValueError(
                f"VanillaTransformerConfig.d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads}) "
                "so that every head gets d_k = d_model / num_heads dimensions."
            )
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"VanillaTransformerConfig.{name} must be in [0, 1), got {value}.")
        if self.d_k is not None and self.d_k <= 0:
            raise ValueError(f"VanillaTransformerConfig.d_k must be a positive integer or None, got {self.d_k}.")
        if not 0 < self.layer_norm_eps < math.inf:
            raise ValueError(
                f"VanillaTransformerConfig.layer_norm_eps must be a positive finite number, got {self.layer_norm_eps}."
            )
        if self.init_std is not None and not 0 < self.init_std < math.inf:
            raise ValueError(
                f"VanillaTransformerConfig.init_std must be a positive finite number or None, got {self.init_std}."
            )
        for name, allowed in (
            ("norm_position", NORM_POSITIONS),
            ("position_encoding", POSITION_ENCODINGS),
            ("activation", ACTIVATIONS),
            ("position_layout", POSITION_LAYOUTS),
        ):
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"VanillaTransformerConfig.{name} must be one of {allowed}, got {value!r}.")
        self._check_vocabularies()
        self._check_token_ids()
        if self.position_layout != "interleaved" and self.d_model % 2 != 0:
            raise ValueError(
                f"VanillaTransformerConfig.position_layout={self.position_layout!r} needs an even d_model (half sines, "
                f"half cosines), got d_model={self.d_model}."
            )
        if self.position_layout == "fairseq" and self.d_model < 4:
            raise ValueError(
                f"VanillaTransformerConfig.position_layout='fairseq' needs d_model >= 4 (its frequency step divides by "
                f"d_model/2 - 1), got d_model={self.d_model}."
            )

    def _check_vocabularies(self) -> None:
        if self.target_vocab_size is not None and self.target_vocab_size <= 0:
            raise ValueError(
                f"VanillaTransformerConfig.target_vocab_size must be a positive integer or None, got "
                f"{self.target_vocab_size}."
            )
        if self.share_embeddings and target_vocabulary_size(self) != self.vocab_size:
            raise ValueError(
                f"VanillaTransformerConfig.target_vocab_size={self.target_vocab_size} differs from vocab_size="
                f"{self.vocab_size}: a separate target vocabulary needs share_embeddings=False."
            )

    def _check_token_ids(self) -> None:
        """Token ids the decoder reads or writes lie in the target vocabulary; the padding id in both."""
        sizes = {"vocab_size": self.vocab_size}
        if target_vocabulary_size(self) != self.vocab_size:
            sizes["target_vocab_size"] = target_vocabulary_size(self)
        if self.eos_token_id == []:
            raise ValueError(
                "VanillaTransformerConfig.eos_token_id must be a token id, a list of them or None, got []."
            )
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            value = getattr(self, name)
            for token_id in value if isinstance(value, list) else [value]:
                for size_name, size in sizes.items():
                    if token_id is not None and not 0 <= token_id < size:
                        raise ValueError(
                            f"VanillaTransformerConfig.{name} must be a token id in [0, {size_name}={size}), "
                            f"got {token_id}."
                        )
        if self.pad_token_id is None:
            raise ValueError("VanillaTransformerConfig.pad_token_id must be set: padding is masked out of attention.")
        if self.decoder_start_token_id is None:
            raise ValueError(
                "VanillaTransformerConfig.decoder_start_token_id must be set: "
                "it starts the shifted-right decoder input."
            )


def check_tokenizer_matches(config, tokenizer, where: str = "") -> None:
    """A model and a tokenizer from different runs fail late and quietly (ids past the embedding table, padding
    treated as a word); stop early instead, naming both numbers. Works for any config with `vocab_size`."""
    prefix = f"{where}: " if where else ""
    if len(tokenizer) > config.vocab_size:
        raise ValueError(
            f"{prefix}the tokenizer has {len(tokenizer)} tokens but the model's config.json has vocab_size="
            f"{config.vocab_size}; expected a tokenizer from the same run as the model (at most vocab_size tokens)."
        )
    for name in ("pad_token_id", "eos_token_id"):
        expected, found = getattr(config, name, None), getattr(tokenizer, name, None)
        if expected is not None and found is not None and expected != found:
            raise ValueError(
                f"{prefix}the tokenizer's {name} is {found} but the model's config.json has {name}={expected}; "
                "expected a tokenizer from the same run as the model."
            )


def target_vocabulary_size(config) -> int:
    """The size of the vocabulary the decoder reads and writes: `target_vocab_size` where the model has a separate
    target vocabulary, else `vocab_size`. Works for any config with `vocab_size`."""
    return getattr(config, "target_vocab_size", None) or config.vocab_size


def switch_lines() -> str:
    """The study switches as the configuration's docstring lists them: each field, what it is and what another value
    leaves."""
    lines = []
    for name, switch in SWITCHES.items():
        other = "another size" if switch.off is None else repr(switch.off)
        lines.append(f"        {name}: {switch.what}; {other}: {switch.otherwise}.")
    return "\n".join(lines) + "\n"


VanillaTransformerConfig.__doc__ = VanillaTransformerConfig.__doc__.rstrip(" ") + switch_lines()


def changed_switches(config) -> dict:
    """The study switches a model changes from the paper's, by name: {} for the paper's architecture. Works for any
    config (a field it lacks is the paper's)."""
    changed = {
        name: getattr(config, name)
        for name, switch in SWITCHES.items()
        if switch.changes(getattr(config, name, switch.paper))
    }
    # a configuration class of an earlier version (from remote code) holds the old booleans
    return {**changed, **folded_values(lambda old: getattr(config, old, None))}


def position_limit(config) -> int | None:
    """The longest sequence a model can read or write: `max_position_embeddings` for learned positions, which have no
    row beyond their table; None for the sinusoids of §3.5, which are defined for every position. Works for any
    config (None where it has no `position_encoding="learned"`)."""
    if getattr(config, "position_encoding", None) == "learned":
        return config.max_position_embeddings
    return None


__all__ = [
    "FOLDED_SWITCHES",
    "STUDY_SWITCHES",
    "SWITCHES",
    "StudySwitch",
    "VanillaTransformerConfig",
    "changed_switches",
    "check_tokenizer_matches",
    "fold_switches",
    "position_limit",
    "target_vocabulary_size",
]
