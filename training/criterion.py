"""Training criteria: label-smoothed cross-entropy (§5.4 of the paper, epsilon_ls = 0.1), as fairseq computes it,
and R-Drop's consistency term between two dropout passes of the same batch."""

import torch

from ..modeling.kernels_vanilla_transformer import token_cross_entropy


def label_smoothed_nll_loss(
    logits: torch.Tensor, labels: torch.Tensor, epsilon: float, ignore_index: int = -100
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Summed over the non-ignored target tokens.

    The smoothed target puts 1 - epsilon on the reference token and spreads epsilon uniformly over the vocabulary:
    loss = (1 - epsilon) * NLL(reference) + epsilon * mean over the vocabulary of -log p.

    Returns (smoothed loss sum, plain NLL sum, number of target tokens); divide by the token count to normalise.
    """
    nll, uniform = token_cross_entropy(logits, labels, ignore_index)
    nll_sum, smooth_sum = nll.sum(), uniform.sum()
    loss = (1.0 - epsilon) * nll_sum + epsilon * smooth_sum
    return loss, nll_sum, (labels != ignore_index).sum()


def rdrop_kl_sum(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """R-Drop's consistency term (Liang et al. 2021), as fairseq's `rdrop` criterion computes it.

    `logits` and `labels` hold the same batch twice, stacked along the batch dimension, so that the two halves went
    through the model under two different dropout masks. Returns the sum over the non-ignored target tokens of the
    symmetric KL divergence of the two predicted distributions p and q, (KL(p || q) + KL(q || p)) / 2, in float32;
    gradients flow into both halves.
    """
    p_logits, q_logits = logits.chunk(2)  # (batch, tgt_len, vocab) each
    keep = labels.chunk(2)[0] != ignore_index  # (batch, tgt_len)
    log_p = torch.log_softmax(p_logits[keep].float(), dim=-1)  # (tokens, vocab)
    log_q = torch.log_softmax(q_logits[keep].float(), dim=-1)
    # KL(p || q) + KL(q || p) = sum over the vocabulary of (p - q) * (log p - log q)
    return ((log_p.exp() - log_q.exp()) * (log_p - log_q)).sum() / 2
