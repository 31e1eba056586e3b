"""Evaluation during and after training: beam-search translations of a split gathered from every process, their
BLEU/chrF/exact-match scores, the reference cross-entropy, and the length-penalty search on the validation split."""

import contextlib
import copy
import math
import sys

import torch
from torch.utils.data import DataLoader

from ...inference.decoding import decode
from ...modeling.kernels_vanilla_transformer import token_cross_entropy
from ..data.tokenizing import make_collator
from .metrics import MetricSums


def split_loader(tokenized, columns: tuple[str, ...], tokenizer, accelerator, batch_size: int):
    """Padded batches of the given columns of a tokenised split, sharded over the processes."""
    loader = DataLoader(
        tokenized.remove_columns([c for c in tokenized.column_names if c not in columns]),
        batch_size=batch_size,
        collate_fn=make_collator(tokenizer),
    )
    return accelerator.prepare_data_loader(loader)


@contextlib.contextmanager
def eval_mode(model):
    """Dropout off for the block; the model's training mode is restored afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


@torch.no_grad()
def translated_batches(model, tokenizer, tokenized, accelerator, batch_size: int, **generate_kwargs):
    """Translations of a tokenised split, on every process: each batch's, gathered from every process, in input
    order. The search is generate()'s with `generate_kwargs` over the model's generation config, rule for rule, a
    sentence leaving the batch once it is done (`decode`). The model is whole on each process (evaluation runs on a
    whole copy under FSDP and DeepSpeed), so that the processes need not step together."""
    with eval_mode(accelerator.unwrap_model(model)) as unwrapped:
        config = copy.deepcopy(unwrapped.generation_config)
        config.update(**generate_kwargs)
        for batch in split_loader(tokenized, ("input_ids",), tokenizer, accelerator, batch_size):
            found = decode(unwrapped, batch["input_ids"], batch["attention_mask"], config)
            generated = padded([best.tokens for best, *_ in found], tokenizer.pad_token_id, batch["input_ids"].device)
            generated = accelerator.pad_across_processes(generated, dim=1, pad_index=tokenizer.pad_token_id)
            generated = accelerator.gather_for_metrics(generated)
            yield [h.strip() for h in tokenizer.batch_decode(generated, skip_special_tokens=True)]


def padded(rows: list[list[int]], pad: int, device) -> torch.Tensor:
    """Token rows as one tensor, each padded with `pad` to the longest (at least one column)."""
    width = max(1, max(map(len, rows), default=0))
    values = [token for row in rows for token in row + [pad] * (width - len(row))]
    return torch.tensor(values, dtype=torch.long, device=device).view(len(rows), width)


def translate_dataset(model, tokenizer, tokenized, accelerator, batch_size: int, **generate_kwargs) -> list[str]:
    """Beam-search translations of a tokenised split, generated on every process and gathered in order."""
    batches = translated_batches(model, tokenizer, tokenized, accelerator, batch_size, **generate_kwargs)
    return [hypothesis for batch in batches for hypothesis in batch]


def evaluate_split(
    model, tokenizer, raw_split, tokenized_split, accelerator, *, batch_size: int, target_lang: str, **generate_kwargs
):
    """The scores of the model's translations of a split against its `target_lang` references, and the
    translations; `generate_kwargs` override the model's generation config."""
    hypotheses = translate_dataset(model, tokenizer, tokenized_split, accelerator, batch_size, **generate_kwargs)
    references = [pair[target_lang] for pair in raw_split["translation"]]
    return split_metrics(hypotheses, references, raw_split, target_lang), hypotheses


def split_scores(
    model, tokenizer, raw_split, tokenized_split, accelerator, *, batch_size: int, target_lang: str, **generate_kwargs
) -> dict:
    """`evaluate_split`'s scores, the translations not kept: each batch's are scored against its references as
    they come (`MetricSums`), so that memory does not grow with the split."""
    sums, start = MetricSums(target_lang), 0
    for hypotheses in translated_batches(model, tokenizer, tokenized_split, accelerator, batch_size, **generate_kwargs):
        rows = raw_split[start : start + len(hypotheses)]
        references = [pair[target_lang] for pair in rows["translation"]]
        sums.add(hypotheses, references, rows.get("digits"))
        start += len(hypotheses)
    return sums.result()


def split_metrics(hypotheses: list[str], references: list[str], raw_split, target_lang: str) -> dict:
    """BLEU, chrF and exact match of a split's translations into `target_lang`; for the embedded task, exact match
    first, and per digit count."""
    groups = raw_split["digits"] if "digits" in raw_split.column_names else None
    return MetricSums(target_lang).add(hypotheses, references, groups).result()


