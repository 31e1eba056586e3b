"""The model card that `vanilla-transformer train` writes as README.md of its output folder.

The card's text is the Jinja template `model_card_template.md` beside this file; the functions below fill it in from
the model's configuration, the arguments the run was trained with and its evaluation results. A folder written by
`save_pretrained` outside a training run gets the short generic card of `modeling/hub_vanilla_transformer.py`.
"""

import os
from dataclasses import dataclass
from importlib import resources

import jinja2
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ...configuration import changed_switches
from ..options.arguments import (
    CheckpointArguments,
    DataArguments,
    EvaluationArguments,
    ModelArguments,
    OptimisationArguments,
    TokenizerArguments,
)

CARD_TEMPLATE = "model_card_template.md"  # a package data file of this package, beside this module


@dataclass(frozen=True)
class RunDescription:
    """What the card says of how the model was trained: the groups of arguments it describes, and the seed."""

    data: DataArguments
    tokenizer: TokenizerArguments
    model: ModelArguments
    optimisation: OptimisationArguments
    checkpoints: CheckpointArguments
    evaluation: EvaluationArguments
    seed: int


def dataset_name(data: DataArguments) -> tuple[str, str, str | None]:
    """(a readable name of the training data, a short identifier, its Hub id when it came from the Hub)."""
    if data.dataset_name:
        name = data.dataset_name + (f" ({data.dataset_config})" if data.dataset_config else "")
        return name, data.dataset_name, data.dataset_name
    if data.train_file:
        folder = os.path.basename(os.path.dirname(os.path.abspath(data.train_file))) or "local-files"
        return folder, folder, None
    return "English -> German number words (the embedded task)", "numbers", None


def number(value: float) -> str:
    """A hyperparameter as a person writes it: 0.9, 0.98, 1e-9 (Python's shortest form, exponent without zeros)."""
    mantissa, _, exponent = repr(float(value)).partition("e")
    return mantissa + (f"e{int(exponent)}" if exponent else "")


def optimiser(optimisation: OptimisationArguments) -> str:
    """The optimiser with the settings the run was trained with, e.g. "Adam (beta1 0.9, beta2 0.98, eps 1e-9)"."""
    settings = [
        f"beta1 {number(optimisation.adam_beta1)}",
        f"beta2 {number(optimisation.adam_beta2)}",
        f"eps {number(optimisation.adam_epsilon)}",
    ]
    if optimisation.weight_decay:
        settings.append(f"weight decay {number(optimisation.weight_decay)}")
    return f"Adam ({', '.join(settings)})"


def schedule(optimisation: OptimisationArguments) -> str:
    """The learning-rate schedule: the paper's, or a peak learning rate after warm-up, with an optional cool-down."""
    text = (
        f"peak learning rate {optimisation.lr} reached after {optimisation.warmup_steps} warm-up updates, then "
        "decaying as step^-0.5"
        if optimisation.lr
        else f"the paper's schedule d_model^-0.5 * min(step^-0.5, step * {optimisation.warmup_steps}^-1.5)"
    )
    if optimisation.cooldown_steps:
        text += f", decaying linearly to 0 over the last {optimisation.cooldown_steps} updates"
    return text


