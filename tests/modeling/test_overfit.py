"""The model learns: it overfits a small reverse-the-sequence task to 100% greedy accuracy in seconds on CPU."""

import torch

from tests.conftest import tiny_model


def test_overfits_a_tiny_reverse_task():
    torch.manual_seed(0)
    n, pad, bos, eos = 48, 0, 1, 2
    lengths = torch.randint(3, 7, (n,))
    sources = torch.full((n, 6), pad)
    labels = torch.full((n, 7), -100)
    for i, length in enumerate(lengths.tolist()):
        tokens = torch.randint(3, 13, (length,))
        sources[i, :length] = tokens
        labels[i, :length] = tokens.flip(0)
        labels[i, length] = eos
    mask = (sources != pad).long()

    model = tiny_model(d_model=64, num_heads=4, d_ff=128, vocab_size=16).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
    updates = 0
    while True:
        output = model(input_ids=sources, attention_mask=mask, labels=labels)
        # every next token right given the reference's prefix, so greedy decoding's too
        if (output.logits.argmax(-1) == labels)[labels != -100].all() or updates == 300:
            break
        optimizer.zero_grad()
        output.loss.backward()
        optimizer.step()
        updates += 1

    model.eval()
    generated = model.generate(input_ids=sources, attention_mask=mask, max_new_tokens=8, do_sample=False)
    correct = 0
    for i, length in enumerate(lengths.tolist()):
        expected = [bos] + labels[i, : length + 1].tolist()
        correct += generated[i, : length + 2].tolist() == expected
    assert correct == n, f"{correct}/{n} sequences reversed exactly after {updates} updates (loss {output.loss:.4f})"
