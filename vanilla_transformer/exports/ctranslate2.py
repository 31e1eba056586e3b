"""Export a trained model to CTranslate2, the OpenNMT inference engine (https://github.com/OpenNMT/CTranslate2).

The ctranslate2 model is built through ctranslate2's own spec API: Figure 1 maps onto its `TransformerSpec` one
weight at a time (this model type is not one of those its transformers converter knows). The folder written holds the
ctranslate2 model, the tokenizer and the model's generation defaults, so that it translates on its own:

    vanilla-transformer export --model runs/numbers-en-de --to ctranslate2 --out runs/numbers-en-de-ct2
    vanilla-transformer translate --model runs/numbers-en-de-ct2 "four hundred and two"

ctranslate2 is an optional dependency: `pip install "vanilla-transformer[fast]"`.
"""

import json
import os

import torch

from ..configuration import changed_switches, check_tokenizer_matches, target_vocabulary_size
from ..errors import is_whole
from ..folders import check_writable, staged_folder
from ..model_folder import EXPORT_INFO, load_model_folder, recorded_seed, vocabularies

QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
MISSING_CTRANSLATE2 = 'CTranslate2 export and translation need ctranslate2: pip install "vanilla-transformer[fast]"'
# written beside the ctranslate2 model: what the export came from and the positions it holds
# sinusoidal positions are defined everywhere, but a ctranslate2 model holds a table: at least this many rows
MIN_SINUSOIDAL_POSITIONS = 1024


class ExportError(ValueError):
    """The model (or the export's arguments) cannot be expressed as a ctranslate2 model; the message says why."""


def import_ctranslate2():
    """The ctranslate2 module, or an `ImportError` saying how to install it."""
    try:
        import ctranslate2
    except ImportError:
        from ..errors import MissingDependencyError

        raise MissingDependencyError(MISSING_CTRANSLATE2) from None
    return ctranslate2


def export_ctranslate2(
    model_or_folder,
    out: str,
    quantization: str | None = None,
    tokenizer=None,
    max_positions: int | None = None,
    overwrite: bool = False,
) -> str:
    """Write `model_or_folder` (a `VanillaTransformerForConditionalGeneration`, or a model folder / Hub name) as a
    ctranslate2 model folder `out`, with its tokenizer and generation config beside it, and return `out`.

    `quantization`: the weights' type in the folder (int8, int8_float32, float16, bfloat16, ...; None keeps float32).
    `tokenizer`: needed when a model object is given (a folder brings its own). `max_positions`: the rows of the
    positional table written (learned positions: their table; sinusoids: the model's table, at least 1024 rows), which
    bounds the source and output lengths. `out` must be new or empty unless `overwrite`; the folder is written in a
    temporary folder beside it and moved into place, so a failed export leaves nothing half-written."""
    ctranslate2 = import_ctranslate2()
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ExportError(f"quantization {quantization!r}: expected one of {', '.join(QUANTIZATIONS)}.")
    check_writable(out, overwrite, ExportError, reading=model_or_folder)  # before the model loads
    model, tokenizer = model_and_tokenizer(model_or_folder, tokenizer)
    rows = positions_to_write(model.config, max_positions)
    spec = transformer_spec(model, tokenizer, rows)
    spec.validate()
    spec.optimize(quantization=quantization)
    with staged_folder(out) as staging:
        spec.save(staging)
        tokenizer.save_pretrained(staging)
        model.generation_config.save_pretrained(staging)
        info = {
            "model_type": model.config.model_type,
            "quantization": quantization or "float32",
            "max_positions": rows,
            "ctranslate2_version": ctranslate2.__version__,
        }
        seed = recorded_seed(str(model_or_folder)) if isinstance(model_or_folder, (str, os.PathLike)) else None
        if seed is not None:  # the embedded task's splits: evaluate draws the model's own test split
            info["trained_with_seed"] = seed
        with open(os.path.join(staging, EXPORT_INFO), "w") as handle:
            json.dump(info, handle, indent=2)
    return out


def model_and_tokenizer(model_or_folder, tokenizer):
    """The model and its tokenizer, from a model object or a folder / Hub name."""
    if isinstance(model_or_folder, (str, os.PathLike)):
        model, folder_tokenizer = load_model_folder(str(model_or_folder))
        tokenizer = tokenizer or folder_tokenizer
    else:
        model = model_or_folder
    if getattr(model.config, "model_type", None) != "vanilla_transformer" or not hasattr(model, "lm_head"):
        raise ExportError(
            f"expected a VanillaTransformerForConditionalGeneration (the model with its output projection), got "
            f"{type(model).__name__}."
        )
    if tokenizer is None:
        raise ExportError("a model object needs its tokenizer: pass tokenizer=..., or export from a model folder.")
    try:
        check_tokenizer_matches(model.config, tokenizer)  # the rule of every loader: at most vocab_size tokens
    except ValueError as error:
        raise ExportError(str(error)) from error
    return model, tokenizer  # read weight by weight into float32 copies (`array`): the caller's model unchanged


