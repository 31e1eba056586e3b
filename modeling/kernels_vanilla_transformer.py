"""The kernels of the model written by hand rather than taken from PyTorch: the dropout of §5.4, the chunked
cross-entropy behind the softmax of §3.4, and the final linear layer of §3.4 in vocabulary blocks when decoding on the
CPU (their docstrings say what they do better than the library's own).
The modeling file imports them; training code imports `token_cross_entropy` from here."""

import torch
from torch import nn
from torch.nn import functional as F
from transformers.utils import is_torchdynamo_compiling

# ---------------------------------------------------------------------------------------------------------------------
# §5.4 Residual dropout
# ---------------------------------------------------------------------------------------------------------------------


class Dropout(nn.Dropout):
    """Dropout with rate P_drop (§5.4): each element is kept with probability 1 - P_drop and scaled by 1 / (1 - P_drop).

    On the CPU the keep mask is drawn as `uniform >= P_drop`, several times faster than the `bernoulli_` behind
    `nn.Dropout`, and kept as booleans for the backward pass; other devices use the fused `F.dropout` kernel.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu" or self.p == 1.0:
            return F.dropout(x, self.p, training=True)
        keep = torch.rand_like(x) >= self.p
        return x.mul(keep).mul_(1.0 / (1.0 - self.p))


# ---------------------------------------------------------------------------------------------------------------------
# §3.4 Softmax and cross-entropy over the vocabulary
# ---------------------------------------------------------------------------------------------------------------------


CROSS_ENTROPY_CHUNK_ELEMENTS = 2**20  # logits per pass (4 MiB in float32): each chunk is read once and stays cached
# on a GPU a pass is a handful of kernel launches whatever its size: 128 MiB of float32 per pass keeps them few (a
# base-size batch of 25,000 tokens and 37,000 types is 28 passes, not 900) and still far below the whole logits'
# float32 copy (3.4 GiB there) that a plain cross-entropy makes
ACCELERATOR_CHUNK_ELEMENTS = 2**25


class TokenCrossEntropy(torch.autograd.Function):
    """Per-token -log p(reference) and mean over the vocabulary of -log p, from logits, without materialising
    log-probabilities or one-hot targets: a chunk of rows at a time, each chunk read once forward and once backward,
    in float32 at least (half-precision logits are upcast a chunk at a time, never as a whole).

    nll = -log p_ref,   uniform = -mean_v log p_v,   where p = softmax(z)
    d nll / dz = p - onehot(ref),    d uniform / dz = p - 1/V
    Ignored tokens give 0 and get no gradient.

    With `in_place`, the backward pass writes the gradient over the logits instead of into a tensor of their size
    (half the memory the two need at the start of the backward pass, 128 MiB at 4096 tokens and 8000 types), so the
    logits read as their gradient afterwards: for a caller that owns them and drops them after the loss, as the
    training criterion does.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, ignore_index: int, in_place: bool = False):
        keep = labels != ignore_index  # (tokens,)
        safe_labels = labels.masked_fill(~keep, 0)
        dtype = torch.promote_types(logits.dtype, torch.float32)
        nll, uniform = (torch.empty(labels.shape, dtype=dtype, device=logits.device) for _ in range(2))
        for rows in chunks(logits):
            log_p = torch.log_softmax(logits[rows], dim=-1, dtype=dtype)  # (rows, vocab), one fused pass
            nll[rows] = -log_p.gather(-1, safe_labels[rows, None]).squeeze(-1)
            uniform[rows] = -log_p.mean(dim=-1)
        ctx.save_for_backward(logits, safe_labels, keep)
        ctx.in_place = in_place
        return nll * keep, uniform * keep

    @staticmethod
    def backward(ctx, grad_nll: torch.Tensor, grad_uniform: torch.Tensor):
        logits, safe_labels, keep = ctx.saved_tensors
        a = (grad_nll * keep).unsqueeze(-1)  # (tokens, 1)
        b = (grad_uniform * keep).unsqueeze(-1)
        grad = logits if ctx.in_place else torch.empty_like(logits)
        for rows in chunks(logits):
            p = torch.softmax(logits[rows], dim=-1, dtype=a.dtype)  # (rows, vocab)
            torch.addcmul(-b[rows] / logits.shape[-1], p, a[rows] + b[rows], out=p)
            grad[rows] = p.scatter_add_(-1, safe_labels[rows, None], -a[rows])
        return grad, None, None, None


