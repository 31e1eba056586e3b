"""The kernels of the model written by hand rather than taken from PyTorch: the dropout of §5.4, the attention of a
decoding step on the CPU (§3.2.1), the chunked cross-entropy behind the softmax of §3.4, the same fused with the final
linear layer (the model's `skip_logits`), and the final linear layer of §3.4 through oneDNN or in vocabulary blocks
when decoding on the CPU (their docstrings say what they do better than the library's own).
The modeling file imports them; training code imports `token_cross_entropy` from here."""

import math
import platform

import torch
from torch import nn
from torch.nn import functional as F
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.utils import is_torchdynamo_compiling

# ---------------------------------------------------------------------------------------------------------------------
# §5.4 Residual dropout
# ---------------------------------------------------------------------------------------------------------------------


class Dropout(nn.Dropout):
    """Dropout with rate P_drop (§5.4): each element is kept with probability 1 - P_drop and scaled by 1 / (1 - P_drop).

    On the CPU the keep mask is drawn by `keep_mask` and kept as booleans for the backward pass; other devices use
    the fused `F.dropout` kernel.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu" or self.p == 1.0:
            return F.dropout(x, self.p, training=True)
        return x.mul(keep_mask(x.shape, self.p)).mul_(1.0 / (1.0 - self.p))


def keep_mask(shape: torch.Size, p: float) -> torch.Tensor:
    """A CPU tensor of booleans, each True with probability 1 - p (p rounded to a multiple of 2^-32): each element
    is 32 random bits from torch's generator (so the global seed decides it), read as a signed integer, True where
    it is at least round(p * 2^32) - 2^31, whatever the input's precision. Each 64-bit draw gives two elements: half
    the generator's calls of `rand_like(x) >= p` and about half its time. That draw was also in the input's
    precision, and kept 0.898 of a bfloat16 input for p = 0.1. The `bernoulli_` behind `nn.Dropout` takes longer
    than either. torch.compile cannot trace `random_`: a compiled graph draws a float32 `uniform >= p`."""
    if torch.compiler.is_compiling():
        return torch.rand(shape, device="cpu") >= p
    count = math.prod(shape)
    bits = torch.empty((count + 1) // 2, dtype=torch.int64, device="cpu").random_(-(2**63), None)
    return bits.view(torch.int32)[:count].view(shape) >= round(p * 2**32) - 2**31


# ---------------------------------------------------------------------------------------------------------------------
# §3.2.1 Scaled dot-product attention, a decoding step on the CPU
# ---------------------------------------------------------------------------------------------------------------------


def one_query_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, may_attend: torch.Tensor | None, scaling: float
) -> torch.Tensor:
    """softmax(q K^T / sqrt(d_k)) V for one query per sentence and head, as a decoding step asks: two batched matrix
    products over the (batch * h) heads. query (batch, h, 1, d_k); key and value (batch, h, keys, d_k or d_v),
    contiguous; `may_attend` None or the boolean mask SDPA takes (True: may attend), broadcasting to (batch, h, 1,
    keys). A query that may see no key gets zeros, as from SDPA. Returns (batch, 1, h, d_v), as the library's
    attention functions do."""
    batch, heads, _, d_k = query.shape
    keys, d_v = key.shape[-2], value.shape[-1]
    scores = torch.bmm(query.reshape(batch * heads, 1, d_k), key.view(batch * heads, keys, d_k).transpose(1, 2))
    scores = scores.mul_(scaling).view(batch, heads, 1, keys)
    if may_attend is not None:
        scores.masked_fill_(~may_attend, -math.inf)
    weights = scores.softmax(-1)
    if may_attend is not None:  # where every score is -inf the softmax gave NaN
        weights.masked_fill_(~may_attend.any(-1, keepdim=True), 0.0)
    output = torch.bmm(weights.view(batch * heads, 1, keys), value.view(batch * heads, keys, d_v))
    return output.view(batch, heads, 1, d_v).transpose(1, 2)


def sdpa_or_one_query(module: nn.Module, query, key, value, attention_mask, scaling: float, dropout=0.0, **kwargs):
    """The library's SDPA attention function, except for a decoding step on the CPU: one query per sentence and head,
    in float32, nothing wanting a gradient, no dropout, no mask or a boolean one, keys and values contiguous (as the
    cache keeps them), not under torch.compile. There PyTorch's CPU kernel for SDPA goes through the (batch * h)
    heads one by one, which costs more than the arithmetic at a beam search's batch; `one_query_attention` is two
    batched matrix products instead. Measured on 2 cores (AMD EPYC), 160 rows (32 sentences, beam 5) x 8 heads of
    64 over 32 keys: 1.98 ms -> 0.45 ms; 32 rows x 4 heads of 32 over 16 keys: equal. The same sums to float
    rounding. Returns (output (batch, tgt_len, h, d_v), None)."""
    if (
        query.shape[-2] == 1
        and query.device.type == "cpu"
        and query.dtype == torch.float32
        and dropout == 0.0
        and (attention_mask is None or attention_mask.dtype == torch.bool)
        and key.is_contiguous()
        and value.is_contiguous()
        and not (torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value)))
        and not is_torchdynamo_compiling()
    ):
        return one_query_attention(query, key, value, attention_mask, scaling), None
    return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)


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
            # written straight into the gradient's rows where it has the softmax's dtype, else cast into them
            out = grad[rows] if grad.dtype == p.dtype else p
            torch.addcmul(-b[rows] / logits.shape[-1], p, a[rows] + b[rows], out=out)
            out.scatter_add_(-1, safe_labels[rows, None], -a[rows])
            if out is p:
                grad[rows] = p
        return grad, None, None, None


def chunks(logits: torch.Tensor):
    """Row slices of about CROSS_ENTROPY_CHUNK_ELEMENTS logits each (ACCELERATOR_CHUNK_ELEMENTS off the CPU). Under
    torch.compile one slice of all rows: a loop over the chunks would make the graph guard on the exact number of
    tokens, and every batch of another shape would compile it again; the compiler fuses the passes itself."""
    if torch.compiler.is_compiling():
        return (slice(None),)
    return row_slices(logits.shape[0], logits.shape[-1], logits.device, CROSS_ENTROPY_CHUNK_ELEMENTS)


def row_slices(tokens: int, vocab: int, device: torch.device, cpu_elements: int):
    """Slices of `tokens` rows of `vocab` logits each, about `cpu_elements` logits a slice on the CPU
    (ACCELERATOR_CHUNK_ELEMENTS elsewhere)."""
    elements = cpu_elements if device.type == "cpu" else ACCELERATOR_CHUNK_ELEMENTS
    rows = max(1, elements // vocab)
    return (slice(start, start + rows) for start in range(0, tokens, rows))


def token_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100, in_place: bool = False):
    """(-log p(reference), mean over the vocabulary of -log p) per target token, in float32 (float64 for float64
    logits), 0 where labels == ignore_index. `in_place`: the backward pass overwrites the logits with their gradient
    (see `TokenCrossEntropy`)."""
    vocab = logits.shape[-1]
    flat_labels = labels.reshape(-1).to(logits.device)
    return TokenCrossEntropy.apply(logits.reshape(-1, vocab), flat_labels, ignore_index, in_place)


class LinearCrossEntropy(torch.autograd.Function):
    """The final linear layer (§3.4) and the label-smoothed cross-entropy in one, a chunk of tokens at a time, so that
    the (tokens, vocab) logits are never made whole: forward, each chunk's logits are projected, turned into the loss
    and, when a gradient is wanted, at once into their gradient, which goes into the gradients of the hidden states,
    the weight and the bias; then the chunk's logits are dropped. The backward pass only scales those gradients by the
    loss's own. (Liger-Kernel's fused linear cross-entropy works the same way, in Triton.)

    loss = sum over kept tokens of (1 - epsilon) * nll + epsilon * uniform   (as `TokenCrossEntropy`'s two terms)
    d loss / d logits = softmax(logits) - (1 - epsilon) * onehot(ref) - epsilon / V

    Under autocast the products run in its dtype, as `lm_head` would; softmax and the sums are float32, and the
    weight's and bias's gradients are summed over the chunks in float32. Returns (loss sum, NLL sum); the NLL sum is
    for logging and takes no gradient.
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, epsilon: float, ignore_index: int):
        keep = (labels != ignore_index).unsqueeze(-1)  # (tokens, 1)
        safe_labels = labels.masked_fill(~keep.squeeze(-1), 0).unsqueeze(-1)
        wants_grad = any(ctx.needs_input_grad[:3])
        dtype = torch.promote_types(hidden.dtype, torch.float32)  # of the softmax and the sums
        loss, nll = (hidden.new_zeros((), dtype=dtype) for _ in range(2))
        grads = LinearGradients(hidden, weight, bias) if wants_grad else None
        for rows in row_slices(hidden.shape[0], weight.shape[0], hidden.device, LINEAR_CHUNK_ELEMENTS):
            logits = F.linear(hidden[rows], weight, bias)  # (rows, vocab)
            log_p = torch.log_softmax(logits, dim=-1, dtype=dtype)
            chunk_nll = (-log_p.gather(-1, safe_labels[rows]) * keep[rows]).sum()
            nll += chunk_nll
            loss += (1.0 - epsilon) * chunk_nll - epsilon * (log_p.mean(-1, keepdim=True) * keep[rows]).sum()
            if grads is not None:
                grad = log_p.exp_().sub_(epsilon / weight.shape[0])
                grad.scatter_add_(-1, safe_labels[rows], grad.new_full(safe_labels[rows].shape, epsilon - 1.0))
                grads.add(rows, grad.mul_(keep[rows]).to(logits.dtype), hidden[rows], weight)
        ctx.mark_non_differentiable(nll)
        if grads is not None:  # saved as tensors, so that the backward pass frees them
            ctx.save_for_backward(grads.hidden, grads.weight, grads.bias)
            ctx.dtypes = (weight.dtype, None if bias is None else bias.dtype)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, grad_nll: torch.Tensor):
        hidden, weight, bias = ctx.saved_tensors
        weight_dtype, bias_dtype = ctx.dtypes
        bias = None if bias is None else (bias * grad_loss).to(bias_dtype)
        return hidden * grad_loss.to(hidden.dtype), (weight * grad_loss).to(weight_dtype), bias, None, None, None


