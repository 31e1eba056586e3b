"""fairseq's loss normalisation: an update's summed loss over all its target tokens, whatever the micro-batches and
processes it is split over."""

import types

import pytest
import torch
from vanilla_transformer.training.run.loop import NonFiniteLoss, finite_totals

from ..conftest import two_processes

COMMON = '''
import torch
from accelerate import Accelerator
from vanilla_transformer.configuration import VanillaTransformerConfig
from vanilla_transformer.modeling import VanillaTransformerForConditionalGeneration
from vanilla_transformer.training.optim.criterion import TranslationCriterion
from vanilla_transformer.training.run.loop import accumulate_gradients

PAD, BOS, EOS = 0, 1, 2


def tiny_model():
    torch.manual_seed(0)
    config = VanillaTransformerConfig(vocab_size=40, d_model=16, num_heads=2, d_ff=32, encoder_layers=1,
                                      decoder_layers=1, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                                      max_position_embeddings=64, pad_token_id=PAD, bos_token_id=BOS,
                                      eos_token_id=EOS, decoder_start_token_id=BOS)
    return VanillaTransformerForConditionalGeneration(config)


def make_batch(model, sources, targets):
    """Padded batch of (source ids, target ids) pairs, as the training collator builds it."""
    width, target_width = max(map(len, sources)), max(map(len, targets))
    input_ids = torch.tensor([s + [PAD] * (width - len(s)) for s in sources])
    labels = torch.tensor([t + [-100] * (target_width - len(t)) for t in targets])
    return {"input_ids": input_ids, "attention_mask": (input_ids != PAD).long(), "labels": labels,
            "decoder_input_ids": model.prepare_decoder_input_ids_from_labels(labels)}


def pairs():
    """A micro-batch with 2 target tokens and one with 4 x 14: very different weights under the two rules."""
    generator = torch.Generator().manual_seed(1)
    short = [([5, 6, 7, EOS], [8, EOS])]
    long = [(torch.randint(3, 40, (9,), generator=generator).tolist() + [EOS],
             torch.randint(3, 40, (13,), generator=generator).tolist() + [EOS]) for _ in range(4)]
    return short, long


def update_gradients(model, accelerator, group):
    """The gradients one update over the micro-batches `group` applies (what the training loop's optimizer steps
    with), and its logged totals."""
    model.zero_grad(set_to_none=True)
    totals = accumulate_gradients(accelerator, model, TranslationCriterion(label_smoothing=0.1), group)
    gradients = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return gradients, totals
'''

DISTRIBUTED = (
    COMMON
    + """
import sys
from vanilla_transformer.processes import end_processes
accelerator = Accelerator(cpu=True)
model = tiny_model()
short, long = pairs()
mine = (short, long)[accelerator.process_index]
batch = make_batch(model, [s for s, _ in mine], [t for _, t in mine])
model = accelerator.prepare(model)
gradients, totals = update_gradients(model, accelerator, [batch])
if accelerator.is_main_process:
    torch.save({"gradients": {k.removeprefix("module."): v for k, v in gradients.items()}, "totals": totals},
               sys.argv[1])
end_processes()
"""
)


def common():
    namespace = {}
    exec(COMMON, namespace)
    return types.SimpleNamespace(**namespace)


def accumulated_and_joined(c):
    """Gradients of an update accumulating the two micro-batches, and of one batch holding both."""
    short, long = c.pairs()
    model = c.tiny_model()
    micro = [c.make_batch(model, [s for s, _ in part], [t for _, t in part]) for part in (short, long)]
    accumulated, totals = c.update_gradients(model, c.Accelerator(cpu=True, gradient_accumulation_steps=2), micro)
    model = c.tiny_model()
    joined = c.make_batch(model, [s for s, _ in short + long], [t for _, t in short + long])
    whole, whole_totals = c.update_gradients(model, c.Accelerator(cpu=True), [joined])
    return model, micro, accumulated, totals, whole, whole_totals


def test_an_update_weighs_its_micro_batches_by_their_target_tokens():
    c = common()
    model, micro, accumulated, totals, whole, whole_totals = accumulated_and_joined(c)
    assert totals[2].item() == whole_totals[2].item() == 2 + 4 * 14
    torch.testing.assert_close(totals, whole_totals, rtol=1e-5, atol=1e-4)
    assert accumulated.keys() == whole.keys() and accumulated
    for name in whole:
        torch.testing.assert_close(accumulated[name], whole[name], rtol=1e-4, atol=1e-6)
    # the old rule (the mean of the micro-batches' per-token losses) gives a clearly different gradient
    criterion = c.TranslationCriterion(label_smoothing=0.1)
    model.zero_grad()
    sum(criterion(model, batch)[0] / criterion.sample_size(batch) / 2 for batch in micro).backward()
    old = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    difference = max((old[n] - whole[n]).abs().max() / whole[n].abs().max().clamp_min(1e-12) for n in whole)
    assert difference > 0.05


def test_two_processes_give_the_update_one_process_accumulates(tmp_path):
    c = common()
    _, _, accumulated, totals, _, _ = accumulated_and_joined(c)
    script, out = tmp_path / "update.py", tmp_path / "rank0.pt"
    script.write_text(DISTRIBUTED)
    two_processes(29537, str(script), str(out), check=True)
    two = torch.load(out)
    torch.testing.assert_close(two["totals"], totals, rtol=1e-5, atol=1e-4)
    assert two["gradients"].keys() == accumulated.keys()
    for name in accumulated:
        torch.testing.assert_close(two["gradients"][name], accumulated[name], rtol=1e-4, atol=1e-6)


def test_a_non_finite_loss_stops_the_update_before_its_last_backward_pass():
    """The update's losses are checked once, before the backward pass that could apply it; the error names the first
    micro-batch's loss that is not finite."""
    c = common()
    short, long = c.pairs()
    model = c.tiny_model()
    group = [c.make_batch(model, [s for s, _ in part], [t for _, t in part]) for part in (short, long, short)]
    criterion, overflows = c.TranslationCriterion(label_smoothing=0.1), iter([1.0, float("inf"), float("nan")])

    def overflowing(model, batch):
        loss, sample_size, logging = criterion(model, batch)
        factor = next(overflows)
        return loss * factor, sample_size, {**logging, "loss": logging["loss"] * factor}

    overflowing.sample_size = criterion.sample_size
    accelerator = c.Accelerator(cpu=True, gradient_accumulation_steps=3)
    backward_passes, backward = [], accelerator.backward
    accelerator.backward = lambda loss, **kwargs: (backward_passes.append(loss.item()), backward(loss, **kwargs))
    with pytest.raises(NonFiniteLoss, match="the loss became inf") as raised:
        c.accumulate_gradients(accelerator, model, overflowing, group)
    assert raised.value.value == float("inf")
    assert len(backward_passes) == 2  # the first two micro-batches' only


def test_an_update_with_finite_losses_sums_its_micro_batches():
    rows = torch.tensor([[2.0, 1.5, 3.0], [4.0, 3.5, 5.0]])
    torch.testing.assert_close(finite_totals(rows), torch.tensor([6.0, 5.0, 8.0]))
    with pytest.raises(NonFiniteLoss, match="nan"):
        finite_totals(torch.tensor([[2.0, 1.5, 3.0], [float("nan"), 3.5, 5.0]]))
