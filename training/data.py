"""Data, always through the `datasets` library: loading, checking, tokenising, and token-count batching."""

import array
import ctypes
import json
import os
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from accelerate.utils import broadcast_object_list
from tokenizers import Tokenizer, models
from transformers import DataCollatorForSeq2Seq, PreTrainedTokenizerBase

from ..model_folder import encode_within
from .tasks.numbers import numbers_dataset

FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}
ARROW_BATCH = 1_000_000  # rows per Arrow batch when a whole column is checked or measured


class DataError(ValueError):
    """Bad input data: the message names the file, split, row or flag and what was expected."""


def load_raw_datasets(args, require_train: bool = True) -> datasets.DatasetDict:
    """The pairs of `load_pairs`, without the count of those dropped."""
    return load_pairs(args, require_train)[0]


def load_pairs(args, require_train: bool = True) -> tuple[datasets.DatasetDict, dict[str, int]]:
    """A Hub dataset (`--dataset-name`), local files (`--train-file` ...) or the embedded number task, without the
    pairs that lack text on a side; returns the splits and {split: pairs dropped}. Evaluation (`require_train=False`)
    needs only the file of the split it scores."""
    streaming = require_train and getattr(args, "streaming", False)  # the training split: see streaming.py
    if args.dataset_name:
        raw = load_hub_dataset(args, streaming)
    elif args.train_file or (not require_train and (args.validation_file or args.test_file)):
        train = None if streaming else args.train_file
        raw = load_files(
            {"train": train, "validation": args.validation_file, "test": args.test_file},
            args.source_lang,
            args.target_lang,
        )
    else:
        raw = numbers_dataset(seed=args.seed)
    check_translation_column(raw, args.source_lang, args.target_lang, require_train and not streaming)
    # evaluation scores every pair of its split, as sacreBLEU on the file would: there, a pair without text is refused
    return drop_pairs_without_text(raw, args.source_lang, args.target_lang, refuse=not require_train)


def load_hub_dataset(args, streaming: bool = False) -> datasets.DatasetDict:
    """--dataset-name's splits; with `streaming`, its splits other than 'train' only, read through the streaming
    reader (which downloads nothing else) and held in memory."""
    try:
        if not streaming:
            return datasets.load_dataset(args.dataset_name, args.dataset_config)
        splits = datasets.load_dataset(args.dataset_name, args.dataset_config, streaming=True)
        return datasets.DatasetDict(
            {name: datasets.Dataset.from_list(list(split)) for name, split in splits.items() if name != "train"}
        )
    except Exception as error:  # offline, unknown name, missing config: all stop here with the flag named
        offline = (
            " (HF_HUB_OFFLINE is set, so only datasets already in the local cache can be used)"
            if (os.environ.get("HF_HUB_OFFLINE") == "1")
            else ""
        )
        raise DataError(f"--dataset-name {args.dataset_name!r}: could not load it{offline}: {error}") from error


def load_files(files: dict[str, str | None], source_lang: str, target_lang: str) -> datasets.DatasetDict:
    """The local files of each split, in the translation schema (see `to_translation_schema` for the layouts)."""
    splits = {}
    for split, path in files.items():
        if path is None:
            continue
        flag = f"--{split}-file"
        builder = check_file(flag, path)
        try:
            splits[split] = datasets.load_dataset(builder, data_files=path, split="train")
            splits[split].data.validate(full=True)  # the JSON reader lets bytes that are not UTF-8 through
        except Exception as error:
            reason = first_bad_line(path, builder) or f"could not be read as {builder}: {error}"
            raise DataError(f"{flag} {path}: {reason}") from error
        if len(splits[split]) == 0:
            raise DataError(f"{flag} {path}: the file holds no rows.")
        splits[split] = to_translation_schema(splits[split], f"{flag} {path}", source_lang, target_lang)
    return datasets.DatasetDict(splits)


