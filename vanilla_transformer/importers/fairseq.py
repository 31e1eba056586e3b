"""Import a fairseq translation Transformer (`fairseq-train --arch transformer...`): its checkpoint, dictionaries,
BPE codes and the tokenizer built from them.

A fairseq model is a checkpoint file (`checkpoint_best.pt`: a pickle of the weights, the training arguments and the
optimizer's state) and the files of its data folder: the dictionaries `dict.SRC.txt` and `dict.TGT.txt` and the BPE
codes (`bpecodes`, or `code`). SOURCE is the checkpoint file with those files beside it, or a folder holding them all.
A pickle can run code when it is read: it is read only with `trust_pickle=True` (`--trust-pickle`).

fairseq numbers its vocabulary <s>=0, <pad>=1, </s>=2, <unk>=3, then the dictionary's lines; a source sentence ends in
</s>, and decoding starts from </s>. The tokenizer written with the model is `FairseqTokenizer`: transformers'
FSMTTokenizer (Moses tokenisation and subword-nmt BPE, as fairseq's WMT models use) with a target side of its own,
built from the dictionaries and BPE codes the way transformers' FSMT converter builds it. A model trained on text
prepared otherwise keeps its ids and weights exactly, but needs its own preprocessing before the tokenizer's BPE.
"""

import argparse
import json
import os
import re
import tempfile

from ..configuration import VanillaTransformerConfig
from ..errors import MissingDependencyError, warn
from .mapping import (
    MISSING_TOKENIZER_PACKAGES,
    CheckpointImportError,
    SourceWeights,
    activation,
    embeddings_and_output,
    layers,
    model_from_state,
    sharing,
)

CHECKPOINT_NAMES = ("checkpoint_best.pt", "checkpoint_last.pt", "model.pt")
SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # fairseq's Dictionary: ids 0 to 3
# fairseq's base_architecture defaults, for checkpoints whose arguments leave a field out
DEFAULTS = dict(
    encoder_embed_dim=512,
    encoder_ffn_embed_dim=2048,
    encoder_layers=6,
    encoder_attention_heads=8,
    encoder_normalize_before=False,
    encoder_learned_pos=False,
    decoder_layers=6,
    decoder_normalize_before=False,
    decoder_learned_pos=False,
    dropout=0.1,
    attention_dropout=0.0,
    activation_dropout=0.0,
    activation_fn="relu",
    no_scale_embedding=False,
    max_source_positions=1024,
    max_target_positions=1024,
)
# the defaults that no weight's shape confirms: the heads, the activation, the embedding scale, the norm's place
UNTOLD = ("encoder_attention_heads", "activation_fn", "no_scale_embedding", "encoder_normalize_before",
          "decoder_normalize_before")  # fmt: skip
# arguments of variants this model does not implement: (name, the value that means "not used")
UNSUPPORTED = (
    ("layernorm_embedding", False),
    ("no_token_positional_embeddings", False),
    ("adaptive_softmax_cutoff", None),
    ("adaptive_input", False),
    ("cross_self_attention", False),
    ("max_relative_positions", None),
    ("max_relative_position", None),
    ("relative_positional_embeddings", None),
    ("encoder_layers_to_keep", None),
    ("decoder_layers_to_keep", None),
    ("tie_adaptive_weights", False),
)


def checkpoint_path(source: str) -> str:
    """The checkpoint file: SOURCE itself, or the one checkpoint in the folder SOURCE."""
    if os.path.isfile(source):
        return source
    if not os.path.isdir(source):
        from huggingface_hub import snapshot_download

        try:
            source = snapshot_download(source)
        except Exception as error:  # any failure to fetch: offline, no such repository
            raise CheckpointImportError(
                f"{source}: neither a checkpoint file, nor a folder, nor a Hub repository that could be downloaded "
                f"({error})."
            ) from error
    for name in CHECKPOINT_NAMES:
        if os.path.isfile(os.path.join(source, name)):
            return os.path.join(source, name)
    found = sorted(name for name in os.listdir(source) if name.endswith(".pt"))
    if len(found) != 1:
        raise CheckpointImportError(
            f"{source}: expected one fairseq checkpoint ({', '.join(CHECKPOINT_NAMES)} or a single .pt file), found "
            f"{', '.join(found) or 'none'}; pass the checkpoint file."
        )
    return os.path.join(source, found[0])


