"""Nothing in a forward pass, a backward pass or a decoding step reads a value back from the device: on a GPU each
such read makes the host wait for the queue to drain, at every training and decoding step. The meta device, whose
tensors have shapes but no values, stands in for an accelerator on any machine: a read fails there. The clear errors
about bad inputs stay where reading is free, on the CPU."""

import pytest
import torch

from tests.conftest import greedy_steps, tiny_model


def padded_batch(device: str) -> dict:
    torch.manual_seed(1)
    src, labels = torch.randint(3, 50, (3, 9)), torch.randint(3, 50, (3, 7))
    src_mask = (torch.arange(9)[None] < torch.tensor([[9], [6], [4]])).long()
    labels = labels.masked_fill(torch.arange(7)[None] >= torch.tensor([[7], [5], [3]]), -100)
    batch = dict(input_ids=src.masked_fill(src_mask == 0, 0), attention_mask=src_mask, labels=labels)
    return {key: value.to(device) for key, value in batch.items()}


def decoding_steps(model, batch: dict, steps: int) -> torch.Tensor:
    """The encoder once, then `steps` decoding steps of one token each through the cache; the last step's logits."""
    # made where the batch is: a copy from the host would be a synchronisation of the test's own
    start = torch.full(
        (batch["input_ids"].shape[0], 1), model.config.decoder_start_token_id, device=batch["input_ids"].device
    )
    return greedy_steps(model, batch, start, steps)[-1]


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_a_training_forward_and_backward_read_no_values(implementation):
    model = tiny_model(dropout=0.1, attn_implementation=implementation).train().to("meta")
    loss = model(**padded_batch("meta"), use_cache=False).loss
    loss.backward()
    assert loss.shape == () and model.model.encoder.layers[0].self_attn.in_proj.weight.grad is not None


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_a_decoding_step_reads_no_values(implementation):
    model = tiny_model(attn_implementation=implementation).to("meta")
    assert decoding_steps(model, padded_batch("meta"), 3).shape == (3, 1, 50)


def test_bad_inputs_are_still_named_on_the_cpu():
    model = tiny_model()
    batch = padded_batch("cpu")
    with pytest.raises(ValueError, match=r"labels holds token id 50, outside the vocabulary \[0, 50\)"):
        model(**{**batch, "labels": batch["labels"].masked_fill(batch["labels"] == 7, 50)})
    with pytest.raises(ValueError, match=r"input_ids holds token id -4"):
        model(**{**batch, "input_ids": batch["input_ids"] - 4})
    # a mask of another batch size is a matter of shapes, named on every device
    meta = padded_batch("meta")
    with pytest.raises(ValueError, match="batch size 2"):
        tiny_model().to("meta")(**{**meta, "attention_mask": meta["attention_mask"][:2]})


@pytest.mark.gpu
@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_a_training_step_and_a_decoding_step_do_not_synchronise_on_cuda(implementation):
    model = tiny_model(dropout=0.1, attn_implementation=implementation).cuda().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    batch = padded_batch("cuda")

    def training_step():
        model(**batch, use_cache=False).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    training_step()  # the first step allocates the optimizer's state
    decoding_steps(model.eval(), batch, 1)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        model.train()
        training_step()
        decoding_steps(model.eval(), batch, 3)
    finally:
        torch.cuda.set_sync_debug_mode("default")
