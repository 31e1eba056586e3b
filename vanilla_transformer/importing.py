"""Import a trained model of another implementation of the same architecture, exactly, as a vanilla_transformer model:

    model, tokenizer = import_checkpoint("path/to/opus-mt-en-de", "marian", out="runs/opus-mt-en-de")
    vanilla-transformer import --from marian path/to/opus-mt-en-de --out runs/opus-mt-en-de

Three sources are read:

- "marian": a folder written by transformers' `MarianMTModel.save_pretrained` (the OPUS-MT models), or its Hub id;
- "fsmt": a folder written by `FSMTForConditionalGeneration.save_pretrained` (fairseq's WMT19 models), or its Hub id;
- "fairseq": a fairseq translation Transformer's checkpoint file (`checkpoint_best.pt`) with its `dict.*.txt` and
  BPE codes beside it (see `fairseq_checkpoint`). It is a pickle, read only with `trust_pickle=True`.

Every tensor of the source is mapped onto the model, or the import stops with an error naming it, as it does for any
setting the model cannot express. What differs between the implementations, and is carried over by configuration
fields: the layout of the sinusoids (`position_layout`), the feed-forward activation, the output bias, separate
vocabularies (`target_vocab_size`) and which embeddings share a matrix, pre-norm stacks with their final LayerNorm.
Marian and FSMT models are read through their own transformers classes (weights from safetensors unless
`trust_pickle`), so that their tied and generated tensors come out as their implementation defines them.
"""

import copy
import os

import torch

from .configuration import VanillaTransformerConfig, check_tokenizer_matches
from .errors import MissingDependencyError
from .folders import check_writable, staged_folder
from .modeling import VanillaTransformerForConditionalGeneration
from .modeling.hub_vanilla_transformer import weights_fingerprint
from .modeling.modeling_vanilla_transformer import SinusoidalPositionalEncoding

KINDS = ("marian", "fsmt", "fairseq")
MISSING_TOKENIZER_PACKAGES = (
    "importing needs the source's tokenizer packages (sentencepiece, sacremoses): pip install \"vanilla-transformer"
    '[import]"'
)


class CheckpointImportError(ValueError):
    """The source cannot be read, or holds something the model cannot express; the message names it."""


class SourceWeights:
    """The tensors of a source model by name; each taken once. What is left at the end was not understood."""

    def __init__(self, tensors: dict, where: str):
        self.tensors, self.where, self.taken = dict(tensors), where, set()

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def take(self, name: str) -> torch.Tensor:
        if name not in self.tensors:
            raise CheckpointImportError(f"{self.where}: expected a tensor named {name!r}, which it does not hold.")
        self.taken.add(name)
        return self.tensors[name].detach().to(torch.float32)

    def drop(self, *names: str) -> None:
        """Tensors that carry nothing to import (fixed tables checked otherwise, version counters)."""
        self.taken.update(name for name in names if name in self.tensors)

    def linear(self, theirs: str, ours: str) -> dict:
        """A linear layer or LayerNorm: its weight and, if it has one, its bias."""
        found = {f"{ours}.weight": self.take(f"{theirs}.weight")}
        if f"{theirs}.bias" in self.tensors:
            found[f"{ours}.bias"] = self.take(f"{theirs}.bias")
        return found

    def leftover(self) -> list[str]:
        return sorted(set(self.tensors) - self.taken)


def attention(weights: SourceWeights, theirs: str, ours: str) -> dict:
    """W^Q, W^K, W^V stacked into one projection (as the model keeps them), and W^O. Separate q/k/v projections (the
    usual layout) or an already stacked in_proj (old fairseq checkpoints) are both read."""
    if f"{theirs}.in_proj_weight" in weights:
        found = {f"{ours}.in_proj.weight": weights.take(f"{theirs}.in_proj_weight")}
        if f"{theirs}.in_proj_bias" in weights:
            found[f"{ours}.in_proj.bias"] = weights.take(f"{theirs}.in_proj_bias")
    else:
        parts = [weights.linear(f"{theirs}.{name}_proj", name) for name in "qkv"]
        found = {f"{ours}.in_proj.weight": torch.cat([part[f"{name}.weight"] for part, name in zip(parts, "qkv")])}
        if all(f"{name}.bias" in part for part, name in zip(parts, "qkv")):
            found[f"{ours}.in_proj.bias"] = torch.cat([part[f"{name}.bias"] for part, name in zip(parts, "qkv")])
    found.update(weights.linear(f"{theirs}.out_proj", f"{ours}.out_proj"))
    return found


