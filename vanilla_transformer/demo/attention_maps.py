"""Attention heatmaps: what each position attends to, for one sentence pair.

`vanilla-transformer attention --model FOLDER --source "..." [--target "..."] --out DIR` translates the source (or
force-decodes the given target), runs the model once with `output_attentions=True` and writes, with token labels on
both axes:

- `encoder_self_layer{i}.png`: encoder self-attention of layer i, one panel per head (rows: queries, columns: keys);
- `decoder_self_layer{i}.png`: the decoder's masked self-attention (lower-triangular: no position sees the future);
- `cross_layer{i}.png`: decoder queries over encoder keys (rows: target tokens produced, columns: source tokens);
- `alignment.png`: cross-attention of the last layer averaged over its heads, the soft alignment between the sentences.
"""

import contextlib
import os
import re

import torch

from ..errors import MISSING_MATPLOTLIB, MissingDependencyError
from ..folders import replacing
from ..inference.checks import not_unicode
from ..model_folder import source_tokens

TITLES = {  # each layer's attention of each kind, drawn in this order
    "encoder_self": "Encoder self-attention",
    "decoder_self": "Decoder masked self-attention",
    "cross": "Cross-attention (decoder queries, encoder keys)",
}
ALIGNMENT = "alignment.png"
MAX_DRAWN_TOKENS = 128  # the longest sentence drawn: a figure grows as the square of its tokens


class NotDrawable(ValueError):
    """A sentence pair whose maps cannot be drawn: `argument` names `attention_maps`' argument at fault."""

    def __init__(self, argument: str, message: str):
        super().__init__(f"{argument}: {message}")
        self.argument = argument


@torch.no_grad()
def attention_maps(
    model,
    tokenizer,
    source: str,
    target: str | None = None,
    num_beams: int = 1,
    max_new_tokens: int = 64,
    during_forward=None,
) -> dict:
    """Token labels, attention probabilities (layers x (heads, queries, keys)) and the output logits for one sentence
    pair. `during_forward`, a context manager, is entered around the one forward pass that gives them (and not
    around the generation before it): forward hooks placed there see exactly that pass."""
    for argument, text in (("source", source), ("target", target or "")):
        if problem := not_unicode(text):
            raise NotDrawable(argument, problem)
    encoded = tokenizer([source], return_tensors="pt").to(model.device)  # the figures get CPU float32 copies
    check_length("source", encoded["input_ids"].shape[1])
    if target is None:
        check_length("max_new_tokens", max_new_tokens)  # the end of sentence among them
        generated = model.generate(**encoded, num_beams=num_beams, max_new_tokens=max_new_tokens)[0]
        start, produced = generated[:1], generated[1:]  # produced: the translation, ending with </s> unless cut
    else:
        produced = forced_target(tokenizer, target).to(model.device)
        start = torch.tensor([model.config.decoder_start_token_id], device=model.device)
    produced = produced[produced != model.config.pad_token_id]
    decoder_input_ids = torch.cat([start, produced[:-1]])  # the outputs shifted right
    with during_forward or contextlib.nullcontext():
        out = model(**encoded, decoder_input_ids=decoder_input_ids[None], output_attentions=True, use_cache=False)
    return {
        "source_tokens": source_tokens(tokenizer, encoded["input_ids"][0].tolist()),
        "decoder_input_tokens": tokenizer.convert_ids_to_tokens(decoder_input_ids.tolist()),
        "target_tokens": tokenizer.convert_ids_to_tokens(produced.tolist()),
        "translation": tokenizer.decode(produced, skip_special_tokens=True),
        "encoder_self": [a[0].float().cpu() for a in out.encoder_attentions],  # each (heads, src_len, src_len)
        "decoder_self": [a[0].float().cpu() for a in out.decoder_attentions],  # each (heads, tgt_len, tgt_len)
        "cross": [a[0].float().cpu() for a in out.cross_attentions],  # each (heads, tgt_len, src_len)
        "logits": out.logits[0].float().cpu(),  # (tgt_len, vocab): the final linear layer, before the softmax
    }


def check_length(argument: str, tokens: int) -> None:
    if tokens > MAX_DRAWN_TOKENS:
        raise NotDrawable(argument, f"{tokens} tokens; the maps are drawn for at most {MAX_DRAWN_TOKENS}, since a "
                          "figure grows as the square of its tokens")  # fmt: skip


