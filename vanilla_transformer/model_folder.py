"""A model folder and its tokenizer: loading them (one tokenizer rule for every caller), and encoding text within the
model's positions (one truncation rule, with its warning, for every caller)."""

import contextlib
import glob
import json
import os
import re
import sys

from .configuration import check_tokenizer_matches
from .errors import HeldLog, ModelFolderError, first_few, one_line
from .importers import IMPORTERS, KINDS

EXPORT_INFO = "vanilla_transformer_export.json"  # what a CTranslate2 export adds: its settings and origin


def load_model_folder(path: str, where: str | None = None):
    """The model (in evaluation mode) and tokenizer of a model folder or Hub name, checked against each other by
    `check_tokenizer_matches`. Raises `ModelFolderError`, its message starting with `where` (default: the path), if
    the folder cannot be loaded (see `load_weights`) or its tokenizer does not belong to its model."""
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    import vanilla_transformer  # noqa: F401  (registers the model type)

    where = where or str(path)
    with nested_json_named(path, where):
        check_model_type(path, where)
        try:
            tokenizer = text_as_text(AutoTokenizer.from_pretrained(path))
        except (OSError, ValueError, StrictDataclassError) as error:
            reason = f"{cannot_load(path)}{missing_tokenizer(path)}: {one_line(error)}"
            raise ModelFolderError(f"{where}: {reason}") from error
        model = load_weights(AutoModelForSeq2SeqLM, path, where).eval()
    try:
        check_tokenizer_matches(model.config, tokenizer, where)
    except ValueError as error:
        raise ModelFolderError(str(error)) from error
    return model, tokenizer


@contextlib.contextmanager
def nested_json_named(path: str, where: str):
    """Within the block, Python's JSON parser stopped at its recursion limit (a file of the folder nests thousands
    deep) is a `ModelFolderError` starting with `where` that names the file, not a RecursionError."""
    try:
        yield
    except RecursionError:
        files = sorted(glob.glob(os.path.join(glob.escape(str(path)), "*.json")))
        name = next((os.path.basename(file) for file in files if nests_too_deeply(file)), None)
        if name is None:  # not a file's: a bug, which keeps its traceback
            raise
        raise ModelFolderError(f"{where}: {name} is not valid JSON: it nests too deeply") from None


def nests_too_deeply(file: str) -> bool:
    """Whether Python's JSON parser stops at its recursion limit on `file`."""
    try:
        with open(file, encoding="utf-8") as handle:
            json.load(handle)
    except RecursionError:
        return True
    except (OSError, ValueError):
        pass
    return False


def text_as_text(tokenizer):
    """The tokenizer, set to read the text of a special token in a sentence (`</s>`, `<pad>`, `<s>`) as text, as
    the models' own tools do (SentencePiece in Marian's, the Moses tokenizer in fairseq's), not as that token: else
    a `</s>` in a source would end it early, and a `<pad>` put padding inside it. The setting is saved with the
    tokenizer (its `init_kwargs`, which `save_pretrained` writes), so that a folder written with it reads text alike
    wherever it is loaded, `AutoTokenizer` included."""
    tokenizer.split_special_tokens = True
    tokenizer.init_kwargs["split_special_tokens"] = True
    if getattr(tokenizer, "backend_tokenizer", None) is not None:  # a fast tokenizer's, for those who encode with it
        tokenizer.backend_tokenizer.encode_special_tokens = True
    return tokenizer


def load_weights(model_class, path: str, where: str, **overrides):
    """`model_class.from_pretrained(path, **overrides)`, or a `ModelFolderError` starting with `where`: a config.json
    that does not load, weights that cannot be read or whose shapes are not its config's, and weights that do not
    cover the model (the library would fill the rest at random, and translate nonsense) or hold more than it (the
    library would leave them out). The library's loading report is shown only for a model that loads. A generation
    config that names no token to start the decoder with takes config.json's, as the library's generate() would
    not."""
    from huggingface_hub.errors import StrictDataclassError

    from .modeling.hub_vanilla_transformer import WeightShapeError

    if os.path.isdir(path):
        read_generation_config(path, where)  # which the library would read without a check
    with HeldLog("transformers.modeling_utils") as report:  # the library's loading report, shown if it loads
        try:
            model, loading = model_class.from_pretrained(path, output_loading_info=True, **overrides)
        except (OSError, ValueError, StrictDataclassError, WeightShapeError) as error:  # StrictDataclassError: a
            # config.json field of the wrong type
            raise ModelFolderError(f"{where}: {cannot_load(path)}: {one_line(error)}") from error
        if loading["missing_keys"]:
            missing = first_few(sorted(loading["missing_keys"]))
            raise ModelFolderError(f"{where}: its weights lack {missing}, which the model of its config.json has")
        if loading["unexpected_keys"]:  # the library would leave them out: a model of fewer layers, say
            extra = first_few(sorted(loading["unexpected_keys"]))
            raise ModelFolderError(f"{where}: its weights hold {extra}, which the model of its config.json lacks")
        report.release()
    generation = model.generation_config
    if generation.decoder_start_token_id is None and generation.bos_token_id is None:
        generation.decoder_start_token_id = model.config.decoder_start_token_id
    return model


