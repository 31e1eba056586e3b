"""How the suites time and count: a training batch and step, a call timed on the device, two models timed
alternately, the machine's matmul peak and a training step's counted FLOPs."""

import json
import statistics
import time

import torch
from torch.utils.flop_counter import FlopCounterMode


def training_batch(size: dict, shape: tuple[int, int, int], device: str) -> dict:
    batch, src_len, tgt_len = shape
    generator = torch.Generator().manual_seed(1)
    ids = lambda length: torch.randint(3, size["vocab"], (batch, length), generator=generator)  # noqa: E731
    return {
        "input_ids": ids(src_len).to(device),
        "attention_mask": torch.ones(batch, src_len, dtype=torch.long, device=device),
        "decoder_input_ids": ids(tgt_len).to(device),
        "labels": ids(tgt_len).to(device),
    }


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


class TrainStep:
    """Forward with labels (each model's own cross-entropy), backward, gradient clipping, a fused Adam update (as
    `vanilla-transformer train` uses), the same for both models."""

    def __init__(self, model, batch):
        self.model, self.batch = model.train(), batch
        self.optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)

    def loss(self) -> torch.Tensor:
        """The forward pass and the loss to differentiate: the model's own mean cross-entropy."""
        return self.model(**self.batch, use_cache=False).loss

    def __call__(self):
        self.loss().backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def seconds_per_call(fn, calls: int, device: str) -> float:
    synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    synchronize(device)
    return (time.perf_counter() - start) / calls


def compare(make_ours, make_theirs, repeats: int, calls: int, device: str) -> dict:
    """Warm both up, then time them alternately; per-repeat times and the median ratio theirs/ours."""
    ours, theirs = make_ours(), make_theirs()
    ours(), theirs()  # warm-up (allocations, kernel selection)
    times = {"ours": [], "theirs": []}
    for repeat in range(repeats):
        order = [("ours", ours), ("theirs", theirs)]
        for name, fn in order if repeat % 2 == 0 else order[::-1]:
            times[name].append(seconds_per_call(fn, calls, device))
    ratios = [t / o for o, t in zip(times["ours"], times["theirs"])]
    # whether generate() actually ran compiled decoding steps (it compiles greedy and sampling, not beam search)
    compiled = {name: hasattr(getattr(fn, "model", None), "_compiled_call") for name, fn in order}
    return {
        "ours": statistics.median(times["ours"]),
        "theirs": statistics.median(times["theirs"]),
        "ratio": statistics.median(ratios),
        "ours_compiled": compiled["ours"],
        "theirs_compiled": compiled["theirs"],
    }


def matmul_peak(device: str, n: int, dtype=torch.float32) -> float:
    """The machine's dense matmul FLOP/s in this dtype and thread setting: best of several n x n products."""
    a, b = torch.randn(n, n, dtype=dtype, device=device), torch.randn(n, n, dtype=dtype, device=device)
    torch.mm(a, b)
    best = min(seconds_per_call(lambda: torch.mm(a, b), 3, device) for _ in range(5))
    return 2 * n**3 / best


def training_flops(model, batch) -> int:
    """FLOPs of one forward+backward, counted by torch's FLOP counter (matmuls and attention), not estimated."""
    counter = FlopCounterMode(display=False)
    with counter:
        model(**batch, use_cache=False).loss.backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def log_row(rows: list, row: dict) -> None:
    rows.append(row)
    print(json.dumps(row), flush=True)
