"""Word alignments from the cross-attention, as fairseq prints them with `--print-alignment`: for each target token
(the end of sentence left out), the source token (the end of sentence and padding left out) that the chosen decoder
layer's cross-attention, averaged over the chosen heads, weighs most, when the decoder reads the target shifted
right (teacher forcing: the attention that wrote each token). The token pairs are then merged into pairs of
whitespace-separated words and written in Pharaoh format, `0-0 1-2 ...` (source-target, 0-based): by the tokens'
character offsets where the tokenizer gives them (a fast tokenizer), else by the tokenizer's own word markers
(SentencePiece's "▁" starts a word, subword-nmt's "@@" continues one, "</w>" ends one), which count the words of the
text as the tokenizer splits it (Moses' tokenizer, in fairseq's and FSMT's, makes punctuation a word).

    translator = load_translator("runs/numbers-en-de")
    [alignment] = align(translator.model, translator.tokenizer, ["forty-two"], ["zweiundvierzig"])
    alignment.pharaoh()        # '0-0'

The attention is computed from the layer's own queries and keys whatever the attention backend (the fused kernels
do not return their weights), by a hook that sees the layer's input in one forward pass. The layer and the heads are
choosable (fairseq's `alignment_layer` and `alignment_heads`; by default, as there, the last layer and every head),
so that a model trained for alignment can use its supervised layer.
"""

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from ..configuration import position_limit
from ..errors import is_whole
from ..model_folder import source_tokens
from .checks import check_whole, sentences_given
from .scoring import check_pairs, pairs_given, shift_right


@dataclass(frozen=True)
class Alignment:
    token_pairs: list[tuple[int, int]]  # (source token, target token), 0-based, without the ends of sentence
    word_pairs: list[tuple[int, int]]  # the same merged into whitespace-separated words, each pair once

    def pharaoh(self) -> str:
        return " ".join(f"{source}-{target}" for source, target in self.word_pairs)


def cross_attention_probs(model, batch: dict, decoder_input_ids, layer: int, heads) -> torch.Tensor:
    """The cross-attention probabilities of decoder layer `layer`, averaged over `heads` (None: all), computed from
    its queries and keys: (batch, target length, source length)."""
    attention = model.get_decoder().layers[layer].cross_attn
    seen = {}

    def keep_inputs(module, args, kwargs):
        seen["queries"], seen["memory"] = args[0], args[1]

    hook = attention.register_forward_pre_hook(keep_inputs, with_kwargs=True)
    try:
        model(**batch, decoder_input_ids=decoder_input_ids, use_cache=False)
    finally:
        hook.remove()
    query, key, _ = attention.cross_attention_inputs(seen["queries"], seen["memory"], None)  # (batch, h, len, d_k)
    scores = (query @ key.transpose(-1, -2)) * attention.scaling  # (batch, h, tgt_len, src_len)
    scores = scores.masked_fill(~batch["attention_mask"].bool()[:, None, None, :], float("-inf"))
    probs = scores.float().softmax(-1)
    return (probs if heads is None else probs[:, list(heads)]).mean(1)


def word_indices(offsets: list[tuple[int, int]], text: str) -> list[int]:
    """Each token's whitespace-separated word in `text`, from the tokens' character offsets; -1 for a token of
    whitespace before the first word (or in a text of none)."""
    starts, word, inside = [], -1, False
    for character in text:
        if not character.isspace() and not inside:
            word += 1
        inside = not character.isspace()
        starts.append(word)
    indices = []
    for start, end in offsets:
        while start < end - 1 and text[start].isspace():  # a token may carry the space before its word ("▁dog")
            start += 1
        indices.append(starts[min(start, len(starts) - 1)] if starts else 0)
    return indices


def marker_words(tokens: list[str]) -> list[int]:
    """Each token's word, from the markers of the tokenizer's subwords: a token that starts with "▁" starts a word
    (SentencePiece); else a word ends with a token that ends with "</w>" (FSMT's BPE), or goes on after one that ends
    with "@@" (subword-nmt, fastBPE)."""
    sentencepiece = any(token.startswith("▁") for token in tokens)
    word_ends = not sentencepiece and any(token.endswith("</w>") for token in tokens)
    indices, word = [], -1
    for index, token in enumerate(tokens):
        previous = tokens[index - 1] if index else None
        if previous is None:
            starts = True
        elif sentencepiece:
            starts = token.startswith("▁")
        elif word_ends:
            starts = previous.endswith("</w>")
        else:
            starts = not previous.endswith("@@")
        word += starts
        indices.append(word)
    return indices


@torch.inference_mode()
def align(model, tokenizer, sources, targets, layer=None, heads=None, batch_size=32) -> list[Alignment]:
    """The alignment of each (source, target) pair; `layer` (default the last) and `heads` (default all) choose
    the attention that aligns."""
    sources, targets = pairs_given(sources, targets, batch_size)
    if not sources:  # the tokenizer's own call would fail on none
        return []
    offsets = {"return_offsets_mapping": True} if tokenizer.is_fast else {}
    target = tokenizer(text_target=targets, **offsets)
    words = [token_words(tokenizer, target, row, text, target=True) for row, text in enumerate(targets)]
    return aligned_in_batches(model, tokenizer, sources, target["input_ids"], words, layer, heads, batch_size)