def read_checkpoint(path: str, trust_pickle: bool) -> tuple[dict, dict]:
    """The training settings (fairseq's arguments, as a dict) and the weights of a fairseq checkpoint."""
    if not trust_pickle:
        raise CheckpointImportError(
            f"{path}: a fairseq checkpoint is a pickle, which can run code when it is read; it is read only when you "
            "trust it: pass --trust-pickle (trust_pickle=True in Python)."
        )
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except ModuleNotFoundError as error:
        raise CheckpointImportError(
            f"{path}: the pickle needs the Python module {error.name!r} to be read; install it and retry."
        ) from error
    except Exception as error:  # a damaged or foreign file fails in many ways
        raise CheckpointImportError(f"{path}: could not read it as a fairseq checkpoint: {error}") from error
    if not isinstance(state, dict) or "model" not in state:
        raise CheckpointImportError(f"{path}: not a fairseq checkpoint (no 'model' entry with the weights).")
    return checkpoint_settings(state, path), state["model"]


def as_dict(value) -> dict:
    """A Namespace, a mapping (fairseq's omegaconf sections) or nothing, as a dict."""
    if value is None:
        return {}
    if isinstance(value, argparse.Namespace):
        return vars(value)
    return dict(value.items()) if hasattr(value, "items") else {}


def checkpoint_settings(state: dict, path: str) -> dict:
    """fairseq's training settings: its `args` (a Namespace, before fairseq 0.10) or `cfg` (its task and model
    sections), with base_architecture's defaults for the fields they leave out."""
    settings = as_dict(state.get("args"))
    if not settings:
        cfg = as_dict(state.get("cfg"))
        settings = {**as_dict(cfg.get("task")), **as_dict(cfg.get("model"))}
    if not settings:
        raise CheckpointImportError(f"{path}: the checkpoint holds no training arguments ('args' or 'cfg').")
    untold = [key for key in UNTOLD if settings.get(key) is None]
    arch = str(settings.get("arch", "transformer"))
    if untold and arch != "transformer":
        filled = ", ".join(f"{key}={DEFAULTS[key]!r}" for key in untold)
        warn(f"{path}: its arguments leave out {', '.join(untold)}, which the weights cannot tell; the import takes "
             f"fairseq's base_architecture values ({filled}), which arch={arch} may not use")  # fmt: skip
    settings = {
        **DEFAULTS,
        **{key: value for key, value in settings.items() if value is not None or key not in DEFAULTS},
    }
    for name in ("embed_dim", "ffn_embed_dim", "attention_heads"):  # fairseq: the decoder's default the encoder's
        settings.setdefault(f"decoder_{name}", settings[f"encoder_{name}"])
    return settings


def check_settings(settings: dict, where: str) -> None:
    """Stop at a variant of the architecture the model cannot express, naming fairseq's argument."""
    arch = str(settings.get("arch", "transformer"))
    if not arch.startswith("transformer") or arch.startswith("transformer_lm"):
        raise CheckpointImportError(
            f"{where}: arch={arch!r}; the import reads fairseq's encoder-decoder Transformer (--arch transformer...)."
        )
    for name, unused in UNSUPPORTED:
        value = settings.get(name, unused)
        if value not in (unused, None, False, "", 0):
            raise CheckpointImportError(
                f"{where}: {name}={value!r}; the model has no such variant of the architecture."
            )
    tagged = [name for name in ("encoder_langtok", "decoder_langtok") if settings.get(name)]
    if tagged:  # a multilingual task's: a language token (__de__) before each sentence, which fairseq adds itself
        raise CheckpointImportError(
            f"{where}: {tagged[0]}={settings[tagged[0]]!r}; the model reads and writes language tokens, which the "
            "imported tokenizer cannot add (the import reads single-pair translation checkpoints)."
        )
    if settings.get("decoder_normalize_before") and settings.get("no_decoder_final_norm"):
        raise CheckpointImportError(
            f"{where}: no_decoder_final_norm=True; the model's pre-norm decoder ends in a final LayerNorm."
        )
    for first, second in (
        ("encoder_embed_dim", "decoder_embed_dim"),
        ("encoder_ffn_embed_dim", "decoder_ffn_embed_dim"),
        ("encoder_attention_heads", "decoder_attention_heads"),
        ("encoder_normalize_before", "decoder_normalize_before"),
        ("encoder_learned_pos", "decoder_learned_pos"),
        ("decoder_embed_dim", "decoder_output_dim"),
        ("decoder_embed_dim", "decoder_input_dim"),
    ):
        if second in settings and settings[second] is not None and settings[first] != settings[second]:
            raise CheckpointImportError(
                f"{where}: {first}={settings[first]} but {second}={settings[second]}; the model has one setting for "
                "both."
            )


