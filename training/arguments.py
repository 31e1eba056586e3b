"""The arguments of `vanilla-transformer train`, as dataclasses read by transformers' `HfArgumentParser`: each option's
default, type, choices and help line in one place, one dataclass per concern (each a group of `--help`). The size
presets are instances of `Preset`; `resolve` fills what a preset sets and checks the flags against each other.

`TrainArguments` is all of them in one frozen object: the training loop reads it and never writes into it.
"""

import argparse
import dataclasses
import math
import os
import types
from dataclasses import dataclass, field

from transformers import HfArgumentParser

from ..configuration import VanillaTransformerConfig
from ..configuration.configuration_vanilla_transformer import NORM_POSITIONS, POSITION_ENCODINGS

# ---------------------------------------------------------------------------------------------------------------------
# Checked types: argparse calls them on a flag's text, and `Checked.__post_init__` on values given in Python; each
# returns a plain int or float (which checkpoints, trackers and JSON take as they are)
# ---------------------------------------------------------------------------------------------------------------------


class PositiveInt(int):
    def __new__(cls, value):
        number = int(value)
        if number <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
        return number


class NonNegativeInt(int):
    def __new__(cls, value):
        number = int(value)
        if number < 0:
            raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
        return number


class Probability(float):
    def __new__(cls, value):
        number = float(value)
        if not 0.0 <= number < 1.0:
            raise argparse.ArgumentTypeError(f"expected a value in [0, 1), got {value}")
        return number


class PositiveFloat(float):
    def __new__(cls, value):
        number = float(value)
        if not number > 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
        return number


class NonNegativeFloat(float):
    def __new__(cls, value):
        number = float(value)
        if not 0 <= number < math.inf:
            raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {value}")
        return number


CHECKED_TYPES = (PositiveInt, NonNegativeInt, Probability, PositiveFloat, NonNegativeFloat)


def option(default=None, help: str = "", **argparse_kwargs):
    """A field of an arguments dataclass: its default and help line (and any choices, metavar, ...)."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help, **argparse_kwargs})
    return field(default=default, metadata={"help": help, **argparse_kwargs})


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


class DashedOptions:
    """An argument group that takes each option under its dashed spelling only (`--max-tokens`, not `--max_tokens`):
    the one the README, `--help` and the error messages show."""

    def __init__(self, group):
        self.group = group

    def add_argument(self, *names, **kwargs):
        return self.group.add_argument(*(name for name in names if "_" not in name), **kwargs)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default after its help line, unless the help line says it (or there is none to say)."""

    def _get_help_string(self, action):
        if action.default is None or "default:" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


class ArgumentParser(HfArgumentParser):
    """transformers' `HfArgumentParser`, with each dataclass field as one dashed option."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, formatter_class=kwargs.pop("formatter_class", HelpFormatter), **kwargs)

    @staticmethod
    def _parse_dataclass_field(parser, field):
        HfArgumentParser._parse_dataclass_field(DashedOptions(parser), field)


class Checked:
    """Values given in Python are checked by the same types as the command line's, naming the flag."""

    def __post_init__(self):
        for item in dataclasses.fields(self):
            kinds = item.type.__args__ if isinstance(item.type, types.UnionType) else (item.type,)
            kind = next((k for k in kinds if k in CHECKED_TYPES), None)
            value = getattr(self, item.name)
            if kind is not None and value is not None:
                try:
                    object.__setattr__(self, item.name, kind(value))
                except (argparse.ArgumentTypeError, TypeError, ValueError) as error:
                    raise ValueError(f"{flag_name(item.name)}: {error}") from None


# ---------------------------------------------------------------------------------------------------------------------
# Presets: sizes and schedules
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Preset:
    """The options a preset sets; every one of them can be set by its own flag instead."""

    d_model: int
    num_heads: int
    d_ff: int
    encoder_layers: int
    decoder_layers: int
    dropout: float
    attention_dropout: float
    activation_dropout: float
    vocab_size: int
    max_tokens: int
    warmup_steps: int
    lr: float | None
    max_steps: int | None
    num_epochs: int | None
    eval_steps: int
    save_steps: int
    max_source_length: int
    max_target_length: int
    cooldown_steps: int = 0
    bpe_dropout: float = 0.0