@torch.inference_mode()
def align_tokens(model, tokenizer, sources, target_ids, layer=None, heads=None, batch_size=32) -> list[Alignment]:
    """The alignment of each source with the target tokens a search wrote (`Translation.tokens`), not its text
    encoded again (which may give other tokens): their words are those of the text they decode to."""
    sources = sentences_given(sources, "sources")  # one string would be its characters
    check_pairs(sources, target_ids)
    check_whole("batch_size", batch_size)
    eos = model.config.eos_token_id
    rows = [list(ids) if ids and ids[-1] == eos else list(ids) + [eos] for ids in target_ids]
    words = [decoded_words(tokenizer, ids) for ids in rows]
    return aligned_in_batches(model, tokenizer, sources, rows, words, layer, heads, batch_size)


def decoded_words(tokenizer, ids: list[int]) -> list[int]:
    """Each token's whitespace-separated word in the text that `ids` decode to: the words of the text up to it,
    less one (a token that decodes to nothing is in the word before it)."""
    return [max(0, len(tokenizer.decode(ids[: j + 1], skip_special_tokens=True).split()) - 1) for j in range(len(ids))]


def aligned_in_batches(model, tokenizer, sources, target_ids, target_words, layer, heads, batch_size):
    layers = len(model.get_decoder().layers)
    layer = layers - 1 if layer is None else layer
    if not is_whole(layer) or not -layers <= layer < layers:
        raise ValueError(f"layer {layer!r}: expected 0 to {layers - 1}, the decoder's layers")
    heads = heads_given(heads, model.config.num_heads)
    results = []
    for start in range(0, len(sources), batch_size):
        part = slice(start, start + batch_size)
        results += align_batch(model, tokenizer, sources[part], target_ids[part], target_words[part], layer, heads)
    return results


def heads_given(heads, num_heads: int) -> list[int] | None:
    """`heads` as a list: None (every head) or distinct head numbers of the layer's; a ValueError otherwise."""
    if heads is None:
        return None
    expected = f"None (every head) or a non-empty list of distinct heads from 0 to {num_heads - 1}"
    if isinstance(heads, (str, bytes)) or not isinstance(heads, Iterable):
        raise ValueError(f"heads {heads!r}: expected {expected}")
    heads = list(heads)
    if not heads:
        raise ValueError(f"heads []: expected {expected}")
    for head in heads:
        if not is_whole(head) or not 0 <= head < num_heads:
            raise ValueError(f"heads {heads}: head {head!r} is not one of the layer's; expected {expected}")
    if len(set(heads)) != len(heads):
        raise ValueError(f"heads {heads}: a head is given twice; expected {expected}")
    return heads


def token_alignments(model, batch: dict, labels, layer: int, heads) -> list[list[tuple[int, int]]]:
    """Each row's (source token, target token) pairs, as fairseq's hard alignment: for each target token of `labels`
    (the end of sentence and padding left out), the source token of `batch` (the same left out) that the attention
    weighs most; indices count the tokens left in. The ids of the ends are the model's."""
    decoder_input_ids = shift_right(labels, model.config.pad_token_id, model.config.decoder_start_token_id)
    probs = cross_attention_probs(model, batch, decoder_input_ids, layer, heads)
    special = {model.config.eos_token_id, model.config.pad_token_id}
    found = []
    for row, (src_ids, tgt_ids) in enumerate(zip(batch["input_ids"].tolist(), labels.tolist())):
        src_valid = [i for i, token in enumerate(src_ids) if token not in special]
        tgt_valid = [j for j, token in enumerate(tgt_ids) if token not in special]
        if not src_valid:
            found.append([])
            continue
        best = probs[row][tgt_valid][:, src_valid].argmax(-1).tolist()  # each target token's source token
        found.append(list(zip(best, range(len(tgt_valid)))))
    return found


def token_words(tokenizer, encoded, row: int, text: str, target: bool) -> list[int]:
    """Each token's whitespace-separated word: from its character offsets, or from the tokenizer's word markers."""
    if tokenizer.is_fast:
        return word_indices(encoded["offset_mapping"][row], text)
    ids = encoded["input_ids"][row]
    return marker_words(tokenizer.convert_ids_to_tokens(ids) if target else source_tokens(tokenizer, ids))


def align_batch(model, tokenizer, sources, target_ids, target_words, layer, heads) -> list[Alignment]:
    """The alignments of a batch: the sources encoded here (cut to the model's learned positions, as translating cuts
    them), the targets as token ids with each token's word."""
    offsets = {"return_offsets_mapping": True} if tokenizer.is_fast else {}
    limit = position_limit(model.config)
    source = tokenizer(list(sources), **offsets, truncation=limit is not None, max_length=limit)
    batch = tokenizer.pad({"input_ids": source["input_ids"]}, return_tensors="pt").to(model.device)
    labels = tokenizer.pad({"input_ids": list(target_ids)}, return_tensors="pt")["input_ids"].to(model.device)
    special = {model.config.eos_token_id, model.config.pad_token_id}
    alignments = []
    for row, token_pairs in enumerate(token_alignments(model, batch, labels, layer, heads)):
        src_valid = [i for i, token in enumerate(source["input_ids"][row]) if token not in special]
        tgt_valid = [j for j, token in enumerate(target_ids[row]) if token not in special]
        source_words = token_words(tokenizer, source, row, sources[row], target=False)
        merged = {(source_words[src_valid[i]], target_words[row][tgt_valid[j]]) for i, j in token_pairs}
        merged = {pair for pair in merged if min(pair) >= 0}  # a token of whitespace before any word is in none
        words = sorted(merged, key=lambda pair: (pair[1], pair[0]))  # in target order, as fairseq lists them
        alignments.append(Alignment(token_pairs, words))
    return alignments


__all__ = ["Alignment", "align", "align_tokens", "token_alignments"]
