"""The fused output projection and loss (`linear_cross_entropy`, the model's `skip_logits`) against the plain one, the
residual stream of `residual_in_fp32=False` under autocast, and the output projection when decoding on the CPU."""

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from vanilla_transformer.modeling import kernels_vanilla_transformer
from vanilla_transformer.modeling.kernels_vanilla_transformer import linear_cross_entropy, token_cross_entropy

from vanilla_transformer import VanillaTransformerForConditionalGeneration

from ..conftest import tiny_model


def plain_sums(hidden, head, labels, epsilon):
    """(loss sum, NLL sum) through the whole logits: the loss the fused one must equal."""
    nll, uniform = token_cross_entropy(head(hidden), labels)
    return (1 - epsilon) * nll.sum() + epsilon * uniform.sum(), nll.sum()


def gradients(loss, leaves):
    return torch.autograd.grad(loss, [leaf for leaf in leaves if leaf is not None])


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("epsilon", [0.0, 0.1])
@pytest.mark.parametrize("rows_per_chunk", [None, 7])  # every row in one chunk; 7 rows a chunk, the last one short
def test_the_fused_loss_and_its_gradients_equal_the_plain_ones_in_float32(bias, epsilon, rows_per_chunk, monkeypatch):
    vocab = 301
    if rows_per_chunk:
        monkeypatch.setattr(kernels_vanilla_transformer, "LINEAR_CHUNK_ELEMENTS", rows_per_chunk * vocab)
    torch.manual_seed(0)
    head = nn.Linear(24, vocab, bias=bias)
    hidden = torch.randn(5, 9, 24, requires_grad=True)
    labels = torch.randint(0, vocab, (5, 9))
    labels[1, 4:] = -100
    leaves = (hidden, head.weight, head.bias)
    loss, nll = linear_cross_entropy(hidden, head, labels, epsilon)
    expected_loss, expected_nll = plain_sums(hidden, head, labels, epsilon)
    # the bar is 1e-3 relative; in float32 it is far closer
    torch.testing.assert_close(loss, expected_loss, rtol=1e-5, atol=0)
    torch.testing.assert_close(nll, expected_nll, rtol=1e-5, atol=0)
    for fused, plain in zip(gradients(loss, leaves), gradients(expected_loss, leaves)):
        torch.testing.assert_close(fused, plain, rtol=1e-4, atol=1e-6)
    assert not nll.requires_grad  # the NLL sum is for logging


def test_the_fused_gradient_passes_gradcheck_in_float64(monkeypatch):
    monkeypatch.setattr(kernels_vanilla_transformer, "LINEAR_CHUNK_ELEMENTS", 3 * 11)
    torch.manual_seed(1)
    labels = torch.tensor([3, -100, 0, 10, 7])

    def loss(hidden, weight, bias):
        return kernels_vanilla_transformer.LinearCrossEntropy.apply(hidden, weight, bias, labels, 0.1, -100)[0]

    leaves = (torch.randn(5, 4), torch.randn(11, 4), torch.randn(11))
    assert torch.autograd.gradcheck(loss, tuple(t.double().requires_grad_() for t in leaves))


