"""Label-smoothed cross-entropy (§5.4 of the paper, epsilon_ls = 0.1), as fairseq computes it."""

import torch
from torch.nn import functional as F


def label_smoothed_nll_loss(
    logits: torch.Tensor, labels: torch.Tensor, epsilon: float, ignore_index: int = -100
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Summed over the non-ignored target tokens.

    The smoothed target puts 1 - epsilon on the reference token and spreads epsilon uniformly over the vocabulary:
    loss = (1 - epsilon) * NLL(reference) + epsilon * mean over the vocabulary of -log p.

    Returns (smoothed loss sum, plain NLL sum, number of target tokens); divide by the token count to normalise.
    """
    log_probs = F.log_softmax(logits.float(), dim=-1)  # (batch, tgt_len, vocab)
    keep = labels != ignore_index
    safe_labels = labels.masked_fill(~keep, 0)
    nll = -log_probs.gather(-1, safe_labels.unsqueeze(-1)).squeeze(-1)  # (batch, tgt_len)
    uniform = -log_probs.mean(dim=-1)
    nll_sum = nll.masked_fill(~keep, 0.0).sum()
    smooth_sum = uniform.masked_fill(~keep, 0.0).sum()
    loss = (1.0 - epsilon) * nll_sum + epsilon * smooth_sum
    return loss, nll_sum, keep.sum()
