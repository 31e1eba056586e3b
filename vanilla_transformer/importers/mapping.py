"""What every importer shares: the error it raises, the source's tensors taken one by one (`SourceWeights`), their
mapping onto the model's names (attention, the layers of a stack, embeddings and output projection), the checks of
settings the model has once, the model built from the mapped tensors (`model_from_state`), and the loading of a
source that transformers implements (its model, its tokenizer, its sizes in this model's configuration fields)."""

import json
import os

import torch

from ..configuration import VanillaTransformerConfig
from ..errors import HeldLog, MissingDependencyError, first_few, one_line
from ..modeling import VanillaTransformerForConditionalGeneration
from ..modeling.modeling_vanilla_transformer import SinusoidalPositionalEncoding

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


def stored_rounding(table: torch.Tensor) -> float:
    """How far a table of values in [-1, 1] may be from the float32 one: a table saved in bfloat16 or float16 (each
    value exactly one of that type's) carries that type's rounding, a float32 one next to none."""
    for dtype in (torch.bfloat16, torch.float16):
        if torch.equal(table, table.to(dtype).float()):
            return torch.finfo(dtype).eps
    return 1e-5


def check_sinusoids(weights: SourceWeights, name: str, config: VanillaTransformerConfig, rows: slice) -> None:
    """A source that saves its sinusoidal table must hold the table the model computes (`position_layout`)."""
    if name not in weights:
        return
    table = weights.take(name)[rows]
    offset = rows.start or 0  # fairseq's rows before padding_idx + 1 encode no position
    expected = SinusoidalPositionalEncoding(0, config.d_model, config.position_layout, offset).table(table.shape[0])
    if not torch.allclose(table, expected, atol=stored_rounding(table)):
        raise CheckpointImportError(
            f"{weights.where}: {name} is not the sinusoidal table of position_layout={config.position_layout!r}; "
            "the model has no other fixed positions."
        )


def model_from_state(
    config: VanillaTransformerConfig, state: dict, weights: SourceWeights
) -> VanillaTransformerForConditionalGeneration:
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
        try:
            model.load_state_dict(state, strict=True)
        except RuntimeError as error:  # torch's many lines of `size mismatch for ...`: the first one
            first = next((line.strip() for line in str(error).splitlines() if "size mismatch" in line), str(error))
            raise CheckpointImportError(
                f"{weights.where}: a weight does not fit the model its settings describe: {first}"
            ) from error
    return model


def same(config, where: str, **pairs: tuple[str, str]) -> None:
    """Encoder and decoder settings that the model has once for both: each pair must agree."""
    for name, (first, second) in pairs.items():
        if getattr(config, first) != getattr(config, second):
            raise CheckpointImportError(
                f"{where}: {first}={getattr(config, first)} but {second}={getattr(config, second)}; the model has one "
                f"{name} for the encoder and the decoder."
            )


def activation(name: str, field: str, where: str) -> str:
    """The source's feed-forward activation, if the model has it."""
    if name not in ("relu", "gelu", "silu", "swish"):
        raise CheckpointImportError(
            f"{where}: {field}={name!r}; the model's feed-forward activation is one of relu, gelu, silu/swish."
        )
    return name


def load_source_model(model_class, source: str, trust_pickle: bool):
    """A transformers model in its own class: from safetensors, or from a pickled file only with `trust_pickle`."""
    from safetensors import SafetensorError

    check_token_ids(source)
    with HeldLog("transformers.modeling_utils") as report:  # the library's loading report, shown if it is whole
        try:
            model, info = model_class.from_pretrained(  # in float32: a half-precision source's values exactly, and
                source,  # a float32 one's never rounded to the precision its config names
                dtype=torch.float32,
                use_safetensors=None if trust_pickle else True,
                output_loading_info=True,
            )
        except (OSError, ValueError, TypeError, RuntimeError, SafetensorError) as error:  # cut short, other sizes
            pickle = " (weights are read from safetensors only; pass --trust-pickle to read a pickle)"
            hub_pickle = not os.path.exists(source) and "safetensors" in str(error)  # a Hub model without them
            hint = pickle if not trust_pickle and (pickled_only(source) or hub_pickle) else ""
            message = f"{source}: could not load it as {model_class.__name__}: {one_line(error)}{hint}"
            raise CheckpointImportError(message) from error
        check_loaded_whole(source, info)
        report.release()
    return model.eval()


def check_token_ids(source: str) -> None:
    """A source folder's config.json must give the padding and end-of-sentence tokens ids (whole numbers): the
    library fails on one of null deep in its loading (an `int + None`)."""
    try:
        with open(os.path.join(source, "config.json"), encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError):  # a Hub id, or a file the library names itself
        return
    for key in ("pad_token_id", "eos_token_id"):
        value = config.get(key, 0) if isinstance(config, dict) else 0
        if isinstance(value, bool) or not isinstance(value, int):
            raise CheckpointImportError(f"{source}: config.json: {key} is {json.dumps(value)}; expected a token id")


def pickled_only(source: str) -> bool:
    """Whether a source folder holds its weights as a pickle (pytorch_model.bin) and not in safetensors."""
    if not os.path.isdir(source):
        return False
    names = os.listdir(source)
    pickled = any(name.startswith("pytorch_model") for name in names)
    return pickled and not any(name.endswith(".safetensors") for name in names)


def check_loaded_whole(source: str, info: dict) -> None:
    """A `CheckpointImportError` where the source's weights and its class's do not match one for one: a weight
    missing (the class would make it up) or one more (it would be dropped). Only the sinusoidal position table,
    which the class computes, may be missing."""
    missing = [key for key in info.get("missing_keys", ()) if "embed_positions" not in key]
    for what, keys in (("lacks", missing), ("has weights its config has no place for", info.get("unexpected_keys"))):
        if keys:
            shown = first_few(sorted(keys))
            raise CheckpointImportError(f"{source}: the model {what}: {shown}; every weight must find its place")


def source_tokenizer(source: str):
    """The tokenizer saved with a transformers source model."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(source)
    except ImportError as error:
        raise MissingDependencyError(f"{MISSING_TOKENIZER_PACKAGES} ({error})") from error
    # AssertionError: Marian's, on a file it lacks; RuntimeError: sentencepiece's, on a model file cut short;
    # KeyError: Marian's, on a vocabulary without <unk>
    except (OSError, ValueError, TypeError, AssertionError, RuntimeError, KeyError) as error:
        raise CheckpointImportError(f"{source}: could not load its tokenizer: {error!r}") from error


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