def chunks(logits: torch.Tensor):
    """Row slices of about CROSS_ENTROPY_CHUNK_ELEMENTS logits each (ACCELERATOR_CHUNK_ELEMENTS off the CPU). Under
    torch.compile one slice of all rows: a loop over the chunks would make the graph guard on the exact number of
    tokens, and every batch of another shape would compile it again; the compiler fuses the passes itself."""
    if torch.compiler.is_compiling():
        return (slice(None),)
    elements = CROSS_ENTROPY_CHUNK_ELEMENTS if logits.device.type == "cpu" else ACCELERATOR_CHUNK_ELEMENTS
    rows = max(1, elements // logits.shape[-1])
    return (slice(start, start + rows) for start in range(0, logits.shape[0], rows))


def token_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100, in_place: bool = False):
    """(-log p(reference), mean over the vocabulary of -log p) per target token, in float32 (float64 for float64
    logits), 0 where labels == ignore_index. `in_place`: the backward pass overwrites the logits with their gradient
    (see `TokenCrossEntropy`)."""
    vocab = logits.shape[-1]
    flat_labels = labels.reshape(-1).to(logits.device)
    return TokenCrossEntropy.apply(logits.reshape(-1, vocab), flat_labels, ignore_index, in_place)


# ---------------------------------------------------------------------------------------------------------------------
# §3.4 The final linear layer, decoding on the CPU
# ---------------------------------------------------------------------------------------------------------------------


# vocabulary rows of the output projection per pass in `project_to_vocabulary`: 1024 rows of a d_model=512 weight are
# 2 MiB, which stay in the cache while the kernel packs and multiplies them
VOCABULARY_BLOCK_ROWS = 1024


def project_to_vocabulary(lm_head: nn.Linear, hidden_states: torch.Tensor) -> torch.Tensor:
    """The final linear layer (§3.4): hidden states (..., d_model) -> logits (..., vocab_size).

    Decoding on the CPU (float32, no gradient), the projection is computed a block of VOCABULARY_BLOCK_ROWS vocabulary
    entries at a time, each block's product written straight into its columns of the one logits tensor: the same
    matrix product, each logit the same dot product over d_model, so the same numbers (bit for bit as measured), but
    each block of the weight is used while it is still in the cache. For a few rows (a decoding step) over a vocabulary
    of tens of thousands of types, the largest product of a step, that was about a fifth faster (37000 x 512, one
    core).
    Compiled, the blocks are concatenated, which the compiler turns into the same writes. Anywhere else (a gradient
    to keep, another device or dtype, a replaced or hooked head) it is the plain `lm_head`."""
    weight, bias = lm_head.weight, lm_head.bias
    if (
        hidden_states.device.type != "cpu"
        or weight.shape[0] <= 2 * VOCABULARY_BLOCK_ROWS
        or type(lm_head) is not nn.Linear
        or lm_head._forward_hooks
        or lm_head._forward_pre_hooks
        or hidden_states.dtype != torch.float32
        or weight.dtype != torch.float32
        or weight.device != hidden_states.device
        or (torch.is_grad_enabled() and (hidden_states.requires_grad or weight.requires_grad))
    ):
        return lm_head(hidden_states)
    blocks = [slice(start, start + VOCABULARY_BLOCK_ROWS) for start in range(0, weight.shape[0], VOCABULARY_BLOCK_ROWS)]
    if is_torchdynamo_compiling():  # the compiler writes each block's product into its place in the concatenation
        return torch.cat([F.linear(hidden_states, weight[b], None if bias is None else bias[b]) for b in blocks], -1)
    rows = hidden_states.reshape(-1, hidden_states.shape[-1])  # (tokens, d_model)
    logits = rows.new_empty(rows.shape[0], weight.shape[0])
    for block in blocks:
        if bias is None:
            torch.mm(rows, weight[block].t(), out=logits[:, block])
        else:
            torch.addmm(bias[block], rows, weight[block].t(), out=logits[:, block])
    return logits.view(*hidden_states.shape[:-1], weight.shape[0])
