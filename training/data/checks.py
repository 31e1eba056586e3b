"""Checking the data before training on it: each file's builder and first bad line, the translation column, and the
pairs with text on both sides. `DataError` names the file, split, row or flag and what was expected."""

import csv
import itertools
import json
import os
import re
import sys

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


ARROW_BATCH = 1_000_000  # rows per Arrow batch when a whole column is checked or measured


class DataError(ValueError):
    """Bad input data: the message names the file, split, row or flag and what was expected."""


def check_file(flag: str, path: str) -> str:
    """The `datasets` builder that reads the file given to `flag`; a `DataError` if there is no such file, it is
    empty, or its extension is not one of FILE_BUILDERS."""
    if os.path.isdir(path):
        raise DataError(f"{flag} {path}: a folder; expected a file.")
    if not os.path.isfile(path):
        if os.path.exists(path):  # a pipe or a device: the data is read more than once
            raise DataError(f"{flag} {path}: not a regular file; expected a file the data can be read from again.")
        raise DataError(f"{flag} {path}: no such file.")
    extension = os.path.splitext(path)[1].lower()
    if extension not in FILE_BUILDERS:
        raise DataError(f"{flag} {path}: expected a .jsonl, .json, .csv or .parquet file.")
    if os.path.getsize(path) == 0:
        raise DataError(f"{flag} {path}: the file is empty.")
    try:
        open(path, "rb").close()
    except OSError as error:
        raise DataError(f"{flag} {path}: cannot be read ({error.strerror}).") from None
    if FILE_BUILDERS[extension] == "json" and (found := too_deep_line(path)):
        number, depth = found
        raise DataError(f"{flag} {path}: line {number} nests its JSON {depth} levels deep; expected at most "
                        f"{MAX_JSON_DEPTH} (a row holds a pair of texts).")  # fmt: skip
    return FILE_BUILDERS[extension]


# How deep a JSON file's values may nest: a row of the translation schema takes 2 levels, and Arrow holds no more than
# about 63. pyarrow's JSON reader, which `datasets` reads JSON files with, parses recursively and crashes the process
# (a segmentation fault) on a line that nests some thousands deep; such a file is refused before it is read.
MAX_JSON_DEPTH = 32
NOT_OPENERS = bytes(range(256)).translate(None, b"[{\n")  # deleted, so that '[', '{' and line ends are left
DEEPER_THAN_MAX = re.compile(rb"[^\n]{%d}" % (MAX_JSON_DEPTH + 1))  # a line's openers, after they are kept alone
JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')  # whose brackets are text
NOT_BRACKETS = bytes(range(256)).translate(None, b"[]{}")
BLOCK = 1 << 24  # bytes read at a time


def too_deep_line(path: str) -> tuple[int, int] | None:
    """The first line of a JSON file whose values nest deeper than MAX_JSON_DEPTH, and its depth; None if there is
    none. A line can nest no deeper than it has '[' and '{' bytes, which are counted at C speed (every other byte
    deleted); a line with more than MAX_JSON_DEPTH of them (brackets in text, as wiki markup has) is parsed for its
    depth. pyarrow reads a JSON file a line at a time, so depth across lines does not reach it."""
    lines_before, pending = 0, []  # the pieces of a line whose end has not come yet
    with open(path, "rb") as handle:
        while chunk := handle.read(BLOCK):
            end = chunk.rfind(b"\n") + 1
            if not end:
                pending.append(chunk)
                continue
            lines, pending = b"".join([*pending, chunk[:end]]), [chunk[end:]]  # whole lines
            if found := too_deep_in(lines):
                return lines_before + found[0], found[1]
            lines_before += lines.count(b"\n")
    found = too_deep_in(b"".join(pending))  # a last line without its newline
    return None if found is None else (lines_before + found[0], found[1])


