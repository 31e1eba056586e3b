"""The model compiles as one graph: a training forward and backward under `torch.compile(fullgraph=True)`, the
hand-written dropout and cross-entropy kernels included, give the eager gradients. (`vanilla-transformer train
--compile` runs the training step so; the backend here is the library's graph capture and autograd tracing without
code generation, which takes a few seconds instead of a minute on a CPU.)"""

import pytest
import torch

from tests.conftest import tiny_model


def padded_batch() -> dict:
    torch.manual_seed(1)
    src, labels = torch.randint(3, 50, (3, 9)), torch.randint(3, 50, (3, 7))
    src_mask = (torch.arange(9)[None] < torch.tensor([[9], [6], [4]])).long()
    labels = labels.masked_fill(torch.arange(7)[None] >= torch.tensor([[7], [5], [3]]), -100)
    return dict(input_ids=src.masked_fill(src_mask == 0, 0), attention_mask=src_mask, labels=labels)


def loss_and_gradients(model, batch: dict, compiled=None) -> tuple[torch.Tensor, dict]:
    """The loss of `model` (run as `compiled` if given) and its parameters' gradients."""
    loss = (model if compiled is None else compiled)(**batch, use_cache=False).loss
    loss.backward()
    return loss.detach(), {name: p.grad for name, p in model.named_parameters()}


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_a_training_forward_and_backward_compile_as_one_graph(implementation):
    torch._dynamo.reset()
    batch = padded_batch()
    eager = tiny_model(attn_implementation=implementation).train()
    model = tiny_model(attn_implementation=implementation).train()
    expected_loss, expected = loss_and_gradients(eager, batch)
    loss, gradients = loss_and_gradients(model, batch, torch.compile(model, fullgraph=True, backend="aot_eager"))
    torch.testing.assert_close(loss, expected_loss)
    for name, gradient in expected.items():
        torch.testing.assert_close(gradients[name], gradient, msg=name)


def test_dropout_compiles_into_the_graph():
    torch._dynamo.reset()
    model = tiny_model(dropout=0.1).train()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    loss, gradients = loss_and_gradients(model, padded_batch(), compiled)
    assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in gradients.values())
