"""Tokenising the pairs: the splits through `datasets.map`, the training rows within the length limits, BPE-dropout's
pairs segmented anew each epoch, and the collator that pads a batch."""

import sys
from dataclasses import dataclass

import datasets
import numpy as np
import pyarrow.compute as pc
import torch
from accelerate.utils import broadcast_object_list
from tokenizers import Tokenizer, models
from transformers import DataCollatorForSeq2Seq, PreTrainedTokenizerBase

from ...model_folder import encode_within
from ...processes import usable_cores
from ..options.arguments import DataArguments
from .checks import ARROW_BATCH, DataError


def within_length_limits(source_lengths, target_lengths, data: DataArguments):
    """Whether tokenised pairs of these lengths fit `--max-source-length` and `--max-target-length` (numpy arrays:
    one answer per pair); longer pairs are not trained on."""
    return (np.asarray(source_lengths) <= data.max_source_length) & (
        np.asarray(target_lengths) <= data.max_target_length
    )


def tokenize_pairs(
    split: datasets.Dataset,
    tokenizer: PreTrainedTokenizerBase,
    data: DataArguments,
    max_length: int | None = None,
    num_proc: int | None = None,
) -> datasets.Dataset:
    """`input_ids` and `labels` of every pair of a split, with `Dataset.map(batched=True)` on `num_proc` processes,
    which the datasets library caches (a second run on the same file and tokenizer reads the cache); the split's
    other columns are dropped. With `max_length` (a model's learned positions, see `position_limit`), a longer source
    or reference is truncated to it as the tokenizer truncates (the end-of-sentence token kept), each named in a
    warning on stderr: the model cannot read it whole."""
    source_lang, target_lang = data.source_lang, data.target_lang  # the map's fingerprint depends on these only

    def tokenize(batch, indices):
        sources = [pair[source_lang] for pair in batch["translation"]]
        targets = [pair[target_lang] for pair in batch["translation"]]
        if max_length is None:
            encoded = tokenizer(sources, text_target=targets)
            return {"input_ids": encoded["input_ids"], "labels": encoded["labels"]}
        warnings = [[] for _ in sources]  # per pair, printed after the map (which datasets caches)
        columns = {}
        for column, side, texts in (("input_ids", "source", sources), ("labels", "reference", targets)):
            columns[column] = encode_within(
                tokenizer,
                texts,
                max_length,
                lambda i, side=side: f"warning: pair {indices[i] + 1}, {side}",
                target=column == "labels",
                warn=lambda i, line: warnings[i].append(line),
            )
        return {**columns, "truncation_warnings": ["\n".join(lines) for lines in warnings]}

    tokenized = split.map(
        tokenize,
        batched=True,
        with_indices=True,
        remove_columns=split.column_names,
        num_proc=num_proc,
        desc="Tokenising",
    )
    if max_length is None:
        return tokenized
    for lines in tokenized["truncation_warnings"]:  # outside the cached map, so that every run warns
        if lines:
            print(lines, file=sys.stderr)
    return tokenized.remove_columns("truncation_warnings")


def token_lengths(tokenized: datasets.Dataset) -> tuple[np.ndarray, np.ndarray]:
    """The source and target length of every tokenised pair, read as Arrow list lengths (no Python object per pair)."""
    sources, targets = [], []
    columns = tokenized.select_columns(["input_ids", "labels"]).with_format("arrow")
    for batch in columns.iter(batch_size=ARROW_BATCH):
        sources.append(pc.list_value_length(batch.column("input_ids")).to_numpy(zero_copy_only=False))
        targets.append(pc.list_value_length(batch.column("labels")).to_numpy(zero_copy_only=False))
    empty = np.zeros(0, dtype=np.int32)
    return (np.concatenate(sources) if sources else empty), (np.concatenate(targets) if targets else empty)


def trained_positions(data: DataArguments) -> int:
    """`max_position_embeddings` of a model trained within `--max-source-length` / `--max-target-length`: the longest
    training sentence, and two positions to spare."""
    return max(data.max_source_length, data.max_target_length) + 2


def tokenizing_processes(rows: int, requested: int | None) -> int | None:
    """`--preprocessing-num-workers`, or by default every core for a corpus large enough to repay the processes'
    start (100,000 pairs); None: tokenise in this process."""
    if requested is not None:
        return requested if requested > 1 else None
    cores = usable_cores()
    return cores if rows >= 100_000 and cores > 1 else None


@dataclass(frozen=True)
class TrainingRows:
    """The rows of the tokenised training split that are trained on (within the length limits), their source and
    target lengths, and how many rows were dropped. The split itself stays whole: a `select` would put an indices
    mapping in front of it, through which every later read copies the rows it touches."""

    indices: np.ndarray
    source_lengths: np.ndarray
    target_lengths: np.ndarray
    dropped: int