def transformer_spec(model, tokenizer, rows: int):
    """The ctranslate2 `TransformerSpec` of the model: Figure 1, weight by weight."""
    from ctranslate2.specs import common_spec
    from ctranslate2.specs import transformer_spec as specs

    config = model.config
    changed = changed_switches(config)
    if changed:
        raise ExportError(
            f"the model changes the architecture ({changed}, a study's switches); ctranslate2 runs "
            "the paper's Transformer only."
        )
    activations = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU}
    activations["silu"] = activations["swish"] = common_spec.Activation.SWISH
    if config.activation not in activations:
        raise ExportError(f"activation {config.activation!r}: ctranslate2 export knows {', '.join(activations)}.")
    spec = specs.TransformerSpec.from_config(
        (config.encoder_layers, config.decoder_layers),
        config.num_heads,
        pre_norm=config.norm_position == "pre",
        activation=activations[config.activation],
    )
    base = model.model
    set_stack(spec.encoder, base.encoder, rows)
    set_stack(spec.decoder, base.decoder, rows)
    for layer_spec, layer in zip(spec.encoder.layer, base.encoder.layers):
        set_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_norm, self_attention=True)
        set_feed_forward(layer_spec.ffn, layer.ffn, layer.ffn_norm)
    for layer_spec, layer in zip(spec.decoder.layer, base.decoder.layers):
        set_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_norm, self_attention=True)
        set_attention(layer_spec.attention, layer.cross_attn, layer.cross_attn_norm, self_attention=False)
        set_feed_forward(layer_spec.ffn, layer.ffn, layer.ffn_norm)
    set_linear(spec.decoder.projection, model.lm_head)  # §3.4: the pre-softmax linear transformation (and its bias)

    spec.register_source_vocabulary(vocabulary(tokenizer, config.vocab_size))
    tokens = vocabulary(tokenizer, target_vocabulary_size(config), target=True)
    spec.register_target_vocabulary(tokens)
    if tokenizer.unk_token is None:  # ctranslate2 reads every text through a vocabulary with one
        raise ExportError("the tokenizer has no unknown token (unk_token); ctranslate2 needs one in the vocabulary.")
    spec.config.unk_token = tokenizer.unk_token
    # a tokenizer without <s> (Marian's): the decoder start token stands in; no source gets one (add_source_bos)
    spec.config.bos_token = tokenizer.bos_token or tokens[config.decoder_start_token_id]
    eos = config.eos_token_id[0] if isinstance(config.eos_token_id, list) else config.eos_token_id
    spec.config.eos_token = tokenizer.eos_token or tokens[eos]  # FSMT's tokenizer names its </s> only sep_token
    spec.config.decoder_start_token = tokens[config.decoder_start_token_id]  # the shifted-right decoder input
    spec.config.add_source_bos = spec.config.add_source_eos = False  # the tokenizer appends </s> itself
    spec.config.layer_norm_epsilon = config.layer_norm_eps
    return spec


def vocabulary(tokenizer, size: int, target: bool = False) -> list[str]:
    """The tokenizer's source (or `target`) tokens in id order, one per row of the embedding (or of the output
    projection): ids that no token has (rows past the tokenizer's last id) get placeholder tokens that no text
    encodes to."""
    source_vocabulary, target_vocabulary = vocabularies(tokenizer)
    if target_vocabulary is None:  # one vocabulary: the tokenizer's own id order, its added tokens included
        tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    else:
        by_id = {i: token for token, i in (target_vocabulary if target else source_vocabulary).items()}
        tokens = [by_id.get(i) for i in range(min(size, max(by_id) + 1))]
    taken = set(tokens)
    fillers = (token for token in (f"<unused{i}>" for i in range(size * 2)) if token not in taken)
    tokens = [token if token is not None else next(fillers) for token in tokens]
    return tokens + [next(fillers) for _ in range(size - len(tokens))]


def positions_to_write(config, max_positions: int | None) -> int:
    """The rows of the positional table in the export; an ExportError where `max_positions` is no positive
    integer."""
    if max_positions is not None and (not is_whole(max_positions) or max_positions < 1):
        raise ExportError(f"max_positions {max_positions!r}: expected a positive integer, or None")
    if config.position_encoding == "learned":
        if max_positions is not None and max_positions > config.max_position_embeddings:
            raise ExportError(
                f"max_positions {max_positions}: the model has only {config.max_position_embeddings} learned positions."
            )
        return max_positions or config.max_position_embeddings
    return max_positions or max(config.max_position_embeddings, MIN_SINUSOIDAL_POSITIONS)