def data_lines(tokenizer: TokenizerArguments, optimisation: OptimisationArguments, results: dict) -> list[str]:
    """What the model was fed: the vocabulary, lowercasing, and the batches."""
    processes = results.get("processes", 1)
    engine = results.get("engine", "")  # "FSDP2 (SHARDED_STATE_DICT) on 2 processes", "DDP on 2 processes"
    sharded = f", sharded with {engine.split(' on ')[0]}" if engine.startswith(("FSDP", "DeepSpeed")) else ""
    lines = [
        "`vanilla-transformer train` (Accelerate): a joint source-target BPE vocabulary trained with `tokenizers`"
        + ("" if tokenizer.tokenizer_name else f" ({tokenizer.vocab_size} tokens)")
        + (
            f", with BPE-dropout {tokenizer.bpe_dropout} on the training pairs (segmented anew every epoch)"
            if tokenizer.bpe_dropout
            else ""
        )
        + ";",
        f"batches of similar-length sentence pairs up to {optimisation.max_tokens} tokens per process"
        + (f", {processes} data-parallel processes{sharded}" if processes > 1 else "")
        + (
            f", {optimisation.gradient_accumulation_steps} accumulated per update"
            if optimisation.gradient_accumulation_steps > 1
            else ""
        )
        + ";",
    ]
    if tokenizer.lowercase:
        lines.insert(
            1,
            "all text lowercased by the tokenizer (`--lowercase`): inputs are lowercased before "
            "translation and outputs are lowercase, so lowercased BLEU is the comparable score;",
        )
    return lines


def loss_lines(model: ModelArguments, optimisation: OptimisationArguments) -> list[str]:
    """The regularisation and the loss: dropout, word dropout, label smoothing and R-Drop."""
    lines = [
        f"dropout P_drop {model.dropout} on sub-layer outputs and embedding sums"
        + (f", {model.attention_dropout} on attention weights" if model.attention_dropout else "")
        + (f", {model.activation_dropout} after the feed-forward ReLU" if model.activation_dropout else "")
        + ";",
    ]
    if optimisation.word_dropout:
        lines.append(f"word dropout {optimisation.word_dropout} (source and decoder input tokens replaced by <unk>);")
    lines.append(
        f"label-smoothed cross-entropy (epsilon {optimisation.label_smoothing}) normalised by target tokens"
        + (
            f", with R-Drop (every batch through two dropout masks, alpha {optimisation.rdrop_alpha} on their "
            "symmetric KL divergence)"
            if optimisation.rdrop_alpha
            else ""
        )
        + ";"
    )
    return lines


def final_weights(checkpoints: CheckpointArguments, results: dict) -> str:
    """Which weights the model holds: the last update's, or the average of the last checkpoints (of whole epochs
    with --save-strategy epoch), or the one of the two that --tune-averaging chose on validation."""
    if checkpoints.average_checkpoints == 1 or results.get("checkpoints_averaged") == 0:  # none saved to average
        return "the final weights are those of the last update;"
    unit = "epoch checkpoints" if checkpoints.save_strategy == "epoch" else "checkpoints"
    search = results.get("averaging_search")
    count = (search or results).get("checkpoints_averaged", checkpoints.average_checkpoints)
    average = f"the average of the last {count} {unit}"
    if not search:
        return f"the final weights are {average};"
    kept = average if search["chosen"] == "average" else "those of the last update"
    return f"the final weights are {kept}, chosen on the validation split against the other of the two;"


def update_lines(described: RunDescription, results: dict) -> list[str]:
    """How the weights were updated and chosen, and how the model was evaluated."""
    optimisation, evaluation = described.optimisation, described.evaluation
    seconds = f"{results['train_seconds']:.1f} s of training"
    if optimisation.max_steps:
        length = f"{optimisation.max_steps} updates ({seconds})"
    else:
        length = f"{optimisation.num_epochs} epochs ({results.get('train_steps')} updates, {seconds})"
    return [
        f"{optimiser(optimisation)}, {schedule(optimisation)};",
        f"gradient clipping at norm {optimisation.clip_norm}; {length}; seed {described.seed}; mixed precision: "
        f"{optimisation.mixed_precision};",
        final_weights(described.checkpoints, results),
        f"evaluation with beam search (beams {evaluation.num_beams}, length penalty {evaluation.length_penalty}"
        + (
            f", chosen on the validation split among {', '.join(map(str, evaluation.tune_length_penalty))}"
            if evaluation.tune_length_penalty
            else ""
        )
        + ").",
    ]


