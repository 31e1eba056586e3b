"""The arguments of `vanilla-transformer train`: dataclasses read by HfArgumentParser, one place for each option's
default, type, choices and help; presets as instances; frozen groups, kept apart in `TrainArguments`."""

import dataclasses
import re

import pytest
from vanilla_transformer.configuration.configuration_vanilla_transformer import NORM_POSITIONS, POSITION_ENCODINGS
from vanilla_transformer.training.options.arguments import (
    TRAIN_ARGUMENT_GROUPS,
    ArgumentsError,
    CheckpointArguments,
    DataArguments,
    ModelArguments,
    OptimisationArguments,
    RunArguments,
    TrainArguments,
    option_groups,
    resolve,
)
from vanilla_transformer.training.options.presets import PRESETS, Preset

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
    negated = [
        f.name
        for group in TRAIN_ARGUMENT_GROUPS
        for f in dataclasses.fields(group)
        if f.default is True or (f.type == bool | None and f.default is None)  # a switch, or one with no default
    ]
    assert "share_embeddings" in negated and "residual" in negated  # --no-share-embeddings, --no-residual, ...
    assert len(options) == len(set(options)) == len(option_groups()) + len(negated)
    assert re.search(r"--max-tokens MAX_TOKENS\s+tokens per batch \(per process\) \(default: the preset's\)", text)
    assert re.search(r"--label-smoothing LABEL_SMOOTHING\s+epsilon_ls .*\(default: 0\.1\)", text, re.DOTALL)


def test_choices_come_from_the_configuration_and_presets_are_instances():
    fields = {field.name: field for group in TRAIN_ARGUMENT_GROUPS for field in dataclasses.fields(group)}
    assert fields["norm_position"].metadata["choices"] is NORM_POSITIONS
    assert fields["position_encoding"].metadata["choices"] is POSITION_ENCODINGS
    assert fields["preset"].metadata["choices"] == tuple(sorted(PRESETS))
    assert all(isinstance(preset, Preset) for preset in PRESETS.values())
    paper, base = VanillaTransformerConfig(), PRESETS["base"]
    for name in ("d_model", "num_heads", "d_ff", "encoder_layers", "decoder_layers", "dropout", "vocab_size"):
        assert getattr(base, name) == getattr(paper, name), name