def check_file(flag: str, path: str) -> str:
    """The `datasets` builder that reads the file given to `flag`; a `DataError` if there is no such file, it is
    empty, or its extension is not one of FILE_BUILDERS."""
    if not os.path.isfile(path):
        raise DataError(f"{flag} {path}: no such file.")
    extension = os.path.splitext(path)[1].lower()
    if extension not in FILE_BUILDERS:
        raise DataError(f"{flag} {path}: expected a .jsonl, .json, .csv or .parquet file.")
    if os.path.getsize(path) == 0:
        raise DataError(f"{flag} {path}: the file is empty.")
    return FILE_BUILDERS[extension]


def first_bad_line(path: str, builder: str) -> str | None:
    """Where a text file that `datasets` could not read goes wrong: the first line that is not UTF-8 or, in JSON
    lines, not a JSON object; None if every line is fine (then the library's own message is the one to show)."""
    if builder not in ("json", "csv"):
        return None
    with open(path, "rb") as handle:
        for number, raw_line in enumerate(handle, start=1):
            try:
                raw_line.decode("utf-8")
            except UnicodeDecodeError as error:
                return (
                    f"line {number} is not UTF-8 (byte 0x{raw_line[error.start]:02x} at column {error.start + 1}); "
                    "expected a UTF-8 file: convert it, e.g. with iconv -f latin1 -t utf-8"
                )
    return first_bad_json_line(path) if builder == "json" else None


def first_bad_json_line(path: str) -> str | None:
    """The first line of a JSON-lines file that is not a JSON object; None for a file that is one JSON document (an
    array of rows), which `datasets` reads too."""
    seen_a_row = False
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            if line.lstrip().startswith("[") and not seen_a_row:
                return None
            seen_a_row = True
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                return f"line {number} is not valid JSON ({error.msg} at column {error.colno})"
            if not isinstance(row, dict):
                return f'line {number} is not a JSON object (one pair per line, e.g. {{"translation": ...}})'
    return None


def to_translation_schema(
    dataset: datasets.Dataset, where: str, source_lang: str, target_lang: str
) -> datasets.Dataset:
    """The rows of a local file in the translation schema. A file holds either a 'translation' column of pairs
    {"en": ..., "de": ...} (in CSV, which cannot nest, each cell a JSON object) or one text column per language,
    named by --source-lang and --target-lang; the per-language columns become a `datasets.Translation` column."""
    languages = list(dict.fromkeys((source_lang, target_lang)))
    columns = dataset.column_names
    if "translation" in columns:
        feature = dataset.features["translation"]
        is_text = isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")
        return decode_translation_cells(dataset, where, languages) if is_text else dataset
    missing = [lang for lang in languages if lang not in columns]
    if missing:
        raise DataError(
            f"{where}: found columns {columns}, expected one of two layouts: a 'translation' column holding "
            f"{{'{source_lang}': ..., '{target_lang}': ...}} per row (in CSV, a JSON object per cell), or one column "
            f"per language, '{source_lang}' and '{target_lang}' (--source-lang, --target-lang); "
            f"no {', '.join(repr(lang) for lang in missing)} column."
        )
    features = {name: feature for name, feature in dataset.features.items() if name not in languages}
    features["translation"] = datasets.Translation(languages=languages)

    def pair_up(batch):
        return {"translation": [dict(zip(languages, texts)) for texts in zip(*(batch[lang] for lang in languages))]}

    return dataset.map(
        pair_up,
        batched=True,
        remove_columns=languages,
        features=datasets.Features(features),
        desc="Pairing the language columns",
    )


def decode_translation_cells(dataset: datasets.Dataset, where: str, languages: list[str]) -> datasets.Dataset:
    """A 'translation' column of text (a CSV file) holding one JSON object per cell, decoded into pairs."""
    features = dict(dataset.features)
    features["translation"] = datasets.Translation(languages=languages)

    def decode(batch, indices):
        pairs = []
        for row, cell in zip(indices, batch["translation"]):
            try:
                pair = json.loads(cell) if cell else None
            except json.JSONDecodeError:
                pair = None
            if not isinstance(pair, dict) or not all(
                isinstance(pair.get(lang), (str, type(None))) for lang in languages
            ):
                example = json.dumps(dict(zip(languages, ("...", "..."))))
                raise DataError(
                    f"{where}, row {row}: the 'translation' cell {cell!r:.200} is not a JSON object of "
                    f"texts such as {example}; or give one column per language instead."
                )
            pairs.append({lang: pair.get(lang) for lang in languages})
        return {"translation": pairs}

    return dataset.map(
        decode,
        batched=True,
        with_indices=True,
        features=datasets.Features(features),
        desc="Decoding the translation cells",
    )