def procedure(described: RunDescription, results: dict) -> str:
    """The card's "Training procedure" section, from the groups of arguments the run was trained with and its results
    (the number of processes, updates and seconds)."""
    lines = (
        data_lines(described.tokenizer, described.optimisation, results)
        + loss_lines(described.model, described.optimisation)
        + update_lines(described, results)
    )
    return "\n".join("- " + line for line in lines)


def write_run_card(folder: str, model, results: dict, described: RunDescription, hub_model_id: str | None) -> None:
    """Write the card of a trained `model` into `folder`, describing the run by the groups of arguments it was
    trained with; `hub_model_id` names it where it is uploaded."""
    data = described.data
    name, identifier, hub_id = dataset_name(data)
    example = "forty-two" if not (data.dataset_name or data.train_file) else "A man is riding a bicycle."
    description = (
        f"Training data: {name}, direction {data.source_lang} -> {data.target_lang}. "
        "Sentence pairs longer than "
        f"{data.max_source_length} source or {data.max_target_length} target tokens were left out of training."
    )
    card = model_card(
        model.config,
        model.num_parameters(),
        model_name=hub_model_id or os.path.basename(os.path.normpath(folder)),
        languages=(data.source_lang, data.target_lang),
        dataset=name,
        dataset_type=identifier,
        dataset_id=hub_id,
        data_description=description,
        procedure=procedure(described, results),
        results={k: v for k, v in results.items() if isinstance(v, dict)},
        path=hub_model_id or folder,
        example=example,
    )
    card.save(os.path.join(folder, "README.md"))


def architecture(config, num_parameters: int) -> dict:
    """The template's architecture variables: the description and the table of the model's configuration."""
    return {
        "scale": " scaled by sqrt(d_model)" if config.scale_embedding else "",
        "positions": POSITIONS[config.position_encoding],
        "encoder_layers": config.encoder_layers,
        "decoder_layers": config.decoder_layers,
        "norm": NORMS[config.norm_position],
        "d_model": config.d_model,
        "num_heads": config.num_heads,
        "d_k": getattr(config, "d_k", None) or config.d_model // config.num_heads,
        "d_ff": config.d_ff,
        "dropout": config.dropout,
        "vocab_size": config.vocab_size,
        "shared": "yes" if config.share_embeddings else "no",
        "parameters": f"{num_parameters:,}",
        "switches": switches_line(config),
    }


# the card's words for each `position_encoding`, after "token embeddings"
POSITIONS = {
    "sinusoidal": "plus sinusoidal positional encodings",
    "learned": "plus learned positional encodings",
    "none": "without positional encodings (a study's)",
}
# the card's words for each `norm_position`
NORMS = {
    "post": "post-norm Add&Norm, LayerNorm(x + Dropout(Sublayer(x)))",
    "pre": "pre-norm, x + Dropout(Sublayer(LayerNorm(x))) and a final LayerNorm per stack",
    "none": "no LayerNorm (a study's), x + Dropout(Sublayer(x))",
}


def switches_line(config) -> str:
    """A paragraph for a model that a study took apart (its changed study switches), else nothing."""
    changed = changed_switches(config)
    if not changed:
        return ""
    settings = ", ".join(f"`{name}={value}`" for name, value in changed.items())
    return (
        f"\n\n**Not the paper's model:** a study of the architecture (`vanilla-transformer ablate`) changed {settings} "
        "(see `VanillaTransformerConfig`)."
    )


