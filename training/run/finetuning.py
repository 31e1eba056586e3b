"""Fine-tuning: `train --init-from FOLDER` starts from a model folder (one this command wrote, or one that
`vanilla-transformer import` brought in from Marian, FSMT or fairseq) instead of a new model. The folder gives the
weights, the architecture and the tokenizer; the run's data, schedule and evaluation are the command's as usual.

The architecture's flags take the folder's values (so that the schedule's d_model, the length limits of learned
positions and the card describe the model trained); one given on the command line must agree with the folder. The
dropout flags, where given, replace the folder's rates for this run. No tokenizer is trained: the flags of one
(--vocab-size, --bpe-sample-size, --lowercase) are refused.
"""

import os

from ...configuration import VanillaTransformerConfig, check_tokenizer_matches
from ...errors import ModelFolderError
from ...model_folder import load_weights
from ...modeling import VanillaTransformerForConditionalGeneration
from ..options.argument_types import ArgumentsError, option_flag

# ModelArguments' architecture fields, each named as the configuration's field it sets
ARCHITECTURE = (
    "d_model",
    "num_heads",
    "d_ff",
    "encoder_layers",
    "decoder_layers",
    "norm_position",
    "position_encoding",
    "activation",
    "share_embeddings",
)
DROPOUTS = ("dropout", "attention_dropout", "activation_dropout")
TOKENIZER_TRAINING = ("vocab_size", "bpe_sample_size", "lowercase")  # TokenizerArguments' for a new tokenizer


def folder_config(folder: str) -> VanillaTransformerConfig:
    """The configuration of the model folder `folder`; an `ArgumentsError` naming --init-from if it has none."""
    if not os.path.isfile(os.path.join(folder, "config.json")):
        raise ArgumentsError(f"--init-from {folder}: expected a model folder with a config.json")
    try:
        return VanillaTransformerConfig.from_pretrained(folder)
    except (OSError, ValueError) as error:
        raise ArgumentsError(f"--init-from {folder}: {error}") from error


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def options_from_folder(folder: str, given: dict, defaults: dict) -> dict:
    """The model options of a run that starts from `folder`: its architecture (a flag the command line gave must
    agree) and dropout rates (unless given), and its tokenizer."""
    if given.get("tokenizer_name") not in (None, folder):
        raise ArgumentsError("--tokenizer-name: a run with --init-from uses the folder's tokenizer")
    for option in TOKENIZER_TRAINING:  # no tokenizer is trained: a flag for its training would be dropped unsaid
        if given.get(option) != defaults.get(option):
            raise ArgumentsError(f"{option_flag(option, given[option])}: a run with --init-from uses the folder's "
                                 "tokenizer, and trains none")  # fmt: skip
    config = folder_config(folder)
    if os.path.isdir(folder) and not any(os.path.isfile(os.path.join(folder, name)) for name in TOKENIZER_FILES):
        raise ArgumentsError(f"--init-from {folder}: no tokenizer ({' or '.join(TOKENIZER_FILES)}); expected a model "
                             "folder with its tokenizer, as train writes one")  # fmt: skip
    options = {"tokenizer_name": folder}
    for option in ARCHITECTURE:
        value = getattr(config, option)
        named = given.get(option)
        if named is not None and named != value:
            has = option_flag(option, value) if isinstance(value, bool) else value
            raise ArgumentsError(f"{option_flag(option, named)}: the model of --init-from {folder} has {has}")
        options[option] = value
    for option in DROPOUTS:
        if given.get(option) is None:
            options[option] = getattr(config, option)
    return options


def model_from_folder(folder: str, overrides: dict, tokenizer) -> VanillaTransformerForConditionalGeneration:
    """The folder's model with the run's settings of its configuration (dropout rates, the residual stream's
    dtype), checked against the tokenizer the run encodes with."""
    try:
        model = load_weights(VanillaTransformerForConditionalGeneration, folder, f"--init-from {folder}", **overrides)
    except ModelFolderError as error:  # no weights, weights that cannot be read, or do not cover the model
        raise ArgumentsError(str(error)) from error
    try:
        check_tokenizer_matches(model.config, tokenizer, folder)
    except ValueError as error:
        raise ArgumentsError(f"--init-from {folder}: {error}") from error
    return model