def read_dictionary(path: str) -> list[str]:
    """fairseq's Dictionary, read as its `add_from_file` reads it: the four special symbols, then a row per line,
    `<symbol> <count>` (the line's trailing white space dropped); a symbol already there takes a new row only with
    the `#fairseq:overwrite` flag (CamemBERT's dictionaries re-add the special symbols so), which then names it."""
    if not os.path.isfile(path):
        raise CheckpointImportError(f"{path}: the dictionary is missing; it is written by fairseq-preprocess.")
    symbols, known = list(SPECIALS), set(SPECIALS)
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            symbol, overwrite = dictionary_row(line, f"{path}:{number}")
            if symbol in known and not overwrite:
                raise CheckpointImportError(f"{path}:{number}: {symbol!r} is in the dictionary already; fairseq takes "
                                            "a second row only with the #fairseq:overwrite flag.")  # fmt: skip
            symbols.append(symbol)
            known.add(symbol)
    return symbols


def dictionary_row(line: str, where: str) -> tuple[str, bool]:
    """A dictionary line's symbol and whether it has the overwrite flag; a `CheckpointImportError` naming `where`
    for a line that is not `<symbol> <count> [#fairseq:overwrite]`."""
    fields = line.rstrip().rsplit(" ", 1)
    overwrite = len(fields) == 2 and fields[1] == "#fairseq:overwrite"
    if overwrite:
        fields = fields[0].rsplit(" ", 1)
    if len(fields) != 2 or not re.fullmatch(r"[+-]?\d+", fields[1].strip()):
        raise CheckpointImportError(f"{where}: expected '<symbol> <count>' (a whole count), got {line.strip()!r}.")
    return fields[0], overwrite


def import_fairseq(source: str, trust_pickle: bool = False, languages: tuple[str, str] | None = None):
    """The model, a FairseqTokenizer and the generation settings of a fairseq checkpoint (see the module docstring).
    `languages`, (source, target), for a checkpoint that names none (see `checkpoint_languages`)."""
    path = checkpoint_path(source)
    settings, tensors = read_checkpoint(path, trust_pickle)
    check_settings(settings, path)
    folder = os.path.dirname(os.path.abspath(path))
    languages = checkpoint_languages(settings, path, languages)
    vocabularies = [read_dictionary(os.path.join(folder, f"dict.{language}.txt")) for language in languages]
    weights = SourceWeights(tensors, path)
    matrices = fairseq_matrices(weights, vocabularies, path)
    config = fairseq_config(settings, matrices, path)
    state = embeddings_and_output(*matrices)
    state.update(layers(weights, "encoder", "model.encoder", settings["encoder_layers"], cross=False))
    state.update(layers(weights, "decoder", "model.decoder", settings["decoder_layers"], cross=True))
    state.update(stack_extras(weights, settings, config))
    weights.drop(*(name for name in weights.tensors if name.endswith((".version", "._float_tensor"))))
    model = model_from_state(config, state, weights)
    tokenizer = fairseq_tokenizer(folder, vocabularies, languages, config.vocab_size, config.target_vocab_size)
    return model, tokenizer, fairseq_generation_config(config)