def model_card(
    config,
    num_parameters: int,
    *,
    model_name: str = "vanilla-transformer translation model",
    languages: tuple[str, str] | None = None,
    dataset: str | None = None,
    dataset_type: str | None = None,
    dataset_id: str | None = None,
    data_description: str | None = None,
    procedure: str | None = None,
    results: dict | None = None,
    path: str = "path/to/this/folder",
    example: str = "forty-two",
    tags: list[str] | None = None,
) -> ModelCard:
    """The training run's model card: `model_card_template.md` with Hub metadata. `results` maps split names to the
    metrics written by `vanilla-transformer train` (bleu, bleu_lowercase, chrf, bleu_signature); they become the
    card's `model-index`."""
    dataset_name = dataset or "custom"
    eval_results = card_eval_results(results or {}, dataset_name, dataset_type or dataset_id or dataset_name)
    data = ModelCardData(
        library_name="transformers",
        pipeline_tag="translation",
        license="apache-2.0",
        language=list(languages) if languages else None,
        datasets=[dataset_id] if dataset_id else None,
        tags=["translation", "vanilla-transformer", "transformer", "encoder-decoder"] + list(tags or []),
        model_name=model_name,
        eval_results=eval_results or None,
    )
    template = jinja2.Template(
        resources.files(__package__).joinpath(CARD_TEMPLATE).read_text(encoding="utf-8"),
        undefined=jinja2.StrictUndefined,
    )
    text = template.render(
        card_data=data.to_yaml(),
        model_name=model_name,
        task_line=f" It translates {languages[0]} -> {languages[1]}." if languages else "",
        direction=f" from {languages[0]} to {languages[1]}" if languages else "",
        data=data_description or "Not recorded.",
        procedure=procedure or "Not recorded.",
        evaluation=evaluation_section(results),
        path=path,
        example=example,
        **architecture(config, num_parameters),
    )
    return ModelCard(text)


def card_eval_results(results: dict, dataset_name: str, dataset_type: str) -> list[EvalResult]:
    """The card's `model-index` entries: per split, exact match first where it is the figure to read (the embedded
    number task), then BLEU and chrF, cased and lowercased."""
    eval_results = []
    for split, metrics in results.items():
        if not isinstance(metrics, dict) or "bleu" not in metrics:
            continue
        leading = (("exact_match", "exact_match", "Exact match"),) if "exact_match_by_digits" in metrics else ()
        for metric_type, key, name in leading + (
            ("bleu", "bleu", "BLEU"),
            ("bleu", "bleu_lowercase", "BLEU (lowercased)"),
            ("chrf", "chrf", "chrF"),
            ("chrf", "chrf_lowercase", "chrF (lowercased)"),
        ):
            if key not in metrics:
                continue
            eval_results.append(
                EvalResult(
                    task_type="translation",
                    task_name="Translation",
                    dataset_type=dataset_type,
                    dataset_name=dataset_name,
                    dataset_split=split,
                    metric_type=metric_type,
                    metric_name=name,
                    metric_value=metrics[key],
                    verified=False,
                )
            )
    return eval_results


def evaluation_section(results: dict | None) -> str:
    """The card's evaluation text: the scores table, the sacreBLEU signature and exact match per digit count."""
    if not results:
        return "Not evaluated: this folder was written by `save_pretrained` without evaluation results."
    rows = [
        f"| {split} | {m['bleu']} | {m['bleu_lowercase']} | {m['chrf']} | {m.get('chrf_lowercase', '')} | "
        f"{m.get('exact_match', '')} | {m.get('perplexity', '')} |"
        for split, m in results.items()
        if isinstance(m, dict) and "bleu" in m
    ]
    signature = next(
        (m["bleu_signature"] for m in results.values() if isinstance(m, dict) and "bleu_signature" in m), ""
    )
    where = results.get("evaluated_on")
    return (
        f"sacreBLEU on the held-out splits, beam search{f' (computed on {where})' if where else ''}:\n\n"
        "| split | BLEU | BLEU (lowercased) | chrF | chrF (lowercased) | exact match % | perplexity |\n"
        "|---|---|---|---|---|---|---|\n"
        + "\n".join(rows)
        + (f"\n\nsacreBLEU signature: `{signature}`" if signature else "")
        + "".join(
            f"\n\nExact match % on {split} by digit count: "
            + ", ".join(f"{digits} digits {value}" for digits, value in m["exact_match_by_digits"].items())
            for split, m in results.items()
            if isinstance(m, dict) and "exact_match_by_digits" in m
        )
        + "\n\nPerplexity: of the reference translations, per target token, with dropout off."
    )