def read_generation_config(folder: str, where: str):
    """The folder's generation config (the library's defaults where it has no generation_config.json), or a
    `ModelFolderError` starting with `where` that names the file: not an object, or a setting of the wrong kind."""
    from transformers import GenerationConfig

    try:
        config = GenerationConfig.from_pretrained(folder)
    except (OSError, TypeError, ValueError) as error:
        if not os.path.isfile(os.path.join(folder, "generation_config.json")):  # none: the library's defaults
            return GenerationConfig()
        reason = f"not a generation config the library reads: {one_line(error)}"
        raise ModelFolderError(f"{where}: generation_config.json is {reason}") from error
    return config


def missing_tokenizer(path: str) -> str:
    """What a message adds for a folder whose tokenizer the library looks for in a tokenizer.json it lacks."""
    config = os.path.join(path, "tokenizer_config.json")
    if not os.path.isdir(path) or os.path.isfile(os.path.join(path, "tokenizer.json")):
        return ""
    try:
        with open(config, encoding="utf-8") as handle:
            backend = json.load(handle).get("backend")
    except (OSError, ValueError, AttributeError):  # none, or not an object: the library's own message says it
        return ", which has no tokenizer.json" if not os.path.exists(config) else ""
    return ", which has no tokenizer.json" if backend == "tokenizers" else ""


def cannot_load(path: str) -> str:
    return "could not load a model folder" if os.path.exists(path) else "no such folder, nor a Hub model it finds"


def vocabularies(tokenizer) -> tuple[dict[str, int], dict[str, int] | None]:
    """The source vocabulary (token -> id) of a tokenizer, and its target vocabulary where it has a separate one
    (None otherwise): transformers' FSMTTokenizer, and MarianTokenizer with `separate_vocabs`, whose
    `convert_ids_to_tokens` reads the target vocabulary."""
    if getattr(tokenizer, "separate_vocabs", False):  # MarianTokenizer (their get_tgt_vocab fail)
        return tokenizer.get_src_vocab(), dict(tokenizer.target_encoder)
    if hasattr(tokenizer, "get_tgt_vocab") and not hasattr(tokenizer, "separate_vocabs"):  # FSMTTokenizer
        return tokenizer.get_src_vocab(), {token: i for i, token in tokenizer.decoder.items()}
    return tokenizer.get_vocab(), None


def source_tokens(tokenizer, ids: list[int]) -> list[str]:
    """The source tokens of the ids of a source sentence (`convert_ids_to_tokens` gives target tokens where the
    tokenizer has a separate target vocabulary)."""
    source_vocabulary, target_vocabulary = vocabularies(tokenizer)
    if target_vocabulary is None:
        return tokenizer.convert_ids_to_tokens(ids)
    by_id = {i: token for token, i in source_vocabulary.items()}
    return [by_id.get(i, tokenizer.unk_token) for i in ids]


def importable() -> dict[str, str]:
    """The model types of other implementations' folders -> the `vanilla-transformer import --from KIND` that brings
    them in, from the importers' table."""
    return {importer.model_type: kind for kind, importer in IMPORTERS.items() if importer.model_type}


# a Hub repository's name, "name" or "owner/name", which from_pretrained looks up when no such folder exists
HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")