def checkpoint_languages(settings: dict, path: str, given: tuple[str, str] | None) -> tuple[str, str]:
    """The source and target languages: as the checkpoint's arguments name them (`given` must agree), else `given`,
    else as fairseq-train inferred them when they were left out: from the data folder's file names
    (`train.en-de.en.bin`: en to de)."""
    named = settings.get("source_lang"), settings.get("target_lang")
    if all(named):
        if given is not None and tuple(given) != named:
            raise CheckpointImportError(
                f"{path}: the checkpoint is {named[0]} to {named[1]}, not {given[0]} to {given[1]}."
            )
        return named
    if given is not None:
        return tuple(given)
    data = str(settings.get("data") or "").split(os.pathsep)[0]
    pairs = set()
    if data and os.path.isdir(data):
        for name in os.listdir(data):
            parts = name.split(".")
            languages = parts[1].split("-") if len(parts) >= 3 and parts[0] == "train" else []
            if len(languages) == 2:
                pairs.add(tuple(languages))
    if len(pairs) == 1:
        return pairs.pop()
    found = f"{data!r} names {len(pairs)} language pairs" if data and os.path.isdir(data) else f"{data!r} is absent"
    raise CheckpointImportError(
        f"{path}: the checkpoint's arguments name no source_lang and target_lang, and its data folder {found}; "
        "give them (import --languages SRC TGT, or languages=(SRC, TGT)), or put the data folder of "
        "fairseq-preprocess (train.SRC-TGT.* files) where the checkpoint says it is."
    )


def fairseq_matrices(weights: SourceWeights, vocabularies: list[list[str]], where: str):
    """The source and target embeddings and the output projection: `decoder.output_projection` (fairseq >= 0.10),
    `decoder.embed_out` (older), or the target embedding itself (--share-decoder-input-output-embed)."""
    source = weights.take("encoder.embed_tokens.weight")
    target = weights.take("decoder.embed_tokens.weight")
    output = target
    for name in ("decoder.output_projection.weight", "decoder.embed_out"):
        if name in weights:
            output = weights.take(name)
    for side, matrix, vocabulary in (("source", source, vocabularies[0]), ("target", target, vocabularies[1])):
        if matrix.shape[0] < len(vocabulary):
            raise CheckpointImportError(
                f"{where}: the {side} embedding has {matrix.shape[0]} rows but its dictionary {len(vocabulary)} "
                "symbols; expected the dictionaries the model was trained with."
            )
    return source, target, output


def fairseq_config(settings: dict, matrices, where: str) -> VanillaTransformerConfig:
    source, target, _ = matrices
    learned = bool(settings["encoder_learned_pos"])
    sides = settings["max_source_positions"], settings["max_target_positions"]
    if learned and sides[0] != sides[1]:  # the model has one table size
        warn(
            f"{where}: learned positions for {sides[0]} source and {sides[1]} target tokens; the model has one table "
            f"of {min(sides)}: a longer source or translation is cut to it"
        )
    return VanillaTransformerConfig(
        vocab_size=source.shape[0],
        target_vocab_size=target.shape[0] if target.shape[0] != source.shape[0] else None,
        d_model=settings["encoder_embed_dim"],
        num_heads=settings["encoder_attention_heads"],
        d_ff=settings["encoder_ffn_embed_dim"],
        encoder_layers=settings["encoder_layers"],
        decoder_layers=settings["decoder_layers"],
        dropout=settings["dropout"],
        attention_dropout=settings["attention_dropout"],
        activation_dropout=settings.get("activation_dropout") or settings.get("relu_dropout") or 0.0,
        activation=activation(settings["activation_fn"], "activation_fn", "fairseq checkpoint"),
        # learned positions: the rows of both tables; the sinusoids have no limit
        max_position_embeddings=(min if learned else max)(
            settings["max_source_positions"], settings["max_target_positions"]
        ),
        norm_position="pre" if settings["encoder_normalize_before"] else "post",
        position_encoding="learned" if learned else "sinusoidal",
        position_layout="fairseq",
        scale_embedding=not settings["no_scale_embedding"],
        attention_bias=True,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        **sharing(*matrices),
    )


