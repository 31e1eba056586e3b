"""Label-smoothed cross-entropy (§5.4 of the paper, epsilon_ls = 0.1), as fairseq computes it."""

import torch

from ..modeling.modeling_vanilla_transformer import token_cross_entropy


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
