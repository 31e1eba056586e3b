"""Loading the data, always through the `datasets` library: a Hub dataset, local files or the embedded number task,
in the translation schema, checked (checks.py) and without the pairs that lack text on a side."""

import json
import os

import datasets

from ..options.arguments import DataArguments
from ..tasks.numbers import numbers_dataset
from .checks import (
    DataError,
    check_file,
    check_translation_column,
    deepest_cause,
    drop_pairs_without_text,
    first_bad_line,
    reader_options,
)


def load_raw_datasets(data: DataArguments, seed: int, require_train: bool = True) -> datasets.DatasetDict:
    """The pairs of `load_pairs`, without the count of those dropped."""
    return load_pairs(data, seed, require_train)[0]


def load_pairs(
    data: DataArguments, seed: int, require_train: bool = True
) -> tuple[datasets.DatasetDict, dict[str, int]]:
    """A Hub dataset (`--dataset-name`), local files (`--train-file` ...) or the embedded number task, without the
    pairs that lack text on a side; returns the splits and {split: pairs dropped}. Evaluation (`require_train=False`)
    needs only the file of the split it scores. `seed` draws the embedded task's numbers."""
    streaming = require_train and data.streaming  # the training split: see streaming.py
    if data.dataset_name:
        raw = load_hub_dataset(data, streaming)
    elif draws_embedded_task(data, require_train):
        raw = numbers_dataset(seed=seed)
    else:
        train = None if streaming else data.train_file
        raw = load_files(
            {"train": train, "validation": data.validation_file, "test": data.test_file},
            data.source_lang,
            data.target_lang,
        )
    check_translation_column(raw, data.source_lang, data.target_lang, require_train and not streaming)
    # evaluation scores every pair of its split, as sacreBLEU on the file would: there, a pair without text is refused
    return drop_pairs_without_text(raw, data.source_lang, data.target_lang, refuse=not require_train)


def draws_embedded_task(data: DataArguments, require_train: bool = True) -> bool:
    """Whether `load_pairs` draws the embedded task: no Hub dataset and no file (for evaluation, which needs no
    training split, none of its splits' files)."""
    files = data.train_file or (not require_train and (data.validation_file or data.test_file))
    return not (data.dataset_name or files)


def load_hub_dataset(data: DataArguments, streaming: bool = False) -> datasets.DatasetDict:
    """--dataset-name's splits; with `streaming`, its splits other than 'train' only, read through the streaming
    reader (which downloads nothing else) and held in memory."""
    try:
        if not streaming:
            return datasets.load_dataset(data.dataset_name, data.dataset_config)
        splits = datasets.load_dataset(data.dataset_name, data.dataset_config, streaming=True)
        return datasets.DatasetDict(
            {name: datasets.Dataset.from_list(list(split)) for name, split in splits.items() if name != "train"}
        )
    except Exception as error:  # offline, unknown name, missing config: all stop here with the flag named
        offline = (
            " (HF_HUB_OFFLINE is set, so only datasets already in the local cache can be used)"
            if (os.environ.get("HF_HUB_OFFLINE") == "1")
            else ""
        )
        raise DataError(f"--dataset-name {data.dataset_name!r}: could not load it{offline}: {error}") from error


# what the readers say of a file without rows ([], blank lines, `{}` lines, a CSV header alone, an empty Parquet table)
NO_ROWS = ("corresponds to no data", "BatchSize must be greater than 0")


def load_files(files: dict[str, str | None], source_lang: str, target_lang: str) -> datasets.DatasetDict:
    """The local files of each split, in the translation schema (see `to_translation_schema` for the layouts)."""
    splits = {}
    for split, path in files.items():
        if path is None:
            continue
        flag = f"--{split}-file"
        builder = check_file(flag, path)
        try:
            options = reader_options(builder, path)
            splits[split] = datasets.load_dataset(builder, data_files=path, split="train", **options)
            splits[split].data.validate(full=True)  # the JSON reader lets bytes that are not UTF-8 through
        except Exception as error:
            cause = deepest_cause(error)
            if any(words in cause for words in NO_ROWS):
                raise DataError(f"{flag} {path}: the file holds no rows with fields.") from error
            reason = first_bad_line(path, builder) or f"could not be read as {builder}: {cause}"
            raise DataError(f"{flag} {path}: {reason}") from error
        if len(splits[split]) == 0:
            raise DataError(f"{flag} {path}: the file holds no rows with fields.")
        if reason := misread_json(splits[split], path, builder):
            raise DataError(f"{flag} {path}: {reason}")
        splits[split] = to_translation_schema(splits[split], f"{flag} {path}", source_lang, target_lang)
    return datasets.DatasetDict(splits)


def misread_json(dataset: datasets.Dataset, path: str, builder: str) -> str | None:
    """The first bad line of a JSON file that `datasets` read otherwise than as rows: where pyarrow's reader fails (a
    JSON line with a trailing comma, say), the library reads the file as one JSON object of columns, and a line's
    'translation' object becomes a column of its texts. A JSON file's pairs are objects, never text (a CSV file's
    cells are), so such a column is the sign; the file is read again only then."""
    feature = dataset.features.get("translation")
    if builder != "json" or not (isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")):
        return None
    return first_bad_line(path, builder)


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
    # numbers become their text (a CSV column of digits); a column of lists or objects, or one that mixes kinds
    # (`datasets`' Json), keeps its values, not their JSON text, and `drop_pairs_without_text` names the first row
    # whose side is not text
    typed = all(isinstance(dataset.features[lang], datasets.Value) for lang in languages)

    def pair_up(batch):
        return {"translation": [dict(zip(languages, texts)) for texts in zip(*(batch[lang] for lang in languages))]}

    return dataset.map(
        pair_up,
        batched=True,
        remove_columns=languages,
        features=datasets.Features(features) if typed else None,
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
            except (json.JSONDecodeError, RecursionError):  # RecursionError: nested too deeply
                pair = None
            if not isinstance(pair, dict) or not all(
                isinstance(pair.get(lang), (str, type(None))) for lang in languages
            ):
                example = json.dumps(dict(zip(languages, ("...", "..."))))
                raise DataError(
                    f"{where}, row {row} (counting from 0): the 'translation' cell {cell!r:.200} is not a JSON object "
                    f"of texts such as {example}; or give one column per language instead."
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
