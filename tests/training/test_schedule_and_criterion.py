import math

import pytest
import torch
from vanilla_transformer.modeling import kernels_vanilla_transformer
from vanilla_transformer.training.optim.criterion import TranslationCriterion, label_smoothed_nll_loss, rdrop_kl_sum
from vanilla_transformer.training.optim.schedule import cooldown_factor, inverse_sqrt_lr, lr_lambda

from ..conftest import tiny_model


def test_schedule_is_equation_3_of_the_paper():
    d, warmup = 512, 4000
    for step in (1, 10, 1000, 4000, 4001, 10000, 100000):
        expected = d**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert inverse_sqrt_lr(step, d, warmup) == pytest.approx(expected)
    # linear warm-up then inverse square root decay, peaking at the warm-up step
    assert inverse_sqrt_lr(2000, d, warmup) == pytest.approx(inverse_sqrt_lr(4000, d, warmup) / 2)
    assert inverse_sqrt_lr(16000, d, warmup) == pytest.approx(inverse_sqrt_lr(4000, d, warmup) / 2)
    assert inverse_sqrt_lr(4000, d, warmup) == pytest.approx(d**-0.5 * warmup**-0.5)


def test_peak_learning_rate_rescales_the_curve():
    assert inverse_sqrt_lr(4000, 512, 4000, peak_lr=5e-3) == pytest.approx(5e-3)
    assert inverse_sqrt_lr(1000, 512, 4000, peak_lr=5e-3) == pytest.approx(5e-3 / 4)
    assert inverse_sqrt_lr(16000, 512, 4000, peak_lr=5e-3) == pytest.approx(5e-3 / 2)


def test_lambda_counts_optimizer_updates_from_one():
    f = lr_lambda(512, 4000)
    assert f(0) == pytest.approx(inverse_sqrt_lr(1, 512, 4000))
    assert f(3999) == pytest.approx(inverse_sqrt_lr(4000, 512, 4000))


def test_cooldown_falls_linearly_to_zero_over_the_last_updates():
    total, cooldown = 100, 10
    assert [cooldown_factor(step, total, cooldown) for step in (1, 50, 90)] == [1.0, 1.0, 1.0]
    # updates 91..100 are the last ten: 10/10, 9/10, ..., 1/10, never zero for an update that is taken
    assert [cooldown_factor(step, total, cooldown) for step in range(91, 101)] == pytest.approx(
        [k / 10 for k in range(10, 0, -1)]
    )
    assert cooldown_factor(101, total, cooldown) == 0.0
    assert all(cooldown_factor(step, total, 0) == 1.0 for step in (1, 100, 1000))  # 0 disables it
    f = lr_lambda(128, 20, 3e-3, total_steps=total, cooldown_steps=cooldown)
    plain = lr_lambda(128, 20, 3e-3)
    assert [f(s) for s in range(90)] == [plain(s) for s in range(90)]
    assert f(94) == pytest.approx(plain(94) * 0.6)  # update 95 of 100


def test_label_smoothing_against_a_hand_computation():
    logits = torch.tensor([[[2.0, 1.0, 0.0], [0.0, 0.0, 3.0]]])
    labels = torch.tensor([[0, -100]])
    loss, nll, tokens = label_smoothed_nll_loss(logits, labels, epsilon=0.1)
    z = math.log(math.exp(2) + math.exp(1) + math.exp(0))
    log_p = [2 - z, 1 - z, 0 - z]
    expected_nll = -log_p[0]
    expected = 0.9 * expected_nll + 0.1 * (-sum(log_p) / 3)
    assert tokens.item() == 1
    assert nll.item() == pytest.approx(expected_nll, rel=1e-6)
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_without_smoothing_it_is_summed_cross_entropy():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 11)
    labels = torch.randint(0, 11, (3, 5))
    labels[0, 3:] = -100
    loss, nll, tokens = label_smoothed_nll_loss(logits, labels, epsilon=0.0)
    expected = torch.nn.functional.cross_entropy(logits.view(-1, 11), labels.view(-1), reduction="sum")
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(nll, expected)
    assert tokens.item() == 13