def array(tensor: torch.Tensor) -> torch.Tensor:
    """A float32 copy: ctranslate2 may quantize the arrays it is given in place, never the live model's."""
    return tensor.detach().to(torch.float32).clone().contiguous()


def set_stack(spec, stack, rows: int) -> None:
    """Token embeddings times sqrt(d_model) plus positions (§3.4, §3.5), and pre-norm's final LayerNorm."""
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = array(stack.embed.embed_tokens.weight)
    spec.scale_embeddings = float(stack.embed.scale)
    positions = stack.embed.embed_positions
    if isinstance(positions, torch.nn.Embedding):  # learned
        spec.position_encodings.encodings = array(positions.weight[:rows])
    else:  # the model's own sinusoids, written out: ctranslate2's built-in ones are fairseq's, the rows from 0
        kept = positions.pe.shape[0] >= rows and positions.pe.dtype == torch.float32  # not a half-precision copy
        table = positions.pe if kept else positions.table(rows)  # in its layout
        spec.position_encodings.encodings = array(table[:rows])
    if stack.final_norm is not None:
        set_layer_norm(spec.layer_norm, stack.final_norm)


def set_attention(spec, attention, add_norm, self_attention: bool) -> None:
    """W^Q, W^K, W^V as one fused projection for self-attention; for attention over the encoder output, W^Q alone
    (queries from the decoder) and W^K, W^V fused (keys and values from the encoder); then W^O and the Add&Norm's
    LayerNorm."""
    weight = attention.in_proj.weight  # [W^Q; W^K; W^V], (3 d_model, d_model)
    bias = attention.in_proj.bias
    d_model = weight.shape[1]
    if self_attention:
        set_linear_arrays(spec.linear[0], weight, bias)
    else:
        set_linear_arrays(spec.linear[0], weight[:d_model], None if bias is None else bias[:d_model])
        set_linear_arrays(spec.linear[1], weight[d_model:], None if bias is None else bias[d_model:])
    set_linear(spec.linear[-1], attention.out_proj)
    set_layer_norm(spec.layer_norm, add_norm.layer_norm)


def set_feed_forward(spec, ffn, add_norm) -> None:
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 (§3.3), and the Add&Norm's LayerNorm."""
    set_linear(spec.linear_0, ffn.w_1)
    set_linear(spec.linear_1, ffn.w_2)
    set_layer_norm(spec.layer_norm, add_norm.layer_norm)


def set_linear(spec, linear: torch.nn.Linear) -> None:
    set_linear_arrays(spec, linear.weight, linear.bias)


def set_linear_arrays(spec, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    spec.weight = array(weight)
    if bias is not None:
        spec.bias = array(bias)


def set_layer_norm(spec, layer_norm: torch.nn.LayerNorm) -> None:
    spec.gamma = array(layer_norm.weight)
    spec.beta = array(layer_norm.bias)


def is_ctranslate2_folder(path) -> bool:
    """Whether `path` is a folder this module exported (or any ctranslate2 model folder)."""
    return isinstance(path, (str, os.PathLike)) and os.path.isfile(os.path.join(path, "model.bin"))


__all__ = ["export_ctranslate2", "ExportError", "QUANTIZATIONS", "is_ctranslate2_folder", "import_ctranslate2"]


def exported_positions(folder: str) -> int | None:
    """The rows of the positional table an export wrote (`EXPORT_INFO`'s max_positions; None where it wrote no
    such file, or no limit), or a ValueError naming the file where it holds something else."""
    path = os.path.join(folder, EXPORT_INFO)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            info = json.load(handle)
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: not the JSON object an export writes: {error}") from error
    rows = info.get("max_positions") if isinstance(info, dict) else None
    if not isinstance(info, dict) or not (rows is None or (is_whole(rows) and rows >= 1)):
        raise ValueError(f"{path}: expected an object whose max_positions is a positive integer or null, got {info!r}")
    return rows


def exported_end_token(folder: str) -> str:
    """The end-of-sentence token an export named in its config.json ("</s>" where it names none)."""
    try:
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError):  # ctranslate2 itself has read it, or refused the folder
        return "</s>"
    token = config.get("eos_token") if isinstance(config, dict) else None
    return token if isinstance(token, str) else "</s>"


def exported_vocabularies(folder: str) -> tuple[list[str], list[str]]:
    """The source and target tokens of a ctranslate2 model, in id order, as the export wrote them: one shared
    vocabulary file, or one for each side."""
    import json

    def read(name: str) -> list[str] | None:
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            return None
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)

    shared = read("shared_vocabulary.json")
    source, target = shared or read("source_vocabulary.json"), shared or read("target_vocabulary.json")
    if source is None or target is None:
        raise ValueError(
            f"{folder}: no vocabulary files (shared_vocabulary.json, or source_ and target_vocabulary.json)."
        )
    return source, target
