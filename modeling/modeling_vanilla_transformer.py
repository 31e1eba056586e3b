"""The Transformer of Vaswani et al. (2017), "Attention Is All You Need", as a Hugging Face model.

The file reads top to bottom like Figure 1 of the paper:

    inputs -> embedding * sqrt(d_model) + positional encoding (§3.4, §3.5)
           -> N x [multi-head self-attention, Add&Norm, feed-forward, Add&Norm]             (encoder, §3.1)
    outputs (shifted right) -> embedding * sqrt(d_model) + positional encoding
           -> N x [masked multi-head self-attention, Add&Norm,
                   multi-head attention over the encoder output, Add&Norm,
                   feed-forward, Add&Norm]                                                    (decoder, §3.1)
           -> linear -> softmax over the vocabulary                                          (§3.4)

Symbols follow the paper: d_model, h (`num_heads`), d_k = d_v = d_model / h, d_ff, P_drop (`dropout`).

What is not Figure 1 lives next to this file: the hand-written dropout and cross-entropy kernels in
kernels_vanilla_transformer.py, loading, saving and uploading (`HubMixin`) in hub_vanilla_transformer.py. As in
MarianMT, attention runs through the library's interface for the chosen implementation (SDPA, flex or flash
attention; eager attention is written out below), the masks come from `transformers.masking_utils`, and the library
records hidden states and attention weights when asked (`_can_record_outputs`).
"""

import copy
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.generation import GenerationConfig, GenerationMixin, MaxLengthCriteria, StoppingCriteriaList
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple, is_torchdynamo_compiling, logging
from transformers.utils.deprecation import deprecate_kwarg
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from ..configuration.configuration_vanilla_transformer import (
    VanillaTransformerConfig,
    position_limit,
    target_vocabulary_size,
)
from .hub_vanilla_transformer import HubMixin
from .kernels_vanilla_transformer import (
    Dropout,
    is_plain_linear,
    linear_cross_entropy,
    project_to_vocabulary,
    sdpa_attention_forward,
    sdpa_or_one_query,
    token_cross_entropy,
)

logger = logging.get_logger(__name__)

# transformers 5.24 renamed the cache argument and output field `past_key_values` to `cache`. The forwards below take
# the cache as `cache` (see `cache_argument`), and their outputs use the installed library's field name.
CACHE_FIELD = "cache" if "cache" in Seq2SeqLMOutput.__dataclass_fields__ else "past_key_values"


def cache_argument(forward: Callable) -> Callable:
    """The installed library's contract for the old name of the cache argument. Where the library has the rename,
    `past_key_values=` is deprecated as for its own models: its `deprecate_kwarg` warns and passes the cache on as
    `cache`. Before the rename `past_key_values` is the library's own name (generate() passes the cache so), taken
    silently; `cache` is accepted there too."""
    if CACHE_FIELD == "cache":
        return deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")(forward)

    @functools.wraps(forward)
    def taking_past_key_values(*args, past_key_values: Cache | None = None, **kwargs):
        if past_key_values is not None:
            if kwargs.get("cache") is not None:
                raise ValueError("Pass the cache once, as `cache` or as `past_key_values`, not both.")
            kwargs["cache"] = past_key_values
        return forward(*args, **kwargs)

    return taking_past_key_values


# ---------------------------------------------------------------------------------------------------------------------
# §3.4-3.5 Embeddings and positional encoding
# ---------------------------------------------------------------------------------------------------------------------


