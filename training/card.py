"""The model card that `vanilla-transformer train` writes as README.md of its output folder."""

import os

from ..modeling.hub_vanilla_transformer import model_card


def dataset_name(args) -> tuple[str, str, str | None]:
    """(a readable name of the training data, a short identifier, its Hub id when it came from the Hub)."""
    if args.dataset_name:
        name = args.dataset_name + (f" ({args.dataset_config})" if args.dataset_config else "")
        return name, args.dataset_name, args.dataset_name
    if args.train_file:
        folder = os.path.basename(os.path.dirname(os.path.abspath(args.train_file))) or "local-files"
        return folder, folder, None
    return "English -> German number words (the embedded task)", "numbers", None


def procedure(args, results: dict) -> str:
    schedule = (
        f"peak learning rate {args.lr} reached after {args.warmup_steps} warm-up updates, then decaying as step^-0.5"
        if args.lr
        else f"the paper's schedule d_model^-0.5 * min(step^-0.5, step * {args.warmup_steps}^-1.5)"
    )
    if args.cooldown_steps:
        schedule += f", decaying linearly to 0 over the last {args.cooldown_steps} updates"
    length = f"{args.max_steps} updates" if args.max_steps else f"{args.num_epochs} epochs"
    processes = results.get("processes", 1)
    lines = [
        "`vanilla-transformer train` (Accelerate): a joint source-target BPE vocabulary trained with `tokenizers`"
        + ("" if args.tokenizer_name else f" ({args.vocab_size} tokens)")
        + (
            f", with BPE-dropout {args.bpe_dropout} on the training pairs (segmented anew every epoch)"
            if args.bpe_dropout
            else ""
        )
        + ";",
        f"batches of similar-length sentence pairs up to {args.max_tokens} tokens per process"
        + (f", {processes} data-parallel processes" if processes > 1 else "")
        + (
            f", {args.gradient_accumulation_steps} accumulated per update"
            if args.gradient_accumulation_steps > 1
            else ""
        )
        + ";",
        f"dropout P_drop {args.dropout} on sub-layer outputs and embedding sums"
        + (f", {args.attention_dropout} on attention weights" if args.attention_dropout else "")
        + (f", {args.activation_dropout} after the feed-forward ReLU" if args.activation_dropout else "")
        + ";",
        (
            f"word dropout {args.word_dropout} (source and decoder input tokens replaced by <unk>);"
            if args.word_dropout
            else None
        ),
        f"label-smoothed cross-entropy (epsilon {args.label_smoothing}) normalised by target tokens"
        + (
            f", with R-Drop (every batch through two dropout masks, alpha {args.rdrop_alpha} on their symmetric KL "
            "divergence)"
            if args.rdrop_alpha
            else ""
        )
        + ";",
        f"Adam (beta1 0.9, beta2 0.98, eps 1e-9), {schedule};",
        f"gradient clipping at norm {args.clip_norm}; {length} ({results.get('train_steps')} updates, "
        f"{results.get('train_seconds')} s); seed {args.seed}; mixed precision: {args.mixed_precision};",
        (
            f"the final weights are the average of the last {args.average_checkpoints} checkpoints;"
            if args.average_checkpoints > 1
            else "the final weights are those of the last update;"
        ),
        f"evaluation with beam search (beams {args.num_beams}, length penalty {args.length_penalty}"
        + (
            f", chosen on the validation split among {', '.join(map(str, args.tune_length_penalty))}"
            if args.tune_length_penalty
            else ""
        )
        + ").",
    ]
    if args.lowercase:
        lines.insert(
            1,
            "all text lowercased by the tokenizer (`--lowercase`): inputs are lowercased before "
            "translation and outputs are lowercase, so lowercased BLEU is the comparable score;",
        )
    return "\n".join("- " + line for line in lines if line)


def write_run_card(args, model, results: dict) -> None:
    name, identifier, hub_id = dataset_name(args)
    example = "forty-two" if not (args.dataset_name or args.train_file) else "A man is riding a bicycle."
    data = (
        f"Training data: {name}, direction {args.source_lang} -> {args.target_lang}. "
        "Sentence pairs longer than "
        f"{args.max_source_length} source or {args.max_target_length} target tokens were left out of training."
    )
    card = model_card(
        model.config,
        model.num_parameters(),
        model_name=args.hub_model_id or os.path.basename(os.path.normpath(args.output_dir)),
        languages=(args.source_lang, args.target_lang),
        dataset=name,
        dataset_type=identifier,
        dataset_id=hub_id,
        data_description=data,
        procedure=procedure(args, results),
        results={k: v for k, v in results.items() if isinstance(v, dict)},
        path=args.hub_model_id or args.output_dir,
        example=example,
    )
    card.save(os.path.join(args.output_dir, "README.md"))