def check_translation_column(
    raw: datasets.DatasetDict, source_lang: str, target_lang: str, require_train: bool = True
) -> None:
    """Every split must be in the translation schema: a 'translation' column of pairs."""
    if require_train and "train" not in raw:
        raise DataError(f"the dataset has no 'train' split (it has {sorted(raw)}).")
    for split, dataset in raw.items():
        if "translation" not in dataset.column_names:
            raise DataError(
                f"split {split!r}: expected a 'translation' column with {{'{source_lang}': ..., '{target_lang}': ...}}"
                f" per row, found columns {dataset.column_names}."
            )


def text_present(column: pa.ChunkedArray, lang: str) -> np.ndarray:
    """Per row of a 'translation' column, whether its `lang` side holds text other than whitespace (Arrow compute:
    no Python object per row)."""
    index = column.type.get_field_index(lang) if pa.types.is_struct(column.type) else -1
    if index < 0:
        return np.zeros(len(column), dtype=bool)
    text = pc.struct_field(column, [index])
    if not (pa.types.is_string(text.type) or pa.types.is_large_string(text.type)):
        return np.zeros(len(column), dtype=bool)
    present = pc.greater(pc.utf8_length(pc.utf8_trim_whitespace(text)), 0)
    return pc.fill_null(present, False).to_numpy(zero_copy_only=False)


def text_present_in_rows(pairs: list, lang: str) -> np.ndarray:
    """`text_present` for pairs as Python dicts: a 'translation' column whose rows hold different keys, which
    `datasets` stores as JSON text rather than as an Arrow struct."""
    return np.array([isinstance(p, dict) and isinstance(p.get(lang), str) and bool(p[lang].strip()) for p in pairs])


def pairs_with_text(dataset: datasets.Dataset, languages: tuple[str, str]) -> dict[str, np.ndarray]:
    """For each language, which rows hold text on its side."""
    present = {lang: [] for lang in languages}
    column = dataset.select_columns(["translation"])
    is_struct = isinstance(dataset.features["translation"], (dict, datasets.Translation))
    batches = column.with_format("arrow").iter(batch_size=ARROW_BATCH) if is_struct else column.iter(ARROW_BATCH)
    for batch in batches:
        for lang in languages:
            if is_struct:
                present[lang].append(text_present(batch.column("translation"), lang))
            else:
                present[lang].append(text_present_in_rows(batch["translation"], lang))
    return {lang: np.concatenate(parts) if parts else np.zeros(0, dtype=bool) for lang, parts in present.items()}


def drop_pairs_without_text(raw: datasets.DatasetDict, source_lang: str, target_lang: str, refuse: bool = False):
    """Drop the pairs whose source or target is missing or empty, as the established tools do, and say how many on
    stderr; returns the data and {split: pairs dropped}. A split left with no pair is a `DataError`, and so is any
    such pair with `refuse`."""
    dropped, kept = {}, {}
    flags = {source_lang: "--source-lang", target_lang: "--target-lang"}
    for split, dataset in raw.items():
        present = pairs_with_text(dataset, (source_lang, target_lang))
        keep = present[source_lang] & present[target_lang]
        dropped[split] = int(len(keep) - keep.sum())
        missing = ", ".join(f"{int((~ok).sum())} without {lang!r} text ({flags[lang]})" for lang, ok in present.items())
        if not keep.any():
            example = dataset[0]["translation"] if len(dataset) else None
            raise DataError(
                f"split {split!r}: no pair is left: of {len(keep)}, {missing}; row 0 holds {example!r:.300}."
            )
        if dropped[split]:
            first = int(np.flatnonzero(~keep)[0])
            if refuse:
                raise DataError(
                    f"split {split!r}, row {first} (counting from 0): no text on a side ({missing}); every pair is "
                    "scored: give it text or remove it."
                )
            print(f"split {split!r}: dropped {dropped[split]:,} of {len(keep):,} pairs ({missing}; first: row {first}, "
                  "counting from 0)", file=sys.stderr)  # fmt: skip
            dataset = dataset.select(np.flatnonzero(keep))
        kept[split] = dataset
    return datasets.DatasetDict(kept), dropped