def stack_extras(weights: SourceWeights, settings: dict, config: VanillaTransformerConfig) -> dict:
    """Pre-norm's final LayerNorm of each stack, and learned positions (fairseq's rows from padding_idx + 1)."""
    found = {}
    for stack in ("encoder", "decoder"):
        if config.norm_position == "pre":
            found.update(weights.linear(f"{stack}.layer_norm", f"model.{stack}.final_norm"))
        if config.position_encoding == "learned":  # the first max_position_embeddings rows after padding_idx
            table = weights.take(f"{stack}.embed_positions.weight")[config.pad_token_id + 1 :]
            found[f"model.{stack}.embed.embed_positions.weight"] = table[: config.max_position_embeddings]
    return found


def fairseq_generation_config(config: VanillaTransformerConfig):
    """fairseq's search defaults as FSMT carries them over: a beam of 5, at most 200 tokens, </s> forced at the end."""
    from transformers import GenerationConfig

    return GenerationConfig(num_beams=5, max_length=200, early_stopping=False, forced_eos_token_id=config.eos_token_id)


def fsmt_vocabulary(symbols: list[str], size: int) -> dict[str, int]:
    """FSMT's spelling of a fairseq dictionary (as transformers' FSMT converter writes it): subword-nmt's "@@"
    continuation mark dropped, "</w>" appended to word ends; the special symbols as they are. Rows past the
    dictionary (an embedding padded to a multiple of 8) get placeholder symbols."""
    vocabulary = {}
    for index, symbol in enumerate(symbols):
        if symbol in SPECIALS and index >= len(SPECIALS):  # a #fairseq:overwrite row: fairseq's </s> and <unk> stay
            continue  # at their own ids (eos_index, unk_index), which it appends and maps unknown words to
        if symbol in SPECIALS:
            vocabulary[symbol] = index
        else:
            vocabulary[symbol[:-2] if symbol.endswith("@@") else symbol + "</w>"] = index
    for index in range(len(symbols), size):
        vocabulary[f"madeupword{index:04d}"] = index
    return vocabulary


def bpe_merges(folder: str) -> str:
    """The BPE codes as FSMTTokenizer reads them: one merge a line, its two symbols. fastBPE writes each merge with
    its count (`e r 1234`), subword-nmt without (`e r</w>`, and `8 7`: a second symbol of digits is a symbol, not a
    count); the count is dropped, the version line of subword-nmt kept (it ranks below every merge)."""
    for name in ("bpecodes", "code"):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                return "".join(merge_line(line) + "\n" for line in handle.read().splitlines() if line.strip())
    raise CheckpointImportError(
        f"{folder}: no BPE codes ('bpecodes' or 'code') beside the checkpoint; the tokenizer is built from them."
    )


def merge_line(line: str) -> str:
    """A line of BPE codes without fastBPE's count: the first two symbols of a line of three."""
    symbols = line.split()
    return " ".join(symbols[:2]) if len(symbols) == 3 and symbols[2].isdigit() else line


def fairseq_tokenizer(folder: str, vocabularies, languages, vocab_size: int, target_vocab_size: int | None):
    from ..tokenization_fairseq import FairseqTokenizer

    sizes = (vocab_size, target_vocab_size or vocab_size)
    with tempfile.TemporaryDirectory() as scratch:
        files = {}
        for name, symbols, size in zip(("vocab-src.json", "vocab-tgt.json"), vocabularies, sizes):
            files[name] = os.path.join(scratch, name)
            with open(files[name], "w", encoding="utf-8") as handle:
                json.dump(fsmt_vocabulary(symbols, size), handle, ensure_ascii=False)
        files["merges.txt"] = os.path.join(scratch, "merges.txt")
        with open(files["merges.txt"], "w", encoding="utf-8") as handle:
            handle.write(bpe_merges(folder))
        try:
            return FairseqTokenizer(
                langs=list(languages),
                src_vocab_file=files["vocab-src.json"],
                tgt_vocab_file=files["vocab-tgt.json"],
                merges_file=files["merges.txt"],
            )
        except ImportError as error:
            raise MissingDependencyError(f"{MISSING_TOKENIZER_PACKAGES} ({error})") from error