def reference_label_smoothed_loss(logits, labels, epsilon):
    """The textbook computation through log-probabilities, to check the fused one against."""
    log_probs = torch.log_softmax(logits.double(), dim=-1)
    keep = labels != -100
    target = torch.full_like(log_probs, epsilon / logits.shape[-1])
    target.scatter_add_(
        -1, labels.masked_fill(~keep, 0).unsqueeze(-1), torch.full_like(log_probs[..., :1], 1.0 - epsilon)
    )
    return -(target * log_probs).sum(-1)[keep].sum()


@pytest.mark.parametrize("rows_per_chunk", [None, 5])  # all rows in one pass; 5 rows per pass, the last one short
@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.3])
def test_fused_loss_and_gradient_match_the_textbook_computation(epsilon, rows_per_chunk, monkeypatch):
    if rows_per_chunk:
        monkeypatch.setattr(kernels_vanilla_transformer, "CROSS_ENTROPY_CHUNK_ELEMENTS", rows_per_chunk * 37)
    torch.manual_seed(1)
    logits = torch.randn(4, 6, 37, dtype=torch.double, requires_grad=True)
    labels = torch.randint(0, 37, (4, 6))
    labels[1, 2:] = -100
    labels[3, :] = -100
    loss, _, _ = label_smoothed_nll_loss(logits, labels, epsilon)
    (grad,) = torch.autograd.grad(loss, logits)
    expected = reference_label_smoothed_loss(logits, labels, epsilon)
    (expected_grad,) = torch.autograd.grad(expected, logits)
    torch.testing.assert_close(loss.double(), expected)
    torch.testing.assert_close(grad, expected_grad)
    assert grad[3].abs().max() == 0  # ignored tokens get no gradient
    small_labels = labels[:2, :3].remainder(7).masked_fill(labels[:2, :3] == -100, -100)
    small_logits = logits[:2, :3, :7].detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda z: label_smoothed_nll_loss(z, small_labels, epsilon)[0], (small_logits,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_in_place_backward_gives_the_same_gradients_and_leaves_them_in_the_logits(dtype, monkeypatch):
    """The training criterion's backward pass writes the logits' gradient over the logits (one tensor of their size
    fewer at the start of the backward pass): the weights below the logits get the same gradients, to the bit."""
    monkeypatch.setattr(kernels_vanilla_transformer, "CROSS_ENTROPY_CHUNK_ELEMENTS", 7 * 53)
    torch.manual_seed(3)
    hidden, weight = torch.randn(30, 16, dtype=dtype), torch.randn(53, 16, dtype=dtype)
    labels = torch.randint(0, 53, (30,))
    labels[::5] = -100
    gradients = {}
    for in_place in (False, True):
        leaves = (hidden.clone().requires_grad_(), weight.clone().requires_grad_())
        logits = leaves[0] @ leaves[1].T  # (tokens, vocab), the output projection of §3.4
        loss, _, _ = label_smoothed_nll_loss(logits, labels, 0.1, in_place=in_place)
        loss.backward()
        gradients[in_place] = [leaf.grad for leaf in leaves]
        if in_place:
            held = logits.detach()
    for separate, overwritten in zip(gradients[False], gradients[True]):
        assert torch.equal(separate, overwritten)
    # what the logits hold afterwards is their gradient: the gradient of the weight is computed from it
    torch.testing.assert_close(held.T.float() @ hidden.float(), gradients[True][1].float(), rtol=2e-2, atol=2e-2)


def test_bfloat16_logits_are_scored_in_float32_a_chunk_at_a_time(monkeypatch):
    monkeypatch.setattr(kernels_vanilla_transformer, "CROSS_ENTROPY_CHUNK_ELEMENTS", 7 * 53)
    torch.manual_seed(2)
    logits = (torch.randn(30, 53) * 4).to(torch.bfloat16).requires_grad_()
    labels = torch.randint(0, 53, (30,))
    labels[::4] = -100
    loss, _, _ = label_smoothed_nll_loss(logits, labels, 0.1)
    (grad,) = torch.autograd.grad(loss, logits)
    assert loss.dtype == torch.float32 and grad.dtype == torch.bfloat16
    upcast = logits.detach().float().requires_grad_()  # the same values in float32
    expected = reference_label_smoothed_loss(upcast, labels, 0.1)
    (expected_grad,) = torch.autograd.grad(expected, upcast)
    torch.testing.assert_close(loss, expected.float())
    torch.testing.assert_close(grad, expected_grad.to(torch.bfloat16))  # rounded once, at the end


def test_rdrop_term_is_the_symmetric_kl_of_the_two_passes_over_the_target_tokens():
    torch.manual_seed(3)
    logits = torch.randn(2 * 3, 5, 11, dtype=torch.double, requires_grad=True)  # the batch of 3, twice
    labels = torch.randint(0, 11, (3, 5))
    labels[1, 2:] = -100
    doubled = torch.cat([labels, labels])
    kl = rdrop_kl_sum(logits, doubled)
    log_p, log_q = torch.log_softmax(logits, -1).chunk(2)
    keep = labels != -100
    kl_pq = torch.nn.functional.kl_div(log_q, log_p, log_target=True, reduction="none").sum(-1)  # KL(p || q)
    kl_qp = torch.nn.functional.kl_div(log_p, log_q, log_target=True, reduction="none").sum(-1)  # KL(q || p)
    torch.testing.assert_close(kl.double(), ((kl_pq + kl_qp)[keep].sum() / 2))
    (grad,) = torch.autograd.grad(kl, logits)
    assert grad[1, 2:].abs().max() == 0 and grad[4, 2:].abs().max() == 0  # padding gets no gradient
    assert grad[:3].abs().max() > 0 and grad[3:].abs().max() > 0  # both passes are pulled together
    same = torch.cat([logits[:3], logits[:3]]).detach()
    assert rdrop_kl_sum(same, doubled).item() == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("device", ["cpu", "meta"])  # the meta device stands in for a GPU: anything but the CPU
def test_the_cross_entropy_takes_cache_sized_passes_on_the_cpu_and_few_large_ones_on_an_accelerator(device):
    """On the CPU a pass over the logits fits the cache; on a GPU every pass costs kernel launches whatever its size,
    so a base-size batch (25,000 tokens, 37,000 types) is cut into a few dozen passes, not hundreds."""
    logits = torch.empty(25_000, 1, device=device).expand(25_000, 37_000)  # the shape, without 3.4 GiB behind it
    rows = [len(range(25_000)[part]) for part in kernels_vanilla_transformer.chunks(logits)]
    most = kernels_vanilla_transformer.CROSS_ENTROPY_CHUNK_ELEMENTS if device == "cpu" else 2**25
    assert sum(rows) == 25_000 and max(rows) * 37_000 <= most
    assert len(rows) > 800 if device == "cpu" else len(rows) < 50


def test_the_fused_criterion_gives_the_plain_ones_sums_and_gradients():
    """--fused-loss: the model projects and scores a chunk of tokens at a time; the loss, its logging figures and
    the gradients are the plain criterion's, to float rounding."""
    model = tiny_model(seed=6).train()
    labels = torch.randint(3, 50, (4, 5))
    labels[2, 3:] = -100
    batch = {
        "input_ids": torch.randint(3, 50, (4, 7)),
        "attention_mask": torch.ones(4, 7, dtype=torch.long),
        "decoder_input_ids": model.prepare_decoder_input_ids_from_labels(labels),
        "labels": labels,
    }
    results = {}
    for fused in (False, True):
        loss, sample_size, logging = TranslationCriterion(0.1, fused_loss=fused)(model, batch)
        results[fused] = (loss, sample_size, logging, torch.autograd.grad(loss, list(model.parameters())))
    (plain, plain_size, plain_log, plain_grads), (loss, size, log, grads) = results[False], results[True]
    assert size == plain_size == 18 and log["target_tokens"] == 18
    torch.testing.assert_close(loss, plain, rtol=1e-5, atol=0)
    torch.testing.assert_close(log["nll_loss"], plain_log["nll_loss"], rtol=1e-5, atol=0)
    for fused_grad, plain_grad in zip(grads, plain_grads):
        torch.testing.assert_close(fused_grad, plain_grad, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="fused_loss never makes the logits"):
        TranslationCriterion(0.1, rdrop_alpha=5.0, fused_loss=True)
