"""Streaming (`--streaming`): the training split read as a `datasets.IterableDataset`, for corpora larger than memory.

The corpus is read in its order, a pool of pairs at a time (`--stream-pool-pairs`): each pool is tokenised, its
pairs with an empty side or beyond the length limits are dropped and counted, and it is cut into token batches the
way `TokenBatchSampler` cuts a whole corpus (pairs shuffled, sorted by length, cut by `--max-tokens`, the batch order
shuffled), as OpenNMT-py's bucket and fairseq's buffered batches do. Memory holds one pool, whatever the corpus size.

Shuffling reaches across a pool, not across the corpus: a corpus sorted by anything (source, date, domain) should be
shuffled once on disk. Every draw comes from a generator seeded by (--seed, epoch, pool), and a checkpoint records
where the current pool began in the stream (the dataset's own `state_dict`) and how many of its batches were done, so
a resumed run reads the same pool again and continues with the batch it would have taken next.
"""

import copy
import itertools
import json
import os
import random
import sys
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import datasets
import numpy as np
from tqdm.auto import tqdm

from ..options.arguments import DataArguments
from .batching import batch_bounds
from .checks import FILE_BUILDERS, DataError, check_file, first_bad_line, has_text, reader_options, side_not_text
from .tokenizing import within_length_limits

CHUNK = 1_000  # pairs read from the stream at a time; a pool is a whole number of chunks


# --------------------------------------------------------------------------------------------------------------------
# The stream
# --------------------------------------------------------------------------------------------------------------------


def train_stream_source(data: DataArguments) -> tuple[Callable[[], datasets.IterableDataset], str]:
    """A function opening the training split as an `IterableDataset` (a new one for each pass), and the name of the
    source for messages: `--train-file PATH` or `--dataset-name NAME`."""
    if data.dataset_name:
        where = f"--dataset-name {data.dataset_name}"

        def open_hub() -> datasets.IterableDataset:
            try:
                return datasets.load_dataset(data.dataset_name, data.dataset_config, split="train", streaming=True)
            except Exception as error:
                raise DataError(f"{where}: could not stream its 'train' split: {error}") from error

        return open_hub, where
    path = data.train_file
    builder = check_file("--train-file", path)
    where = f"--train-file {path}"
    options = reader_options(builder, path)
    return lambda: datasets.load_dataset(builder, data_files=path, split="train", streaming=True, **options), where


def chunk_pairs(chunk: dict, where: str, first_row: int, source_lang: str, target_lang: str) -> tuple[list, list]:
    """The source and target texts of a chunk of rows in either layout of a local file (a 'translation' column of
    pairs, in CSV a JSON object per cell; or one column per language); None where a side is missing."""
    if "translation" in chunk:
        pairs = [json_cell(cell, where, first_row + i) for i, cell in enumerate(chunk["translation"])]
        sides = [p.get(source_lang) for p in pairs], [p.get(target_lang) for p in pairs]
    elif source_lang in chunk and target_lang in chunk:
        sides = list(chunk[source_lang]), list(chunk[target_lang])
    else:
        raise missing_columns(chunk, where, source_lang, target_lang)
    for lang, texts in zip((source_lang, target_lang), sides):
        problem = side_not_text(texts, lang, first_row)  # as the files read whole refuse it
        if problem:
            raise DataError(f"{where}, {problem}")
    return sides


def missing_columns(chunk: dict, where: str, source_lang: str, target_lang: str) -> DataError:
    return DataError(
        f"{where}: found columns {sorted(chunk)}, expected a 'translation' column of {{'{source_lang}': ..., "
        f"'{target_lang}': ...}} pairs or one column per language ('{source_lang}', '{target_lang}')."
    )


def json_cell(cell, where: str, row: int) -> dict:
    """A pair as a dict: the cell itself, or the JSON object a CSV cell holds; an empty dict for an empty cell."""
    if isinstance(cell, dict) or cell is None:
        return cell or {}
    try:
        pair = json.loads(cell) if isinstance(cell, str) and cell else {}
    except (json.JSONDecodeError, RecursionError):  # RecursionError: nested too deeply
        pair = None
    if not isinstance(pair, dict):
        raise DataError(
            f"{where}, row {row} (counting from 0): the 'translation' cell {cell!r:.200} is not a JSON object of texts."
        )
    return pair