def layers(weights: SourceWeights, theirs: str, ours: str, count: int, cross: bool) -> dict:
    """The N layers of a stack in the names shared by fairseq, FSMT and Marian (fc1, self_attn_layer_norm, ...)."""
    found = {}
    for i in range(count):
        source, target = f"{theirs}.layers.{i}", f"{ours}.layers.{i}"
        sublayers = [("self_attn", "self_attn")] + ([("encoder_attn", "cross_attn")] if cross else [])
        for their_name, our_name in sublayers:
            found.update(attention(weights, f"{source}.{their_name}", f"{target}.{our_name}"))
            found.update(weights.linear(f"{source}.{their_name}_layer_norm", f"{target}.{our_name}_norm.layer_norm"))
        found.update(weights.linear(f"{source}.fc1", f"{target}.ffn.w_1"))
        found.update(weights.linear(f"{source}.fc2", f"{target}.ffn.w_2"))
        found.update(weights.linear(f"{source}.final_layer_norm", f"{target}.ffn_norm.layer_norm"))
    return found


def sharing(source: torch.Tensor, target: torch.Tensor, output: torch.Tensor) -> dict:
    """Which of the three matrices of §3.4 the source shares, read from the matrices themselves: the configuration
    fields that say so."""
    if source.shape == target.shape and torch.equal(source, target) and torch.equal(target, output):
        return {"share_embeddings": True}
    return {"share_embeddings": False, "share_decoder_embeddings": torch.equal(target, output)}


def embeddings_and_output(source: torch.Tensor, target: torch.Tensor, output: torch.Tensor) -> dict:
    """The model's names for the source and target embeddings and the pre-softmax projection."""
    found = {
        "model.encoder.embed.embed_tokens.weight": source,
        "model.decoder.embed.embed_tokens.weight": target,
        "lm_head.weight": output,
    }
    if sharing(source, target, output)["share_embeddings"]:
        found["model.shared.weight"] = source
    return found


def check_sinusoids(weights: SourceWeights, name: str, config: VanillaTransformerConfig, rows: slice) -> None:
    """A source that saves its sinusoidal table must hold the table the model computes (`position_layout`)."""
    if name not in weights:
        return
    table = weights.take(name)[rows]
    offset = rows.start or 0  # fairseq's rows before padding_idx + 1 encode no position
    expected = SinusoidalPositionalEncoding(0, config.d_model, config.position_layout, offset).table(table.shape[0])
    if not torch.allclose(table, expected, atol=1e-5):
        raise CheckpointImportError(
            f"{weights.where}: {name} is not the sinusoidal table of position_layout={config.position_layout!r}; "
            "the model has no other fixed positions."
        )


def build_model(config: VanillaTransformerConfig, state: dict, weights: SourceWeights):
    """The model of `config` with the mapped tensors; an error names any source tensor left over, and any weight of
    the model that the source did not give."""
    leftover = weights.leftover()
    if leftover:
        raise CheckpointImportError(
            f"{weights.where}: holds tensors the model has no place for: {', '.join(leftover)}; it is not the "
            "architecture this model implements (or a variant of it the import does not know)."
        )
    model = VanillaTransformerForConditionalGeneration(config).eval()
    expected = set(model.state_dict())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise CheckpointImportError(
            f"{weights.where}: the mapped weights do not fit the model: missing {', '.join(missing) or 'none'}; "
            f"not in the model: {', '.join(unexpected) or 'none'}."
        )
    with torch.no_grad():
        model.load_state_dict(state, strict=True)
    return model


def same(config, where: str, **pairs) -> None:
    """Encoder and decoder settings that the model has once for both: each pair must agree."""
    for name, (first, second) in pairs.items():
        if getattr(config, first) != getattr(config, second):
            raise CheckpointImportError(
                f"{where}: {first}={getattr(config, first)} but {second}={getattr(config, second)}; the model has one "
                f"{name} for the encoder and the decoder."
            )


def activation(name: str, field: str, where: str) -> str:
    if name not in ("relu", "gelu", "silu", "swish"):
        raise CheckpointImportError(
            f"{where}: {field}={name!r}; the model's feed-forward activation is one of relu, gelu, silu/swish."
        )
    return name


def load_source_model(model_class, source: str, trust_pickle: bool):
    """A transformers model in its own class: from safetensors, or from a pickled file only with `trust_pickle`."""
    try:
        return model_class.from_pretrained(source, use_safetensors=None if trust_pickle else True).eval()
    except (OSError, ValueError) as error:
        hint = "" if trust_pickle else " (weights are read from safetensors only; pass --trust-pickle to read a pickle)"
        raise CheckpointImportError(f"{source}: could not load it as {model_class.__name__}: {error}{hint}") from error