def forced_target(tokenizer, target: str) -> torch.Tensor:
    """The ids of the translation to force-decode; a `NotDrawable` naming a word the target vocabulary cannot
    spell (its maps would be those of the unknown token, not of the word) or a translation too long to draw."""
    ids = tokenizer(text_target=[target], return_tensors="pt")["input_ids"][0]
    unknown = tokenizer.unk_token_id
    if unknown is not None and unknown in ids.tolist():
        spelt = lambda word: unknown not in tokenizer(text_target=word)["input_ids"]  # noqa: E731
        words = [word for word in target.split() if not spelt(word)] or [target]
        raise NotDrawable("target", f"{words[0]!r} has a token the target vocabulary lacks ({tokenizer.unk_token})")
    check_length("target", len(ids))
    return ids


def literal(texts: list[str]) -> list[str]:
    """Tokens as matplotlib shows them as they are: each `$` escaped (two would start its math notation, and an
    unmatched brace between them fail to draw)."""
    return [text.replace("$", r"\$") for text in texts]


def draw_heatmap(ax, matrix, rows, columns, title):
    ax.imshow(matrix.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(columns)), literal(columns), rotation=90, fontsize=7)
    ax.set_yticks(range(len(rows)), literal(rows), fontsize=7)
    ax.set_title(title, fontsize=9)


def _grid(plt, maps, rows, columns, title, path):
    heads = maps.shape[0]
    width = min(heads, 4)
    height = (heads + width - 1) // width
    size = 0.28 * max(len(rows), len(columns)) + 1.5
    fig, axes = plt.subplots(height, width, figsize=(size * width, size * height), squeeze=False)
    for head, ax in enumerate(axes.flat):
        if head < heads:
            draw_heatmap(ax, maps[head], rows, columns, f"head {head + 1}")
        else:
            ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    save_png(plt, fig, path, dpi=90)


def save_png(plt, fig, path: str, dpi: int) -> None:
    with replacing(path, binary=True) as handle:  # whole, or the file that was there
        fig.savefig(handle, dpi=dpi, format="png")
    plt.close(fig)


def layer_figures(maps: dict) -> list[tuple[str, int, str]]:
    """Each layer's figure of each kind of attention: (kind, layer, file name)."""
    return [(kind, layer, f"{kind}_layer{layer + 1}.png") for kind in TITLES for layer in range(len(maps[kind]))]


def earlier_figures(maps: dict, out_dir: str) -> list[str]:
    """The figures in `out_dir` of the names `write_attention_figures` gives that `maps` does not have: another
    model's deeper layers, left from an earlier sentence."""
    kinds = "|".join(TITLES)
    ours = {os.path.basename(path) for path in figure_paths(maps, out_dir)}
    return sorted(os.path.join(out_dir, name) for name in os.listdir(out_dir)
                  if re.fullmatch(rf"({kinds})_layer\d+\.png", name) and name not in ours)  # fmt: skip


def figure_paths(maps: dict, out_dir: str) -> list[str]:
    """The PNG files `write_attention_figures` writes for `maps`, in its order."""
    return [os.path.join(out_dir, name) for _, _, name in layer_figures(maps)] + [os.path.join(out_dir, ALIGNMENT)]


def write_attention_figures(maps: dict, out_dir: str) -> list[str]:
    """One PNG per layer and attention kind (a panel per head) and the head-averaged alignment (`figure_paths`),
    each written whole over any file of its name; returns the paths."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingDependencyError(MISSING_MATPLOTLIB) from None
    os.makedirs(out_dir, exist_ok=True)
    src, dec_in, tgt = maps["source_tokens"], maps["decoder_input_tokens"], maps["target_tokens"]
    axes = {"encoder_self": (src, src), "decoder_self": (tgt, dec_in), "cross": (tgt, src)}  # (rows, columns)
    for kind, layer, name in layer_figures(maps):
        title = f"{TITLES[kind]}, layer {layer + 1}"
        _grid(plt, maps[kind][layer], *axes[kind], title, os.path.join(out_dir, name))
    alignment = maps["cross"][-1].mean(dim=0)
    size = max(4.5, 0.4 * max(len(src), len(tgt)) + 2.5)
    fig, ax = plt.subplots(figsize=(size, size))
    draw_heatmap(ax, alignment, tgt, src, "Cross-attention\n(last layer, mean over heads)")
    ax.set(xlabel="source", ylabel="translation")
    fig.tight_layout()
    save_png(plt, fig, os.path.join(out_dir, ALIGNMENT), dpi=110)
    return figure_paths(maps, out_dir)
