"""The demo's pictures of one translation's `Stages`, drawn with matplotlib as RGB arrays (height, width, 3).

Each function takes the `Stages` that `trace_stages` recorded and draws one view: the alignment, one attention map,
the embeddings, one sub-layer with its Add&Norm, the statistics of every Add&Norm, and the feed-forward networks'
zero units.
"""

import numpy as np
import torch

from .attention_maps import draw_heatmap, literal
from .stages import Stages, position_stats, zero_share

KINDS = {  # attention kind -> (title, rows, columns)
    "cross": ("Cross-attention\n(decoder queries, encoder keys)", "target_tokens", "source_tokens"),
    "encoder_self": ("Encoder self-attention", "source_tokens", "source_tokens"),
    "decoder_self": ("Decoder masked self-attention", "target_tokens", "decoder_input_tokens"),
}


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def to_image(fig) -> np.ndarray:
    fig.canvas.draw()
    image = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
    pyplot().close(fig)
    return image


def square_size(rows: int, columns: int) -> tuple[float, float]:
    return max(4.0, 0.42 * columns + 2.5), max(3.5, 0.42 * rows + 2.0)


def attention_matrix(stages: Stages, kind: str, layer: int, head: int | None) -> torch.Tensor:
    """One head's attention probabilities (queries, keys) in a layer (from 1), or the heads' mean when head is None."""
    maps = stages.attentions[kind][layer - 1]
    return maps.mean(dim=0) if head is None else maps[head - 1]


def attention_figure(stages: Stages, kind: str = "cross", layer: int | None = None, head: int | None = None):
    """One attention map with the tokens on both axes; in the decoder's self-attention, the positions the mask hides
    (the future, §3.2.3) are drawn grey."""
    layer = layer or len(stages.attentions[kind])
    title, rows, columns = KINDS[kind]
    rows, columns = getattr(stages, rows), getattr(stages, columns)
    matrix = attention_matrix(stages, kind, layer, head).clone()
    if kind == "decoder_self":
        matrix[torch.ones_like(matrix, dtype=torch.bool).triu(1)] = float("nan")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=square_size(len(rows), len(columns)), layout="constrained")
    which = "mean over heads" if head is None else f"head {head}"
    draw_heatmap(ax, matrix, rows, columns, f"{title}\nlayer {layer}, {which}")
    image = ax.images[0]
    image.set_cmap(image.get_cmap().with_extremes(bad="lightgrey"))
    return to_image(fig)