class LargestOutput(TorchDispatchMode):
    """The most elements any operator made while it was on."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tensors = out if isinstance(out, (tuple, list)) else (out,)
        self.largest = max([self.largest, *(t.numel() for t in tensors if isinstance(t, torch.Tensor))])
        return out


def test_the_fused_loss_never_makes_the_whole_logits(monkeypatch):
    tokens, vocab = 64, 500
    monkeypatch.setattr(kernels_vanilla_transformer, "LINEAR_CHUNK_ELEMENTS", 8 * vocab)
    head = nn.Linear(4, vocab, bias=False)
    hidden = torch.randn(tokens, 4, requires_grad=True)
    labels = torch.randint(0, vocab, (tokens,))
    with LargestOutput() as fused:
        linear_cross_entropy(hidden, head, labels, 0.1)[0].backward()
    with LargestOutput() as plain:
        plain_sums(hidden, head, labels, 0.1)[0].backward()
    assert plain.largest == tokens * vocab
    assert fused.largest == 8 * vocab  # a chunk's logits; the weight's gradient (vocab x 4) is smaller


def test_under_autocast_the_products_run_in_bf16_and_the_sums_and_gradients_stay_float32():
    torch.manual_seed(2)
    head = nn.Linear(32, 200, bias=False)
    hidden = torch.randn(40, 32, requires_grad=True)
    labels = torch.randint(0, 200, (40,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _ = linear_cross_entropy(hidden, head, labels, 0.1)
        expected, _ = plain_sums(hidden, head, labels, 0.1)  # autocast's logits, bf16, scored in float32
    assert loss.dtype == torch.float32
    fused_grads, plain_grads = gradients(loss, (hidden, head.weight)), gradients(expected, (hidden, head.weight))
    assert [g.dtype for g in fused_grads] == [torch.float32, torch.float32]
    torch.testing.assert_close(loss, expected, rtol=1e-3, atol=0)
    for fused, plain in zip(fused_grads, plain_grads):
        torch.testing.assert_close(fused, plain, rtol=0.05, atol=2e-3)


def test_skip_logits_gives_the_models_loss_without_logits_and_the_same_gradients():
    model = tiny_model(seed=3)
    batch = {"input_ids": torch.randint(3, 50, (3, 6)), "labels": torch.randint(3, 50, (3, 5))}
    batch["labels"][0, 3:] = -100
    plain = model(**batch, smoothing=0.1)
    plain_grads = torch.autograd.grad(plain.loss, list(model.parameters()))
    fused = model(**batch, smoothing=0.1, skip_logits=True)
    fused_grads = torch.autograd.grad(fused.loss, list(model.parameters()))
    assert fused.logits is None and plain.logits.shape == (3, 5, 50)
    torch.testing.assert_close(fused.loss, plain.loss, rtol=1e-5, atol=0)
    torch.testing.assert_close(fused.nll_loss, plain.nll_loss, rtol=1e-5, atol=0)
    assert plain.loss > plain.nll_loss  # smoothing adds the uniform term: it is not the plain cross-entropy
    for fused_grad, plain_grad in zip(fused_grads, plain_grads):
        torch.testing.assert_close(fused_grad, plain_grad, rtol=1e-4, atol=1e-6)
    assert model(**batch).nll_loss is None  # no smoothing: the loss is the cross-entropy, returned once


def test_a_batch_whose_labels_are_all_ignored_has_loss_0_and_no_gradient():
    """0 tokens made the mean 0 / 0: a NaN loss whose gradient turned every weight NaN at the next step."""
    model = tiny_model(seed=5)
    batch = {"input_ids": torch.randint(3, 50, (2, 6)), "labels": torch.full((2, 5), -100)}
    for skip_logits in (False, True):
        out = model(**batch, smoothing=0.1, skip_logits=skip_logits)
        grads = torch.autograd.grad(out.loss, list(model.parameters()), allow_unused=True)
        assert out.loss.item() == 0 and out.nll_loss.item() == 0
        assert all(grad is None or grad.eq(0).all() for grad in grads)


def test_skip_logits_needs_labels_and_leaves_a_replaced_head_to_make_its_logits():
    model = tiny_model(seed=4)
    ids = torch.randint(3, 50, (2, 4))
    with pytest.raises(ValueError, match="skip_logits=True needs labels"):
        model(input_ids=ids, decoder_input_ids=ids, skip_logits=True)
    with pytest.raises(ValueError, match=r"smoothing is label smoothing\'s epsilon, in \[0, 1\); got 1.5"):
        model(input_ids=ids, labels=ids, smoothing=1.5)
    with pytest.raises(TypeError, match="as `smoothing`, not `label_smoothing`"):  # the name before: not ignored
        model(input_ids=ids, labels=ids, label_smoothing=0.1)
    model.lm_head.register_forward_hook(lambda module, args, out: out * 2)  # an adapter's hook: the head is not plain
    out = model(input_ids=ids, labels=ids, skip_logits=True)
    assert out.logits is not None and out.loss is not None


def stream_dtypes(model, batch: dict) -> set[torch.dtype]:
    """The dtypes of every Add&Norm's output in one forward pass under bf16 autocast."""
    dtypes = set()
    hooks = [
        module.register_forward_hook(lambda module, args, out: dtypes.add(out.dtype))
        for name, module in model.named_modules()
        if name.endswith("_norm") and not name.endswith("final_norm")
    ]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(**batch)
    for hook in hooks:
        hook.remove()
    return dtypes