def too_deep_in(block: bytes) -> tuple[int, int] | None:
    """`too_deep_line` for the lines of one block: the line's number within it, from 1, and its depth."""
    openers, line_starts = block.translate(None, NOT_OPENERS), None
    position, number = 0, 1
    while match := DEEPER_THAN_MAX.search(openers, position):
        if line_starts is None:  # once a block, where a line has that many brackets
            line_starts = np.concatenate(([0], np.flatnonzero(np.frombuffer(block, np.uint8) == ord("\n")) + 1))
        number += openers.count(b"\n", position, match.start())
        start = int(line_starts[number - 1])
        end = int(line_starts[number]) - 1 if number < len(line_starts) else len(block)
        depth = json_depth(block[start:end])
        if depth > MAX_JSON_DEPTH:
            return number, depth
        position = openers.find(b"\n", match.end())
        if position < 0:
            return None
    return None


def json_depth(line: bytes) -> int:
    """How deep a line of JSON nests its arrays and objects, the brackets in its strings left out."""
    brackets = JSON_STRING.sub(b"", line).translate(None, NOT_BRACKETS)
    return max(itertools.accumulate(1 if byte in b"[{" else -1 for byte in brackets), default=0)


def reader_options(builder: str, path: str) -> dict:
    """How `datasets` is to read the file: a CSV file's cells as the text they hold, where pandas would read "007"
    as 7, "1.50" as 1.5 and "N/A", "null" or "nan" as missing. (A header that cannot be read is named later, by
    `first_bad_line`.)"""
    if builder != "csv":
        return {}
    options = {"keep_default_na": False, "na_filter": False}
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            header = next(csv.reader(handle), [])
    except (UnicodeDecodeError, csv.Error):
        return options
    if header and len(set(header)) == len(header) and all(name.strip() for name in header):  # as pandas names them
        options["features"] = datasets.Features({name: datasets.Value("string") for name in header})
    return options


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
    return first_bad_json_line(path) if builder == "json" else first_bad_csv_line(path)