PAPER = VanillaTransformerConfig()  # the paper's base model: the configuration's defaults

# "numbers" trains the embedded task quickly on a CPU; "small" suits Multi30k-sized corpora; "tiny" is the
# Transformer-Tiny of Wu et al. (2021), the best text-only Multi30k model, with their learning rate and warm-up, and
# a schedule sized for a CPU run of the Multi30k recipe (two single-thread processes of 2048 tokens; its duration is
# in training/recipes/RESULTS.md); "base" is the paper's base model and schedule (§5.3).
# fmt: off
PRESETS = {
    # numbers: a 200-token BPE keeps the German pieces short ("▁zwei", "undvierzig"), so that a number held out of
    # training is composed of pieces seen in others, while "null" is still one piece
    "numbers": Preset(
        d_model=128, num_heads=4, d_ff=512, encoder_layers=2, decoder_layers=2,
        dropout=0.1, attention_dropout=0.0, activation_dropout=0.0,
        vocab_size=200, max_tokens=4096, warmup_steps=200, lr=2e-3, max_steps=600, num_epochs=None,
        eval_steps=300, save_steps=300, max_source_length=32, max_target_length=32,
    ),
    "small": Preset(
        d_model=256, num_heads=4, d_ff=1024, encoder_layers=3, decoder_layers=3,
        dropout=0.3, attention_dropout=0.0, activation_dropout=0.0,
        vocab_size=8000, max_tokens=4096, warmup_steps=500, lr=1e-3, max_steps=None, num_epochs=10,
        eval_steps=1000, save_steps=1000, max_source_length=128, max_target_length=128,
    ),
    # Transformer-Tiny for Multi30k: also dropout 0.1 on the attention weights and after the FFN's ReLU, which raised
    # validation and test BLEU (the comparison is in training/recipes/RESULTS.md)
    "tiny": Preset(
        d_model=128, num_heads=4, d_ff=256, encoder_layers=4, decoder_layers=4,
        dropout=0.3, attention_dropout=0.1, activation_dropout=0.1,
        vocab_size=8000, max_tokens=4096, warmup_steps=2000, cooldown_steps=2000, lr=5e-3, max_steps=None,
        num_epochs=70, eval_steps=500, save_steps=120, max_source_length=128, max_target_length=128,
    ),
    # the paper's base model (Table 3) and schedule (§5.3): 25,000 tokens a batch, 4,000 warm-up steps, 100k updates
    "base": Preset(
        d_model=PAPER.d_model, num_heads=PAPER.num_heads, d_ff=PAPER.d_ff,
        encoder_layers=PAPER.encoder_layers, decoder_layers=PAPER.decoder_layers, dropout=PAPER.dropout,
        attention_dropout=PAPER.attention_dropout, activation_dropout=PAPER.activation_dropout,
        vocab_size=PAPER.vocab_size, max_tokens=25000, warmup_steps=4000, lr=None, max_steps=100_000,
        num_epochs=None, eval_steps=5000, save_steps=5000, max_source_length=256, max_target_length=256,
    ),
}
# fmt: on

# ---------------------------------------------------------------------------------------------------------------------
# The options, by concern
# ---------------------------------------------------------------------------------------------------------------------

PRESET_HELP = "(default: the preset's)"


@dataclass(frozen=True)
class DataArguments(Checked):
    _argument_group_name = "data (default: the embedded English->German number task)"

    dataset_name: str | None = option(help="a Hub dataset in the translation schema")
    dataset_config: str | None = option(help="configuration of --dataset-name, e.g. de-en")
    train_file: str | None = option(
        help="JSON lines, CSV or Parquet, either with a 'translation' column of {source: ..., target: ...} pairs (in "
        "CSV a JSON object per cell) or with one text column per language, named as --source-lang and --target-lang"
    )
    validation_file: str | None = option(help="the validation split, in the layout of --train-file")
    test_file: str | None = option(help="the test split, in the layout of --train-file")
    source_lang: str = option("en", help="the source language's key in each pair (or its column)")
    target_lang: str = option("de", help="the target language's key in each pair (or its column)")
    max_source_length: PositiveInt | None = option(
        help=f"longest source in tokens (longer pairs are dropped from training) {PRESET_HELP}"
    )
    max_target_length: PositiveInt | None = option(
        help=f"longest target in tokens; also the generation limit {PRESET_HELP}"
    )
    preprocessing_num_workers: PositiveInt | None = option(
        help="processes that tokenise the corpus (default: every core for 100,000 pairs or more, else one)"
    )
    streaming: bool = option(
        False,
        help="read the training split as it trains (a datasets IterableDataset), a pool of pairs at a time, for "
        "corpora larger than memory; pairs are shuffled within a pool, so shuffle a sorted corpus on disk first; "
        "needs --max-steps",
    )
    stream_pool_pairs: PositiveInt = option(
        100_000, help="with --streaming: pairs tokenised, shuffled and batched by length together"
    )