MADV_DONTNEED = 4  # from <sys/mman.h> (Linux)


def release_file_pages(splits: datasets.DatasetDict) -> int:
    """Drop from this process's page tables the pages of the splits' Arrow files that earlier reads left mapped;
    returns the bytes of mapping released. The datasets library reads its files through read-only memory maps, and a
    pass over a whole column (the checks, the BPE's sample, the pairs' lengths) leaves nearly every page of the file
    resident there: the kernel reads ahead around each page touched, and opening an Arrow stream walks every record
    batch. Those pages count as the process's memory until the kernel reclaims them. `madvise(MADV_DONTNEED)` on a
    read-only file mapping only unmaps them: the data stays in the page cache and a later read maps it again. On
    other systems than Linux, nothing is done."""
    paths = {os.path.realpath(entry["filename"]) for split in splits.values() for entry in split.cache_files}
    if not paths or not os.path.exists("/proc/self/maps"):
        return 0
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    released = 0
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)  # address range, permissions, offset, device, inode, path
            if len(fields) < 6 or "w" in fields[1] or fields[5].rstrip("\n") not in paths:
                continue
            start, end = (int(address, 16) for address in fields[0].split("-"))
            if madvise(start, end - start, MADV_DONTNEED) == 0:
                released += end - start
    return released


def within_length_limits(source_lengths, target_lengths, args):
    """Whether tokenised pairs of these lengths fit `--max-source-length` and `--max-target-length` (numpy arrays:
    one answer per pair); longer pairs are not trained on."""
    return (np.asarray(source_lengths) <= args.max_source_length) & (
        np.asarray(target_lengths) <= args.max_target_length
    )


def tokenize_pairs(
    split: datasets.Dataset,
    tokenizer: PreTrainedTokenizerBase,
    args,
    max_length: int | None = None,
    num_proc: int | None = None,
) -> datasets.Dataset:
    """`input_ids` and `labels` of every pair of a split, with `Dataset.map(batched=True)` on `num_proc` processes,
    which the datasets library caches (a second run on the same file and tokenizer reads the cache); the split's
    other columns are dropped. With `max_length` (a model's learned positions, see `position_limit`), a longer source
    or reference is truncated to it as the tokenizer truncates (the end-of-sentence token kept), each named in a
    warning on stderr: the model cannot read it whole."""
    source_lang, target_lang = args.source_lang, args.target_lang  # the map's fingerprint depends on these only

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


def trained_positions(args) -> int:
    """`max_position_embeddings` of a model trained within `--max-source-length` / `--max-target-length`: the longest
    training sentence, and two positions to spare."""
    return max(args.max_source_length, args.max_target_length) + 2


def tokenizing_processes(rows: int, requested: int | None) -> int | None:
    """`--preprocessing-num-workers`, or by default every core for a corpus large enough to repay the processes'
    start (100,000 pairs); None: tokenise in this process."""
    if requested is not None:
        return requested if requested > 1 else None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
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