@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_without_residual_in_fp32_the_stream_is_bf16_under_autocast_and_unchanged_without(norm_position, tmp_path):
    batch = {"input_ids": torch.randint(3, 50, (3, 6)), "labels": torch.randint(3, 50, (3, 5))}
    float32_stream = tiny_model(seed=5, norm_position=norm_position)
    bf16_stream = tiny_model(seed=5, norm_position=norm_position, residual_in_fp32=False)
    assert stream_dtypes(float32_stream, batch) == {torch.float32}
    assert stream_dtypes(bf16_stream, batch) == {torch.bfloat16}
    # without autocast the field changes nothing, to the bit
    assert torch.equal(float32_stream(**batch).logits, bf16_stream(**batch).logits)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        losses = [model(**batch).loss for model in (float32_stream, bf16_stream)]
    assert all(loss.dtype == torch.float32 for loss in losses)
    torch.testing.assert_close(losses[1], losses[0], rtol=2e-2, atol=0)
    bf16_stream.save_pretrained(tmp_path)
    reloaded = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path)
    assert reloaded.config.residual_in_fp32 is False and stream_dtypes(reloaded, batch) == {torch.bfloat16}


class Operators(TorchDispatchMode):
    """The ATen operators that run inside it, by name (`mkldnn._linear_pointwise.default`, `aten.mm.out`, ...)."""

    def __enter__(self):
        self.names = []
        return super().__enter__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def project(head: nn.Linear, hidden: torch.Tensor) -> tuple[torch.Tensor, list[str]]:
    """`project_to_vocabulary` without a gradient, as decoding runs it, and the operators it ran."""
    with torch.no_grad(), Operators() as ops:
        logits = kernels_vanilla_transformer.project_to_vocabulary(head, hidden)
    return logits, ops.names


@pytest.mark.skipif(not kernels_vanilla_transformer.ONEDNN_LINEAR, reason="torch has no oneDNN on this CPU")
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows", [1, 5, 32])
def test_decoding_on_the_cpu_projects_through_onednn_to_float_rounding(bias, rows):
    torch.manual_seed(rows)
    head = nn.Linear(128, 4096, bias=bias)  # 2^19 weight elements: oneDNN's from there
    hidden = torch.randn(rows, 1, 128)
    logits, ops = project(head, hidden)
    assert ops == ["mkldnn._linear_pointwise.default"]
    assert logits.shape == (rows, 1, 4096)
    torch.testing.assert_close(logits, head(hidden), rtol=1e-5, atol=1e-5)


def test_a_smaller_weight_a_gradient_or_another_dtype_leave_the_plain_head():
    head, hidden = nn.Linear(128, 4000), torch.randn(3, 2, 128)  # just under 2^19 weight elements
    logits, ops = project(head, hidden)
    assert torch.equal(logits, head(hidden)) and "mkldnn._linear_pointwise.default" not in ops
    head = nn.Linear(128, 4096)
    with Operators() as ops:
        logits = kernels_vanilla_transformer.project_to_vocabulary(head, hidden)  # the weight wants its gradient
    assert logits.requires_grad and "mkldnn._linear_pointwise.default" not in ops.names
    logits, ops = project(head.to(torch.float64), hidden.to(torch.float64))
    assert torch.equal(logits, head(hidden.to(torch.float64))) and "mkldnn._linear_pointwise.default" not in ops