@dataclass(frozen=True)
class RunArguments(Checked):
    _argument_group_name = "run"

    output_dir: str | None = option(help="where the model folder is written (default: runs/<task>)")
    overwrite_output_dir: bool = option(False, help="replace a run already in --output-dir")
    preset: str | None = option(
        help="size defaults; 'numbers' without data, 'small' with data", choices=tuple(sorted(PRESETS))
    )
    seed: int = option(
        42,
        help="fixes the tokenizer, data order, initialisation and dropout: on CPU the same seed, data and thread "
        "count give bit-identical weights; on GPU, kernels may sum in another order, so runs agree closely but not "
        "bit for bit",
    )


@dataclass(frozen=True)
class ModelArguments(Checked):
    _argument_group_name = "model (the paper's symbols in VanillaTransformerConfig's docstring)"

    d_model: PositiveInt | None = option(help=f"the width of every sub-layer output and embedding {PRESET_HELP}")
    num_heads: PositiveInt | None = option(help=f"attention heads h; d_model must divide by it {PRESET_HELP}")
    d_ff: PositiveInt | None = option(help=f"the feed-forward network's inner size {PRESET_HELP}")
    encoder_layers: PositiveInt | None = option(help=f"encoder layers N {PRESET_HELP}")
    decoder_layers: PositiveInt | None = option(help=f"decoder layers N {PRESET_HELP}")
    dropout: Probability | None = option(
        help=f"P_drop, on each sub-layer's output and on the embedding sums {PRESET_HELP}"
    )
    attention_dropout: Probability | None = option(
        help="dropout on the attention weights (default: the preset's; 0 in the paper)"
    )
    activation_dropout: Probability | None = option(
        help="dropout after the FFN's ReLU (default: the preset's; 0 in the paper)"
    )
    norm_position: str = option(
        "post",
        help="post: LayerNorm(x + Sublayer(x)), the paper's; pre: x + Sublayer(LayerNorm(x))",
        choices=NORM_POSITIONS,
    )
    position_encoding: str = option(
        "sinusoidal", help="the paper's sinusoids (§3.5), or learned positions", choices=POSITION_ENCODINGS
    )
    share_embeddings: bool = option(
        True, help="one matrix for both embeddings and the output projection (§3.4); --no-share-embeddings: three"
    )


@dataclass(frozen=True)
class TokenizerArguments(Checked):
    _argument_group_name = "tokenizer"

    vocab_size: PositiveInt | None = option(help=f"joint BPE vocabulary size {PRESET_HELP}")
    tokenizer_name: str | None = option(help="use this tokenizer (folder or Hub name) instead of training one")
    bpe_sample_size: PositiveInt = option(
        500_000,
        help="train the BPE on at most this many training pairs, drawn at random with --seed (sentencepiece's "
        "input_sentence_size, 1M sentences); the whole corpus is still tokenised",
    )
    bpe_dropout: Probability | None = option(
        help="BPE-dropout (Provilkov et al. 2020): segment the training pairs anew every epoch, skipping each merge "
        "with this probability; evaluation and translation segment without it. The draws come from the tokenizers "
        "library's own generator, which --seed does not fix (default: the preset's; 0 in every preset)"
    )
    lowercase: bool = option(
        False,
        help="the trained tokenizer lowercases all text (the usual Multi30k preprocessing); the model then writes "
        "lowercase, so compare it by lowercased BLEU. References are never changed.",
    )


