"""Training criteria: label-smoothed cross-entropy (§5.4 of the paper, epsilon_ls = 0.1), as fairseq computes it,
and R-Drop's consistency term between two dropout passes of the same batch."""

import torch

from ...modeling.kernels_vanilla_transformer import token_cross_entropy
from ..options.arguments import OptimisationArguments

COMPILE_BACKEND = "inductor"  # torch.compile's code generator for --compile


def label_smoothed_nll_loss(
    logits: torch.Tensor, labels: torch.Tensor, epsilon: float, ignore_index: int = -100, in_place: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Summed over the non-ignored target tokens.

    The smoothed target puts 1 - epsilon on the reference token and spreads epsilon uniformly over the vocabulary:
    loss = (1 - epsilon) * NLL(reference) + epsilon * mean over the vocabulary of -log p.

    Returns (smoothed loss sum, plain NLL sum, number of target tokens); divide by the token count to normalise.
    `in_place`: the backward pass writes the logits' gradient over them (for a caller that drops the logits).
    """
    nll, uniform = token_cross_entropy(logits, labels, ignore_index, in_place)
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


def drop_words(ids: torch.Tensor, rate: float, replacement: int, keep_ids: tuple[int, ...]) -> torch.Tensor:
    """Word dropout on token ids (Token Drop, Zhang et al. 2020): a copy of `ids` in which each token, except those
    in `keep_ids` (padding and sentence boundaries), is replaced by `replacement` (<unk>) with probability `rate`.

    Applied to the source ids and to the decoder's shifted-right inputs of a training batch, never to the labels: the
    model has to predict every reference token from a context with holes in it, a regulariser for small corpora.
    The draws come from torch's global generator, which --seed fixes and checkpoints save, like dropout's.
    """
    droppable = ~torch.isin(ids, torch.tensor(keep_ids, device=ids.device))  # (batch, len)
    dropped = droppable & (torch.rand(ids.shape, device=ids.device) < rate)
    return ids.masked_fill(dropped, replacement)


class TranslationCriterion:
    """The training criterion as fairseq's criteria are: given the model and a batch, the summed loss to
    differentiate, the number of target tokens that normalises it, and the figures to log.

    It owns label smoothing (epsilon), R-Drop (alpha > 0: the batch twice through two dropout masks, fairseq's
    weighting) and word dropout (a rate > 0: <unk> in place of source and decoder-input tokens, never the labels).
    """

    def __init__(
        self,
        label_smoothing: float,
        rdrop_alpha: float = 0.0,
        word_dropout: float = 0.0,
        unk_token_id: int | None = None,
        special_ids: tuple[int, ...] = (),
        compile: bool = False,
        fused_loss: bool = False,
    ):
        if fused_loss and rdrop_alpha:
            raise ValueError("fused_loss never makes the logits, which R-Drop (rdrop_alpha) reads: give one")
        self.label_smoothing, self.rdrop_alpha, self.word_dropout = label_smoothing, rdrop_alpha, word_dropout
        self.unk_token_id, self.special_ids = unk_token_id, special_ids
        # --fused-loss: the model projects and computes the loss a chunk of tokens at a time (`skip_logits`)
        self.forward_loss = self.fused_forward_loss if fused_loss else self.forward_loss
        # the backward pass writes the logits' gradient over them, except under torch.compile, whose graphs take no
        # mutation of a tensor saved for the backward pass (and which plans the memory of its backward itself)
        self.in_place = not compile
        if compile:  # --compile: only the training step's forward and loss; the model itself (saved, evaluated) is not
            self.forward_loss = torch.compile(self.forward_loss, backend=COMPILE_BACKEND)

    @classmethod
    def from_arguments(cls, optimisation: OptimisationArguments, tokenizer) -> "TranslationCriterion":
        # word dropout keeps padding and the sentence boundaries
        special_ids = (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id)
        return cls(
            optimisation.label_smoothing,
            optimisation.rdrop_alpha,
            optimisation.word_dropout,
            tokenizer.unk_token_id,
            special_ids,
            compile=optimisation.compile,
            fused_loss=optimisation.fused_loss,
        )

    def sample_size(self, batch: dict) -> torch.Tensor:
        """The target tokens that normalise a batch's loss, known before the forward pass: its non-pad labels, twice
        with R-Drop (both passes count, as in fairseq). An int64 scalar tensor."""
        tokens = (batch["labels"] != -100).sum()
        return tokens * 2 if self.rdrop_alpha else tokens

    def __call__(self, model, batch: dict) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """(summed loss, its target tokens (`sample_size`), logging figures). The logging figures are the summed
        label-smoothed loss, the summed NLL and the target tokens, detached and counted once per distinct target token
        (R-Drop's two passes are averaged), so that they read the same with R-Drop on or off."""
        inputs = {key: batch[key] for key in ("input_ids", "attention_mask", "decoder_input_ids", "labels")}
        if self.word_dropout:
            for key in ("input_ids", "decoder_input_ids"):
                inputs[key] = drop_words(inputs[key], self.word_dropout, self.unk_token_id, self.special_ids)
        if self.rdrop_alpha:  # R-Drop: the batch twice, through two dropout masks
            inputs = {key: torch.cat([value, value]) for key, value in inputs.items()}
        labels = inputs.pop("labels")
        logits, loss_sum, nll_sum, tokens = self.forward_loss(model, inputs, labels)
        loss = loss_sum
        if self.rdrop_alpha:
            # fairseq's weighting: both passes' cross-entropy plus alpha times the symmetric KL, normalised by the
            # target tokens of both passes; logged per distinct target token, like the plain loss
            loss = loss_sum + self.rdrop_alpha * rdrop_kl_sum(logits, labels)
            loss_sum, nll_sum, tokens = loss_sum / 2, nll_sum / 2, tokens // 2
        logging = {"loss": loss_sum.detach(), "nll_loss": nll_sum.detach(), "target_tokens": tokens}
        return loss, self.sample_size(batch), logging

    def forward_loss(self, model, inputs: dict, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The forward pass and its label-smoothed loss: (logits, loss sum, NLL sum, target tokens). With
        --compile this runs under torch.compile, which also compiles its backward pass. The logits are the
        criterion's own, read before the backward pass only: their gradient is written over them (see
        `self.in_place`)."""
        logits = model(**inputs, use_cache=False).logits
        return (logits, *label_smoothed_nll_loss(logits, labels, self.label_smoothing, in_place=self.in_place))

    def fused_forward_loss(self, model, inputs: dict, labels: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        """`forward_loss` with the model's own fused projection and loss (`skip_logits`): no logits (None), the
        same sums to float rounding."""
        outputs = model(
            **inputs,
            labels=labels,
            use_cache=False,
            skip_logits=True,
            smoothing=self.label_smoothing,
            num_items_in_batch=1,  # the model's loss is the sum over tokens divided by this
        )
        nll = outputs.loss if outputs.nll_loss is None else outputs.nll_loss  # None: no smoothing, the same sum
        return None, outputs.loss, nll, (labels != -100).sum()
