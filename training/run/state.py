"""A training run's state: `Run`, what the update loop and the finish work with, built by startup.py's `setup_run`;
the run's metrics.jsonl; and `TrainingStopped`, the run stopping on purpose."""

import dataclasses
import json
import os
import time

import datasets
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
from transformers import PreTrainedTokenizerBase

from ...folders import replacing
from ..data.batching import TokenBatchSampler
from ..data.streaming import StreamingBatches
from ..data.tokenizing import BpeDropoutPairs
from ..optim.criterion import TranslationCriterion
from ..options.arguments import CheckpointArguments, DataArguments, EvaluationArguments, OptimisationArguments
from .engines import whole_copy

METRICS_FILE = "metrics.jsonl"
RUN_MARKERS = ("config.json", "model.safetensors", METRICS_FILE, "checkpoints")


class TrainingStopped(RuntimeError):
    """The run stopped on purpose (a non-finite loss); the last good checkpoint is kept."""


def forget_metrics_after(output_dir: str, step: int) -> None:
    """A resumed run repeats the steps after its checkpoint: drop their records from the killed run so that
    metrics.jsonl holds each step once. The file is rewritten under a temporary name and renamed into place."""
    path = os.path.join(output_dir, METRICS_FILE)
    if not os.path.isfile(path):
        return
    with open(path) as handle:
        kept = []
        for line in handle:
            try:
                if json.loads(line)["step"] <= step:
                    kept.append(line if line.endswith("\n") else line + "\n")
            except (ValueError, KeyError):  # a line cut short by the kill
                continue
    with replacing(path) as handle:
        handle.writelines(kept)


def log_metrics(output_dir: str, accelerator, record: dict) -> None:
    """One update's record, appended to the run's metrics.jsonl (main process) and handed to the trackers."""
    if accelerator.is_main_process:
        with open(os.path.join(output_dir, METRICS_FILE), "a") as handle:
            handle.write(json.dumps(record) + "\n")
    accelerator.log({k: v for k, v in record.items() if isinstance(v, (int, float))}, step=record["step"])


@dataclasses.dataclass
class Run:
    """What the update loop and the finish work with, set up by `setup_run`: the groups of arguments they read, and
    the run's pieces; `step`, `epoch` and `batches_done` advance."""

    output_dir: str
    data: DataArguments
    optimisation: OptimisationArguments
    checkpoints: CheckpointArguments
    evaluation: EvaluationArguments
    validation_score: str  # what chooses on the validation split: "bleu", or "bleu_lowercase" with --lowercase
    accelerator: Accelerator
    tokenizer: PreTrainedTokenizerBase
    tokenizer_identity: dict  # recorded in each checkpoint (checkpoints.py's `tokenizer_identity`)
    raw: datasets.DatasetDict
    tokenized: datasets.DatasetDict
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    criterion: TranslationCriterion
    train_data: datasets.Dataset | BpeDropoutPairs | None  # None when streamed
    sampler: TokenBatchSampler | StreamingBatches
    train_loader: DataLoader | StreamingBatches
    batches_per_epoch: int
    max_steps: int
    dropped: dict[str, dict[str, int]]  # pairs left out of the data: {reason: {split: count}}
    resume_checkpoint: str | None = None
    sharded: bool = False  # under FSDP and DeepSpeed: evaluation uses a whole copy of the weights (engines.py)
    step: int = 0
    epoch: int = 0
    batches_done: int = 0  # of the current epoch
    seconds_before: float = 0.0  # training seconds of the runs this one resumed, up to its checkpoint
    started: float = dataclasses.field(default_factory=time.time)  # when this process's updates began

    def train_seconds(self) -> float:
        """Seconds of training behind the current weights, over every resumed run: each run's time up to the
        checkpoint the next one resumed from, and this run's so far."""
        return self.seconds_before + time.time() - self.started

    def evaluation_model(self) -> torch.nn.Module:
        """The model to translate and score with: the prepared one, or under FSDP and DeepSpeed a whole copy of its
        current weights (every process must call this at the same point)."""
        return whole_copy(self.accelerator, self.model) if self.sharded else self.model

    def split_settings(self) -> dict:
        """How a split is evaluated: its batch size and the language of its references (`evaluate_split`)."""
        return {"batch_size": self.evaluation.eval_batch_size, "target_lang": self.data.target_lang}