@dataclass(frozen=True)
class OptimisationArguments(Checked):
    _argument_group_name = "optimisation"

    max_tokens: PositiveInt | None = option(help=f"tokens per batch (per process) {PRESET_HELP}")
    max_steps: PositiveInt | None = option(help=f"optimizer updates {PRESET_HELP}")
    num_epochs: PositiveInt | None = option(help=f"used when --max-steps is not given {PRESET_HELP}")
    label_smoothing: Probability = option(0.1, help="epsilon_ls of the label-smoothed cross-entropy (§5.4)")
    rdrop_alpha: NonNegativeFloat = option(
        0.0,
        help="R-Drop (Liang et al. 2021): every batch goes through the model twice, under two dropout masks, and the "
        "loss adds this weight times the symmetric KL divergence of the two predictions (fairseq's weighting; 5 in "
        "its translation examples). Each update then costs about twice as much. 0 turns it off",
    )
    word_dropout: Probability = option(
        0.0,
        help="word dropout (Token Drop, Zhang et al. 2020): in training batches, replace each source token and each "
        "decoder input token with <unk> with this probability; the labels stay whole. 0 turns it off",
    )
    warmup_steps: PositiveInt | None = option(help=f"updates of linear learning-rate warm-up (§5.3) {PRESET_HELP}")
    lr: PositiveFloat | None = option(
        help="peak learning rate; without it the paper's d_model^-0.5 * warmup^-0.5 (default: the preset's)"
    )
    cooldown_steps: NonNegativeInt | None = option(
        help="decay the learning rate linearly to 0 over the last N updates (0: the paper's schedule to the end) "
        f"{PRESET_HELP}"
    )
    adam_beta1: Probability = option(0.9, help="Adam's beta1 (§5.3)")
    adam_beta2: Probability = option(0.98, help="Adam's beta2 (§5.3)")
    adam_epsilon: PositiveFloat = option(1e-9, help="Adam's epsilon (§5.3)")
    weight_decay: NonNegativeFloat = option(0.0, help="Adam's L2 weight decay (0 in the paper)")
    clip_norm: NonNegativeFloat = option(1.0, help="clip the gradient to this norm; 0 disables gradient clipping")
    gradient_accumulation_steps: PositiveInt = option(1, help="batches accumulated into each optimizer update")
    mixed_precision: str = option(
        "no",
        help="autocast the training forward (weights, gradients and optimizer stay float32; bf16 is fast on CPUs "
        "with AVX512-BF16 or AMX too). Greedy validation during training runs under it too; the final "
        "length-penalty search, scores and saved model are float32",
        choices=("no", "fp16", "bf16"),
    )
    cpu: bool = option(False, help="train on the CPU even if a GPU is present")
    compile: bool = option(
        False,
        help="run the training step (the forward pass and its loss; the backward pass follows) under torch.compile: "
        "on a GPU it saves the launch overhead of many small kernels; on a CPU, at this project's model sizes, it is "
        "slower than eager. The first steps, and each new batch shape for a while, spend time compiling",
    )


@dataclass(frozen=True)
class CheckpointArguments(Checked):
    _argument_group_name = "checkpoints and logging"

    save_strategy: str = option(
        "steps",
        help="when to checkpoint: every --save-steps updates and after the last one (steps), or at the end of every "
        "epoch (epoch: as fairseq's epoch checkpoints, a last epoch cut short by --max-steps is not checkpointed, so "
        "--average-checkpoints averages whole epochs)",
        choices=("steps", "epoch"),
    )
    save_steps: NonNegativeInt | None = option(
        help=f"checkpoint every N updates with --save-strategy steps; 0 disables checkpoints {PRESET_HELP}"
    )
    keep_checkpoints: PositiveInt = option(5, help="how many of the newest checkpoints are kept")
    resume_from: str | None = option(help="a checkpoint folder, or a run folder to continue from its newest")
    average_checkpoints: PositiveInt = option(1, help="average the last N checkpoints into the final weights")
    tune_averaging: bool = option(
        False,
        help="with --average-checkpoints: score the last update's weights and the average on the validation split "
        "(each with its best --tune-length-penalty value, when given) and keep the better for the test split and "
        "the saved model",
    )
    eval_steps: NonNegativeInt | None = option(help=f"greedy validation BLEU every N steps; 0 disables {PRESET_HELP}")
    log_steps: PositiveInt = option(10, help="the token rate is measured over this many updates")
    report_to: list[str] = option(
        ["tensorboard"], help="Accelerate trackers ('none' for none); tensorboard is used when installed"
    )
    show_samples: NonNegativeInt = option(5, help="translations printed at the end, with their source and reference")


