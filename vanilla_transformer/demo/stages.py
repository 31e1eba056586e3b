"""The stages of Figure 1 for one sentence pair, with the model's own numbers, recorded by forward hooks.

    stages = trace_stages(model, tokenizer, "forty-two")   # translates, then runs the model once on the pair

The one forward pass over the source and its translation (the outputs shifted right, as in training) is watched by
forward hooks on the model's modules, which record:

- `embeddings`: for the encoder and the decoder, the token embedding times sqrt(d_model) (§3.4), the positional
  encoding (§3.5) and their sum, the input of the first layer;
- `sublayers`: for every sub-layer of every layer (encoder: self-attention, feed-forward; decoder: masked
  self-attention, cross-attention, feed-forward), the Add&Norm around it (§3.1): its input x, the sub-layer's output,
  the residual sum, the LayerNorm's normalised values (before its learned scale and shift) and its output;
- `active_units`: for every feed-forward network (§3.3), the activation's output, in which ReLU sets units to zero;
- the attention probabilities of every layer and head (§3.2), and the final softmax's most likely tokens per step.

It works for any model with this package's module layout, including one loaded with `trust_remote_code`.
"""

from dataclasses import dataclass, field

import torch

from ..configuration import changed_switches
from .attention_maps import attention_maps

SUBLAYERS = {  # (sub-layer attribute, its Add&Norm, the paper's name for it)
    "encoder": (("self_attn", "self_attn_norm", "self-attention"), ("ffn", "ffn_norm", "feed-forward")),
    "decoder": (
        ("self_attn", "self_attn_norm", "masked self-attention"),
        ("cross_attn", "cross_attn_norm", "cross-attention"),
        ("ffn", "ffn_norm", "feed-forward"),
    ),
}


@dataclass
class Embedding:
    """The input of a stack's first layer, each (len, d_model): token embedding x sqrt(d_model) + positions."""

    scaled_tokens: torch.Tensor
    positions: torch.Tensor
    sum: torch.Tensor


@dataclass
class Sublayer:
    """One sub-layer with its Add&Norm, each tensor (len, d_model). Post-norm (the paper):
    residual_sum = x + Sublayer(x) is what the LayerNorm normalises; pre-norm: the LayerNorm normalises x, the
    sub-layer reads its output and residual_sum = x + Sublayer(LayerNorm(x)) goes on."""

    stack: str  # "encoder" or "decoder"
    layer: int  # from 1
    name: str  # "self-attention", "masked self-attention", "cross-attention" or "feed-forward"
    pre_norm: bool
    x: torch.Tensor
    output: torch.Tensor
    residual_sum: torch.Tensor
    norm_input: torch.Tensor
    normalised: torch.Tensor  # (norm_input - mean) / sqrt(variance + eps) per position
    norm_output: torch.Tensor  # normalised x gamma + beta

    @property
    def title(self) -> str:
        return f"{self.stack} layer {self.layer}, {self.name}"


@dataclass
class Stages:
    source_tokens: list[str]
    target_tokens: list[str]  # the translation's tokens, ending with </s> unless cut
    decoder_input_tokens: list[str]  # the same shifted right: the decoder start token first
    translation: str
    activation: str  # the feed-forward activation: "relu" in the paper
    embeddings: dict[str, Embedding]  # "encoder", "decoder"
    sublayers: list[Sublayer]  # in the order the data flows: encoder layers, then decoder layers
    active_units: dict[tuple[str, int], torch.Tensor]  # (stack, layer) -> activation output (len, d_ff)
    attentions: dict[str, list[torch.Tensor]]  # "encoder_self", "decoder_self", "cross" -> per layer (h, q, k)
    logits: torch.Tensor  # (tgt_len, vocab)
    top_tokens: list[list[tuple[str, float]]] = field(default_factory=list)  # per step: (token, probability)


def stacks(model) -> dict[str, torch.nn.Module]:
    """The encoder and decoder stacks, in the order the data flows."""
    return {"encoder": model.get_encoder(), "decoder": model.get_decoder()}


def position_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and standard deviation over d_model at each position, as LayerNorm computes them (biased variance)."""
    return x.mean(dim=-1), x.var(dim=-1, unbiased=False).sqrt()


def zero_share(active: torch.Tensor) -> torch.Tensor:
    """The share of a feed-forward network's units that are exactly zero at each position: (len, d_ff) -> (len,)."""
    return (active == 0).float().mean(dim=-1)


