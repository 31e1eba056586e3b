"""The arguments of `vanilla-transformer train`: dataclasses read by HfArgumentParser, one place for each option's
default, type, choices and help; presets as instances; a frozen object the loop cannot write into."""

import dataclasses
import re

import pytest
from vanilla_transformer.configuration.configuration_vanilla_transformer import NORM_POSITIONS, POSITION_ENCODINGS
from vanilla_transformer.training.arguments import (
    PRESETS,
    TRAIN_ARGUMENT_GROUPS,
    ArgumentsError,
    Preset,
    TrainArguments,
    resolve,
)

from vanilla_transformer import VanillaTransformerConfig
from vanilla_transformer.cli import build_parser


def train_help(capsys) -> str:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--help"])
    return capsys.readouterr().out


def test_every_option_has_a_help_line_in_its_group(capsys):
    for group in TRAIN_ARGUMENT_GROUPS:
        for field in dataclasses.fields(group):
            assert field.metadata.get("help", "").strip(), f"{group.__name__}.{field.name} has no help"
    text = train_help(capsys)
    headings = [line[:-1] for line in text.splitlines() if line and not line.startswith(" ") and line.endswith(":")]
    for group in TRAIN_ARGUMENT_GROUPS:
        assert group._argument_group_name in headings
    # each option once, in its dashed spelling, and none without a help line under it
    options = re.findall(r"^  (--[a-z0-9-]+)", text, re.MULTILINE)
    assert "--max-tokens" in options and "--max_tokens" not in text
    assert len(options) == len(set(options)) == len(dataclasses.fields(TrainArguments)) + 1  # + --no-share-embeddings
    assert re.search(r"--max-tokens MAX_TOKENS\s+tokens per batch \(per process\) \(default: the preset's\)", text)
    assert re.search(r"--label-smoothing LABEL_SMOOTHING\s+epsilon_ls .*\(default: 0\.1\)", text, re.DOTALL)


def test_choices_come_from_the_configuration_and_presets_are_instances():
    fields = {field.name: field for field in dataclasses.fields(TrainArguments)}
    assert fields["norm_position"].metadata["choices"] is NORM_POSITIONS
    assert fields["position_encoding"].metadata["choices"] is POSITION_ENCODINGS
    assert fields["preset"].metadata["choices"] == tuple(sorted(PRESETS))
    assert all(isinstance(preset, Preset) for preset in PRESETS.values())
    paper, base = VanillaTransformerConfig(), PRESETS["base"]
    for name in ("d_model", "num_heads", "d_ff", "encoder_layers", "decoder_layers", "dropout", "vocab_size"):
        assert getattr(base, name) == getattr(paper, name), name


def test_the_arguments_are_frozen_and_resolving_makes_a_new_object():
    given = TrainArguments(train_file="train.jsonl", d_model=64, num_heads=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        given.lr = 1.0
    resolved = resolve(given)
    assert given.d_ff is None and given.preset is None and given.output_dir is None  # untouched
    small = PRESETS["small"]
    assert (resolved.d_model, resolved.num_heads, resolved.d_ff) == (64, 2, small.d_ff)
    assert resolved.preset == "small" and resolved.output_dir == "runs/en-de" and resolved.length_penalty == 1.0


def test_values_given_in_python_are_checked_as_flags_are():
    with pytest.raises(ValueError, match="--max-tokens: expected a positive integer, got 0"):
        TrainArguments(max_tokens=0)
    with pytest.raises(ValueError, match=r"--dropout: expected a value in \[0, 1\), got 1.5"):
        TrainArguments(dropout=1.5)
    arguments = TrainArguments(max_tokens=512, dropout=0.25)
    assert type(arguments.max_tokens) is int and type(arguments.dropout) is float  # plain values for checkpoints
    with pytest.raises(ArgumentsError, match="--d-model 30 must be divisible by --num-heads 4"):
        resolve(TrainArguments(d_model=30, num_heads=4))