@pytest.mark.parametrize("bias", [False, True])
def test_without_onednn_the_projection_runs_a_vocabulary_block_at_a_time(bias, monkeypatch):
    torch.manual_seed(5)
    head = nn.Linear(64, 2 * kernels_vanilla_transformer.VOCABULARY_BLOCK_ROWS + 100, bias=bias)  # 3 blocks
    hidden = torch.randn(4, 3, 64)
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", False)  # as torch.backends.mkldnn.flags(enabled=False)
    logits, ops = project(head, hidden)
    assert ops.count("aten.addmm.out" if bias else "aten.mm.out") == 3
    torch.testing.assert_close(logits, head(hidden), rtol=1e-5, atol=1e-5)


def heads(batch: int, heads: int, length: int, size: int) -> torch.Tensor:
    return torch.randn(batch, heads, length, size)


@pytest.mark.parametrize("d_v", [8, 12])  # d_k = d_v, as in the paper, and a smaller d_k (Table 3 row B)
@pytest.mark.parametrize("masked", [False, True])
def test_the_one_query_attention_of_a_decoding_step_is_sdpas(d_v, masked):
    torch.manual_seed(d_v)
    query, key, value = heads(6, 4, 1, 8), heads(6, 4, 5, 8), heads(6, 4, 5, d_v)
    may_attend = torch.rand(6, 1, 1, 5) > 0.4 if masked else None
    if masked:
        may_attend[0] = False  # a query that may see no key: zeros, as from SDPA
        may_attend[1] = True
    found = kernels_vanilla_transformer.one_query_attention(query, key, value, may_attend, 8**-0.5)
    expected = F.scaled_dot_product_attention(query, key, value, attn_mask=may_attend, scale=8**-0.5)
    assert found.shape == (6, 1, 4, d_v)
    torch.testing.assert_close(found, expected.transpose(1, 2), rtol=1e-5, atol=1e-6)
    if masked:
        assert torch.equal(found[0], torch.zeros(1, 4, d_v))


def attention_ops(query, key, value, attention_mask=None) -> list[str]:
    """The operators `sdpa_or_one_query` runs, without a gradient unless its inputs want one."""
    module = nn.Module()
    module.is_causal = False
    with Operators() as ops:
        kernels_vanilla_transformer.sdpa_or_one_query(module, query, key, value, attention_mask, scaling=0.5)
    return ops.names


def test_sdpa_takes_every_call_but_a_decoding_steps_on_the_cpu():
    step = heads(3, 2, 1, 4), heads(3, 2, 7, 4), heads(3, 2, 7, 4)
    with torch.no_grad():
        assert attention_ops(*step).count("aten.bmm.default") == 2
        assert attention_ops(*step, torch.ones(3, 1, 1, 7, dtype=torch.bool)).count("aten.bmm.default") == 2
        for other in (
            (heads(3, 2, 2, 4), *step[1:]),  # two queries
            (step[0], heads(3, 7, 2, 4).transpose(1, 2), step[2]),  # keys not contiguous
            (*step, torch.zeros(3, 1, 1, 7)),  # an additive mask
            tuple(t.to(torch.bfloat16) for t in step),  # bf16: SDPA's softmax sums in float32
        ):
            assert "aten.bmm.default" not in attention_ops(*other)
    assert "aten.bmm.default" not in attention_ops(step[0].requires_grad_(), *step[1:])  # a gradient to keep


def test_a_decoding_step_through_the_cache_takes_the_one_query_attention():
    model = tiny_model(seed=6)
    assert model.config._attn_implementation == "sdpa"
    source = torch.randint(3, 50, (2, 5))
    with torch.no_grad(), Operators() as ops:
        model(input_ids=source, decoder_input_ids=torch.ones(2, 1, dtype=torch.long), use_cache=True)
    sdpa = [name for name in ops.names if "scaled_dot_product" in name]
    assert len(sdpa) == 2  # the encoder's self-attention
    assert ops.names.count("aten.bmm.default") == 2 * 2 * 2  # self- and cross-attention of 2 decoder layers
