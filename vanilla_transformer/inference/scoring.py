"""Scoring given translations (forced decoding): the log-probability the model gives each token of a target sentence
given its source, in one teacher-forced pass per batch, as fairseq-generate's `--score-reference` and CTranslate2's
`score_batch` compute it.

    translator = load_translator("runs/numbers-en-de")
    [score] = translator.score(["forty-two"], ["zweiundvierzig"])
    score.tokens            # the target's tokens, "</s>" last
    score.token_log_probs   # natural logarithms, one per token, "</s>" included
    score.log_prob          # their sum; `log_prob_without_eos` leaves "</s>" out
    score.normalized        # the sum over the number of tokens, "</s>" counted: fairseq's hypothesis score
"""

from dataclasses import asdict, dataclass

import torch

from ..model_folder import encode_within
from .checks import check_whole, sentences_given


@dataclass(frozen=True)
class PairScore:
    tokens: list[str]  # the target's tokens as the model reads them, the end of sentence last
    token_log_probs: list[float]  # natural logarithms, one per token

    @property
    def log_prob(self) -> float:
        """log p(target | source): every token's, the end of sentence included."""
        return sum(self.token_log_probs)

    @property
    def log_prob_without_eos(self) -> float:
        return sum(self.token_log_probs[:-1])

    @property
    def normalized(self) -> float:
        """The log-probability per token, the end of sentence counted (length penalty 1)."""
        return self.log_prob / len(self.token_log_probs)

    def as_dict(self) -> dict:
        return {
            "log_prob": self.log_prob,
            "normalized": self.normalized,
            "log_prob_without_eos": self.log_prob_without_eos,
            **asdict(self),
        }


def shift_right(labels: torch.Tensor, pad_token_id: int, start_token_id: int) -> torch.Tensor:
    """The decoder's input: the target shifted right by one position, after the decoder's start token."""
    shifted = labels.new_full(labels.shape, pad_token_id)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = start_token_id
    return shifted


def check_pairs(sources, targets) -> None:
    """A ValueError where there are not as many targets as sources: one translation per source."""
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources for {len(targets)} targets: give one translation per source")


def pairs_given(sources, targets, batch_size: int) -> tuple[list[str], list[str]]:
    """The sources and their translations `targets` as lists of strings, one target per source, read `batch_size`
    pairs at a time: a TypeError, a ValueError or an `OptionError` (`batch_size`) says what is wrong with them."""
    sources, targets = sentences_given(sources, "sources"), sentences_given(targets, "targets")
    check_pairs(sources, targets)
    check_whole("batch_size", batch_size)
    return sources, targets


@torch.inference_mode()
def score_pairs(model, tokenizer, sources, targets, batch_size=32, limit=None) -> list[PairScore]:
    """Each target's tokens and their log-probabilities given the source and the target tokens before them (end of
    sentence included), for a seq2seq model and its tokenizer; sentences longer than `limit` tokens are cut with a
    warning."""
    sources, targets = pairs_given(sources, targets, batch_size)
    config, results = model.config, []
    for start in range(0, len(sources), batch_size):
        source_ids = encode_within(tokenizer, sources[start : start + batch_size], limit)
        target_ids = encode_within(tokenizer, targets[start : start + batch_size], limit, target=True)
        batch = tokenizer.pad({"input_ids": source_ids}, return_tensors="pt").to(model.device)
        labels = tokenizer.pad({"input_ids": target_ids}, return_tensors="pt")["input_ids"].to(model.device)
        decoder_input_ids = shift_right(labels, config.pad_token_id, config.decoder_start_token_id)
        logits = model(**batch, decoder_input_ids=decoder_input_ids).logits  # (batch, target length, vocabulary)
        picked = logits.float().log_softmax(-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)  # (batch, length)
        results += [
            PairScore(tokenizer.convert_ids_to_tokens(ids), row[: len(ids)].tolist())
            for row, ids in zip(picked, target_ids)
        ]
    return results


__all__ = ["PairScore", "check_pairs", "pairs_given", "score_pairs", "shift_right"]