class Recorder:
    """Forward hooks on the embeddings, every sub-layer, Add&Norm, LayerNorm and feed-forward activation of a model,
    in place while the recorder is entered; each keeps its module's last inputs and output, under a name."""

    def __init__(self, model):
        self.model, self.calls, self.handles = model, {}, []

    def __enter__(self) -> "Recorder":
        for stack_name, stack in stacks(self.model).items():
            self.watch(f"{stack_name}.embed", stack.embed)
            self.watch(f"{stack_name}.positions", stack.embed.embed_positions)
            for i, layer in enumerate(stack.layers):
                for sublayer, norm, _ in SUBLAYERS[stack_name]:
                    self.watch(f"{stack_name}.{i}.{sublayer}", getattr(layer, sublayer))
                    self.watch(f"{stack_name}.{i}.{norm}", getattr(layer, norm))
                    self.watch(f"{stack_name}.{i}.{norm}.layer_norm", getattr(layer, norm).layer_norm)
                self.watch(f"{stack_name}.{i}.activation", layer.ffn.activation)
        return self

    def __exit__(self, *exc_info) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def watch(self, name: str, module: torch.nn.Module) -> None:
        def hook(module, args, output):
            self.calls[name] = (args, output)

        self.handles.append(module.register_forward_hook(hook))

    def input(self, name: str) -> torch.Tensor:
        return self.calls[name][0][0][0].detach().float().cpu()  # the first argument, first (only) sentence

    def output(self, name: str) -> torch.Tensor:
        output = self.calls[name][1]
        output = output[0] if isinstance(output, tuple) else output  # attention returns (output, weights)
        return (output[0] if output.dim() == 3 else output).detach().float().cpu()


def embedding(recorder: Recorder, stack: str) -> Embedding:
    total, positions = recorder.output(f"{stack}.embed"), recorder.output(f"{stack}.positions")
    return Embedding(scaled_tokens=total - positions, positions=positions, sum=total)


def sublayer_record(recorder: Recorder, stack: str, i: int, layer, attribute: str, norm: str, name: str) -> Sublayer:
    add_norm = getattr(layer, norm)
    key = f"{stack}.{i}.{norm}"
    x, result = recorder.input(key), recorder.output(key)
    norm_input, norm_output = recorder.input(f"{key}.layer_norm"), recorder.output(f"{key}.layer_norm")
    mean, variance = norm_input.mean(dim=-1, keepdim=True), norm_input.var(dim=-1, unbiased=False, keepdim=True)
    return Sublayer(
        stack=stack,
        layer=i + 1,
        name=name,
        pre_norm=add_norm.pre_norm,
        x=x,
        output=recorder.output(f"{stack}.{i}.{attribute}"),
        residual_sum=result if add_norm.pre_norm else norm_input,
        norm_input=norm_input,
        normalised=(norm_input - mean) / torch.sqrt(variance + add_norm.layer_norm.eps),
        norm_output=norm_output,
    )


def top_tokens(tokenizer, logits: torch.Tensor, k: int = 5) -> list[list[tuple[str, float]]]:
    """The final softmax's k most likely tokens at each step, with their probabilities."""
    probabilities, ids = torch.softmax(logits, dim=-1).topk(min(k, logits.shape[-1]), dim=-1)
    return [
        list(zip(tokenizer.convert_ids_to_tokens(row_ids.tolist()), row_p.tolist()))
        for row_ids, row_p in zip(ids, probabilities)
    ]


@torch.no_grad()
def trace_stages(
    model, tokenizer, source: str, target: str | None = None, num_beams: int = 5, max_new_tokens: int = 64, k: int = 5
) -> Stages:
    """Translate `source` (or force-decode `target`) and record every stage of Figure 1 on the way. A model that a
    study took apart (`VanillaTransformerConfig.changed_switches`) is refused with a `ValueError`: its stages are not
    those of Figure 1."""
    changed = changed_switches(model.config)
    if changed:
        raise ValueError(f"the model changes Figure 1 ({changed}); the stages are traced for the paper's architecture")
    model.eval()
    recorder = Recorder(model)
    maps = attention_maps(model, tokenizer, source, target, num_beams, max_new_tokens, during_forward=recorder)
    layers = [(name, i, layer) for name, stack in stacks(model).items() for i, layer in enumerate(stack.layers)]
    sublayers = [
        sublayer_record(recorder, stack, i, layer, attribute, norm, name)
        for stack, i, layer in layers
        for attribute, norm, name in SUBLAYERS[stack]
    ]
    active_units = {(stack, i + 1): recorder.output(f"{stack}.{i}.activation") for stack, i, _ in layers}
    return Stages(
        source_tokens=maps["source_tokens"],
        target_tokens=maps["target_tokens"],
        decoder_input_tokens=maps["decoder_input_tokens"],
        translation=maps["translation"],
        activation=str(model.config.activation),
        embeddings={stack: embedding(recorder, stack) for stack in ("encoder", "decoder")},
        sublayers=sublayers,
        active_units=active_units,
        attentions={kind: maps[kind] for kind in ("encoder_self", "decoder_self", "cross")},
        logits=maps["logits"],
        top_tokens=top_tokens(tokenizer, maps["logits"], k),
    )