@dataclass(frozen=True)
class HubArguments(Checked):
    _argument_group_name = "Hugging Face Hub"

    push_to_hub: bool = option(False, help="upload the finished model folder (not its checkpoints) to --hub-model-id")
    hub_model_id: str | None = option(help="repository name, e.g. user/vanilla-transformer-en-de")
    hub_token: str | None = option(help="default: the token saved by `hf auth login`")
    hub_private_repo: bool | None = option(
        help="make a new repository private (default: the Hub's own default)", nargs="?", const=True
    )


@dataclass(frozen=True)
class GenerationArguments(Checked):
    _argument_group_name = "evaluation (beam search)"

    num_beams: PositiveInt = option(5, help="beam size; 1 is greedy search")
    length_penalty: float | None = option(
        help="beam score = log p / length^alpha (default: the model's generation config; 1.0 for a new model)"
    )
    eval_batch_size: PositiveInt = option(64, help="sentences per evaluation batch")


@dataclass(frozen=True)
class EvaluationArguments(GenerationArguments):
    tune_length_penalty: list[float] | None = option(
        help="at the end, decode the validation split with each length penalty and keep the one with the best BLEU "
        "(lowercased with --lowercase) for the test split and the saved generation config",
        metavar="ALPHA",
    )


TRAIN_ARGUMENT_GROUPS = (
    DataArguments,
    RunArguments,
    ModelArguments,
    TokenizerArguments,
    OptimisationArguments,
    CheckpointArguments,
    HubArguments,
    EvaluationArguments,
)


@dataclass(frozen=True)
class TrainArguments(
    EvaluationArguments,
    HubArguments,
    CheckpointArguments,
    OptimisationArguments,
    TokenizerArguments,
    ModelArguments,
    RunArguments,
    DataArguments,
):
    """Every option of `vanilla-transformer train`, in one frozen object (see the groups for each one's help)."""

    @classmethod
    def from_namespace(cls, namespace) -> "TrainArguments":
        return cls(**{item.name: getattr(namespace, item.name) for item in dataclasses.fields(cls)})

    @property
    def uses_embedded_task(self) -> bool:
        return not (self.dataset_name or self.train_file)


# ---------------------------------------------------------------------------------------------------------------------
# Resolving: the preset's values where no flag was given, and the flags checked against each other
# ---------------------------------------------------------------------------------------------------------------------


class ArgumentsError(ValueError):
    """Flags that cannot be used together; the message names them."""


def check_sources(args: TrainArguments) -> None:
    """The data and tokenizer flags, each pair that cannot go together named."""
    if args.dataset_name and args.train_file:
        raise ArgumentsError("--dataset-name and --train-file are mutually exclusive: give one source of data")
    if (args.validation_file or args.test_file) and not args.train_file:
        raise ArgumentsError("--validation-file/--test-file need --train-file")
    if args.dataset_config and not args.dataset_name:
        raise ArgumentsError("--dataset-config needs --dataset-name")
    if args.tokenizer_name and args.vocab_size:
        raise ArgumentsError("--vocab-size trains a new tokenizer; it cannot be combined with --tokenizer-name")
    if args.tokenizer_name and args.lowercase:
        raise ArgumentsError(
            "--lowercase applies to a tokenizer trained here; it cannot be combined with --tokenizer-name"
        )
    if args.streaming and args.uses_embedded_task:
        raise ArgumentsError("--streaming reads --train-file or --dataset-name; the embedded task is in memory")
    if args.source_lang == args.target_lang:
        raise ArgumentsError(f"--source-lang and --target-lang are both {args.source_lang!r}")


