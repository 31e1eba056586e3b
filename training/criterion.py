"""Label-smoothed cross-entropy (§5.4 of the paper, epsilon_ls = 0.1), as fairseq computes it."""

import torch


class TokenCrossEntropy(torch.autograd.Function):
    """Per-token -log p(reference) and mean over the vocabulary of -log p, from logits, in two passes over the
    (tokens, vocab) logits forward and two backward, without materialising log-probabilities or one-hot targets.

    With lse = log sum_v exp(z_v):   nll = lse - z_ref,   uniform = lse - mean_v z_v
    d nll / dz = p - onehot(ref),    d uniform / dz = p - 1/V,   where p = softmax(z).
    Ignored tokens give 0 and get no gradient.
    """

    CHUNK = 256  # rows per pass: temporaries stay small enough to be reused instead of freshly mapped each time

    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, ignore_index: int):
        keep = labels != ignore_index  # (tokens,)
        safe_labels = labels.masked_fill(~keep, 0)
        lse = torch.cat([torch.logsumexp(chunk, dim=-1) for chunk in logits.split(TokenCrossEntropy.CHUNK)])
        nll = (lse - logits.gather(-1, safe_labels.unsqueeze(-1)).squeeze(-1)) * keep
        uniform = (lse - logits.mean(dim=-1)) * keep
        ctx.save_for_backward(logits, lse, safe_labels, keep)
        return nll, uniform

    @staticmethod
    def backward(ctx, grad_nll: torch.Tensor, grad_uniform: torch.Tensor):
        logits, lse, safe_labels, keep = ctx.saved_tensors
        a = grad_nll * keep  # (tokens,)
        b = grad_uniform * keep
        grad = torch.empty_like(logits)
        for start in range(0, logits.shape[0], TokenCrossEntropy.CHUNK):
            end = start + TokenCrossEntropy.CHUNK
            p = torch.sub(logits[start:end], lse[start:end].unsqueeze(-1), out=grad[start:end]).exp_()
            p.mul_((a + b)[start:end].unsqueeze(-1)).sub_((b[start:end] / logits.shape[-1]).unsqueeze(-1))
        grad.scatter_add_(-1, safe_labels.unsqueeze(-1), -a.unsqueeze(-1))
        return grad, None, None


def label_smoothed_nll_loss(
    logits: torch.Tensor, labels: torch.Tensor, epsilon: float, ignore_index: int = -100
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Summed over the non-ignored target tokens.

    The smoothed target puts 1 - epsilon on the reference token and spreads epsilon uniformly over the vocabulary:
    loss = (1 - epsilon) * NLL(reference) + epsilon * mean over the vocabulary of -log p.

    Returns (smoothed loss sum, plain NLL sum, number of target tokens); divide by the token count to normalise.
    """
    vocab = logits.shape[-1]
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()  # the softmax in full precision
    nll, uniform = TokenCrossEntropy.apply(logits.reshape(-1, vocab), labels.reshape(-1), ignore_index)
    nll_sum, smooth_sum = nll.sum(), uniform.sum()
    loss = (1.0 - epsilon) * nll_sum + epsilon * smooth_sum
    return loss, nll_sum, (labels != ignore_index).sum()