def drop_long_pairs(train: datasets.Dataset, data: DataArguments) -> TrainingRows:
    """The training pairs within `--max-source-length` / `--max-target-length` tokens, and how many were dropped;
    a `DataError` if none is left."""
    sources, targets = token_lengths(train)
    keep = within_length_limits(sources, targets, data)
    dropped = int(len(keep) - keep.sum())
    if not keep.any():
        raise DataError(
            f"no training pair is left after length filtering (--max-source-length {data.max_source_length}, "
            f"--max-target-length {data.max_target_length})."
        )
    if dropped:
        print(
            f"split 'train': dropped {dropped:,} of {len(keep):,} pairs longer than --max-source-length "
            f"{data.max_source_length} or --max-target-length {data.max_target_length} tokens",
            file=sys.stderr,
        )
    indices = np.flatnonzero(keep)
    return TrainingRows(indices, sources[indices], targets[indices], dropped)


def tokenize_datasets(
    raw, tokenizer: PreTrainedTokenizerBase, data: DataArguments, learned_positions: bool
) -> tuple[datasets.DatasetDict, TrainingRows | None]:
    """Tokenise every split; returns the splits and the training rows within `--max-source-length` /
    `--max-target-length` tokens (the longer ones are not trained on; None without a training split, when streamed).
    With learned positions, which end there, longer validation and test pairs are truncated."""
    limit = trained_positions(data) if learned_positions else None
    tokenized = {}
    for name, split in raw.items():
        processes = tokenizing_processes(len(split), data.preprocessing_num_workers)
        tokenized[name] = tokenize_pairs(split, tokenizer, data, None if name == "train" else limit, processes)
    return datasets.DatasetDict(tokenized), drop_long_pairs(tokenized["train"], data) if "train" in tokenized else None


class BpeDropoutPairs(torch.utils.data.Dataset):
    """BPE-dropout (Provilkov et al. 2020): the training pairs are segmented anew for every epoch, each merge of the
    tokenizer's BPE being skipped with probability `dropout`, so the model sees many segmentations of each word.
    Validation, test and translation use the tokenizer as trained, without dropout.

    The pairs are those `tokenize_datasets` keeps (within `--max-source-length` / `--max-target-length` when
    segmented without dropout); a pair whose sampled segmentation is longer than that keeps its plain segmentation.
    The `tokenizers` library draws the skipped merges from its own generator, which no seed fixes, so the main process
    segments and hands the result to the others: every process then batches the same pairs.
    """

    def __init__(self, raw_train, tokenizer: PreTrainedTokenizerBase, data: DataArguments, dropout: float):
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None or not isinstance(backend.model, models.BPE):
            kind = type(backend.model).__name__ if backend is not None else "a slow (Python) tokenizer"
            raise DataError(f"--bpe-dropout {dropout} needs a BPE tokenizer; this tokenizer's model is {kind}.")
        self.sampler = Tokenizer.from_str(backend.to_str())  # a copy: the saved tokenizer keeps no dropout
        self.sampler.model.dropout = dropout
        self.sampler.encode_special_tokens = backend.encode_special_tokens  # not in the copy's text: `text_as_text`
        self.max_lengths = (data.max_source_length, data.max_target_length)
        pairs = raw_train["translation"]
        sources, targets = [p[data.source_lang] for p in pairs], [p[data.target_lang] for p in pairs]
        plain = (self._encode(backend, sources), self._encode(backend, targets))
        fits = within_length_limits([len(ids) for ids in plain[0]], [len(ids) for ids in plain[1]], data)
        keep = np.flatnonzero(fits).tolist()
        self.texts = ([sources[i] for i in keep], [targets[i] for i in keep])
        self.plain = ([plain[0][i] for i in keep], [plain[1][i] for i in keep])
        self.input_ids, self.labels = self.plain
        self.epoch = None  # the epoch the current segmentation was drawn for

    @staticmethod
    def _encode(tokenizer: Tokenizer, texts: list[str]) -> list[list[int]]:
        return [encoding.ids for encoding in tokenizer.encode_batch(texts)]

    def resegment(self, epoch: int, accelerator) -> None:
        """Draw this epoch's segmentation (on the main process; the others receive it)."""
        drawn = [None]
        if accelerator.is_main_process:
            sides = []
            for texts, plain, limit in zip(self.texts, self.plain, self.max_lengths):
                sampled = self._encode(self.sampler, texts)
                sides.append([ids if len(ids) <= limit else fallback for ids, fallback in zip(sampled, plain)])
            drawn = [sides]
        if accelerator.num_processes > 1:
            broadcast_object_list(drawn, from_process=0)
        self.input_ids, self.labels = drawn[0]
        self.epoch = epoch

    def lengths(self) -> tuple[list[int], list[int]]:
        return [len(x) for x in self.input_ids], [len(x) for x in self.labels]

    def __len__(self) -> int:
        return len(self.input_ids)

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.input_ids[index], "labels": self.labels[index]}


def make_collator(tokenizer, model=None) -> DataCollatorForSeq2Seq:
    """Pads sources with the pad id and labels with -100; builds `decoder_input_ids` from the model."""
    return DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100, return_tensors="pt")
