"""The paper's model does not change by accident: a tiny post-norm model built from a seed has the weights, the
logits, the training loss (with dropout drawn from a seed) and the gradients saved in data/paper_reference.safetensors,
bit for bit. A refactoring of the model file must leave all of them as they are; a deliberate change of the paper's
model rewrites the file with `python -m tests.modeling.test_paper_reference` and says why in its commit."""

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from tests.conftest import tiny_model

REFERENCE = Path(__file__).parent / "data" / "paper_reference.safetensors"


def batch() -> dict:
    """Two padded sentence pairs: sources of 7 and 4 tokens, targets of 6 and 3."""
    generator = torch.Generator().manual_seed(3)
    source = torch.randint(3, 50, (2, 7), generator=generator)
    labels = torch.randint(3, 50, (2, 6), generator=generator)
    source_mask = (torch.arange(7)[None] < torch.tensor([[7], [4]])).long()
    labels = labels.masked_fill(torch.arange(6)[None] >= torch.tensor([[6], [3]]), -100)
    return dict(input_ids=source.masked_fill(source_mask == 0, 0), attention_mask=source_mask, labels=labels)


def outputs() -> dict[str, torch.Tensor]:
    """The weights of the seeded tiny model (2+2 layers, dropout 0.1 on sub-layers, attention and ReLU), its
    evaluation logits, and one training forward and backward's loss and gradients, dropout drawn from a seed."""
    model = tiny_model(dropout=0.1, attention_dropout=0.1, activation_dropout=0.1)
    found = {f"weight.{name}": value.detach().clone() for name, value in model.state_dict().items()}
    with torch.no_grad():
        found["logits"] = model(**batch()).logits
    model.train()
    torch.manual_seed(7)
    loss = model(**batch(), use_cache=False).loss
    loss.backward()
    found["loss"] = loss.detach()
    found |= {f"grad.{name}": p.grad for name, p in model.named_parameters() if p.grad is not None}
    return found


def test_the_papers_model_gives_its_saved_weights_outputs_and_gradients_bit_for_bit():
    saved, found = load_file(REFERENCE), outputs()
    assert sorted(found) == sorted(saved)
    changed = [name for name in saved if not torch.equal(found[name], saved[name])]
    assert not changed, f"differs from the saved reference: {changed[:5]}"


if __name__ == "__main__":
    save_file({name: value.contiguous() for name, value in outputs().items()}, REFERENCE)
    print(f"wrote {REFERENCE}")
