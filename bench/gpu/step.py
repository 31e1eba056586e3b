"""The GPU suite's training step, plain or with one of the candidate changes to it (`Change`)."""

import dataclasses
import gc

import torch

from ..common import models
from ..common.measure import training_flops


@dataclasses.dataclass(frozen=True)
class Change:
    """A change to our training step, named on the command line by `key`, as the training command would make it:
    fields of the model's configuration, the forward's keywords, Adam's keywords, and the token batch's size (a
    multiple of --max-tokens)."""

    key: str
    name: str
    config: dict = dataclasses.field(default_factory=dict)
    forward: dict = dataclasses.field(default_factory=dict)
    optimizer: dict = dataclasses.field(default_factory=dict)
    batch_scale: int = 1


PLAIN = Change("plain", "plain")
FUSED_LOSS = Change("fused-loss", "fused loss (--fused-loss)", forward={"skip_logits": True})
BF16_STREAM = Change("bf16-stream", "bf16 residual stream (--no-residual-in-fp32)", config={"residual_in_fp32": False})
CAPTURABLE = Change("capturable-adam", "capturable fused Adam", optimizer={"capturable": True})
CHANGES = {
    change.key: change
    for change in (
        FUSED_LOSS,
        BF16_STREAM,
        CAPTURABLE,
        Change("all-three", "all three", BF16_STREAM.config, FUSED_LOSS.forward, CAPTURABLE.optimizer),
        Change("double-batch", "2x the tokens per batch", batch_scale=2),
    )
}


class Step:
    """One training step of one model: the speed suite's step (forward with the model's own loss, backward, clipping,
    fused Adam), with the forward under bf16 autocast and, if `backend` is given, the model under torch.compile;
    `change` (ours only) changes it."""

    def __init__(self, kind: str, size: dict, device: str, batch: dict, backend: str | None, change: Change = PLAIN):
        self.model = models.build(kind, size, "sdpa", device, dropout=size["dropout"], **change.config).train()
        # static shapes: every step compiles the same forward, and dynamo would compile a step of another batch
        # size (the changes' twice the tokens) with a symbolic batch dimension after the first one
        self.forward = torch.compile(self.model, backend=backend, dynamic=False) if backend else self.model
        self.batch, self.device_type, self.keywords = batch, torch.device(device).type, change.forward
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True, **change.optimizer
        )
        self()  # compiles, where compiled; compare warms up once more

    def __call__(self):
        with torch.autocast(self.device_type, dtype=torch.bfloat16):
            loss = self.forward(**self.batch, use_cache=False, **self.keywords).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)  # no host sync: the scale stays on the device
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def step_flops(kind: str, size: dict, device: str, batch: dict) -> int:
    """FLOPs of one forward and backward, counted as the speed suite counts them."""
    with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
        return training_flops(models.build(kind, size, "sdpa", device, dropout=size["dropout"]), batch)


def built_with_peak(make_step, device: str) -> tuple[Step, float | None]:
    """A step built and run twice (compiling it, where compiled, and allocating the optimizer's state), and the most
    memory torch allocated on the GPU meanwhile beyond what was allocated before (None off CUDA)."""
    release(device)
    if not device.startswith("cuda"):
        return make_step(), None
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step = make_step()
    step()
    return step, (torch.cuda.max_memory_allocated() - before) / 2**30


def release(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
