"""The arguments of `vanilla-transformer train`, as dataclasses read by transformers' `HfArgumentParser`: each option's
default, type, choices and help line in one place, one dataclass per concern (each a group of `--help`), and
`TrainArguments`, which holds the groups as they are: `args.data`, `args.model`, `args.optimisation`, ... The size
presets are in presets.py; `resolve` fills what a preset sets and checks the flags against each other.

The run is built from `TrainArguments` in one place (startup.py's `setup_run`); every other function takes the group
it reads, or the plain values.
"""

import dataclasses
import os
from dataclasses import dataclass, field

from ...configuration.configuration_vanilla_transformer import ACTIVATIONS, NORM_POSITIONS, POSITION_ENCODINGS
from .argument_checks import check_outputs, check_sources, tensorboard_installed
from .argument_types import (
    MOST_VOCABULARY,
    ArgumentParser,
    ArgumentsError,
    Checked,
    LengthPenalty,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Probability,
    Seed,
    VocabularySize,
    option,
)
from .presets import PAPER_CHOICES, PRESETS, preset_values
from .switch_arguments import SwitchArguments, check_switches

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

    @property
    def uses_embedded_task(self) -> bool:
        return not (self.dataset_name or self.train_file)


@dataclass(frozen=True)
class RunArguments(Checked):
    _argument_group_name = "run"

    output_dir: str | None = option(help="where the model folder is written (default: runs/<task>)")
    overwrite_output_dir: bool = option(False, help="replace a run already in --output-dir")
    preset: str | None = option(
        help="size defaults; 'numbers' without data, 'small' with data", choices=tuple(sorted(PRESETS))
    )
    seed: Seed = option(
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
    norm_position: str | None = option(
        help="post: LayerNorm(x + Sublayer(x)), the paper's; pre: x + Sublayer(LayerNorm(x)); none: x + Sublayer(x), "
        "a study's (default: post)",
        choices=NORM_POSITIONS,
    )
    position_encoding: str | None = option(
        help="the paper's sinusoids (§3.5), learned positions, or none (a study's: a bag of tokens) (default: "
        "sinusoidal)",
        choices=POSITION_ENCODINGS,
    )
    activation: str | None = option(
        help="the feed-forward network's non-linearity: the paper's ReLU, GELU, SiLU (swish), or linear (a study's: "
        "none) (default: relu)",
        choices=ACTIVATIONS,
    )
    share_embeddings: bool | None = option(
        help="one matrix for both embeddings and the output projection (§3.4); --no-share-embeddings: three "
        "(default: shared)",
        nargs="?",
        const=True,
    )
    residual_in_fp32: bool = option(
        True,
        help="with --mixed-precision, keep the residual stream (every Add&Norm's output) in float32, as autocast "
        "leaves it; --no-residual-in-fp32 carries it in the autocast dtype: each LayerNorm still computes in float32, "
        "and no sub-layer's input is cast again. Saved in the model's configuration (`residual_in_fp32`); a run "
        "with --init-from takes this flag's value",
    )
    init_from: str | None = option(
        help="fine-tune: start from this model folder (trained here or brought in by `import`), its weights, "
        "architecture and tokenizer, instead of a new model"
    )


@dataclass(frozen=True)
class TokenizerArguments(Checked):
    _argument_group_name = "tokenizer"

    vocab_size: VocabularySize | None = option(
        help=f"joint BPE vocabulary size, at most {MOST_VOCABULARY:,} {PRESET_HELP}"
    )
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
    num_epochs: PositiveInt | None = option(
        help=f"used when --max-steps is not given (given, it replaces a preset's --max-steps) {PRESET_HELP}"
    )
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
    fused_loss: bool = option(
        False,
        help="compute the output projection and the label-smoothed loss together, a chunk of tokens at a time, so "
        "that the (tokens x vocabulary) logits are never made whole: less memory at large vocabularies, the same "
        "loss to float rounding. Not with --rdrop-alpha, whose consistency term reads the logits",
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
    layer_gradients: NonNegativeInt = option(
        0,
        help="record in metrics.jsonl, for the first N updates, the gradient norm of each stack's first and last "
        "layer before clipping (whether the gradient reaches the early layers; `ablate` reports it)",
    )
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
    length_penalty: LengthPenalty | None = option(
        help="beam score = log p / length^alpha (default: the model's generation config; 1.0 for a new model)"
    )
    eval_batch_size: PositiveInt = option(64, help="sentences per evaluation batch")


@dataclass(frozen=True)
class EvaluationArguments(GenerationArguments):
    tune_length_penalty: list[LengthPenalty] | None = option(
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
    SwitchArguments,
)


@dataclass(frozen=True)
class TrainArguments:
    """Every option of `vanilla-transformer train`, kept in its groups (see each group for its options' help).
    `TrainArguments.from_options(max_steps=100, d_model=64)` routes options by name to their groups."""

    data: DataArguments = field(default_factory=DataArguments)
    run: RunArguments = field(default_factory=RunArguments)
    model: ModelArguments = field(default_factory=ModelArguments)
    tokenizer: TokenizerArguments = field(default_factory=TokenizerArguments)
    optimisation: OptimisationArguments = field(default_factory=OptimisationArguments)
    checkpoints: CheckpointArguments = field(default_factory=CheckpointArguments)
    hub: HubArguments = field(default_factory=HubArguments)
    evaluation: EvaluationArguments = field(default_factory=EvaluationArguments)
    switches: SwitchArguments = field(default_factory=SwitchArguments)

    @classmethod
    def from_options(cls, **options) -> "TrainArguments":
        """The arguments with these options (by their names: `max_steps`, ...) and every other one's default."""
        return cls().replace(**options)

    @classmethod
    def from_namespace(cls, namespace) -> "TrainArguments":
        """The arguments of the train command's parsed flags, each group built from its own."""
        return cls(**{group.name: group.default_factory.from_namespace(namespace) for group in dataclasses.fields(cls)})

    def replace(self, **options) -> "TrainArguments":
        """A copy with these options changed, each in its group; a `TypeError` names an option that is not one."""
        groups = option_groups()
        unknown = sorted(set(options) - set(groups))
        if unknown:
            raise TypeError(f"not an option of vanilla-transformer train: {', '.join(unknown)}")
        changed = {}
        for group in {groups[name] for name in options}:
            values = {name: value for name, value in options.items() if groups[name] == group}
            changed[group] = dataclasses.replace(getattr(self, group), **values)
        return dataclasses.replace(self, **changed)

    def options(self) -> dict:
        """Every option by its name, from all the groups (what the trackers record)."""
        return {name: getattr(getattr(self, group), name) for name, group in option_groups().items()}


def default_options() -> dict:
    """Every option's value where no flag gives it and no preset sets it: the groups' defaults, with the
    architecture's choices that `resolve` fills in."""
    return {**TrainArguments().options(), **PAPER_CHOICES}


def option_groups() -> dict[str, str]:
    """Each option's name -> the field of `TrainArguments` that holds its group."""
    return {
        item.name: group.name
        for group in dataclasses.fields(TrainArguments)
        for item in dataclasses.fields(group.default_factory)
    }


# ---------------------------------------------------------------------------------------------------------------------
# Resolving: the preset's values where no flag was given, and the flags checked against each other
# ---------------------------------------------------------------------------------------------------------------------


def preset_origin(name: str, preset: str, from_preset: set[str]) -> str:
    return f" (set by --preset {preset})" if name in from_preset else ""


def check_sizes(args: TrainArguments, preset: str, from_preset: set[str]) -> None:
    """The sizes and schedule, once the preset has filled them in: these checks cross the groups."""
    data, optimisation, checkpoints = args.data, args.optimisation, args.checkpoints
    if optimisation.max_steps is None and optimisation.num_epochs is None:
        raise ArgumentsError("give --max-steps or --num-epochs")
    if data.streaming and args.tokenizer.bpe_dropout:
        origin = preset_origin("bpe_dropout", preset, from_preset)
        raise ArgumentsError(
            f"--bpe-dropout{origin} re-segments the whole corpus every epoch; it cannot be used with --streaming"
        )
    if data.streaming and optimisation.max_steps is None:
        raise ArgumentsError(
            "--streaming reads a corpus of unknown length: give --max-steps (--num-epochs cannot size the run)"
        )
    if optimisation.fused_loss and optimisation.rdrop_alpha:
        raise ArgumentsError("--fused-loss never makes the logits, which --rdrop-alpha's KL term reads: give one")
    if args.model.d_model % args.model.num_heads:
        raise ArgumentsError(f"--d-model {args.model.d_model} must be divisible by --num-heads {args.model.num_heads}")
    if optimisation.max_steps is not None and optimisation.cooldown_steps > optimisation.max_steps:
        origin = preset_origin("cooldown_steps", preset, from_preset)
        raise ArgumentsError(
            f"--cooldown-steps {optimisation.cooldown_steps}{origin} is longer than the run (--max-steps "
            f"{optimisation.max_steps}): give a shorter --cooldown-steps"
        )
    if checkpoints.average_checkpoints > 1 and checkpoints.save_strategy == "steps" and not checkpoints.save_steps:
        raise ArgumentsError("--average-checkpoints needs checkpoints: set --save-steps or --save-strategy epoch")
    if data.streaming and checkpoints.save_strategy == "epoch":
        raise ArgumentsError("--save-strategy epoch needs epochs; a --streaming run checkpoints every --save-steps")


def resolve(args: TrainArguments) -> TrainArguments:
    """`args` with every option a preset sets filled in (`--preset`, else 'numbers' for the embedded task and 'small'
    for data), the output folder named, and the flags checked; raises `ArgumentsError` naming the flags."""
    data, evaluation, report_to = args.data, args.evaluation, args.checkpoints.report_to
    check_sources(data, args.tokenizer)
    check_outputs(args.hub, evaluation, args.checkpoints, data)
    check_switches(args.switches, args.model.init_from)
    preset = args.run.preset or ("numbers" if data.uses_embedded_task else "small")
    if args.model.init_from:  # the folder's architecture and tokenizer
        from ..run.finetuning import options_from_folder  # the command line's parsers load this file alone

        args = args.replace(**options_from_folder(args.model.init_from, args.options(), TrainArguments().options()))
    given = args.options()
    from_preset = preset_values(preset, given)
    choices = {name: value for name, value in PAPER_CHOICES.items() if given[name] is None}
    task = "numbers-en-de" if data.uses_embedded_task else f"{data.source_lang}-{data.target_lang}"
    resolved = args.replace(
        **from_preset,
        **choices,
        preset=preset,
        length_penalty=1.0 if evaluation.length_penalty is None else evaluation.length_penalty,
        output_dir=args.run.output_dir or os.path.join("runs", task),
        # the default tracker, only when installed
        report_to=["none"] if report_to == ["tensorboard"] and not tensorboard_installed() else report_to,
    )
    check_sizes(resolved, preset, set(from_preset))
    return resolved


__all__ = [
    "ArgumentParser",
    "PositiveInt",
    "TrainArguments",
    "TRAIN_ARGUMENT_GROUPS",
    "DataArguments",
    "RunArguments",
    "ModelArguments",
    "TokenizerArguments",
    "OptimisationArguments",
    "CheckpointArguments",
    "HubArguments",
    "GenerationArguments",
    "EvaluationArguments",
    "ArgumentsError",
    "default_options",
    "resolve",
]