class LinearGradients:
    """The gradients of a linear layer's input, weight and bias, gathered a chunk of rows at a time from the gradient
    of its output; the weight's and bias's in float32."""

    def __init__(self, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
        self.hidden = torch.empty_like(hidden)
        dtype = torch.promote_types(weight.dtype, torch.float32)  # the sums over the chunks
        self.weight = torch.zeros(weight.shape, dtype=dtype, device=weight.device)
        self.bias = None if bias is None else torch.zeros(bias.shape, dtype=dtype, device=bias.device)
        self.cast_weight = None  # the weight in the products' dtype, cast once

    def add(self, rows: slice, grad_output: torch.Tensor, hidden: torch.Tensor, weight: torch.Tensor) -> None:
        """grad_output: d loss / d (hidden[rows] W^T + b), (rows, vocab)."""
        if self.cast_weight is None:
            self.cast_weight = weight.to(grad_output.dtype)
        self.hidden[rows] = grad_output @ self.cast_weight
        if grad_output.dtype == self.weight.dtype == hidden.dtype:  # no autocast: the product summed in place
            self.weight.addmm_(grad_output.t(), hidden)
        else:  # autocast's dtype: its product, summed in float32
            self.weight += grad_output.t() @ hidden.to(grad_output.dtype)
        if self.bias is not None:
            self.bias += grad_output.sum(0, dtype=self.bias.dtype)


# on the CPU a chunk of the fused loss is three matrix products as well as the softmax: 2^24 logits (64 MiB in
# float32) keep the products' row count in the hundreds at a vocabulary of tens of thousands
LINEAR_CHUNK_ELEMENTS = 2**24


@torch.compiler.disable  # eager under torch.compile: a loop over the chunks would make a graph per token count
def linear_cross_entropy(
    hidden: torch.Tensor, lm_head: nn.Linear, labels: torch.Tensor, epsilon: float = 0.0, ignore_index: int = -100
) -> tuple[torch.Tensor, torch.Tensor]:
    """(label-smoothed loss sum, NLL sum) over the non-ignored tokens of `lm_head(hidden)`'s logits, without making
    them (see `LinearCrossEntropy`). hidden: (..., d_model), labels: (...)."""
    flat = hidden.reshape(-1, hidden.shape[-1])
    flat_labels = labels.reshape(-1).to(hidden.device)
    return LinearCrossEntropy.apply(flat, lm_head.weight, lm_head.bias, flat_labels, epsilon, ignore_index)


# ---------------------------------------------------------------------------------------------------------------------
# §3.4 The final linear layer, decoding on the CPU
# ---------------------------------------------------------------------------------------------------------------------


# oneDNN's linear kernel (the one torch.compile's CPU backend calls for linear layers), where torch has it: x86 builds
ONEDNN_LINEAR = (
    platform.machine().lower() in ("x86_64", "amd64")
    and torch.backends.mkldnn.is_available()
    and hasattr(torch.ops.mkldnn, "_linear_pointwise")
)
# the output projection's weight elements from which oneDNN's kernel pays: below, its overhead of about 15 us a call
# costs more than it saves at a few rows (measured on 2 cores at 1, 5, 32 and 160 rows: 2000 x 128 and 400 x 512
# as fast or slower at 1 and 5 rows; 4000 x 128 and 1000 x 512 faster at all but 5 rows of 4000 x 128; 8000 x 128
# faster at all)
ONEDNN_MIN_WEIGHT_ELEMENTS = 2**19
# vocabulary rows of the output projection per pass where it is computed in blocks: 1024 rows of a d_model=512 weight
# are 2 MiB, which stay in the cache while the kernel packs and multiplies them
VOCABULARY_BLOCK_ROWS = 1024


def project_to_vocabulary(lm_head: nn.Linear, hidden_states: torch.Tensor) -> torch.Tensor:
    """The final linear layer (§3.4): hidden states (..., d_model) -> logits (..., vocab_size).

    Decoding on the CPU (float32, no gradient), the product of a few rows (a decoding step's) with the (vocab_size,
    d_model) weight is the largest of a step, and nn.Linear computes it badly: MKL's GEMM packs the whole weight again
    at every call, a pass over tens of MiB for a product of a few rows. So:
    - on an x86 CPU with a weight of at least ONEDNN_MIN_WEIGHT_ELEMENTS, the product runs through oneDNN's matmul,
      which reads the weight as it is, a block at a time. Measured on 2 cores (AMD EPYC), 37000 x 512: 1 row 7.2 ms
      -> 3.8 ms, 5 rows 16.1 -> 5.4 ms, 32 rows 23.2 -> 13.2 ms, 160 rows (32 sentences, beam 5) 73.9 -> 31.8 ms;
      8000 x 128, 32 rows 0.68 -> 0.59 ms. The same dot products, summed in another order: equal to float rounding,
      not bit for bit;
    - under torch.compile (which cannot lower that call with a weight it has not packed itself), or where torch has
      no oneDNN, with more than two blocks of VOCABULARY_BLOCK_ROWS vocabulary entries, a block at a time, each
      block's product written straight into its columns of the logits (concatenated under torch.compile, which the
      compiler turns into the same writes): the same numbers as nn.Linear, bit for bit as measured, each block of the
      weight used while it is still in the cache (about a fifth faster at 37000 x 512 on one core).
    Anywhere else (a gradient to keep, another device or dtype, a replaced or hooked head, a smaller weight) it is the
    plain `lm_head`."""
    if not decodes_on_cpu(lm_head, hidden_states):
        return lm_head(hidden_states)
    weight, bias = lm_head.weight, lm_head.bias
    if is_torchdynamo_compiling() or not (ONEDNN_LINEAR and torch.backends.mkldnn.enabled):
        if weight.shape[0] <= 2 * VOCABULARY_BLOCK_ROWS:
            return lm_head(hidden_states)
        return project_in_blocks(hidden_states, weight, bias)
    if weight.numel() < ONEDNN_MIN_WEIGHT_ELEMENTS:
        return lm_head(hidden_states)
    return torch.ops.mkldnn._linear_pointwise(hidden_states, weight, bias, "none", [], "")


def decodes_on_cpu(lm_head: nn.Module, hidden_states: torch.Tensor) -> bool:
    """Whether `project_to_vocabulary` may compute a plain head its own way: on the CPU, in float32, no gradient."""
    if not is_plain_linear(lm_head):
        return False
    weight = lm_head.weight
    return (
        hidden_states.device.type == "cpu"
        and weight.device == hidden_states.device
        and hidden_states.dtype == weight.dtype == torch.float32
        and not (torch.is_grad_enabled() and (hidden_states.requires_grad or weight.requires_grad))
    )


def project_in_blocks(hidden_states: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """F.linear(hidden_states, weight, bias) a block of VOCABULARY_BLOCK_ROWS output columns at a time."""
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


def is_plain_linear(module: nn.Module) -> bool:
    """An nn.Linear as it is, not a subclass or wrapper (an adapter's) and with no hooks: its output is
    F.linear(x, weight, bias), which the kernels above may compute their own way."""
    return type(module) is nn.Linear and not module._forward_hooks and not module._forward_pre_hooks