def read_chunks(stream: datasets.IterableDataset, where: str, data: DataArguments, chunk_size: int) -> Iterator[tuple]:
    """(sources, targets) of each chunk of the stream, rows without text on a side included. An error of the reader
    (bad JSON, bytes that are not UTF-8) names the file and, where it can be found, the line."""
    chunks, row = stream.iter(batch_size=chunk_size), 0
    while True:
        try:
            chunk = next(chunks)
        except StopIteration:
            return
        except Exception as error:
            path = data.train_file
            builder = FILE_BUILDERS.get(os.path.splitext(path or "")[1].lower())
            line = first_bad_line(path, builder) if path and builder else None
            raise DataError(f"{where}: {line or f'could not be read after row {row}: {error}'}") from error
        sources, targets = chunk_pairs(chunk, where, row, data.source_lang, data.target_lang)
        row += len(sources)
        yield sources, targets


def reservoir_sample(open_stream, where: str, data: DataArguments, seed: int, size: int) -> list[tuple[str, str]]:
    """`size` pairs with text on both sides drawn uniformly from the whole stream (reservoir sampling, one pass, as
    sentencepiece samples its `input_sentence_size`), seeded by --seed; all of them if there are fewer."""
    rng, kept, seen = random.Random(seed), [], 0
    progress = tqdm(desc="Sampling the BPE's pairs from the stream", unit=" pairs", unit_scale=True)
    for sources, targets in read_chunks(open_stream(), where, data, CHUNK):
        progress.update(len(sources))
        for pair, ok in zip(zip(sources, targets), has_text(sources) & has_text(targets)):
            if not ok:
                continue
            seen += 1
            if len(kept) < size:
                kept.append(pair)
            else:
                slot = rng.randrange(seen)
                if slot < size:
                    kept[slot] = pair
    progress.close()
    return kept


# --------------------------------------------------------------------------------------------------------------------
# A pool: tokenised pairs as flat arrays, cut into token batches
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class Pool:
    """The tokenised pairs of a pool: every pair's ids end to end in one array per side, with its offsets."""

    source_ids: np.ndarray
    source_offsets: np.ndarray
    target_ids: np.ndarray
    target_offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.source_offsets) - 1

    def lengths(self) -> np.ndarray:
        return np.maximum(np.diff(self.source_offsets), np.diff(self.target_offsets))

    def features(self, rows) -> list[dict]:
        """The pairs `rows` as a collator takes them."""
        return [
            {
                "input_ids": self.source_ids[self.source_offsets[i] : self.source_offsets[i + 1]].tolist(),
                "labels": self.target_ids[self.target_offsets[i] : self.target_offsets[i + 1]].tolist(),
            }
            for i in rows
        ]


def flat(ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    return np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(offsets[-1])), offsets


