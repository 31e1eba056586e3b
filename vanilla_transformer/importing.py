"""Import a trained model of another implementation of the same architecture, exactly, as a vanilla_transformer model:

    model, tokenizer = import_checkpoint("path/to/opus-mt-en-de", "marian", out="runs/opus-mt-en-de")
    vanilla-transformer import --from marian path/to/opus-mt-en-de --out runs/opus-mt-en-de

Three sources are read:

- "marian": a folder written by transformers' `MarianMTModel.save_pretrained` (the OPUS-MT models), or its Hub id;
- "fsmt": a folder written by `FSMTForConditionalGeneration.save_pretrained` (fairseq's WMT19 models), or its Hub id;
- "fairseq": a fairseq translation Transformer's checkpoint file (`checkpoint_best.pt`) with its `dict.*.txt` and
  BPE codes beside it (see `importers.fairseq`). It is a pickle, read only with `trust_pickle=True`.

Every tensor of the source is mapped onto the model, or the import stops with an error naming it, as it does for any
setting the model cannot express. What differs between the implementations, and is carried over by configuration
fields: the layout of the sinusoids (`position_layout`), the feed-forward activation, the output bias, separate
vocabularies (`target_vocab_size`) and which embeddings share a matrix, pre-norm stacks with their final LayerNorm.
Marian and FSMT models are read through their own transformers classes (weights from safetensors unless
`trust_pickle`), so that their tied and generated tensors come out as their implementation defines them.
"""

import copy
import json
import os

from huggingface_hub.errors import HFValidationError, StrictDataclassError
from huggingface_hub.utils import validate_repo_id

from .configuration import VanillaTransformerConfig, check_tokenizer_matches
from .errors import CommandError, one_line
from .folders import check_writable, staged_folder
from .importers import IMPORTERS, KINDS, CheckpointImportError
from .model_folder import text_as_text
from .modeling.hub_vanilla_transformer import weights_fingerprint


def generation_settings(source_generation_config, config: VanillaTransformerConfig):
    """The source's generation defaults (beam size, lengths, forced and forbidden tokens), with the special tokens
    of the imported model."""
    from transformers import GenerationConfig

    generation_config = copy.deepcopy(source_generation_config) if source_generation_config else GenerationConfig()
    for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
        setattr(generation_config, name, getattr(config, name))
    if generation_config.max_length is not None and generation_config.max_new_tokens is None:
        # the same limit counted in new tokens (the decoder starts from one token): translate and evaluate ask for
        # new tokens, and generate() warns on every call where a model's config also holds a total length
        generation_config.max_new_tokens = generation_config.max_length - 1
        generation_config.max_length = None
    return generation_config


def check_source_present(source: str, kind: str) -> None:
    """What of the source is not there, named before it is read: a path that does not exist and cannot be a Hub id
    (rather than looked up on the Hub), a source folder lacking a file its tokenizer reads (rather than the
    tokenizer's own `TypeError` about None)."""
    importer = IMPORTERS[kind]
    if not os.path.exists(source):
        try:
            if not importer.hub_base_model:
                raise HFValidationError("not read from the Hub")
            validate_repo_id(source)
        except HFValidationError:
            hub = " (nor a Hub id: NAME or OWNER/NAME)" if importer.hub_base_model else ""
            raise CheckpointImportError(f"{source}: no such file or folder{hub}") from None
    elif os.path.isfile(source) and importer.hub_base_model:  # a fairseq checkpoint, most likely
        others = [name for name, other in IMPORTERS.items() if not other.hub_base_model]
        raise CheckpointImportError(f"{source}: a file; --from {kind} reads a model folder (or a Hub id), and "
                                    f"--from {others[0]} a checkpoint file")  # fmt: skip
    elif os.path.isdir(source) and not os.path.isfile(os.path.join(source, "tokenizer.json")):  # a fast one reads that
        files = importer.tokenizer_files + tuple(
            name for setting, name in importer.tokenizer_files_when if tokenizer_setting(source, setting)
        )
        missing = [name for name in files if not os.path.isfile(os.path.join(source, name))]
        if missing:
            raise CheckpointImportError(
                f"{source}: its tokenizer needs {', '.join(missing)}, which the folder lacks ({kind} reads "
                f"{', '.join(files)})"
            )