def first_bad_json_line(path: str) -> str | None:
    """The first line of a JSON-lines file that is not a JSON object; None for a file that is one JSON document (an
    array of rows), which `datasets` reads too."""
    seen_a_row = False
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            if line.lstrip().startswith("[") and not seen_a_row:
                return first_bad_array_item(path)
            seen_a_row = True
            try:
                row = json.loads(line, object_pairs_hook=keys_once)
            except json.JSONDecodeError as error:
                return f"line {number} is not valid JSON ({error.msg} at column {error.colno})"
            except RepeatedKey as error:
                return f"line {number} has the key {error.key!r} twice; expected each once"
            if not isinstance(row, dict):
                return f'line {number} is not a JSON object (one pair per line, e.g. {{"translation": ...}})'
            try:
                json.dumps(row, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError:
                return f"line {number} holds a lone UTF-16 surrogate (half a character, such as \\ud800); expected text"
    return None


class RepeatedKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def keys_once(pairs: list[tuple]) -> dict:
    """A JSON object's pairs as a dict; `RepeatedKey` where a key comes twice (which one counts is the reader's)."""
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise RepeatedKey(key)
        seen[key] = value
    return seen


def first_bad_array_item(path: str) -> str | None:
    """Where a file holding one JSON document goes wrong: the line of a syntax error, or of the first item of its
    array that is not a JSON object; None if it is an array of objects."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as error:
        return f"line {error.lineno} is not valid JSON ({error.msg} at column {error.colno})"
    except RecursionError:
        return "not valid JSON (nested too deeply)"
    if not isinstance(rows, list):
        return "expected an array of JSON objects (one pair each) or one JSON object per line"
    decoder, between, position = json.JSONDecoder(), re.compile(r"[\s,]*"), text.index("[") + 1
    for number in range(1, len(rows) + 1):
        position = between.match(text, position).end()
        row, end = decoder.raw_decode(text, position)
        if not isinstance(row, dict):
            line = text.count("\n", 0, position) + 1
            example = '{"translation": ...}'
            return f"line {line}: item {number} of the array is not a JSON object (one pair each, e.g. {example})"
        position = end
    return None


def first_bad_csv_line(path: str) -> str | None:
    """The first record of a CSV file with more fields than its header line; None if there is none."""
    limit = csv.field_size_limit(sys.maxsize)
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            reader = csv.reader(handle)
            header = next(reader, [])
            for record in reader:
                if len(record) > len(header):
                    return f"line {reader.line_num} has {len(record)} fields; expected {len(header)}, as the header has"
    finally:
        csv.field_size_limit(limit)
    return None


def deepest_cause(error: BaseException) -> str:
    """The message of the error at the bottom of `error`'s chain: `datasets` wraps its reader's in one that says
    only that the dataset could not be generated."""
    while error.__cause__ is not None or error.__context__ is not None:
        error = error.__cause__ or error.__context__
    return f"{type(error).__name__}: {str(error).strip()}"


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


def has_text(texts: list) -> np.ndarray:
    """Which of these Python values are text with more than whitespace (the one rule, as `text_present` applies it
    to an Arrow column)."""
    return np.fromiter((isinstance(t, str) and bool(t.strip()) for t in texts), dtype=bool, count=len(texts))


def text_present_in_rows(pairs: list, lang: str, first_row: int = 0) -> np.ndarray:
    """`text_present` for pairs as Python dicts: a 'translation' column whose rows hold different keys or kinds of
    values, which `datasets` stores as JSON text rather than as an Arrow struct. A side that is neither text nor
    missing (a number, a list) is a `DataError` naming its row (`first_row`: the row of `pairs[0]`), as a CSV cell's
    is, not a pair without text."""
    sides = [p.get(lang) if isinstance(p, dict) else None for p in pairs]
    problem = side_not_text(sides, lang, first_row)
    if problem:
        raise DataError(problem)
    return has_text(sides)


def side_not_text(sides: list, lang: str, first_row: int = 0) -> str | None:
    """Which of a language's sides (`first_row`: the row of `sides[0]`) is neither text nor missing, and what it is;
    None where each is one of them."""
    for index, side in enumerate(sides):
        if side is not None and not isinstance(side, str):
            return f"row {first_row + index} (counting from 0): its {lang!r} side is {side!r:.100}; expected text"
    return None


def text_feature(feature) -> bool:
    return isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")


def pairs_with_text(dataset: datasets.Dataset, languages: tuple[str, str]) -> dict[str, np.ndarray]:
    """For each language, which rows hold text on its side."""
    present = {lang: [] for lang in languages}
    column = dataset.select_columns(["translation"])
    feature = dataset.features["translation"]
    # Arrow compute reads a struct of text; sides of other kinds (`datasets`' Json where a side mixes kinds) are
    # read in Python, where `text_present_in_rows` names a side that is not text
    is_struct = isinstance(feature, datasets.Translation) or (
        isinstance(feature, dict) and all(lang not in feature or text_feature(feature[lang]) for lang in languages)
    )
    batches = column.with_format("arrow").iter(batch_size=ARROW_BATCH) if is_struct else column.iter(ARROW_BATCH)
    for number, batch in enumerate(batches):
        for lang in languages:
            if is_struct:
                present[lang].append(text_present(batch.column("translation"), lang))
            else:
                present[lang].append(text_present_in_rows(batch["translation"], lang, number * ARROW_BATCH))
    return {lang: np.concatenate(parts) if parts else np.zeros(0, dtype=bool) for lang, parts in present.items()}


def drop_pairs_without_text(raw: datasets.DatasetDict, source_lang: str, target_lang: str, refuse: bool = False):
    """Drop the pairs whose source or target is missing or empty, as the established tools do, and say how many on
    stderr; returns the data and {split: pairs dropped}. A split left with no pair is a `DataError`, and so is any
    such pair with `refuse`."""
    dropped, kept = {}, {}
    flags = {source_lang: "--source-lang", target_lang: "--target-lang"}
    for split, dataset in raw.items():
        try:
            present = pairs_with_text(dataset, (source_lang, target_lang))
        except DataError as error:
            raise DataError(f"split {split!r}, {error}") from None
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