def joined(pieces: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """`flat` pieces, (ids, offsets) each, end to end as one."""
    if not pieces:
        return flat([])
    lengths = np.concatenate([np.diff(offsets) for _, offsets in pieces])
    return np.concatenate([ids for ids, _ in pieces]), np.concatenate(([0], np.cumsum(lengths)))


def tokenize_pool(sources: list[str], targets: list[str], tokenizer, data: DataArguments) -> tuple[Pool, int]:
    """The pool of these pairs within --max-source-length / --max-target-length tokens, and how many were longer.
    The tokenizer encodes a chunk at a time, which a fast tokenizer spreads over the cores; each chunk's ids go into
    flat arrays at once, so that only one chunk is ever held as Python lists of ints (a whole pool's would take
    about 36 bytes a token)."""
    source_parts, target_parts, too_long = [], [], 0
    for start in range(0, len(sources), 2 * CHUNK):
        encoded = tokenizer(sources[start : start + 2 * CHUNK], text_target=targets[start : start + 2 * CHUNK])
        source_ids, target_ids = encoded["input_ids"], encoded["labels"]
        keep = np.flatnonzero(within_length_limits(list(map(len, source_ids)), list(map(len, target_ids)), data))
        too_long += len(source_ids) - len(keep)
        source_parts.append(flat([source_ids[i] for i in keep]))
        target_parts.append(flat([target_ids[i] for i in keep]))
    return Pool(*joined(source_parts), *joined(target_parts)), too_long


def pool_batches(pool: Pool, max_tokens: int, rng: np.random.Generator, replicas: int) -> list[np.ndarray]:
    """The pool's token batches: pairs shuffled, stably sorted by length, cut by `max_tokens` (`batch_bounds`); the
    batch order shuffled, and its first batches repeated to a multiple of `replicas` (every process takes as many)."""
    lengths = pool.lengths()
    longest = int(lengths.max())
    if longest > max_tokens:
        raise DataError(f"--max-tokens {max_tokens} is smaller than the longest pair ({longest} tokens).")
    order = rng.permutation(len(lengths))
    order = order[np.argsort(lengths[order], kind="stable")]
    bounds = batch_bounds(lengths[order], max_tokens)
    batches = [order[bounds[i] : bounds[i + 1]] for i in rng.permutation(len(bounds) - 1)]
    remainder = len(batches) % replicas
    return batches + batches[: replicas - remainder] if remainder else batches


# --------------------------------------------------------------------------------------------------------------------
# The batches of a pass, and where a checkpoint resumes them
# --------------------------------------------------------------------------------------------------------------------


def start_of_epoch(epoch: int) -> dict:
    """A position in the stream (what a checkpoint records): the pass, the pool, the dataset's state where the pool
    begins (None: at the start), the global index of the pool's first batch in the pass, batches of it done."""
    return {"epoch": epoch, "pool": 0, "stream_state": None, "first_batch": 0, "skip": 0}


class StreamingBatches:
    """This process's collated token batches of the streamed training split, pass after pass. Every process reads
    the same stream and builds the same batches; process `rank` of `num_replicas` takes every `num_replicas`-th."""

    def __init__(
        self,
        open_stream,
        where: str,
        tokenizer,
        collate,
        data: DataArguments,
        max_tokens: int,
        seed: int,
        accelerator=None,
    ):
        self.open_stream, self.where, self.tokenizer, self.collate = open_stream, where, tokenizer, collate
        self.data, self.max_tokens, self.seed = data, max_tokens, seed
        self.num_replicas = accelerator.num_processes if accelerator else 1
        self.rank = accelerator.process_index if accelerator else 0
        self.device = accelerator.device if accelerator else None
        self.chunk = min(CHUNK, data.stream_pool_pairs)
        self.chunks_per_pool = -(-data.stream_pool_pairs // self.chunk)
        self.epoch = 0
        self.resume_at: dict | None = None
        self.pools: deque[dict] = deque(maxlen=4)  # the positions of this pass's latest pools
        self.dropped = {"empty_side": 0, "too_long": 0}  # in the first pass this run reads
        self.counting: int | None = None  # that pass's epoch

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def resume(self, position: dict) -> None:
        """Start the next pass at a checkpoint's `position` (see `position`)."""
        self.resume_at = dict(position)

    def position(self, batches_done: int) -> dict:
        """Where the pass stands once this process has taken `batches_done` batches, for a checkpoint."""
        done = batches_done * self.num_replicas  # batches of all processes
        for pool in reversed(self.pools):
            if pool["first_batch"] <= done:
                return {**pool, "skip": done - pool["first_batch"]}
        return start_of_epoch(self.epoch)

    def __iter__(self) -> Iterator[dict]:
        resuming = self.resume_at is not None and self.resume_at["epoch"] == self.epoch
        start = self.resume_at if resuming else start_of_epoch(self.epoch)
        self.resume_at = None
        self.pools.clear()
        self.counting = self.epoch if self.counting is None else self.counting
        stream = self.open_stream()
        if start["stream_state"] is not None:
            stream.load_state_dict(copy.deepcopy(start["stream_state"]))
        pool_index, first_batch, state, yielded = start["pool"], start["first_batch"], start["stream_state"], 0
        for pairs, next_state in self.pools_ahead(stream):
            position = {"epoch": self.epoch, "pool": pool_index, "stream_state": state, "first_batch": first_batch}
            self.pools.append(position)
            batches = self.batches_of(pairs, pool_index)
            skip = start["skip"] if pool_index == start["pool"] else 0
            for index in range(skip, len(batches)):
                if index % self.num_replicas == self.rank:
                    yielded += 1
                    batch = self.collate(pairs.features(batches[index]))
                    yield {key: value.to(self.device) for key, value in batch.items()} if self.device else batch
            pool_index, first_batch, state = pool_index + 1, first_batch + len(batches), next_state
        if not yielded and start == start_of_epoch(self.epoch):
            raise DataError(f"{self.where}: no training pair is left after dropping {self.describe_dropped()}.")

    def pools_ahead(self, stream: datasets.IterableDataset) -> Iterator[tuple[Pool, dict]]:
        """The stream's pools in order, each with the stream's state after it. The next pool is read and tokenised
        in a background thread while the current one is trained on (the tokenizers and Arrow release the GIL)."""
        chunks = read_chunks(stream, self.where, self.data, self.chunk)

        def read() -> tuple[Pool | None, dict]:
            pool = self.read_pool(chunks)
            return pool, copy.deepcopy(stream.state_dict())

        with ThreadPoolExecutor(max_workers=1) as reader:
            ahead = reader.submit(read)
            while True:
                pool, state = ahead.result()
                if pool is None:
                    return
                ahead = reader.submit(read)
                yield pool, state

    def read_pool(self, chunks) -> Pool | None:
        """The next pool of pairs that can train (text on both sides, within the length limits), tokenised; a pool
        with none is passed over (a stretch of the corpus with empty sides, or sorted by length); None at the end of
        the stream."""
        while True:
            sources, targets, read = [], [], 0
            for chunk in itertools.islice(chunks, self.chunks_per_pool):
                read += 1
                keep = has_text(chunk[0]) & has_text(chunk[1])
                self.count_dropped("empty_side", int(len(keep) - keep.sum()))
                sources += [text for text, ok in zip(chunk[0], keep) if ok]
                targets += [text for text, ok in zip(chunk[1], keep) if ok]
            if not read:
                return None
            if not sources:
                continue
            pool, too_long = tokenize_pool(sources, targets, self.tokenizer, self.data)
            self.count_dropped("too_long", too_long)
            if len(pool):
                return pool

    def batches_of(self, pool: Pool, pool_index: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, self.epoch, pool_index])
        return pool_batches(pool, self.max_tokens, rng, self.num_replicas)

    def count_dropped(self, reason: str, count: int) -> None:
        if self.epoch != self.counting:
            return
        if count and not self.dropped[reason]:
            what = "with no text on a side" if reason == "empty_side" else "beyond the length limits"
            print(f"split 'train' (streamed): dropping pairs {what}; counted in the run's record", file=sys.stderr)
        self.dropped[reason] += count

    def describe_dropped(self) -> str:
        return (
            f"{self.dropped['empty_side']:,} with no text on a side and {self.dropped['too_long']:,} longer than "
            f"--max-source-length {self.data.max_source_length} or --max-target-length {self.data.max_target_length}"
        )

    def dropped_pairs(self) -> dict[str, dict[str, int]]:
        """Pairs dropped, by reason, in the first pass this run read (from the start, or from where it resumed), as
        the run's record keeps them."""
        return {reason: {"train": count} for reason, count in self.dropped.items() if count}


# --------------------------------------------------------------------------------------------------------------------
# The joint BPE of a streamed corpus
# --------------------------------------------------------------------------------------------------------------------


def stream_identity(data: DataArguments) -> dict:
    """What identifies a streamed corpus for the cache of its BPE: the file (path, size, modification time) or the
    Hub dataset and its configuration."""
    if data.dataset_name:
        return {"dataset": data.dataset_name, "config": data.dataset_config}
    status = os.stat(data.train_file)
    return {"file": os.path.abspath(data.train_file), "bytes": status.st_size, "modified_ns": status.st_mtime_ns}


def stream_bpe_texts(open_stream, where: str, data: DataArguments, seed: int, size: int) -> tuple[list[str], int]:
    """The texts the BPE learns from, a `reservoir_sample` of `size` (--bpe-sample-size) pairs, source and target in
    turn."""
    pairs = reservoir_sample(open_stream, where, data, seed, size)
    return [text for pair in pairs for text in pair], 2 * len(pairs)