def tokenizer_setting(folder: str, setting: str):
    """A setting of the folder's tokenizer_config.json (None where it has none, or none that can be read)."""
    try:
        with open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8") as handle:
            settings = json.load(handle)
    except (OSError, ValueError):
        return None
    return settings.get(setting) if isinstance(settings, dict) else None


def check_source_type(source: str, kind: str) -> None:
    """A model folder of another type than `kind` reads is named before it is read (it failed deep in the reading,
    on the first field that did not fit)."""
    expected = IMPORTERS[kind].model_type
    config = os.path.join(source, "config.json")
    if expected is None or not os.path.isfile(config):
        return
    try:
        with open(config, encoding="utf-8") as handle:
            found = json.load(handle).get("model_type")
    except (OSError, ValueError, AttributeError) as error:
        raise CheckpointImportError(f"{config}: not a model's configuration ({error})") from error
    if found is None:  # a CTranslate2 export, say: no importer reads a folder without one
        raise CheckpointImportError(f"{source}: its config.json names no model_type; expected a {expected!r} folder")
    if found != expected:
        others = [name for name, importer in IMPORTERS.items() if importer.model_type == found]
        hint = f"; import it with --from {others[0]}" if others else ""
        hint = "; it is a model folder of this package already" if found == "vanilla_transformer" else hint
        raise CheckpointImportError(f"{source}: a {found!r} model folder, not a {expected!r} one{hint}")


def import_checkpoint(source, kind: str, out=None, trust_pickle: bool = False, overwrite: bool = False, languages=None):
    """Import `source` (see the module's docstring for what each `kind` reads) as a
    `VanillaTransformerForConditionalGeneration` with its tokenizer; with `out`, also write them as a model folder
    (weights in safetensors, config.json, the tokenizer, the generation config, a model card naming the source).
    `out` must be new or empty unless `overwrite`. `languages`, (source, target), names the languages of a fairseq
    checkpoint that does not name them itself. Returns (model, tokenizer)."""
    if kind not in IMPORTERS:
        raise CheckpointImportError(f"kind {kind!r}: expected one of {', '.join(IMPORTERS)}.")
    if languages is not None and not IMPORTERS[kind].takes_languages:
        raise CheckpointImportError(f"languages: a {kind} source names its own; they are given for fairseq only.")
    source = str(source)
    if out is not None:
        check_writable(str(out), overwrite, CheckpointImportError, reading=source)
    check_source_type(source, kind)
    check_source_present(source, kind)
    options = {"languages": tuple(languages)} if languages is not None else {}
    try:
        model, tokenizer, generation_config = IMPORTERS[kind].read(source, trust_pickle, **options)
    except StrictDataclassError as error:  # a setting of the source's of the wrong type, as the config reads it
        raise CheckpointImportError(f"{source}: {one_line(error)}") from error
    except UnicodeDecodeError as error:  # a vocabulary or BPE file of the source's
        raise CheckpointImportError(f"{source}: a file of it is not UTF-8 text ({error.reason} at byte "
                                    f"{error.start}); save it as UTF-8") from error  # fmt: skip
    except (CheckpointImportError, CommandError):
        raise
    except ValueError as error:  # a setting the model's config refuses: a token id outside its vocabulary, none
        raise CheckpointImportError(f"{source}: {one_line(error)}") from error
    try:
        check_tokenizer_matches(model.config, tokenizer, source)
    except ValueError as error:
        raise CheckpointImportError(str(error)) from error
    tokenizer = text_as_text(tokenizer)  # and saved so: the source's own tools read such text as text
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

    importer = IMPORTERS[kind]
    is_hub_id = not os.path.exists(source) and importer.hub_base_model
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
        f"The weights of {origin}, {importer.description}, imported unchanged by "
        f"`vanilla-transformer import --from {kind}` "
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