def check_outputs(args: TrainArguments) -> None:
    """The Hub, evaluation and checkpoint flags, each pair that cannot go together named."""
    if args.push_to_hub and not args.hub_model_id:
        raise ArgumentsError("--push-to-hub needs --hub-model-id NAME (e.g. user/vanilla-transformer-en-de)")
    if args.hub_model_id and not args.push_to_hub:
        raise ArgumentsError("--hub-model-id is only used with --push-to-hub")
    if args.tune_length_penalty and args.num_beams == 1:
        raise ArgumentsError("--tune-length-penalty needs beam search (--num-beams > 1); greedy search ignores it")
    if args.tune_length_penalty and args.train_file and not args.validation_file:
        raise ArgumentsError("--tune-length-penalty picks on the validation split: give --validation-file")
    if args.tune_averaging and args.average_checkpoints == 1:
        raise ArgumentsError("--tune-averaging compares the average with the last update: give --average-checkpoints N")
    if args.tune_averaging and args.train_file and not args.validation_file:
        raise ArgumentsError("--tune-averaging picks on the validation split: give --validation-file")
    if args.average_checkpoints > args.keep_checkpoints:
        raise ArgumentsError(
            f"--average-checkpoints {args.average_checkpoints} needs at least as many kept checkpoints "
            f"(--keep-checkpoints {args.keep_checkpoints})"
        )


def check_sizes(args: TrainArguments, preset: str, from_preset: set[str]) -> None:
    """The sizes and schedule, once the preset has filled them in."""
    if args.max_steps is None and args.num_epochs is None:
        raise ArgumentsError("give --max-steps or --num-epochs")
    if args.streaming and args.bpe_dropout:
        origin = f" (set by --preset {preset})" if "bpe_dropout" in from_preset else ""
        raise ArgumentsError(
            f"--bpe-dropout{origin} re-segments the whole corpus every epoch; it cannot be used with --streaming"
        )
    if args.streaming and args.max_steps is None:
        raise ArgumentsError(
            "--streaming reads a corpus of unknown length: give --max-steps (--num-epochs cannot size the run)"
        )
    if args.d_model % args.num_heads:
        raise ArgumentsError(f"--d-model {args.d_model} must be divisible by --num-heads {args.num_heads}")
    if args.max_steps is not None and args.cooldown_steps > args.max_steps:
        origin = f" (set by --preset {preset})" if "cooldown_steps" in from_preset else ""
        raise ArgumentsError(
            f"--cooldown-steps {args.cooldown_steps}{origin} is longer than the run (--max-steps "
            f"{args.max_steps}): give a shorter --cooldown-steps"
        )
    if args.average_checkpoints > 1 and args.save_strategy == "steps" and not args.save_steps:
        raise ArgumentsError("--average-checkpoints needs checkpoints: set --save-steps or --save-strategy epoch")
    if args.streaming and args.save_strategy == "epoch":
        raise ArgumentsError("--save-strategy epoch needs epochs; a --streaming run checkpoints every --save-steps")


def tensorboard_installed() -> bool:
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return False
    return True


def resolve(args: TrainArguments) -> TrainArguments:
    """`args` with every option a preset sets filled in (`--preset`, else 'numbers' for the embedded task and 'small'
    for data), the output folder named, and the flags checked; raises `ArgumentsError` naming the flags."""
    check_sources(args)
    check_outputs(args)
    preset = args.preset or ("numbers" if args.uses_embedded_task else "small")
    from_preset = {name: value for name, value in vars(PRESETS[preset]).items() if getattr(args, name) is None}
    task = "numbers-en-de" if args.uses_embedded_task else f"{args.source_lang}-{args.target_lang}"
    resolved = dataclasses.replace(
        args,
        **from_preset,
        preset=preset,
        length_penalty=1.0 if args.length_penalty is None else args.length_penalty,
        output_dir=args.output_dir or os.path.join("runs", task),
        # the default tracker, only when installed
        report_to=["none"] if args.report_to == ["tensorboard"] and not tensorboard_installed() else args.report_to,
    )
    check_sizes(resolved, preset, set(from_preset))
    return resolved


__all__ = [
    "TrainArguments",
    "TRAIN_ARGUMENT_GROUPS",
    "DataArguments",
    "GenerationArguments",
    "Preset",
    "PRESETS",
    "ArgumentsError",
    "resolve",
]