def source_tokenizer(source: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(source)
    except ImportError as error:
        raise MissingDependencyError(f"{MISSING_TOKENIZER_PACKAGES} ({error})") from error
    except (OSError, ValueError, TypeError, AssertionError) as error:  # Marian's asserts its files exist
        raise CheckpointImportError(f"{source}: could not load its tokenizer: {error!r}") from error


def import_marian(source: str, trust_pickle: bool = False):
    """A MarianMTModel (OPUS-MT): post-norm, [sin | cos] positions from 0, an output bias, SiLU in OPUS-MT."""
    from transformers import MarianMTModel

    marian = load_source_model(MarianMTModel, source, trust_pickle)
    c = marian.config
    same(c, source, **{"number of heads": ("encoder_attention_heads", "decoder_attention_heads")})
    same(c, source, **{"feed-forward size": ("encoder_ffn_dim", "decoder_ffn_dim")})
    weights = SourceWeights(marian.state_dict(), source)
    config = VanillaTransformerConfig(
        **transformers_sizes(c, c.vocab_size, c.decoder_vocab_size or c.vocab_size),
        activation=activation(c.activation_function, "activation_function", source),
        position_layout="halves",
        scale_embedding=c.scale_embedding,
        output_bias=True,
        bos_token_id=c.bos_token_id,
        **sharing(*marian_matrices(weights, peek=True)),
    )
    check_sinusoids(weights, "model.encoder.embed_positions.weight", config, slice(None))
    check_sinusoids(weights, "model.decoder.embed_positions.weight", config, slice(None))
    state = embeddings_and_output(*marian_matrices(weights))
    state["lm_head.bias"] = weights.take("final_logits_bias").reshape(-1)
    state.update(layers(weights, "model.encoder", "model.encoder", c.encoder_layers, cross=False))
    state.update(layers(weights, "model.decoder", "model.decoder", c.decoder_layers, cross=True))
    return build_model(config, state, weights), source_tokenizer(source), marian.generation_config


def marian_matrices(weights: SourceWeights, peek: bool = False):
    """The source and target embeddings and the output projection of a MarianMTModel (its shared matrix included
    when the encoder and decoder share one)."""
    names = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight")
    matrices = [weights.tensors[name].detach().float() if peek else weights.take(name) for name in names]
    if not peek:
        weights.drop("model.shared.weight")
    return matrices


def transformers_sizes(c, vocab_size: int, target_vocab_size: int) -> dict:
    """The sizes, dropouts and special tokens of a transformers Marian or FSMT config, in this model's fields."""
    return dict(
        vocab_size=vocab_size,
        target_vocab_size=target_vocab_size if target_vocab_size != vocab_size else None,
        d_model=c.d_model,
        num_heads=c.encoder_attention_heads,
        d_ff=c.encoder_ffn_dim,
        encoder_layers=c.encoder_layers,
        decoder_layers=c.decoder_layers,
        dropout=c.dropout,
        attention_dropout=c.attention_dropout,
        activation_dropout=c.activation_dropout,
        max_position_embeddings=c.max_position_embeddings,
        norm_position="post",
        position_encoding="sinusoidal",
        attention_bias=True,
        pad_token_id=c.pad_token_id,
        eos_token_id=c.eos_token_id,
        decoder_start_token_id=c.decoder_start_token_id,
    )


def import_fsmt(source: str, trust_pickle: bool = False):
    """An FSMTForConditionalGeneration (fairseq's WMT19 models as transformers ports them): post-norm, fairseq's
    sinusoids from padding_idx + 1, separate source and target vocabularies, decoding from </s>."""
    from transformers import FSMTForConditionalGeneration

    fsmt = load_source_model(FSMTForConditionalGeneration, source, trust_pickle)
    c = fsmt.config
    same(c, source, **{"number of heads": ("encoder_attention_heads", "decoder_attention_heads")})
    same(c, source, **{"feed-forward size": ("encoder_ffn_dim", "decoder_ffn_dim")})
    weights = SourceWeights(fsmt.state_dict(), source)
    names = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")
    names += ("model.decoder.output_projection.weight",)
    config = VanillaTransformerConfig(
        **transformers_sizes(c, c.src_vocab_size, c.tgt_vocab_size),
        activation=activation(c.activation_function, "activation_function", source),
        position_layout="fairseq",
        scale_embedding=c.scale_embedding,
        bos_token_id=c.bos_token_id,
        **sharing(*(weights.tensors[name].detach().float() for name in names)),
    )
    rows = slice(c.pad_token_id + 1, None)  # fairseq's table starts with the rows of padding_idx and those before
    check_sinusoids(weights, "model.encoder.embed_positions.weight", config, rows)
    check_sinusoids(weights, "model.decoder.embed_positions.weight", config, rows)
    state = embeddings_and_output(*(weights.take(name) for name in names))
    state.update(layers(weights, "model.encoder", "model.encoder", c.encoder_layers, cross=False))
    state.update(layers(weights, "model.decoder", "model.decoder", c.decoder_layers, cross=True))
    return build_model(config, state, weights), source_tokenizer(source), fsmt.generation_config


def generation_settings(source_generation_config, config: VanillaTransformerConfig):
    """The source's generation defaults (beam size, lengths, forced and forbidden tokens), with the special tokens
    of the imported model."""
    from transformers import GenerationConfig

    generation_config = copy.deepcopy(source_generation_config) if source_generation_config else GenerationConfig()
    for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
        setattr(generation_config, name, getattr(config, name))
    return generation_config


IMPORTERS = {"marian": import_marian, "fsmt": import_fsmt}


def import_checkpoint(source, kind: str, out=None, trust_pickle: bool = False, overwrite: bool = False):
    """Import `source` (see the module's docstring for what each `kind` reads) as a
    `VanillaTransformerForConditionalGeneration` with its tokenizer; with `out`, also write them as a model folder
    (weights in safetensors, config.json, the tokenizer, the generation config, a model card naming the source).
    `out` must be new or empty unless `overwrite`. Returns (model, tokenizer)."""
    if kind not in KINDS:
        raise CheckpointImportError(f"kind {kind!r}: expected one of {', '.join(KINDS)}.")
    source = str(source)
    if out is not None:
        check_writable(str(out), overwrite, CheckpointImportError)
    if kind == "fairseq":
        from .fairseq_checkpoint import import_fairseq

        model, tokenizer, generation_config = import_fairseq(source, trust_pickle)
    else:
        model, tokenizer, generation_config = IMPORTERS[kind](source, trust_pickle)
    try:
        check_tokenizer_matches(model.config, tokenizer, source)
    except ValueError as error:
        raise CheckpointImportError(str(error)) from error
    model.generation_config = generation_settings(generation_config, model.config)
    model._model_card_text = import_card(model, source, kind)
    model._model_card_weights = weights_fingerprint(model)
    if out is not None:
        with staged_folder(str(out)) as staging:
            model.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
    return model, tokenizer


def import_card(model, source: str, kind: str) -> str:
    """The model card of an imported model: where its weights came from, and what it is now."""
    from huggingface_hub import ModelCard, ModelCardData

    names = {"marian": "MarianMTModel (transformers)", "fsmt": "FSMTForConditionalGeneration (transformers)"}
    names["fairseq"] = "a fairseq translation Transformer checkpoint"
    is_hub_id = not os.path.exists(source) and kind != "fairseq"
    data = ModelCardData(
        library_name="transformers",
        pipeline_tag="translation",
        tags=["translation", "vanilla-transformer", "transformer", "encoder-decoder", f"imported-from-{kind}"],
        base_model=source if is_hub_id else None,
    )
    c = model.config
    origin = f"[{source}](https://huggingface.co/{source})" if is_hub_id else f"`{os.path.basename(source) or source}`"
    text = (
        f"# {os.path.basename(os.path.normpath(source))} (imported)\n\n"
        f"The weights of {origin}, {names[kind]}, imported unchanged by `vanilla-transformer import --from {kind}` "
        'as a `transformers` model of type `vanilla_transformer` (the Transformer of "Attention Is All You Need"); '
        "it computes the source model's logits. The license and the evaluation of the source model apply; this "
        "import adds none.\n\n"
        "| d_model | h | d_ff | encoder layers | decoder layers | norm | positions | activation | vocabulary |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
        f"| {c.d_model} | {c.num_heads} | {c.d_ff} | {c.encoder_layers} | {c.decoder_layers} | {c.norm_position} "
        f"| {c.position_encoding} ({c.position_layout}) | {c.activation} | {c.vocab_size}"
        + (f" / {c.target_vocab_size}" if c.target_vocab_size else "")
        + " |\n"
    )
    return str(ModelCard(f"---\n{data.to_yaml()}\n---\n\n{text}"))


__all__ = ["import_checkpoint", "CheckpointImportError", "KINDS"]