def sinusoids(positions: torch.Tensor, d_model: int, layout: str = "interleaved") -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)),  PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))  (§3.5), for the
    given 1-D positions: a float32 tensor (len(positions), d_model). The other layouts are those of imported models
    (`position_layout`): "halves" puts the same sines first and the cosines after them (Marian, computed in float64
    as Marian does), "fairseq" too, with frequencies 10000^(-i / (d_model/2 - 1)) (fairseq, FSMT)."""
    if layout != "interleaved":
        return sinusoid_halves(positions, d_model, layout)
    device = positions.device
    position = positions.to(torch.float32)[:, None]  # (num_positions, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32, device=device)
    inv_freq = torch.exp(two_i * (-math.log(10000.0) / d_model))  # 1 / 10000^(2i/d_model)
    table = torch.zeros(positions.shape[0], d_model, device=device)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: d_model // 2])
    return table


def sinusoid_halves(positions: torch.Tensor, d_model: int, layout: str) -> torch.Tensor:
    """[sin | cos] of positions times the frequencies of `layout`, in the arithmetic of the implementation that
    trained such models, so that their numbers are reproduced to the last bit where possible."""
    half = torch.arange(d_model // 2, device=positions.device)
    if layout == "halves":  # Marian: pos / 10000^(2i/d_model), in float64
        angles = positions.to(torch.float64)[:, None] / torch.pow(10000.0, half.to(torch.float64) * 2 / d_model)
    else:  # fairseq: pos * exp(-i log(10000) / (d_model/2 - 1)), in float32
        inv_freq = torch.exp(half.to(torch.float32) * -(math.log(10000.0) / (d_model // 2 - 1)))
        angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1).to(torch.float32)


def sinusoidal_table(num_positions: int, d_model: int) -> torch.Tensor:
    """The encoding of positions 0 .. num_positions - 1 (§3.5)."""
    return sinusoids(torch.arange(num_positions), d_model)


class SinusoidalPositionalEncoding(nn.Module):
    """The fixed encoding of §3.5, defined for every position: the paper chose it because it "may allow the model to
    extrapolate to sequence lengths longer than the ones encountered during training". Its rows are a buffer,
    recomputed rather than saved with the weights, of `num_positions` rows at first; a longer sequence grows it (at
    least doubling, so decoding step by step rarely recomputes anything). Compiled code, which cannot grow a buffer,
    computes the rows it needs from the formula instead. Row t holds the encoding of position t + `offset`
    (fairseq counts positions from padding_idx + 1), in the given `layout`."""

    def __init__(self, num_positions: int, d_model: int, layout: str = "interleaved", offset: int = 0):
        super().__init__()
        self.d_model, self.layout, self.offset = d_model, layout, offset
        self.register_buffer("pe", self.table(num_positions), persistent=False)

    def table(self, num_positions: int, start: int = 0, device=None) -> torch.Tensor:
        """Rows start .. num_positions - 1 of the encoding, computed from the formula."""
        return sinusoids(torch.arange(start, num_positions, device=device) + self.offset, self.d_model, self.layout)

    def forward(self, positions: torch.Tensor, end: int | torch.Tensor) -> torch.Tensor:
        """The encodings of `positions`, all of which are below `end`."""
        if is_torchdynamo_compiling():
            return sinusoids(positions + self.offset, self.d_model, self.layout)
        if end > self.pe.shape[0]:
            self.grow(int(end))
        return self.pe[positions]

    def grow(self, num_positions: int) -> None:
        """Append rows to the table, which keeps its first rows as they are, so that it holds at least
        `num_positions`. Grown inside `torch.inference_mode()` (as pipelines run), it stays an ordinary tensor."""
        old = self.pe.shape[0]
        with torch.inference_mode(False):
            new = self.table(max(num_positions, 2 * old), start=old, device=self.pe.device)
            self.pe = torch.cat([self.pe, new.to(self.pe.dtype)])


def without_positions(x: torch.Tensor, past_len: int | torch.Tensor) -> torch.Tensor:
    """The embeddings as they are: a study without positional encoding."""
    return x


class TransformerEmbedding(nn.Module):
    """Token embedding times sqrt(d_model) (§3.4) plus positional encoding (§3.5), then dropout P_drop (§5.4). A
    study may leave the positions out (`position_encoding="none"`)."""

    def __init__(self, config: VanillaTransformerConfig, embed_tokens: nn.Embedding):
        super().__init__()
        self.embed_tokens = embed_tokens
        self.scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        if config.position_encoding == "sinusoidal":
            offset = config.pad_token_id + 1 if config.position_layout == "fairseq" else 0  # fairseq's first position
            self.embed_positions = SinusoidalPositionalEncoding(
                config.max_position_embeddings, config.d_model, config.position_layout, offset
            )
        elif config.position_encoding == "learned":
            self.embed_positions = nn.Embedding(config.max_position_embeddings, config.d_model)
        else:
            self.embed_positions = None  # a study without positions
        self.max_positions = position_limit(config)  # learned positions only: the sinusoids have no bound
        # a study may leave the positions out: the embeddings go on as they are
        self.add_positions = without_positions if config.position_encoding == "none" else self.with_positions
        self.to_stream = identity if config.residual_in_fp32 else in_autocast_dtype  # the residual stream's dtype
        self.dropout = Dropout(config.dropout)

    def forward(
        self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None, past_len: int | torch.Tensor = 0
    ):
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids and inputs_embeds.")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        x = self.add_positions(inputs_embeds * self.scale, past_len)  # (batch, seq_len, d_model)
        return self.dropout(self.to_stream(x))

    def with_positions(self, x: torch.Tensor, past_len: int | torch.Tensor) -> torch.Tensor:
        """x plus the positional encodings of its positions, which continue the `past_len` before them."""
        return x + self.encoding(x.shape[1], past_len, x.device).to(x.dtype)

    def encoding(self, seq_len: int, past_len: int | torch.Tensor, device) -> torch.Tensor:
        """The positional encodings of positions past_len .. past_len + seq_len - 1: (seq_len, d_model)."""
        end = past_len + seq_len  # one past the last position encoded here
        positions = torch.arange(seq_len, device=device) + past_len
        if self.max_positions is None:
            return self.embed_positions(positions, end)
        if not is_torchdynamo_compiling() and end > self.max_positions:
            raise ValueError(
                f"the sequence reaches position {int(end)}, beyond max_position_embeddings={self.max_positions}, "
                "the number of learned positions; truncate the input (generate() and the translation pipeline "
                "do), or use sinusoidal positions, which have no limit."
            )
        return self.embed_positions(positions)


# ---------------------------------------------------------------------------------------------------------------------
# §3.2 Attention
# ---------------------------------------------------------------------------------------------------------------------


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention, softmax(Q K^T / sqrt(d_k)) V (§3.2.1, equation 1), written out. The mask is
    additive (`additive_mask`): -inf where a query may not look."""
    scores = torch.matmul(query, key.transpose(-1, -2)) * scaling  # (batch, h, tgt_len, src_len)
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = F.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = F.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value)  # (batch, h, tgt_len, d_v)
    return output.transpose(1, 2).contiguous(), weights  # (batch, tgt_len, h, d_v)


def attention_implementation(config: VanillaTransformerConfig, kwargs: dict) -> str:
    """The attention a forward pass runs: the configured implementation (`attn_implementation`: eager, sdpa,
    flex_attention, flash_attention_2/3 or a kernel from the Hub), or eager when the call asks for the attention
    weights, which the fused kernels do not return. The stacks build their masks for it, the attention modules run it.
    """
    return "eager" if kwargs.get("output_attentions") else config._attn_implementation


def attention_function(config: VanillaTransformerConfig, kwargs: dict) -> Callable:
    """The library's attention function for `attention_implementation`, its SDPA with a decoding step on the CPU taken
    another way (`sdpa_or_one_query`)."""
    attention = ALL_ATTENTION_FUNCTIONS.get_interface(attention_implementation(config, kwargs), eager_attention_forward)
    return sdpa_or_one_query if attention is sdpa_attention_forward else attention