def drop_long_pairs(train: datasets.Dataset, args) -> TrainingRows:
    """The training pairs within `--max-source-length` / `--max-target-length` tokens, and how many were dropped;
    a `DataError` if none is left."""
    sources, targets = token_lengths(train)
    keep = within_length_limits(sources, targets, args)
    dropped = int(len(keep) - keep.sum())
    if not keep.any():
        raise DataError(
            f"no training pair is left after length filtering (--max-source-length {args.max_source_length}, "
            f"--max-target-length {args.max_target_length})."
        )
    if dropped:
        print(
            f"split 'train': dropped {dropped:,} of {len(keep):,} pairs longer than --max-source-length "
            f"{args.max_source_length} or --max-target-length {args.max_target_length} tokens",
            file=sys.stderr,
        )
    indices = np.flatnonzero(keep)
    return TrainingRows(indices, sources[indices], targets[indices], dropped)


def tokenize_datasets(
    raw, tokenizer: PreTrainedTokenizerBase, args
) -> tuple[datasets.DatasetDict, TrainingRows | None]:
    """Tokenise every split; returns the splits and the training rows within `--max-source-length` /
    `--max-target-length` tokens (the longer ones are not trained on; None without a training split, when streamed).
    With learned positions, which end there, longer validation and test pairs are truncated."""
    limit = trained_positions(args) if args.position_encoding == "learned" else None
    tokenized = {}
    for name, split in raw.items():
        processes = tokenizing_processes(len(split), args.preprocessing_num_workers)
        tokenized[name] = tokenize_pairs(split, tokenizer, args, None if name == "train" else limit, processes)
    return datasets.DatasetDict(tokenized), drop_long_pairs(tokenized["train"], args) if "train" in tokenized else None


class BpeDropoutPairs(torch.utils.data.Dataset):
    """BPE-dropout (Provilkov et al. 2020): the training pairs are segmented anew for every epoch, each merge of the
    tokenizer's BPE being skipped with probability `dropout`, so the model sees many segmentations of each word.
    Validation, test and translation use the tokenizer as trained, without dropout.

    The pairs are those `tokenize_datasets` keeps (within `--max-source-length` / `--max-target-length` when
    segmented without dropout); a pair whose sampled segmentation is longer than that keeps its plain segmentation.
    The `tokenizers` library draws the skipped merges from its own generator, which no seed fixes, so the main process
    segments and hands the result to the others: every process then batches the same pairs.
    """

    def __init__(self, raw_train, tokenizer: PreTrainedTokenizerBase, args, dropout: float):
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None or not isinstance(backend.model, models.BPE):
            kind = type(backend.model).__name__ if backend is not None else "a slow (Python) tokenizer"
            raise DataError(f"--bpe-dropout {dropout} needs a BPE tokenizer; this tokenizer's model is {kind}.")
        self.sampler = Tokenizer.from_str(backend.to_str())  # a copy: the saved tokenizer keeps no dropout
        self.sampler.model.dropout = dropout
        self.max_lengths = (args.max_source_length, args.max_target_length)
        pairs = raw_train["translation"]
        sources, targets = [p[args.source_lang] for p in pairs], [p[args.target_lang] for p in pairs]
        plain = (self._encode(backend, sources), self._encode(backend, targets))
        fits = within_length_limits([len(ids) for ids in plain[0]], [len(ids) for ids in plain[1]], args)
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


def drop_words(ids: torch.Tensor, rate: float, replacement: int, keep_ids: tuple[int, ...]) -> torch.Tensor:
    """Word dropout on token ids (Token Drop, Zhang et al. 2020): a copy of `ids` in which each token, except those
    in `keep_ids` (padding and sentence boundaries), is replaced by `replacement` (<unk>) with probability `rate`.

    Applied to the source ids and to the decoder's shifted-right inputs of a training batch, never to the labels: the
    model has to predict every reference token from a context with holes in it, a regulariser for small corpora.
    The draws come from torch's global generator, which --seed fixes and checkpoints save, like dropout's.
    """
    droppable = ~torch.isin(ids, torch.tensor(keep_ids, device=ids.device))  # (batch, len)
    dropped = droppable & (torch.rand(ids.shape, device=ids.device) < rate)
    return ids.masked_fill(dropped, replacement)


def make_collator(tokenizer, model=None) -> DataCollatorForSeq2Seq:
    """Pads sources with the pad id and labels with -100; builds `decoder_input_ids` from the model."""
    return DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100, return_tensors="pt")