def test_the_arguments_are_frozen_and_resolving_makes_a_new_object():
    given = TrainArguments.from_options(train_file="train.jsonl", d_model=64, num_heads=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        given.optimisation.lr = 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        given.model = ModelArguments()
    resolved = resolve(given)
    assert given.model.d_ff is None and given.run.preset is None and given.run.output_dir is None  # untouched
    small = PRESETS["small"]
    assert (resolved.model.d_model, resolved.model.num_heads, resolved.model.d_ff) == (64, 2, small.d_ff)
    assert resolved.run.preset == "small" and resolved.run.output_dir == "runs/en-de"
    assert resolved.evaluation.length_penalty == 1.0
    # the preset filled options of several groups, each in its own
    assert resolved.optimisation.max_tokens == small.max_tokens and resolved.data.max_source_length == 128


def test_options_go_to_their_groups_and_stay_there():
    """`TrainArguments` holds the groups as `--help` shows them; an option is found only in its own group."""
    arguments = TrainArguments.from_options(max_tokens=512, source_lang="fr", target_lang="en", d_model=64)
    assert isinstance(arguments.optimisation, OptimisationArguments) and arguments.optimisation.max_tokens == 512
    assert isinstance(arguments.data, DataArguments) and arguments.data.source_lang == "fr"
    assert arguments.model.d_model == 64 and not hasattr(arguments, "max_tokens")
    assert [f.name for f in dataclasses.fields(TrainArguments)] == [
        "data",
        "run",
        "model",
        "tokenizer",
        "optimisation",
        "checkpoints",
        "hub",
        "evaluation",
        "switches",
    ]
    assert {type(getattr(arguments, f.name)) for f in dataclasses.fields(TrainArguments)} == set(TRAIN_ARGUMENT_GROUPS)
    with pytest.raises(TypeError, match="not an option of vanilla-transformer train: max_token"):
        TrainArguments.from_options(max_token=512)
    assert arguments.options()["max_tokens"] == 512 and len(arguments.options()) == len(option_groups())


def test_the_command_line_builds_the_same_groups(capsys):
    """The train command's flags, parsed, become the same groups as the options given in Python."""
    namespace = build_parser().parse_args(["train", "--max-tokens", "512", "--d-model", "64", "--no-share-embeddings"])
    parsed = TrainArguments.from_namespace(namespace)
    assert parsed == TrainArguments.from_options(max_tokens=512, d_model=64, share_embeddings=False)
    # a switch without a default of its own (None: the paper's, or the Hub's) is given either way, or left out
    for flags, private in (([], None), (["--hub-private-repo"], True), (["--no-hub-private-repo"], False)):
        parsed = TrainArguments.from_namespace(build_parser().parse_args(["train", *flags]))
        assert parsed.hub.hub_private_repo is private


def test_values_given_in_python_are_checked_as_flags_are():
    with pytest.raises(ValueError, match="--max-tokens: expected a positive integer, got 0"):
        TrainArguments.from_options(max_tokens=0)
    with pytest.raises(ValueError, match=r"--dropout: expected a value in \[0, 1\), got 1.5"):
        TrainArguments.from_options(dropout=1.5)
    with pytest.raises(ValueError, match="--length-penalty: expected a finite number, got nan"):
        TrainArguments.from_options(length_penalty=float("nan"))
    with pytest.raises(ValueError, match="--tune-length-penalty: expected a finite number, got inf"):
        TrainArguments.from_options(tune_length_penalty=[0.6, float("inf")])  # each of a list's values
    assert TrainArguments.from_options(tune_length_penalty=(0.6, 1.0)).evaluation.tune_length_penalty == [0.6, 1.0]
    arguments = TrainArguments.from_options(max_tokens=512, dropout=0.25)
    # plain values for checkpoints
    assert type(arguments.optimisation.max_tokens) is int and type(arguments.model.dropout) is float
    with pytest.raises(ArgumentsError, match="--d-model 30 must be divisible by --num-heads 4"):
        resolve(TrainArguments.from_options(d_model=30, num_heads=4))
    with pytest.raises(ArgumentsError, match="--fused-loss never makes the logits, which --rdrop-alpha's KL term"):
        resolve(TrainArguments.from_options(fused_loss=True, rdrop_alpha=5.0))


def test_the_study_switches_are_flags_that_build_a_new_model_only():
    namespace = build_parser().parse_args(["train", "--no-residual", "--d-k", "8", "--no-decoder-mask"])
    switches = TrainArguments.from_namespace(namespace).switches
    assert switches.changed() == {"d_k": 8, "residual": False, "decoder_mask": False}
    assert TrainArguments().switches.changed() == {}
    with pytest.raises(ArgumentsError, match="--d-k 8, --no-residual: the study switches build a new model"):
        resolve(TrainArguments.from_options(init_from="some/folder", residual=False, d_k=8))


def test_the_manuals_table_of_the_study_switches_is_made_from_their_one_declaration():
    """docs/studies.md shows `switch_table()`: every switch of the configuration's `SWITCHES`, with its flag."""
    from vanilla_transformer.configuration import SWITCHES
    from vanilla_transformer.training.options.switch_arguments import switch_flag, switch_table

    from tests.documents import PAGES

    assert switch_table() in PAGES["studies.md"]
    assert all(f"| `{name}" in switch_table() for name in SWITCHES)
    # train's flags are those switches, each the paper's unless given, and each flag the table shows takes its part out
    options = resolve(TrainArguments.from_namespace(build_parser().parse_args(["train"]))).options()
    assert {name: options[name] for name in SWITCHES} == {name: s.paper for name, s in SWITCHES.items()}
    for name, switch in SWITCHES.items():
        flag = switch_flag(name, switch).replace(" N", " 4").split()
        assert f"`{switch_flag(name, switch)}`" in switch_table()
        assert getattr(build_parser().parse_args(["train", *flag]), name) == (4 if switch.off is None else switch.off)


def test_a_tracker_accelerate_does_not_know_is_named_by_report_to():
    with pytest.raises(ArgumentsError, match="--report-to bogus: expected none or Accelerate's all, .*tensorboard"):
        resolve(TrainArguments.from_options(report_to=["tensorboard", "bogus"]))
    assert resolve(TrainArguments.from_options(report_to=["none"])).checkpoints.report_to == ["none"]
    import accelerate.utils

    if not accelerate.utils.is_aim_available():  # asked for by name, a tracker not installed is named, not skipped
        with pytest.raises(ArgumentsError, match="--report-to aim: not installed here; pip install aim"):
            resolve(TrainArguments.from_options(report_to=["aim"]))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: OptimisationArguments(max_steps=2.5), "--max-steps: expected an integer, got 2.5"),
        (lambda: OptimisationArguments(max_steps=True), "--max-steps: expected an integer, got True"),
        (lambda: OptimisationArguments(lr="fast"), "--lr: could not convert string to float: 'fast'"),
        (lambda: OptimisationArguments(clip_norm=False), "--clip-norm: expected a number, got False"),
        (lambda: RunArguments(overwrite_output_dir="False"), "--overwrite-output-dir: expected True or False"),
        (lambda: RunArguments(seed=-1), "--seed: expected a seed from 0 to 4294967295 (2**32 - 1), got -1"),
        (lambda: RunArguments(seed=2**32), "--seed: expected a seed from 0 to 4294967295"),
        (lambda: DataArguments(source_lang=5), "--source-lang: expected a string, got 5"),
        (lambda: CheckpointArguments(report_to="none"), "--report-to: expected a list, got 'none'"),
        (
            lambda: TrainArguments.from_options(norm_position="sideways"),
            "--norm-position: 'sideways'; expected one of post, pre, none",
        ),  # fmt: skip
        (lambda: TrainArguments.from_options(preset="huge"), "--preset: 'huge'; expected one of base, numbers, small"),
        (lambda: TrainArguments.from_options(mixed_precision="fp32"), "--mixed-precision: 'fp32'; expected one of"),
    ],
)
def test_values_given_in_python_of_the_wrong_kind_are_named_not_converted(make, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make()


def test_paths_and_numbers_given_in_python_are_taken_as_the_command_line_takes_them(tmp_path):
    import numpy

    assert DataArguments(train_file=tmp_path / "train.jsonl").train_file == str(tmp_path / "train.jsonl")
    assert OptimisationArguments(max_steps=numpy.int64(3), lr=1).max_steps == 3
    assert OptimisationArguments(max_steps="3").max_steps == 3  # a flag's text


def test_a_number_of_epochs_given_replaces_the_presets_number_of_updates():
    given = resolve(TrainArguments.from_options(preset="study", num_epochs=1)).optimisation
    assert (given.max_steps, given.num_epochs) == (None, 1)
    both = resolve(TrainArguments.from_options(preset="study", num_epochs=1, max_steps=5)).optimisation
    assert (both.max_steps, both.num_epochs) == (5, 1)  # --max-steps given too: it wins, as its help says
    assert resolve(TrainArguments.from_options(preset="study")).optimisation.max_steps == PRESETS["study"].max_steps