def check_key_size(config: VanillaTransformerConfig, implementation: str | None) -> None:
    """Flash attention needs queries, keys and values of one size: a smaller d_k (`config.d_k`, Table 3 row B) is
    refused there, when the model is built or loaded with it or switched to it."""
    if config.d_k is not None and "flash" in (implementation or ""):
        raise ValueError(
            f"d_k={config.d_k} makes the queries and keys smaller than the values, which {implementation} cannot "
            "take; load the model with attn_implementation='sdpa' or 'eager'."
        )


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O with head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V) (§3.2.2).

    One module serves the three uses of §3.2.3: encoder self-attention, the decoder's masked self-attention
    (`is_causal`), and encoder-decoder attention (`is_cross_attention`: queries from the decoder, keys and values from
    the encoder output). W^Q, W^K and W^V of all heads are stacked in one (3 d_model, d_model) projection, so
    self-attention projects its input once; cross-attention projects queries and keys/values separately. A study may
    make the queries and keys smaller (`config.d_k`, Table 3 row B) or leave out the 1/sqrt(d_k). Attention
    itself is the library's interface for the implementation chosen (`attention_function`); returns the output
    and the attention weights (None from the fused kernels), which the stacks record when asked for.
    """

    def __init__(self, config: VanillaTransformerConfig, layer_idx: int = 0, is_causal=False, is_cross_attention=False):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.is_causal = is_causal and config.decoder_mask  # read by the library's SDPA: no mask, causal or not
        self.is_cross_attention = is_cross_attention
        self.num_heads = config.num_heads  # h
        self.d_v = config.d_model // config.num_heads
        self.d_k = config.d_k or self.d_v
        self.scaling = self.d_k**-0.5 if config.attention_scaling else 1.0  # 1 / sqrt(d_k)
        self.attention_dropout = config.attention_dropout
        self.sizes = [self.num_heads * self.d_k, self.num_heads * self.d_k, config.d_model]  # of Q, K and V
        self.in_proj = nn.Linear(config.d_model, sum(self.sizes), bias=config.attention_bias)  # [W^Q; W^K; W^V]
        self.out_proj = nn.Linear(config.d_model, config.d_model, bias=config.attention_bias)  # W^O
        # Q, K and V of one size (d_k = d_v, as in the paper) come out of the fused projection as one view; a smaller
        # d_k splits them part by part. The same views either way: the first only takes fewer calls, which is most of
        # a decoding step's cost at small sizes.
        self.split_qkv = self.split_equal_heads if len(set(self.sizes)) == 1 else self.split_heads

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, len, h * size) -> (batch, h, len, size): one head per slice of `size` features."""
        return x.unflatten(-1, (self.num_heads, -1)).transpose(1, 2)

    def split_heads(self, x: torch.Tensor, sizes: list[int] | None = None) -> tuple[torch.Tensor, ...]:
        """(batch, len, sum(sizes)) -> a (batch, h, len, size / h) tensor for each size: of Q, K and V (the default),
        or some."""
        return tuple(self.heads(part) for part in x.split(self.sizes if sizes is None else sizes, -1))

    def split_equal_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """`split_heads` of Q, K and V of one size, as one view: (batch, len, 3, h, size / h) -> 3 x (batch, h, len,
        size / h)."""
        return x.unflatten(-1, (len(self.sizes), self.num_heads, -1)).permute(2, 0, 3, 1, 4).unbind(0)

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: EncoderDecoderCache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        batch, tgt_len, d_model = hidden_states.shape
        if not self.is_cross_attention:
            query, key, value = self.split_qkv(self.in_proj(hidden_states))  # (batch, h, tgt_len, d_k)
            if cache is not None:  # append this step's keys/values to the previous steps'
                key, value = cache.self_attention_cache.update(key, value, self.layer_idx)
        else:
            query, key, value = self.cross_attention_inputs(hidden_states, key_value_states, cache)

        output, weights = attention_function(self.config, kwargs)(
            self,
            query,
            key,
            value,
            attention_mask,
            scaling=self.scaling,
            dropout=self.attention_dropout if self.training else 0.0,
            **kwargs,
        )
        output = output.reshape(batch, tgt_len, d_model)  # Concat(head_1, ..., head_h): h d_v = d_model
        return self.out_proj(output), weights

    def projected(self, states: torch.Tensor, rows: slice) -> torch.Tensor:
        """`states` through the rows `rows` of [W^Q; W^K; W^V] only (W^Q, or W^K and W^V): cross-attention reads
        its queries and its keys and values from two inputs. A projection that a library wrapped after the model was
        built (PEFT's LoRA adds its adapters around `in_proj`) is called whole and its output cut, so that the
        adapters count: its weight alone would leave them out."""
        if type(self.in_proj) is not nn.Linear:
            return self.in_proj(states)[..., rows]
        bias = self.in_proj.bias
        return F.linear(states, self.in_proj.weight[rows], None if bias is None else bias[rows])

    def cross_attention_inputs(
        self, hidden_states: torch.Tensor, key_value_states: torch.Tensor, cache: EncoderDecoderCache | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries from the decoder, keys and values from the encoder output, each (batch, h, len, d_k or d_v). The
        encoder output does not change while decoding: its keys/values are computed once per source and kept in the
        cache."""
        query = self.heads(self.projected(hidden_states, slice(None, self.sizes[0])))  # (batch, h, tgt_len, d_k)
        layers = cache.cross_attention_cache if cache is not None else None
        if layers is not None and cache.is_updated.get(self.layer_idx):
            return query, layers.layers[self.layer_idx].keys, layers.layers[self.layer_idx].values
        key_value = self.projected(key_value_states, slice(self.sizes[0], None))
        key, value = self.split_heads(key_value, self.sizes[1:])  # (batch, h, src_len, d_k or d_v)
        if layers is not None:
            key, value = layers.update(key, value, self.layer_idx)
            cache.is_updated[self.layer_idx] = True
        return query, key, value


# ---------------------------------------------------------------------------------------------------------------------
# §3.2.3 Masks: padding, and the decoder's future positions
# ---------------------------------------------------------------------------------------------------------------------


class MasksFor:
    """What `transformers.masking_utils` reads of a config: the attention implementation a mask is made for. The
    eager attention above takes the boolean masks made for SDPA, turned into the paper's additive ones."""

    def __init__(self, implementation: str):
        self._attn_implementation = implementation


BOOLEAN_MASKS = MasksFor("sdpa")


def additive_mask(may_attend: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """Boolean "may attend" -> the additive mask of §3.2.3: 0 where a query may see a key, -inf where it may not,
    so that masked positions get probability 0 after the softmax. A mask that is None or additive already (one the
    caller made) is returned as it is.

    A query that may see no key at all (every key is padding) would turn into NaN; it is let see every key instead.
    Such a query belongs to padding itself or to an all-padding source, and its output is never used.
    """
    if may_attend is None or may_attend.dtype != torch.bool:
        return may_attend
    may_attend = may_attend | ~may_attend.any(dim=-1, keepdim=True)
    return torch.zeros(may_attend.shape, dtype=dtype, device=may_attend.device).masked_fill(~may_attend, -math.inf)


def reads_masks(x: torch.Tensor) -> bool:
    """Whether mask building may look into a padding mask to drop it where it hides nothing (the fused kernels run
    faster unmasked): on the CPU that is free; on an accelerator it would make the host wait for the device, at every
    training and decoding step, so the mask is kept there. Nor while compiling: a value cannot decide the graph."""
    return x.device.type == "cpu" and not is_torchdynamo_compiling()


def hides_nothing(attention_mask: torch.Tensor | None, x: torch.Tensor) -> bool:
    """No padding mask, or a 2-D one that hides no key, where reading it is free (`reads_masks`). SDPA and eager
    attention then need no mask, which is what masking_utils gives them too: checked first, it spares building a mask
    at every decoding step."""
    return attention_mask is None or (attention_mask.dim() == 2 and reads_masks(x) and bool(attention_mask.all()))


def source_mask(
    config: VanillaTransformerConfig,
    implementation: str,
    x: torch.Tensor,
    attention_mask: torch.Tensor | None,
    encoder_hidden_states: torch.Tensor | None = None,
):
    """Source padding hidden from every query: for encoder self-attention (queries and keys `x`), or for the decoder's
    attention over the encoder output (queries `x`, keys `encoder_hidden_states`). The library's mask for the
    implementation: (batch, 1, tgt_len, src_len) for eager and SDPA, a block mask for flex attention, the 2-D mask
    for flash attention; None where nothing needs hiding."""
    if implementation in ("sdpa", "eager") and hides_nothing(attention_mask, x):
        return None
    eager = implementation == "eager"
    mask = create_bidirectional_mask(
        BOOLEAN_MASKS if eager else config,
        x,
        attention_mask,
        encoder_hidden_states=encoder_hidden_states,
        allow_is_bidirectional_skip=attention_mask is None or reads_masks(x),
    )
    return additive_mask(mask, x.dtype) if eager else mask


def unmasked_target_mask(
    config: VanillaTransformerConfig,
    implementation: str,
    x: torch.Tensor,
    attention_mask: torch.Tensor | None,
    cache: Cache | None,
):
    """A study's decoder without the mask of §3.2.3 (`config.decoder_mask=False`): it hides padding only, as in the
    encoder, and takes no fixed-size cache, whose empty slots it would not hide."""
    if cache is not None and cache.is_compileable:
        raise ValueError("a decoder without its mask (decoder_mask=False) takes no fixed-size (static) cache")
    return source_mask(config, implementation, x, attention_mask)


def target_mask(
    config: VanillaTransformerConfig,
    implementation: str,
    x: torch.Tensor,
    attention_mask: torch.Tensor | None,
    cache: Cache | None,
):
    """Decoder self-attention (§3.2.3): the query at position i may see the keys at positions <= i, and no padding.
    With a cache the queries continue its positions, and with a fixed-size (static) one its slots beyond the current
    position are hidden the same way. None where the kernel applies causality itself (SDPA's `is_causal`, flash
    attention) or where one new query may see every key."""
    one_step = x.shape[1] == 1 and cache is not None and not cache.is_compileable  # after the cached positions
    if implementation in ("sdpa", "eager") and one_step and hides_nothing(attention_mask, x):
        return None
    eager = implementation == "eager"
    mask = create_causal_mask(
        BOOLEAN_MASKS if eager else config,
        x,
        attention_mask,
        cache,  # the library's fourth argument, named `past_key_values` before transformers 5.24 and `cache` since
        allow_is_causal_skip=not eager and (attention_mask is None or reads_masks(x)),
    )
    return additive_mask(mask, x.dtype) if eager else mask


# ---------------------------------------------------------------------------------------------------------------------
# §3.3 Position-wise feed-forward network
# ---------------------------------------------------------------------------------------------------------------------


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, applied to each position separately (§3.3); `config.activation` may
    replace the ReLU max(0, .) with GELU or SiLU, and a study may leave it out (`activation="linear"`, the identity)."""

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__()
        self.w_1 = nn.Linear(config.d_model, config.d_ff)
        self.activation = ACT2FN[config.activation]
        self.dropout = Dropout(config.activation_dropout)
        self.w_2 = nn.Linear(config.d_ff, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(self.dropout(self.activation(self.w_1(x))))  # (batch, len, d_ff) inside


# ---------------------------------------------------------------------------------------------------------------------
# §3.1 and §5.4 Add&Norm: the residual connection around each sub-layer
# ---------------------------------------------------------------------------------------------------------------------


def identity(x: torch.Tensor) -> torch.Tensor:
    """x: the residual connection's path around a sub-layer."""
    return x


def no_residual(x: torch.Tensor) -> float:
    """Nothing: a study without the residual connections (the x + goes)."""
    return 0.0


def in_autocast_dtype(x: torch.Tensor) -> torch.Tensor:
    """x in autocast's dtype where autocast is on for its device, as it is otherwise."""
    device = x.device.type
    return x.to(torch.get_autocast_dtype(device)) if torch.is_autocast_enabled(device) else x


class StreamLayerNorm(nn.LayerNorm):
    """LayerNorm (computed in float32 under autocast, as always) whose output is in autocast's dtype: the LayerNorm
    of `residual_in_fp32=False`, which carries the residual stream in that dtype."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return in_autocast_dtype(super().forward(x))


def layer_norm(config: VanillaTransformerConfig) -> nn.LayerNorm:
    """An Add&Norm's LayerNorm, or a pre-norm stack's last: its output in float32 under autocast, or in autocast's
    dtype (`config.residual_in_fp32`)."""
    kind = nn.LayerNorm if config.residual_in_fp32 else StreamLayerNorm
    return kind(config.d_model, eps=config.layer_norm_eps)


class AddNorm(nn.Module):
    """The residual connection around each sub-layer (§3.1) with dropout on the sub-layer output (§5.4), and its
    LayerNorm. `AddNorm(config)` is the Add&Norm of `config.norm_position`: `PostNorm` (the paper's) or `PreNorm`. A
    study may take out the residual (`config.residual`) or the LayerNorm (`norm_position="none"`): both are chosen
    here, once, as the norm's position is."""

    pre_norm: bool

    def __new__(cls, config: VanillaTransformerConfig | None = None, *args, **kwargs):
        if cls is AddNorm:
            cls = PreNorm if config.norm_position == "pre" else PostNorm
        return super().__new__(cls)

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__()
        self.layer_norm = nn.Identity() if config.norm_position == "none" else layer_norm(config)
        self.dropout = Dropout(config.dropout)
        self.residual = identity if config.residual else no_residual


class PostNorm(AddNorm):
    """LayerNorm(x + Dropout(Sublayer(x))), the paper's Add&Norm."""

    pre_norm = False

    def forward(self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        return self.layer_norm(self.residual(x) + self.dropout(sublayer(x)))


class PreNorm(AddNorm):
    """x + Dropout(Sublayer(LayerNorm(x))): pre-norm, an option (the stacks then end in a LayerNorm)."""

    pre_norm = True

    def forward(self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        return self.residual(x) + self.dropout(sublayer(self.layer_norm(x)))


class NoSublayer(nn.Module):
    """In place of an Add&Norm and its sub-layer where a study leaves the sub-layer out: x passes as it is."""

    def forward(self, x: torch.Tensor, sublayer: None) -> torch.Tensor:
        return x


# ---------------------------------------------------------------------------------------------------------------------
# §3.1 Encoder and decoder layers
# ---------------------------------------------------------------------------------------------------------------------


def feed_forward_sublayer(config: VanillaTransformerConfig) -> tuple[nn.Module | None, nn.Module]:
    """A layer's feed-forward network and its Add&Norm; a study may leave both out (`config.feed_forward`)."""
    if not config.feed_forward:
        return None, NoSublayer()
    return PositionwiseFeedForward(config), AddNorm(config)


class EncoderLayer(GradientCheckpointingLayer):
    """Multi-head self-attention, then a position-wise feed-forward network, each wrapped in Add&Norm."""

    def __init__(self, config: VanillaTransformerConfig, layer_idx: int):
        super().__init__()
        self.self_attn = MultiHeadAttention(config, layer_idx)
        self.self_attn_norm = AddNorm(config)
        self.ffn, self.ffn_norm = feed_forward_sublayer(config)

    def forward(self, x: torch.Tensor, mask, **kwargs: Unpack[TransformersKwargs]) -> torch.Tensor:
        x = self.self_attn_norm(x, lambda x: self.self_attn(x, attention_mask=mask, **kwargs)[0])
        return self.ffn_norm(x, self.ffn)  # (batch, src_len, d_model)


class DecoderLayer(GradientCheckpointingLayer):
    """Masked self-attention, attention over the encoder output, then feed-forward, each wrapped in Add&Norm."""

    def __init__(self, config: VanillaTransformerConfig, layer_idx: int):
        super().__init__()
        self.self_attn = MultiHeadAttention(config, layer_idx, is_causal=True)
        self.self_attn_norm = AddNorm(config)
        self.cross_attn = MultiHeadAttention(config, layer_idx, is_cross_attention=True)
        self.cross_attn_norm = AddNorm(config)
        self.ffn, self.ffn_norm = feed_forward_sublayer(config)

    def forward(
        self,
        x: torch.Tensor,
        self_attn_mask,
        encoder_hidden_states: torch.Tensor,
        cross_attn_mask=None,
        cache: EncoderDecoderCache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        x = self.self_attn_norm(x, lambda x: self.self_attn(x, None, self_attn_mask, cache, **kwargs)[0])
        x = self.cross_attn_norm(
            x, lambda x: self.cross_attn(x, encoder_hidden_states, cross_attn_mask, cache, **kwargs)[0]
        )
        return self.ffn_norm(x, self.ffn)  # (batch, tgt_len, d_model)


# ---------------------------------------------------------------------------------------------------------------------
# The Hugging Face model classes
# ---------------------------------------------------------------------------------------------------------------------


class VanillaTransformerPreTrainedModel(HubMixin, PreTrainedModel):
    """The base of the model classes, the encoder and decoder stacks included (as in MarianMTModel, so that each
    records its attention weights and hidden states the library's way): the configuration, what the library may do
    with them, and the initialisation; loading, saving and uploading come from `HubMixin` (hub_vanilla_transformer.py).
    """

    config: VanillaTransformerConfig
    config_class = VanillaTransformerConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    # every attention implementation the library offers, as for MarianMTModel (`attention_implementation`)
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _can_compile_fullgraph = True  # no graph breaks: the input checks that read token ids are skipped while compiling
    _no_split_modules = ["EncoderLayer", "DecoderLayer"]

    def __init__(self, config: VanillaTransformerConfig, *inputs, **kwargs):
        config.validate_fields()  # a field changed since the configuration was made (`config.num_heads = 3`)
        super().__init__(config, *inputs, **kwargs)

    def _check_and_adjust_attn_implementation(self, attn_implementation: str | None, *args, **kwargs) -> str:
        """The library's check of the attention implementation, when the model is built or loaded with one or switched
        to one (`set_attn_implementation`), and this model's own: a smaller d_k is refused by flash attention."""
        check_key_size(self.config, attn_implementation)
        return super()._check_and_adjust_attn_implementation(attn_implementation, *args, **kwargs)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        """Xavier-uniform linear layers, N(0, d_model^-0.5) embeddings with a zero padding row, unit LayerNorms and
        the sinusoidal table. The paper does not state its initialisation; this is tensor2tensor's and fairseq's."""
        std = self.config.init_std or self.config.d_model**-0.5
        if isinstance(module, nn.Linear):
            init.xavier_uniform_(module.weight)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, SinusoidalPositionalEncoding):
            init.copy_(module.pe, module.table(module.pe.shape[0], device=module.pe.device))


# ---------------------------------------------------------------------------------------------------------------------
# §3.1 The encoder and decoder stacks
# ---------------------------------------------------------------------------------------------------------------------


def check_inputs(ids: torch.Tensor | None, mask: torch.Tensor | None, config: VanillaTransformerConfig, name: str):
    """Turn the usual deep failures of bad inputs (an index error inside an embedding, a broadcast error inside
    attention) into a `ValueError` that names the argument and what was expected. Token ids are read only on the
    CPU: on an accelerator reading them would make the host wait for the device at every step; there the ids come
    from a tokenizer checked against the model (`check_tokenizer_matches`) or from data checked on the CPU."""
    vocab_size = config.vocab_size if name == "input_ids" else target_vocabulary_size(config)  # decoder: the target's
    if ids is not None and ids.device.type == "cpu" and not is_torchdynamo_compiling() and ids.numel() > 0:
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= vocab_size:
            bad = low if low < 0 else high
            raise ValueError(f"{name} holds token id {bad}, outside the vocabulary [0, {vocab_size}).")
    if ids is not None and mask is not None and mask.shape[0] != ids.shape[0]:
        raise ValueError(
            f"the attention mask for {name} has batch size {mask.shape[0]}, but {name} has batch size {ids.shape[0]}."
        )


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """The decoder input is the output shifted right by one position (§3.1): [start, y_1, ..., y_{n-1}]."""
    shifted = labels.new_full(labels.shape, pad_token_id)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)  # -100 marks ignored label positions


class Stack(VanillaTransformerPreTrainedModel):
    """What the encoder and decoder stacks share (§3.1): the embedding of their input, N identical layers and, with
    pre-norm, a final LayerNorm (post-norm layers end in one already). Asked for (`output_attentions`,
    `output_hidden_states`), the library records each layer's attention weights and its input and output, as
    `_can_record_outputs` says."""

    def __init__(self, config: VanillaTransformerConfig, embed_tokens: nn.Embedding, layer: type, num_layers: int):
        super().__init__(config)
        self.embed = TransformerEmbedding(config, embed_tokens)
        self.layers = nn.ModuleList([layer(config, i) for i in range(num_layers)])
        pre_norm = config.norm_position == "pre"
        self.final_norm = layer_norm(config) if pre_norm else None
        self.post_init()

    def init_weights(self):
        """Nothing here: the model that holds the stack initialises it with all its other weights, in the order of
        its modules (`initialize_weights` reaches into the stacks), so that a seed gives the same weights whether or
        not the stacks are models of their own."""

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding):
        self.embed.embed_tokens = value

    def run_layers(self, x: torch.Tensor, *layer_inputs, **kwargs: Unpack[TransformersKwargs]) -> torch.Tensor:
        """x (batch, len, d_model) through the N layers, each also given `layer_inputs` (masks, encoder output, cache),
        then the final LayerNorm of pre-norm."""
        for layer in self.layers:
            x = layer(x, *layer_inputs, **kwargs)
        return self.final_norm(x) if self.final_norm is not None else x


class Encoder(Stack):
    """A stack of N identical encoder layers over the embedded source (§3.1, left half of Figure 1)."""

    _can_record_outputs = {"hidden_states": EncoderLayer, "attentions": MultiHeadAttention}

    def __init__(self, config: VanillaTransformerConfig, embed_tokens: nn.Embedding | None = None):
        """`embed_tokens`: the model's source embedding (None: one of its own, for an encoder loaded alone)."""
        if embed_tokens is None:
            embed_tokens = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        super().__init__(config, embed_tokens, EncoderLayer, config.encoder_layers)

    @capture_outputs
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutput:
        check_inputs(input_ids, attention_mask, self.config, "input_ids")
        x = self.embed(input_ids, inputs_embeds)  # (batch, src_len, d_model)
        implementation = attention_implementation(self.config, kwargs)
        mask = source_mask(self.config, implementation, x, attention_mask)  # built once for all layers
        return BaseModelOutput(last_hidden_state=self.run_layers(x, mask, **kwargs))


class Decoder(Stack):
    """A stack of N identical decoder layers over the embedded, shifted-right outputs (§3.1, right half of Figure 1)."""

    _can_record_outputs = {
        "hidden_states": DecoderLayer,
        "attentions": OutputRecorder(MultiHeadAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(MultiHeadAttention, index=1, layer_name="cross_attn"),
    }

    def __init__(self, config: VanillaTransformerConfig, embed_tokens: nn.Embedding | None = None):
        """`embed_tokens`: the model's target embedding (None: one of its own, for a decoder loaded alone)."""
        if embed_tokens is None:
            embed_tokens = nn.Embedding(target_vocabulary_size(config), config.d_model, config.pad_token_id)
        super().__init__(config, embed_tokens, DecoderLayer, config.decoder_layers)
        # §3.2.3's mask over the future positions, or a study's decoder without it
        self.self_attn_mask = target_mask if config.decoder_mask else unmasked_target_mask
        self.gradient_checkpointing = False  # set by gradient_checkpointing_enable(): training then keeps no cache

    @capture_outputs
    @cache_argument
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        if encoder_hidden_states is None:
            raise ValueError("The decoder attends to the encoder output: pass encoder_hidden_states.")
        check_inputs(input_ids, attention_mask, self.config, "decoder_input_ids")
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if use_cache and self.gradient_checkpointing and self.training and torch.is_grad_enabled():
            # checkpointed layers drop the cache, which would come back empty and start the next call at position 0
            logger.warning_once("`use_cache=True` is incompatible with gradient checkpointing: `use_cache=False`.")
            use_cache = False
        if use_cache and cache is None:
            cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        elif cache is not None and not isinstance(cache, EncoderDecoderCache):
            cache = EncoderDecoderCache(cache, DynamicCache())
        # positions already decoded: an int for a growing cache, a 0-d tensor for a fixed-size (static) one
        past_len = cache.get_seq_length() if cache is not None else 0

        x = self.embed(input_ids, inputs_embeds, past_len)  # (batch, tgt_len, d_model)
        # masks, built once for all layers: causal + target padding, and source padding for cross-attention
        implementation = attention_implementation(self.config, kwargs)
        self_cache = cache.self_attention_cache if cache is not None else None
        self_attn_mask = self.self_attn_mask(self.config, implementation, x, attention_mask, self_cache)
        cross_attn_mask = source_mask(self.config, implementation, x, encoder_attention_mask, encoder_hidden_states)

        x = self.run_layers(x, self_attn_mask, encoder_hidden_states, cross_attn_mask, cache=cache, **kwargs)
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=x, **{CACHE_FIELD: cache if use_cache else None}
        )


# ---------------------------------------------------------------------------------------------------------------------
# The encoder-decoder
# ---------------------------------------------------------------------------------------------------------------------


class VanillaTransformerModel(VanillaTransformerPreTrainedModel):
    """The encoder-decoder without the output projection; returns the decoder's last hidden states."""

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        if config.share_embeddings:  # §3.4: one embedding matrix for source and target
            self.shared = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
            self._tied_weights_keys = {
                "encoder.embed.embed_tokens.weight": "shared.weight",
                "decoder.embed.embed_tokens.weight": "shared.weight",
            }
            # The encoder and decoder hold their own embedding modules whose weights the library ties to
            # `shared.weight` (post_init, and from_pretrained after loading), as in MarianModel: sharing the module
            # itself would hide a `shared.weight` absent from a checkpoint from the missing keys. Until then they are
            # placeholders on the meta device, which neither take memory nor draw from the random generator (unless
            # tie_word_embeddings was switched off against share_embeddings: then nothing is tied, as in Marian).
            device = "meta" if config.tie_word_embeddings else None
            source_embedding = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id, device=device)
            target_embedding = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id, device=device)
        else:  # with a separate target vocabulary (target_vocab_size) where the model has one
            source_embedding = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
            target_embedding = nn.Embedding(target_vocabulary_size(config), config.d_model, config.pad_token_id)
        self.encoder = Encoder(config, source_embedding)
        self.decoder = Decoder(config, target_embedding)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Embedding):
        if self.config.share_embeddings:
            self.shared = value
            self.decoder.set_input_embeddings(value)
        self.encoder.set_input_embeddings(value)

    def get_encoder(self, modality: str | None = None) -> Encoder:
        """The text encoder; for another modality (image, audio), the library's answer: the model has none."""
        return self.encoder if modality is None else super().get_encoder(modality)

    def get_decoder(self) -> Decoder:
        return self.decoder

    @can_return_tuple
    @cache_argument
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqModelOutput:
        if encoder_outputs is None:
            encoder_outputs = self.encoder(input_ids, attention_mask, inputs_embeds, **kwargs)
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(*encoder_outputs)
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            raise ValueError(
                "Pass decoder_input_ids (the target shifted right) or, to "
                "VanillaTransformerForConditionalGeneration, labels from which they are built."
            )
        decoder_outputs = self.decoder(
            decoder_input_ids,
            decoder_attention_mask,
            encoder_outputs.last_hidden_state,
            attention_mask,
            cache,
            decoder_inputs_embeds,
            use_cache,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            **{CACHE_FIELD: getattr(decoder_outputs, CACHE_FIELD)},
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


# ---------------------------------------------------------------------------------------------------------------------
# §3.4 The final linear layer and softmax: the full model of Figure 1
# ---------------------------------------------------------------------------------------------------------------------


def items_in_batch(kwargs: dict):
    """The Trainer's `num_items_in_batch` (the target tokens of the whole accumulated batch), taken out of the
    loss's keyword arguments; `label_smoothing`, the name `smoothing` had before, refused rather than ignored."""
    if "label_smoothing" in kwargs:
        raise TypeError("forward() takes the label smoothing epsilon as `smoothing`, not `label_smoothing`")
    return kwargs.pop("num_items_in_batch", None)


def target_tokens(labels: torch.Tensor, num_items_in_batch=None):
    """The target tokens a loss is the mean over: the batch's (labels not -100), or with gradient accumulation the
    whole accumulated batch's (`num_items_in_batch`); at least 1, so that a batch of none (every label -100) has loss
    0 and no gradient: 0 / 0 would make every weight NaN."""
    tokens = num_items_in_batch if num_items_in_batch is not None else (labels != -100).sum()
    return tokens.clamp(min=1) if isinstance(tokens, torch.Tensor) else max(tokens, 1)


@dataclass
class VanillaTransformerLMOutput(Seq2SeqLMOutput):
    r"""Seq2SeqLMOutput, and beside a label-smoothed `loss` the plain cross-entropy it smooths.

    nll_loss (`torch.FloatTensor` of shape `()`, *optional*, returned with `labels` and label smoothing):
        The mean token cross-entropy, normalised as `loss` is. Without smoothing it is `loss` itself and None, so
        that the output's tuple is Seq2SeqLMOutput's.
    """

    nll_loss: torch.FloatTensor | None = None


class VanillaTransformerForConditionalGeneration(VanillaTransformerPreTrainedModel, GenerationMixin):
    """The full model of Figure 1: the encoder-decoder followed by the linear projection onto the vocabulary; the
    softmax of §3.4 is applied by the loss and by generation to the returned logits."""

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        self.model = VanillaTransformerModel(config)
        # the bias exists for imported models only (Marian's final_logits_bias): the paper's projection has none
        self.lm_head = nn.Linear(config.d_model, target_vocabulary_size(config), bias=config.output_bias)
        if config.share_embeddings:  # §3.4: the pre-softmax projection shares the embedding matrix
            self._tied_weights_keys = {"lm_head.weight": "model.shared.weight"}
        elif config.share_decoder_embeddings:  # only the target embedding (separate vocabularies)
            self._tied_weights_keys = {"lm_head.weight": "model.decoder.embed.embed_tokens.weight"}
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear):
        self.lm_head = value

    def get_encoder(self, modality: str | None = None) -> Encoder:
        return self.model.get_encoder(modality) if modality is None else super().get_encoder(modality)

    def get_decoder(self) -> Decoder:
        return self.model.decoder

    def resize_token_embeddings(self, new_num_tokens=None, pad_to_multiple_of=None, mean_resizing=True):
        if target_vocabulary_size(self.config) != self.config.vocab_size:
            raise ValueError(
                f"resize_token_embeddings: the model has a separate target vocabulary (target_vocab_size="
                f"{self.config.target_vocab_size}, vocab_size={self.config.vocab_size}); resize the embeddings "
                "yourself."
            )
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        if not self.config.share_embeddings:  # the separate target embedding follows the source vocabulary
            target = self.model.decoder.get_input_embeddings()
            self.model.decoder.set_input_embeddings(
                self._get_resized_embeddings(target, embeddings.num_embeddings, mean_resizing=mean_resizing)
            )
        return embeddings

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    def create_masks_for_generate(self, attention_mask: torch.Tensor | None = None, **kwargs) -> torch.Tensor | None:
        """With a fixed-size (static) cache, generate() asks the model for a ready-made 4-D decoder mask. This decoder
        builds its masks itself, in one place (`target_mask`), from the 2-D padding mask and the cache, so the 2-D
        mask is passed on unchanged."""
        return attention_mask

    def generate(self, inputs: torch.Tensor | None = None, generation_config: GenerationConfig | None = None, **kwargs):
        """The library's generate(), kept within the table of learned positions (`position_encoding="learned"`): a
        source longer than max_position_embeddings tokens is cut to that many, with a warning naming its batch rows,
        and the output stops where the decoder's positions end, so that no search fails halfway. With the sinusoids
        of §3.5 there is no limit, and nothing changes.

        A decoder without its mask (`config.decoder_mask=False`, a study's switch) decodes without a cache: at every
        step it reads the whole prefix again, each position seeing all the others, as it did in training.

        A `max_length` given to the call (without `max_new_tokens` or a `generation_config`) bounds the output, as
        it does for a model whose generation config holds `max_length` (Seq2SeqTrainer's `generation_max_length` is
        passed so): the library would let the folder's own `max_new_tokens` take precedence over it."""
        if not self.config.decoder_mask:
            kwargs["use_cache"] = False
        if generation_config is None and kwargs.get("max_length") is not None and kwargs.get("max_new_tokens") is None:
            kwargs["max_new_tokens"] = None
        limit = position_limit(self.config)
        if limit is None:
            return super().generate(inputs, generation_config, **kwargs)
        inputs, kwargs = self._source_within_positions(inputs, kwargs, limit)
        resolved, _ = self._prepare_generation_config(generation_config, **kwargs)
        prefix = kwargs["decoder_input_ids"].shape[1] if kwargs.get("decoder_input_ids") is not None else 1
        wanted = resolved.max_length if resolved.max_new_tokens is None else prefix + resolved.max_new_tokens
        if wanted > limit + 1:  # the decoder reads all but the last token, at positions 0 .. limit - 1
            logger.warning_once(
                f"generate(): the output stops after {limit + 1 - prefix} new tokens, where the "
                f"model's max_position_embeddings={limit} learned positions end."
            )
            if generation_config is not None and not {"max_new_tokens", "max_length"} & kwargs.keys():
                # a count, as None there would be filled in from the model's own generation config
                generation_config = copy.deepcopy(generation_config)
                generation_config.update(max_new_tokens=limit + 1 - prefix, max_length=None)
            else:
                kwargs.update(max_new_tokens=None, max_length=limit + 1)
        return super().generate(inputs, generation_config, **kwargs)

    def _get_stopping_criteria(self, *args, **kwargs) -> StoppingCriteriaList:
        """The library's criteria, without its reminder that generation went past max_position_embeddings where the
        sinusoids of §3.5 make that no limit."""
        criteria = super()._get_stopping_criteria(*args, **kwargs)
        if position_limit(self.config) is None:
            for criterion in criteria:
                if isinstance(criterion, MaxLengthCriteria):
                    criterion.max_position_embeddings = None
        return criteria

    @staticmethod
    def _source_within_positions(inputs: torch.Tensor | None, kwargs: dict, limit: int):
        """Cut a source longer than `limit` learned positions to its first `limit` tokens, warning about the batch rows
        that lose tokens (all rows without an attention mask; those with real tokens past the limit with one)."""
        name = next((key for key in ("input_ids", "inputs_embeds") if kwargs.get(key) is not None), None)
        source = inputs if inputs is not None else kwargs.get(name) if name else None
        if source is None or kwargs.get("encoder_outputs") is not None or source.shape[1] <= limit:
            return inputs, kwargs
        kwargs = dict(kwargs)
        mask = kwargs.get("attention_mask")
        rows = mask[:, limit:].any(dim=-1).nonzero().flatten().tolist() if mask is not None else range(len(source))
        if len(rows) > 0:
            logger.warning(
                f"generate(): the source of batch row(s) {', '.join(map(str, rows))} is longer than the "
                f"model's max_position_embeddings={limit} learned positions; truncated to {limit} tokens."
            )
        if mask is not None:
            kwargs["attention_mask"] = mask[:, :limit]
        if inputs is not None:
            return inputs[:, :limit], kwargs
        kwargs[name] = source[:, :limit]
        return inputs, kwargs

    @staticmethod
    def _reorder_cache(past_key_values: Cache, beam_idx: torch.LongTensor) -> Cache:
        """Beam search keeps, at each step, the best continuations of each source; the decoder's self-attention
        keys/values follow the beams they came from. The cross-attention keys/values are not reordered: every beam of
        a source holds the same rows (one encoder output, expanded per beam), and beams never move between sources.
        """
        if isinstance(past_key_values, EncoderDecoderCache):
            past_key_values.self_attention_cache.reorder_cache(beam_idx)
        else:
            past_key_values.reorder_cache(beam_idx)
        return past_key_values

    def decoder_input_ids_for(
        self,
        labels: torch.Tensor | None,
        decoder_input_ids: torch.Tensor | None,
        decoder_inputs_embeds: torch.Tensor | None,
        skip_logits: bool,
        source: torch.Tensor | None = None,
    ) -> torch.Tensor | None:
        """The decoder's input ids: as given, or the labels shifted right; the labels checked first (against the
        decoder's inputs and the `source`'s batch, ids or embeddings, where given)."""
        if skip_logits and labels is None:
            raise ValueError("skip_logits=True needs labels: without them the logits are the output")
        if labels is None:
            return decoder_input_ids
        if labels.dim() != 2 or (decoder_input_ids is not None and decoder_input_ids.shape != labels.shape):
            given = "" if decoder_input_ids is None else f", decoder_input_ids {tuple(decoder_input_ids.shape)}"
            raise ValueError(f"labels {tuple(labels.shape)}{given}: expected (batch, target length), one per input.")
        if source is not None and source.shape[0] != labels.shape[0]:
            raise ValueError(f"labels have batch size {labels.shape[0]}, but the source has {source.shape[0]}.")
        if labels.device.type == "cpu":  # as check_inputs reads token ids: on the CPU only
            check_inputs(labels.masked_fill(labels == -100, 0), None, self.config, "labels")
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            return self.prepare_decoder_input_ids_from_labels(labels)
        return decoder_input_ids

    def logits_and_loss(
        self, hidden: torch.Tensor, labels: torch.Tensor | None, smoothing: float, skip_logits: bool
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        """The logits (batch, tgt_len, vocab_size), None with `skip_logits` where the head is a plain linear layer;
        with labels, the label-smoothed loss and the NLL, summed over the target tokens."""
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"smoothing is label smoothing's epsilon, in [0, 1); got {smoothing}")
        if skip_logits and is_plain_linear(self.lm_head):
            return None, *linear_cross_entropy(hidden, self.lm_head, labels, smoothing)
        logits = project_to_vocabulary(self.lm_head, hidden)
        if labels is None:
            return logits, None, None
        nll, uniform = token_cross_entropy(logits, labels)
        nll_sum = nll.sum()
        return logits, torch.lerp(nll_sum, uniform.sum(), smoothing), nll_sum  # (1 - eps) nll + eps uniform

    @can_return_tuple
    @cache_argument
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        skip_logits: bool = False,
        smoothing: float = 0.0,
        **kwargs: Unpack[TransformersKwargs],
    ) -> "VanillaTransformerLMOutput":
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, target_length)`, *optional*):
            Target token ids; positions set to -100 are ignored (labels all -100: loss 0, and no gradient). When
            given, `decoder_input_ids` default to the labels shifted right and the returned loss is the mean token
            cross-entropy (the training criterion, `vanilla_transformer.training`, adds label smoothing through
            `smoothing`).
        skip_logits (`bool`, *optional*, defaults to `False`):
            With `labels`: the loss without the logits, which are never made whole (`linear_cross_entropy`, a chunk
            of tokens at a time) and returned as None; the convention of Liger-Kernel and of the Trainer's
            `use_liger_kernel`. A replaced or hooked `lm_head` makes the logits as usual.
        smoothing (`float`, *optional*, defaults to 0.0):
            The loss's label smoothing epsilon (§5.4), not named `label_...`: the Trainer reads such for labels.
        """
        decoder_input_ids = self.decoder_input_ids_for(labels, decoder_input_ids, decoder_inputs_embeds, skip_logits,
                                                       inputs_embeds if input_ids is None else input_ids)  # fmt: skip
        num_items_in_batch = items_in_batch(kwargs)
        outputs = self.model(
            input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=False if labels is not None else use_cache,
            **kwargs,
        )
        logits, loss, nll_loss = self.logits_and_loss(outputs.last_hidden_state, labels, smoothing, skip_logits)
        if labels is not None:  # the mean over the target tokens
            tokens = target_tokens(labels, num_items_in_batch)
            loss, nll_loss = loss / tokens, nll_loss / tokens if smoothing else None
        return VanillaTransformerLMOutput(
            loss=loss,
            nll_loss=nll_loss,
            logits=logits,
            **{CACHE_FIELD: getattr(outputs, CACHE_FIELD)},
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )


__all__ = [
    "AddNorm",
    "Dropout",
    "Decoder",
    "DecoderLayer",
    "Encoder",
    "EncoderLayer",
    "MultiHeadAttention",
    "PositionwiseFeedForward",
    "SinusoidalPositionalEncoding",
    "VanillaTransformerForConditionalGeneration",
    "VanillaTransformerLMOutput",
    "VanillaTransformerModel",
    "VanillaTransformerPreTrainedModel",
]