def check_model_type(path, where: str) -> None:
    """A folder (or Hub repository) of another model type fails here, in one line naming the import that brings it
    in, rather than deep inside the library; a fairseq checkpoint file likewise; so do another file, a folder
    without a config.json and a path that is no folder and cannot be a Hub name."""
    from transformers import PreTrainedConfig

    path = str(path)
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "config.json")):
        raise ModelFolderError(f"{where}: no config.json, so not a model folder")
    if not os.path.exists(path) and not HUB_NAME.fullmatch(path):
        raise ModelFolderError(f"{where}: no such folder")
    if os.path.isfile(path) and path.endswith(".pt"):
        raise ModelFolderError(
            f"{where}: a checkpoint file, not a model folder; if it is a fairseq Transformer, bring it in with: "
            f"vanilla-transformer import --from fairseq {path} --out DIR --trust-pickle"
        )
    if os.path.exists(path) and not os.path.isdir(path):
        raise ModelFolderError(f"{where}: a file, not a model folder (its config.json's folder, say)")
    try:
        config, _ = PreTrainedConfig.get_config_dict(path)
    except (OSError, ValueError):
        return
    if not isinstance(config, dict):
        raise ModelFolderError(f"{where}: config.json holds {type(config).__name__}, not an object of settings")
    model_type = config.get("model_type")
    if model_type in (None, "vanilla_transformer"):
        return
    kinds = importable()
    if model_type in kinds:
        raise ModelFolderError(
            f"{where}: a {model_type!r} model folder, not a vanilla_transformer one; bring it in with: "
            f"vanilla-transformer import --from {kinds[model_type]} {path} --out DIR"
        )
    raise ModelFolderError(
        f"{where}: a {model_type!r} model folder, not a vanilla_transformer one; vanilla-transformer import brings in "
        f"{', '.join(KINDS[:-1])} and {KINDS[-1]} models only."
    )


def truncation_warning(where: str, text: str, length: int, limit: int) -> str:
    """One line about a sentence cut to the learned positions: where, the sentence (its start if long), the numbers."""
    shown = text if len(text) <= 60 else text[:57] + "..."
    return (
        f"{where}: {shown!r} has {length} tokens, more than the model's max_position_embeddings={limit} learned "
        f"positions; truncated to {limit} tokens."
    )


def encode_within(tokenizer, texts: list[str], limit: int | None, where="warning", target: bool = False, warn=None):
    """The token ids of each text (as targets with `target`), each cut to `limit` tokens as the tokenizer truncates
    (the end-of-sentence token kept) when longer; None means no limit (sinusoidal positions). Each text that is cut
    is named in a warning: `where` is its label, or a function of the text's index giving one; `warn(index, line)`
    receives it (default: printed on stderr). Texts are encoded once; only those too long are encoded again."""
    texts = list(texts)
    if not texts:  # the tokenizer's own call would fail on none
        return []
    key = "text_target" if target else "text"
    ids = tokenizer(**{key: texts})["input_ids"]
    long = [i for i, row in enumerate(ids) if limit is not None and len(row) > limit]
    if not long:
        return ids
    for i in long:
        label = where(i) if callable(where) else where
        line = truncation_warning(label, texts[i], len(ids[i]), limit)
        warn(i, line) if warn else print(line, file=sys.stderr)
    cut = tokenizer(**{key: [texts[i] for i in long]}, truncation=True, max_length=limit)["input_ids"]
    for i, row in zip(long, cut):
        ids[i] = row
    return ids


__all__ = ["load_model_folder", "text_as_text", "encode_within", "truncation_warning", "vocabularies", "source_tokens"]


def recorded_seed(folder: str) -> int | None:
    """The seed a model was trained with: its folder's eval_results.json records it (`train` writes it), or the
    `EXPORT_INFO` of its CTranslate2 export; None where neither does (a Hub name, an earlier version's folder)."""
    for name, key in (("eval_results.json", "seed"), (EXPORT_INFO, "trained_with_seed")):
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as handle:
                seed = json.load(handle).get(key)
        except (OSError, ValueError, AttributeError):  # no such file, or not a record
            continue
        if isinstance(seed, int) and not isinstance(seed, bool):
            return seed
    return None


def card_languages(folder: str) -> tuple[str, str] | None:
    """The (source, target) languages of a model folder's card, README.md's `language: [source, target]` as
    `vanilla-transformer train` and the Hub write it; None where the folder has no such card (or none it can read)."""
    import yaml

    path = os.path.join(folder, "README.md")
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError):  # a card that cannot be read names no languages
        return None
    if not text.startswith("---"):
        return None
    try:
        metadata = yaml.safe_load(text.split("---", 2)[1]) or {}
    except yaml.YAMLError:
        return None
    languages = metadata.get("language") if isinstance(metadata, dict) else None
    if isinstance(languages, list) and len(languages) == 2 and all(isinstance(code, str) for code in languages):
        return languages[0], languages[1]
    return None
