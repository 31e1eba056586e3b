"""The study switches of `vanilla-transformer train`: the flags that take the architecture apart, one paper claim at
a time, for the studies of `vanilla-transformer ablate` (Table 3's smaller d_k, and the lessons). Every one is the
paper's unless given, and a model's saved configuration names only those its run changed (`STUDY_SWITCHES`)."""

import dataclasses
from dataclasses import dataclass

from ..configuration.configuration_vanilla_transformer import STUDY_SWITCHES
from .argument_types import ArgumentsError, Checked, PositiveInt, option, option_flag


@dataclass(frozen=True)
class SwitchArguments(Checked):
    _argument_group_name = "study switches (for `ablate`'s studies; each the paper's unless given)"

    d_k: PositiveInt | None = option(
        help="the size of each head's queries and keys (Table 3, row B) (default: d_model/h)"
    )
    residual: bool = option(
        True, help="the residual connection around every sub-layer (§3.1); --no-residual leaves it out"
    )
    layer_norm: bool = option(
        True, help="the LayerNorm of every Add&Norm (§3.1); --no-layer-norm leaves x + Sublayer(x)"
    )
    attention_scaling: bool = option(
        True, help="divide the attention scores by sqrt(d_k) (§3.2.1); --no-attention-scaling: softmax(Q K^T) V"
    )
    positional_encoding: bool = option(
        True, help="add the positional encoding (§3.5); --no-positional-encoding: the embeddings alone"
    )
    decoder_mask: bool = option(
        True, help="hide the future from the decoder's self-attention (§3.2.3); --no-decoder-mask lets it see them"
    )
    feed_forward: bool = option(
        True, help="the position-wise feed-forward sub-layer (§3.3); --no-feed-forward leaves it out"
    )
    ffn_activation: bool = option(
        True, help="the ReLU of the feed-forward network (§3.3); --no-ffn-activation makes the network linear"
    )

    def changed(self) -> dict:
        """The switches given, by their configuration field's name, with their values: what a new model differs in."""
        return {
            item.name: getattr(self, item.name)
            for item in dataclasses.fields(self)
            if getattr(self, item.name) != STUDY_SWITCHES[item.name]
        }


def check_switches(switches: SwitchArguments, init_from: str | None) -> None:
    """A study switch builds a new model: it cannot change the one --init-from loads."""
    changed = switches.changed()
    if changed and init_from:
        flags = ", ".join(option_flag(name, value) for name, value in changed.items())
        raise ArgumentsError(f"{flags}: the study switches build a new model; --init-from loads one as it was saved")


__all__ = ["SwitchArguments", "check_switches"]