def embedding_figure(stages: Stages, stack: str = "encoder"):
    """Token embedding x sqrt(d_model), positional encoding and their sum, positions against d_model dimensions."""
    parts = stages.embeddings[stack]
    tokens = stages.source_tokens if stack == "encoder" else stages.decoder_input_tokens
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(12, max(2.8, 0.3 * len(tokens) + 1.8)), sharey=True, layout="constrained")
    panels = (
        (parts.scaled_tokens, "token embedding x sqrt(d_model) (§3.4)"),
        (parts.positions, "positional encoding (§3.5)"),
        (parts.sum, "sum: the input of layer 1"),
    )
    limit = float(max(p.abs().max() for p, _ in panels))
    for ax, (values, title) in zip(axes, panels):
        image = ax.imshow(values.numpy(), cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("dimension of d_model")
    axes[0].set_yticks(range(len(tokens)), literal(tokens), fontsize=7)
    fig.colorbar(image, ax=axes, fraction=0.02)
    fig.suptitle(f"{stack.capitalize()} input: {' '.join(literal(tokens))}", fontsize=10)
    return to_image(fig)


def sublayer_figure(stages: Stages, index: int = 0):
    """One sub-layer and its Add&Norm: x, Sublayer(x), their sum and the LayerNorm's output, with the mean and
    standard deviation of each position before and after the norm."""
    record = stages.sublayers[index]
    tokens = stages.source_tokens if record.stack == "encoder" else stages.decoder_input_tokens
    panels = (
        (record.x, "x"),
        (record.output, f"Sublayer(x): {record.name}"),
        (record.residual_sum, "x + Sublayer(x)"),
        (record.norm_output, "LayerNorm(x + Sublayer(x))"),
    )
    if record.pre_norm:
        panels = panels[:3] + ((record.norm_output, "LayerNorm(x), the sub-layer's input"),)
    plt = pyplot()
    fig, axes = plt.subplots(
        1, 5, figsize=(15, max(3.4, 0.3 * len(tokens) + 2.2)), layout="constrained", width_ratios=[1, 1, 1, 1, 1.2]
    )
    limit = float(max(p.abs().max() for p, _ in panels))
    for ax, (values, title) in zip(axes, panels):
        ax.imshow(values.numpy(), cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
        ax.set_title(title, fontsize=8)
        ax.set_yticks(range(len(tokens)), literal(tokens) if ax is axes[0] else [""] * len(tokens), fontsize=7)
    before_mean, before_std = position_stats(record.norm_input)
    after_mean, after_std = position_stats(record.normalised)
    positions = np.arange(len(tokens))
    stats = axes[4]
    stats.plot(before_std.numpy(), positions, "o-", label="std before the norm")
    stats.plot(after_std.numpy(), positions, "s-", label="std after (normalised)")
    stats.plot(before_mean.numpy(), positions, "o--", label="mean before the norm")
    stats.plot(after_mean.numpy(), positions, "s--", label="mean after (normalised)")
    stats.invert_yaxis()
    stats.set_yticks(positions, [""] * len(tokens))
    stats.set_title("each position's mean and std", fontsize=8)
    stats.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=2)
    fig.suptitle(record.title, fontsize=10)
    return to_image(fig)


def add_norm_figure(stages: Stages):
    """For every Add&Norm in data-flow order: each position's standard deviation before the LayerNorm (spread out)
    and after normalising (1), and the same for the mean (0 after)."""
    labels = [f"{r.stack[0].upper()}{r.layer} {short_name(r.name)}" for r in stages.sublayers]
    plt = pyplot()
    fig, axes = plt.subplots(2, 1, figsize=(max(6.0, 0.7 * len(labels) + 2), 5.5), sharex=True)
    for i, record in enumerate(stages.sublayers):
        for ax, stat in zip(axes, (1, 0)):
            before, after = position_stats(record.norm_input)[stat], position_stats(record.normalised)[stat]
            ax.plot(np.full(len(before), i - 0.12), before.numpy(), "o", color="tab:orange", alpha=0.6, ms=4)
            ax.plot(np.full(len(after), i + 0.12), after.numpy(), "s", color="tab:blue", alpha=0.6, ms=4)
    axes[0].set_ylabel("std per position")
    axes[1].set_ylabel("mean per position")
    axes[0].legend(["before the norm", "after normalising"], fontsize=8)
    axes[1].set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=8)
    axes[0].set_title("Add&Norm: every LayerNorm brings each position to mean 0 and std 1 (§3.1)", fontsize=10)
    fig.tight_layout()
    return to_image(fig)


def short_name(name: str) -> str:
    return {"self-attention": "attn", "masked self-attention": "masked", "cross-attention": "cross"}.get(name, "FFN")


def ffn_figure(stages: Stages):
    """The share of each feed-forward network's d_ff units that its activation sets to zero, per position."""
    plt = pyplot()
    keys = list(stages.active_units)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.0 * len(keys) + 2), 3.6))
    for i, key in enumerate(keys):
        shares = zero_share(stages.active_units[key]).numpy()
        ax.bar(i, shares.mean(), color="tab:green", alpha=0.5)
        ax.plot(np.full(len(shares), i), shares, "o", color="tab:green", ms=4)
    ax.set_xticks(range(len(keys)), [f"{stack} layer {layer}" for stack, layer in keys], fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of units at zero")
    width = next(iter(stages.active_units.values())).shape[-1]
    ax.set_title(f"Feed-forward networks ({stages.activation}, d_ff {width}): units at zero, per position", fontsize=10)
    fig.tight_layout()
    return to_image(fig)
