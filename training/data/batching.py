"""Token-budget batching (fairseq's): batches of similar-length pairs that hold at most `max_tokens` tokens."""

import array
import random
from collections.abc import Iterator

import numpy as np

from .checks import DataError


class TokenBatchSampler:
    """Batches of similar-length pairs holding at most `max_tokens` tokens (padded source or target, whichever is
    larger), as fairseq builds them. Every epoch the pairs are shuffled, then sorted by length (a stable sort, so
    pairs of equal length stay in shuffled order) and cut into batches in that order; the batch order is shuffled
    too. The same seed and epoch give the same batches. Lengths, the order and the batch bounds are numpy arrays:
    a batch becomes a list of indices only when it is read."""

    def __init__(
        self,
        source_lengths,
        target_lengths,
        max_tokens: int,
        seed: int = 0,
        shuffle: bool = True,
        num_replicas: int = 1,
        indices=None,
    ):
        """`indices`: the dataset rows the lengths belong to (default: rows 0, 1, ...), which the batches hold."""
        self.indices = None if indices is None else np.asarray(indices, dtype=np.int64)
        self.max_tokens = max_tokens
        self.seed = seed
        self.shuffle = shuffle
        self.num_replicas = num_replicas
        self.epoch = 0
        self.set_lengths(source_lengths, target_lengths)

    def set_lengths(self, source_lengths, target_lengths) -> None:
        """The pairs' lengths in tokens; they change with every epoch's segmentation under BPE-dropout."""
        self.lengths = np.maximum(
            np.asarray(source_lengths, dtype=np.int64), np.asarray(target_lengths, dtype=np.int64)
        )
        self._cache: tuple[int, np.ndarray, np.ndarray, list[int]] | None = None  # (epoch, order, bounds, batches)
        longest = int(self.lengths.max())
        if longest > self.max_tokens:
            raise DataError(f"--max-tokens {self.max_tokens} is smaller than the longest pair ({longest} tokens).")

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def batches(self) -> tuple[np.ndarray, np.ndarray, list[int]]:
        """The current epoch's pair order, batch bounds in it, and batch sequence, built once per epoch."""
        if self._cache is None or self._cache[0] != self.epoch:
            self._cache = (self.epoch, *self._build())
        return self._cache[1:]

    def _build(self) -> tuple[np.ndarray, np.ndarray, list[int]]:
        rng = random.Random(self.seed + self.epoch)
        order = array.array("q", range(len(self.lengths)))  # machine integers, not a Python object each
        if self.shuffle:
            rng.shuffle(order)
        order = np.frombuffer(order, dtype=np.int64)
        order = order[np.argsort(self.lengths[order], kind="stable")]  # stable: the shuffle stays among equals
        bounds = batch_bounds(self.lengths[order], self.max_tokens)
        if self.indices is not None:
            order = self.indices[order]  # the dataset rows, in batching order
        sequence = list(range(len(bounds) - 1))
        if self.shuffle:
            rng.shuffle(sequence)
        # every process must take the same number of steps: repeat the first batches to a multiple of the replicas
        remainder = len(sequence) % self.num_replicas
        if remainder:
            sequence += sequence[: self.num_replicas - remainder]
        return order, bounds, sequence

    def __iter__(self) -> Iterator[list[int]]:
        order, bounds, sequence = self.batches()
        for batch in sequence:
            yield order[bounds[batch] : bounds[batch + 1]].tolist()

    def __len__(self) -> int:
        return len(self.batches()[2])


def batch_bounds(sorted_lengths: np.ndarray, max_tokens: int) -> np.ndarray:
    """Where each batch starts in pairs sorted by length (and, last, the end): each batch takes pairs while its
    count times its longest pair stays within `max_tokens`. Lengths only grow, so that product only grows, and a
    batch's end is found in one vectorised comparison over the pairs that could fit."""
    bounds, start, count = [0], 0, len(sorted_lengths)
    while start < count:
        window = sorted_lengths[start : start + max_tokens // max(int(sorted_lengths[start]), 1) + 1]
        fits = window * np.arange(1, len(window) + 1) <= max_tokens
        start += max(int(fits.sum()), 1)
        bounds.append(start)
    return np.asarray(bounds, dtype=np.int64)