def summary(split: str, metrics: dict) -> str:
    """One line of scores. Where exact match is the figure to read (the embedded task, whose one-word outputs leave
    BLEU's 2- to 4-gram precisions empty), it comes first, with its figure per digit count."""
    scores = (
        f"BLEU {metrics['bleu']} (lowercased {metrics['bleu_lowercase']}), chrF {metrics['chrf']} "
        f"(lowercased {metrics['chrf_lowercase']})"
    )
    if "cross_entropy" in metrics:
        scores += f", cross-entropy {metrics['cross_entropy']} per token"
    if "exact_match_by_digits" in metrics:
        by_digits = ", ".join(f"{d} digits {v}%" for d, v in metrics["exact_match_by_digits"].items())
        return f"{split}: exact match {metrics['exact_match']}% ({by_digits}); {scores}"
    return f"{split}: {scores}, exact match {metrics['exact_match']}%"


@torch.no_grad()
def reference_cross_entropy(
    model, tokenizer, raw_split, tokenized_split, accelerator, *, batch_size: int, target_lang: str
) -> dict[str, float]:
    """How well the model predicts the reference translations, with dropout off and without label smoothing: the
    cross-entropy in nats per target token (end-of-sentence included) and its perplexity, and in nats per reference
    word (whitespace-separated), which stays comparable between runs whose BPE vocabularies differ."""
    nll, tokens = [], []
    with eval_mode(accelerator.unwrap_model(model)) as unwrapped:
        for batch in split_loader(tokenized_split, ("input_ids", "labels"), tokenizer, accelerator, batch_size):
            labels = batch["labels"]  # (batch, tgt_len), -100 at padding
            logits = unwrapped(
                input_ids=batch["input_ids"],
                attention_mask=batch["attention_mask"],
                decoder_input_ids=unwrapped.prepare_decoder_input_ids_from_labels(labels),
            ).logits
            per_token, _ = token_cross_entropy(logits, labels)  # (batch * tgt_len,), 0 at padding
            nll.append(accelerator.gather_for_metrics(per_token.view(labels.shape).sum(dim=1).double()))
            tokens.append(accelerator.gather_for_metrics((labels != -100).sum(dim=1)))
    words = reference_words(raw_split, target_lang)
    return cross_entropy_figures(torch.cat(nll).sum().item(), torch.cat(tokens).sum().item(), words)


def reference_words(raw_split, target_lang: str, window: int = 10_000) -> int:
    """The whitespace-separated words of a split's `target_lang` references, read a window of rows at a time."""
    rows = raw_split.select_columns(["translation"]).iter(batch_size=window)
    return sum(word_count([pair[target_lang] for pair in part["translation"]]) for part in rows)


def word_count(references: list[str]) -> int:
    """The whitespace-separated words of `references`: what the cross-entropy per word divides by."""
    return sum(len(reference.split()) for reference in references)


def cross_entropy_figures(total: float, tokens: int, words: int) -> dict[str, float]:
    """The reference cross-entropy per token, its perplexity and the cross-entropy per reference word, from the
    summed negative log-likelihood in nats, the number of target tokens it sums over and of reference words. A
    model far off (a run that diverged) has a perplexity past a float's range: infinity."""
    per_token = total / tokens
    return {
        "cross_entropy": round(per_token, 4),
        "perplexity": math.inf if per_token >= math.log(sys.float_info.max) else round(math.exp(per_token), 3),
        "cross_entropy_per_word": round(total / max(words, 1), 4),
    }


def tune_length_penalty(
    model, tokenizer, raw, tokenized, accelerator, penalties: list[float], score: str, **split_settings
) -> tuple:
    """Beam-decode the validation split with each length penalty of `penalties` (--tune-length-penalty) and choose
    the best `score` (BLEU, lowercased with --lowercase; ties go to the earlier value). `split_settings`: the batch
    size and target language of `evaluate_split`. Returns the chosen length penalty, {alpha: score} and the chosen
    one's (metrics, hypotheses)."""
    search, best = {}, None
    for alpha in penalties:
        metrics, hypotheses = evaluate_split(
            model,
            tokenizer,
            raw["validation"],
            tokenized["validation"],
            accelerator,
            length_penalty=alpha,
            **split_settings,
        )
        search[str(alpha)] = metrics[score]
        accelerator.print(f"length penalty {alpha}: validation {score} {metrics[score]}")
        if best is None or metrics[score] > best[1][0][score]:
            best = (alpha, (metrics, hypotheses))
    accelerator.print(f"Chose length penalty {best[0]} on the validation split.")
    return best[0], search, best[1]


__all__ = [
    "split_loader",
    "eval_mode",
    "translated_batches",
    "translate_dataset",
    "evaluate_split",
    "split_scores",
    "split_metrics",
    "cross_entropy_figures",
    "reference_words",
    "word_count",
    "summary",
    "reference_cross_entropy",
    "tune_length_penalty",
]
