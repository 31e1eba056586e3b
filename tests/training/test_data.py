import collections
import json
import os
import re

import datasets
import pandas as pd
import pytest
import torch
from accelerate import Accelerator
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast
from vanilla_transformer.training.data import checks
from vanilla_transformer.training.data.batching import TokenBatchSampler
from vanilla_transformer.training.data.bpe import load_tokenizer, train_bpe_tokenizer, training_texts, vocabulary_note
from vanilla_transformer.training.data.loading import DataError, load_files, load_pairs, load_raw_datasets
from vanilla_transformer.training.data.memory import release_file_pages
from vanilla_transformer.training.data.streaming import train_stream_source
from vanilla_transformer.training.data.tokenizing import BpeDropoutPairs, tokenize_datasets, tokenize_pairs
from vanilla_transformer.training.optim.criterion import drop_words
from vanilla_transformer.training.options.arguments import DataArguments
from vanilla_transformer.training.tasks.numbers import EN_ONES, EN_TENS, english, german, numbers_dataset

from .conftest import pairs, write_jsonl

SEED = 0  # draws the embedded task's numbers


def data_args(**kwargs) -> DataArguments:
    """The data arguments the data functions read (the embedded task unless given)."""
    return DataArguments(**kwargs)


def test_embedded_task_is_deterministic_and_held_out():
    a, b, c = numbers_dataset(seed=1), numbers_dataset(seed=1), numbers_dataset(seed=2)
    assert a["train"]["translation"][:50] == b["train"]["translation"][:50]
    assert a["train"]["translation"][:50] != c["train"]["translation"][:50]
    train = {p["en"] for p in a["train"]["translation"]}
    assert not train & {p["en"] for p in a["test"]["translation"]}
    assert not train & {p["en"] for p in a["validation"]["translation"]}
    assert (english(42), german(42)) == ("forty-two", "zweiundvierzig")
    assert german(1234) == "eintausendzweihundertvierunddreißig"
    assert (english(999_999), german(300_105)) == (
        "nine hundred ninety-nine thousand nine hundred ninety-nine",
        "dreihunderttausendeinhundertfünf",
    )
    # "eins" only ends a number word; inside one it is "ein"
    assert [german(n) for n in (1, 1001, 21_000, 101_000, 501_977)] == [
        "eins",
        "eintausendeins",
        "einundzwanzigtausend",
        "einhunderteintausend",
        "fünfhunderteintausendneunhundertsiebenundsiebzig",
    ]


def test_embedded_task_covers_every_digit_count_equally():
    raw = numbers_dataset(seed=0, train_size=6000, eval_size=600)
    train = collections.Counter(raw["train"]["digits"])
    assert train == {digits: 1000 for digits in range(1, 7)}  # the short numbers are repeated to their share
    for split in ("validation", "test"):
        held_out = collections.Counter(raw[split]["digits"])
        # 100 of each digit count, but at most a fifth of the 10 one-digit and 90 two-digit numbers
        assert held_out == {1: 2, 2: 18, 3: 100, 4: 100, 5: 100, 6: 100}
    for row in raw["test"]:
        assert len(str(english_to_number(row["translation"]["en"]))) == row["digits"]
    train_numbers = [english_to_number(row["translation"]["en"]) for row in raw["train"]]
    assert 0 in train_numbers  # "null" occurs in no other number, so it is never held out
    # round numbers ("eight hundred") are common in training: each digit after the first is 0 with probability 0.3
    hundreds = [n for n in train_numbers if 100 <= n < 1000]
    assert 0.05 < sum(n % 100 == 0 for n in hundreds) / len(hundreds) < 0.15  # 0.09 expected; 0.01 if uniform


def english_to_number(words: str) -> int:
    """The inverse of `english`, to check the digit counts independently of how the task computes them."""
    values = {w: i for i, w in enumerate(EN_ONES)} | {w: 10 * i for i, w in enumerate(EN_TENS) if w}
    total, current = 0, 0
    for word in words.replace("-", " ").split():
        if word == "hundred":
            current *= 100
        elif word == "thousand":
            total, current = (total + current) * 1000, 0
        else:
            current += values[word]
    return total + current


def write_pairs(path, rows, layout: str):
    """`rows` in a file of the kind its name ends with, in the translation layout (in CSV a JSON object per cell) or
    one column per language, with an extra column a file might carry."""
    if path.suffix == ".jsonl" and layout == "translation":
        return write_jsonl(path, rows)
    if layout == "translation":
        cells = [r["translation"] for r in rows]
        frame = pd.DataFrame({"translation": [json.dumps(c) for c in cells] if path.suffix == ".csv" else cells})
    else:
        frame = pd.DataFrame(
            {
                "id": range(len(rows)),
                "de": [r["translation"]["de"] for r in rows],
                "en": [r["translation"]["en"] for r in rows],
            }
        )
    if path.suffix == ".jsonl":
        frame.to_json(path, orient="records", lines=True, force_ascii=False)
    elif path.suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path)
    return path


@pytest.mark.parametrize("kind", ["jsonl", "csv", "parquet"])
@pytest.mark.parametrize("layout", ["translation", "per-language"])
def test_local_files_of_each_kind_load_in_either_layout(tmp_path, kind, layout):
    rows = pairs(range(10, 30))
    path = write_pairs(tmp_path / f"train.{kind}", rows, layout)
    raw = load_raw_datasets(data_args(train_file=str(path)), SEED)
    assert raw["train"]["translation"] == [r["translation"] for r in rows]
    assert raw["train"].num_rows == len(rows)


def test_per_language_columns_follow_the_language_flags(tmp_path):
    frame = pd.DataFrame({"de": ["eins", "zwei"], "en": ["one", "two"], "fr": ["un", "deux"]})
    frame.to_csv(tmp_path / "train.csv", index=False)
    raw = load_raw_datasets(data_args(train_file=str(tmp_path / "train.csv"), source_lang="fr", target_lang="en"), SEED)
    assert raw["train"]["translation"] == [{"fr": "un", "en": "one"}, {"fr": "deux", "en": "two"}]
    assert raw["train"].features["translation"] == datasets.Translation(languages=["fr", "en"])
    assert "de" in raw["train"].column_names  # other columns stay; tokenising drops them


def test_a_file_in_neither_layout_names_the_flag_the_columns_and_both_layouts(tmp_path):
    pd.DataFrame({"en": ["one", "two"], "deutsch": ["eins", "zwei"]}).to_csv(tmp_path / "val.csv", index=False)
    with pytest.raises(DataError) as error:
        load_raw_datasets(
            data_args(
                train_file=str(write_jsonl(tmp_path / "train.jsonl", pairs(range(3)))),
                validation_file=str(tmp_path / "val.csv"),
            ),
            SEED,
        )
    message = str(error.value)
    assert message.startswith(f"--validation-file {tmp_path / 'val.csv'}: found columns ['en', 'deutsch']")
    assert "a 'translation' column" in message and "one column per language, 'en' and 'de'" in message
    assert message.endswith("no 'de' column.")


def test_missing_cells_are_dropped_and_undecodable_translation_cells_are_named(tmp_path, capsys):
    pd.DataFrame({"en": ["one", "two", "three"], "de": ["eins", None, "drei"]}).to_csv(tmp_path / "a.csv", index=False)
    raw, dropped = load_pairs(data_args(train_file=str(tmp_path / "a.csv")), SEED)
    assert raw["train"]["translation"] == [{"en": "one", "de": "eins"}, {"en": "three", "de": "drei"}]
    assert dropped == {"train": 1}
    assert "split 'train': dropped 1 of 3 pairs (0 without 'en' text (--source-lang), 1 without 'de' text " in (
        capsys.readouterr().err
    )
    cells = [json.dumps({"en": "one", "de": "eins"}), "{'en': 'two'}"]
    pd.DataFrame({"translation": cells}).to_csv(tmp_path / "b.csv", index=False)
    cell = r"row 1 \(counting from 0\): the 'translation' cell .* is not a JSON object"
    with pytest.raises(DataError, match=rf"--train-file .*b.csv, {cell} of texts such as"):
        load_raw_datasets(data_args(train_file=str(tmp_path / "b.csv")), SEED)
    cells[1] = json.dumps({"en": ["two"], "de": "zwei"})
    pd.DataFrame({"translation": cells}).to_csv(tmp_path / "c.csv", index=False)
    with pytest.raises(DataError, match=rf"c.csv, {cell} of texts"):
        load_raw_datasets(data_args(train_file=str(tmp_path / "c.csv")), SEED)
    cells[1] = "[" * 5000 + "]" * 5000  # deeper than Python's JSON parser goes
    pd.DataFrame({"translation": cells}).to_csv(tmp_path / "d.csv", index=False)
    with pytest.raises(DataError, match=rf"d.csv, {cell} of texts"):
        load_raw_datasets(data_args(train_file=str(tmp_path / "d.csv")), SEED)


def test_missing_empty_and_undecodable_files_are_named(tmp_path):
    with pytest.raises(DataError, match=r"--train-file .*nope.jsonl: no such file"):
        load_raw_datasets(data_args(train_file=str(tmp_path / "nope.jsonl")), SEED)
    (tmp_path / "folder.jsonl").mkdir()
    with pytest.raises(DataError, match=r"--train-file .*folder.jsonl: a folder; expected a file"):
        load_raw_datasets(data_args(train_file=str(tmp_path / "folder.jsonl")), SEED)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DataError, match="empty"):
        load_raw_datasets(data_args(train_file=str(empty)), SEED)
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(b'{"translation": {"en": "one", "de": "eins"}}\n{not json\n')
    with pytest.raises(DataError, match=r"--train-file .*broken.jsonl: line 2 is not valid JSON \(.* at column 2\)"):
        load_raw_datasets(data_args(train_file=str(broken)), SEED)
    # one Latin-1 byte: the file and the line are named, not only the codec's complaint
    latin = tmp_path / "latin.jsonl"
    rows = [json.dumps({"translation": {"en": english(n), "de": german(n)}}) for n in range(5)]
    latin.write_bytes("\n".join(rows[:3]).encode() + b'\n{"translation": {"en": "caf\xe9", "de": "Caf\xe9"}}\n')
    with pytest.raises(DataError, match=r"--train-file .*latin.jsonl: line 4 is not UTF-8 \(byte 0xe9 at column 28\)"):
        load_raw_datasets(data_args(train_file=str(latin)), SEED)
    csv = tmp_path / "latin.csv"
    csv.write_bytes(b"en,de\none,eins\ncaf\xe9,Caf\xe9\n")
    with pytest.raises(DataError, match=r"--train-file .*latin.csv: line 3 is not UTF-8"):
        load_raw_datasets(data_args(train_file=str(csv)), SEED)
    text = tmp_path / "train.txt"
    text.write_text("hello")
    with pytest.raises(DataError, match=r"expected a .jsonl"):
        load_raw_datasets(data_args(train_file=str(text)), SEED)


def test_a_json_line_nested_deeper_than_a_row_is_named_before_the_reader_meets_it(tmp_path, monkeypatch):
    """pyarrow's JSON reader crashes the process on a line nested some thousands deep, so a JSON file is checked for
    depth first: a line nested deeper than MAX_JSON_DEPTH is named with its depth. Brackets in text do not count,
    and lines are whole across the blocks the file is read in (here of 64 bytes)."""
    monkeypatch.setattr(checks, "BLOCK", 64)
    limit = checks.MAX_JSON_DEPTH
    rows = [json.dumps(row) for row in pairs(range(1, 4))]
    rows.append(json.dumps({"translation": {"en": "[[a link]] {{a template}} " * 60, "de": "eins"}}))
    rows.append(json.dumps({"translation": {"en": "two", "de": "zwei"}, "x": nested(limit - 1)}))
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(rows) + "\n")
    assert len(load_raw_datasets(data_args(train_file=str(path)), SEED)["train"]) == 5
    for ending in ("\n", ""):  # a line of its own, or the last line without its newline
        path.write_text("\n".join([*rows, json.dumps({"x": nested(limit + 50)})]) + ending)
        message = rf"--train-file .*train.jsonl: line 6 nests its JSON {limit + 51} levels deep; expected at most"
        with pytest.raises(DataError, match=message):
            load_raw_datasets(data_args(train_file=str(path)), SEED)
    path.write_text("\n".join(rows) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")  # as the reader would crash on
    assert checks.too_deep_line(str(path)) == (6, 100_000)


def nested(depth: int) -> list:
    value = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_pairs_with_an_empty_side_are_dropped_and_counted_and_an_emptied_split_is_refused(tmp_path, capsys):
    rows = pairs(range(10, 20))
    rows[3] = {"translation": {"en": "thirteen"}}
    rows[5]["translation"]["de"] = ""
    rows[7]["translation"]["en"] = "  "
    path = write_jsonl(tmp_path / "train.jsonl", rows)
    validation = write_jsonl(tmp_path / "validation.jsonl", pairs(range(3)) + [{"translation": {"en": "x", "de": ""}}])
    raw, dropped = load_pairs(data_args(train_file=str(path), validation_file=str(validation)), SEED)
    assert dropped == {"train": 3, "validation": 1}
    assert raw["train"]["translation"] == [r["translation"] for i, r in enumerate(rows) if i not in (3, 5, 7)]
    err = capsys.readouterr().err
    assert "split 'train': dropped 3 of 10 pairs (1 without 'en' text (--source-lang), 2 without 'de' text " in err
    assert "first: row 3, counting from 0)" in err
    with pytest.raises(DataError, match=r"split 'train': no pair is left: of 3, .*3 without 'fr' text"):
        load_raw_datasets(
            data_args(train_file=str(write_jsonl(tmp_path / "ok.jsonl", pairs(range(3)))), target_lang="fr"), SEED
        )


@pytest.mark.parametrize("side", [5, [1, 2], {"x": "y"}, True])
@pytest.mark.parametrize("layout", ["translation", "columns"])
def test_a_side_that_is_not_text_is_named_by_its_row_not_counted_as_missing(tmp_path, side, layout):
    rows = pairs(range(10, 20))
    rows[6]["translation"]["de"] = side
    if layout == "columns":  # a column that mixes kinds: its texts are not turned into their JSON ('"zehn"')
        rows = [row["translation"] for row in rows]
    path = write_jsonl(tmp_path / "train.jsonl", rows)
    with pytest.raises(
        DataError, match=r"split 'train', row 6 \(counting from 0\): its 'de' side is .*; expected text"
    ):
        load_pairs(data_args(train_file=str(path)), SEED)


def test_a_column_of_lists_is_refused_and_one_of_numbers_read_as_their_text(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", [{"en": "ten", "de": ["zehn"]}, {"en": "one", "de": ["eins"]}])
    with pytest.raises(DataError, match=r"row 0 \(counting from 0\): its 'de' side is \['zehn'\]; expected text"):
        load_pairs(data_args(train_file=str(path)), SEED)
    (tmp_path / "digits.csv").write_text("en,de\nten,10\none,1\n")
    raw, _ = load_pairs(data_args(train_file=str(tmp_path / "digits.csv")), SEED)
    assert raw["train"]["translation"] == [{"en": "ten", "de": "10"}, {"en": "one", "de": "1"}]


def test_a_csv_files_cells_are_the_text_they_hold_not_what_pandas_makes_of_them(tmp_path):
    """pandas reads "007" as 7, "1.50" as 1.5 and "N/A", "null" or "nan" as missing; a BOM starts the header."""
    (tmp_path / "cells.csv").write_text("\ufeffen,de\n007,null\n1.50,N/A\n1e3,nan\n12,\n", encoding="utf-8")
    raw, dropped = load_pairs(data_args(train_file=str(tmp_path / "cells.csv")), SEED)
    assert raw["train"]["translation"] == [
        {"en": "007", "de": "null"}, {"en": "1.50", "de": "N/A"}, {"en": "1e3", "de": "nan"}
    ]  # fmt: skip
    assert dropped == {"train": 1}  # the empty cell: no text
    stream_open, where = train_stream_source(data_args(train_file=str(tmp_path / "cells.csv"), streaming=True))
    assert [row["en"] for row in stream_open()] == ["007", "1.50", "1e3", "12"]
    indexed = tmp_path / "indexed.csv"  # pandas' to_csv writes its index as a column without a name
    pd.DataFrame({"en": ["one", "two"], "de": ["eins", "zwei"]}).to_csv(indexed)
    raw, _ = load_pairs(data_args(train_file=str(indexed)), SEED)
    assert raw["train"]["translation"] == [{"en": "one", "de": "eins"}, {"en": "two", "de": "zwei"}]


def test_a_json_array_and_a_csv_file_that_cannot_be_read_are_named_by_line(tmp_path):
    cases = {
        "cut.json": ('[{"en": "one", "de": "eins"},\n {"en": "two", "de":\n]\n', "line 3 is not valid JSON"),
        "item.json": ('[{"en": "one", "de": "eins"}, {"en": "two", "de": "zwei"},\n\n  "three"]', "line 3: item 3 of"),
        "wide.csv": ('en,de\n"one\nuno",eins\ntwo,zwei,deux\n', "line 4 has 3 fields; expected 2, as the header has"),
        "open.csv": ('en,de\none,eins\n"two,zwei\n', "EOF inside string starting at row 2"),  # pandas' own words
        "half.jsonl": ('{"en": "one", "de": "eins"}\n{"en": "tw\\ud800o", "de": "zwei"}\n', "line 2 holds a lone"),
        "twice.jsonl": (
            '{"en": "one", "de": "eins"}\n{"en": "a", "en": "b", "de": "c"}\n',
            "line 2 has the key 'en' twice",
        ),
        "none.json": ("[]\n", "the file holds no rows with fields."),
        "header.csv": ("en,de\n", "the file holds no rows with fields."),
        "fieldless.jsonl": ("{}\n{}\n", "the file holds no rows with fields."),
        "deep.jsonl": ('{"en": "one", "de": "eins"}\n' + "[" * 100_000 + "\n", "line 2 nests its JSON 100000 levels"),
        "deep.json": ("[\n" * 100_000, "not valid JSON (nested too deeply)"),  # across lines: Python's parser says so
        # datasets reads it as one object of columns, its texts a 'translation' column of rows "one" and "eins"
        "comma.jsonl": ('{"translation": {"en": "one", "de": "eins"},}\n', "line 1 is not valid JSON"),
    }
    for name, (text, message) in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(DataError, match=f"--train-file {tmp_path / name}: .*{re.escape(message)}"):
            load_pairs(data_args(train_file=str(tmp_path / name)), SEED)


def test_unreachable_hub_dataset_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError, match=r"--dataset-name 'someone/not-cached-anywhere'"):
        load_raw_datasets(data_args(dataset_name="someone/not-cached-anywhere"), SEED)


def test_token_batches_respect_max_tokens_and_cover_every_pair():
    lengths = [3, 10, 7, 7, 2, 15, 9, 4, 4, 12] * 10
    sampler = TokenBatchSampler(lengths, [n + 1 for n in lengths], max_tokens=48, seed=3)
    batches = list(sampler)
    seen = sorted(i for batch in batches for i in batch)
    assert seen == list(range(len(lengths)))
    for batch in batches:
        width = max(max(lengths[i], lengths[i] + 1) for i in batch)
        assert width * len(batch) <= 48
    assert batches == list(sampler)  # same epoch, same batches
    sampler.set_epoch(1)
    assert batches != list(sampler)
    two = TokenBatchSampler(lengths, lengths, max_tokens=48, num_replicas=2)
    assert len(two) % 2 == 0
    # over a subset of the rows (those within the length limits), batches hold those rows' own indices
    rows = [i for i, n in enumerate(lengths) if n != 15]
    subset = TokenBatchSampler([lengths[i] for i in rows], [lengths[i] + 1 for i in rows], 48, seed=3, indices=rows)
    renumbered = TokenBatchSampler([lengths[i] for i in rows], [lengths[i] + 1 for i in rows], 48, seed=3)
    assert list(subset) == [[rows[i] for i in batch] for batch in renumbered]


def test_tokenizer_trains_saves_and_loads(tmp_path):
    raw = numbers_dataset(seed=0, train_size=500, eval_size=10, max_digits=3)
    tokenizer = train_bpe_tokenizer(training_texts(raw, "en", "de"), vocab_size=150)
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id) == (
        0,
        1,
        2,
        3,
    )
    tokenizer.save_pretrained(tmp_path)
    loaded = load_tokenizer(str(tmp_path))
    text = ["four hundred twenty-one", "vierhunderteinundzwanzig"]
    assert loaded(text)["input_ids"] == tokenizer(text)["input_ids"]
    ids = loaded(text[1])["input_ids"]
    assert ids[-1] == loaded.eos_token_id
    assert loaded.decode(ids, skip_special_tokens=True) == text[1]


def test_a_tokenizer_name_without_a_pad_token_is_named_by_its_flag(tmp_path):
    """The run failed later, in the model's configuration, naming pad_token_id."""
    from vanilla_transformer.training.data.bpe import build_tokenizer
    from vanilla_transformer.training.options.arguments import TokenizerArguments

    raw = numbers_dataset(seed=0, train_size=200, eval_size=10, max_digits=3)
    tokenizer = train_bpe_tokenizer(training_texts(raw, "en", "de"), vocab_size=100)
    tokenizer.pad_token = None
    tokenizer.save_pretrained(tmp_path)
    options = TokenizerArguments(tokenizer_name=str(tmp_path))
    with pytest.raises(ValueError, match=rf"^{tmp_path} \(--tokenizer-name, .*\): the tokenizer has no pad token, "):
        build_tokenizer(options, str(tmp_path / "run"), False, None, None)


def test_a_special_tokens_text_in_the_data_is_text_not_the_token(tmp_path):
    """As the models' own tools read it (`text_as_text`): a pair whose sides hold `</s>`, `<s>` or `<pad>` is trained
    on those characters; read as the token, a `</s>` would end a sentence inside its labels. The BPE saves the
    setting, and a tokenizer saved without it (--tokenizer-name) is loaded to read so too."""
    raw = numbers_dataset(seed=0, train_size=200, eval_size=10, max_digits=3)
    tokenizer = train_bpe_tokenizer(training_texts(raw, "en", "de"), vocab_size=100)
    tokenizer.save_pretrained(tmp_path / "bpe")
    assert json.loads((tmp_path / "bpe" / "tokenizer_config.json").read_text())["split_special_tokens"] is True
    plain = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer.backend_tokenizer, pad_token="<pad>", bos_token="<s>", eos_token="</s>"
    )
    plain.save_pretrained(tmp_path / "plain")
    assert plain("seven </s> one")["input_ids"].count(plain.eos_token_id) == 2  # the library's default
    pair = {"translation": {"en": "seven </s> one <pad>", "de": "sieben</s> <s>eins"}}
    for folder in ("bpe", "plain"):
        loaded = load_tokenizer(str(tmp_path / folder))
        data = data_args(max_source_length=64, max_target_length=64)
        row = tokenize_pairs(datasets.Dataset.from_list([pair]), loaded, data)[0]
        dropout = BpeDropoutPairs(datasets.Dataset.from_list([pair]), loaded, data, dropout=0.5)
        dropout.resegment(0, Accelerator(cpu=True))  # the segmentation drawn each epoch, with its own copy of the BPE
        for ids in (row["input_ids"], row["labels"], dropout.input_ids[0], dropout.labels[0]):
            assert ids[-1] == loaded.eos_token_id and not {0, 1, 2} & set(ids[:-1]), (folder, ids)


def test_lowercase_tokenizer_lowercases_training_text_and_later_inputs(tmp_path):
    texts = ["Ein Hund läuft.", "A Dog runs.", "Zwei Hunde laufen.", "Two dogs run."] * 20
    cased = train_bpe_tokenizer(iter(texts), vocab_size=120)
    lowered = train_bpe_tokenizer(iter(texts), vocab_size=120, lowercase=True)
    assert not any(token != token.lower() for token in lowered.get_vocab())
    assert any(token != token.lower() for token in cased.get_vocab())
    lowered.save_pretrained(tmp_path)
    loaded = load_tokenizer(str(tmp_path))
    assert loaded("A DOG runs.")["input_ids"] == loaded("a dog runs.")["input_ids"]
    assert loaded.decode(loaded("A Dog runs.")["input_ids"], skip_special_tokens=True) == "a dog runs."


def test_punctuation_stands_alone_and_decoding_restores_the_text():
    texts = [
        "A dog runs.",
        "The dog, a big one, sleeps.",
        "Ein Hund läuft.",
        "Der Hund, ein großer, schläft.",
        'A man in a t-shirt says "hello" at 3.5 meters.',
        "The children's ball is red-and-white!",
    ] * 30
    tokenizer = train_bpe_tokenizer(iter(texts), vocab_size=300)
    tokens = tokenizer.tokenize("The dog. A dog, the dog!")
    # "dog" ends a sentence, precedes a comma and stands alone: one token for all three, punctuation apart
    assert [t for t in tokens if "dog" in t] == ["▁dog"] * 3
    assert {".", ",", "!"} <= set(tokens)
    # unseen words made of seen characters, with punctuation doubled, leading, trailing and inside numbers
    for text in set(texts) | {'The man said "hi" -- then left...', "3.5 and 5,3!", '"Dog"!! A red, red ball.'}:
        ids = tokenizer(text)["input_ids"]
        assert tokenizer.decode(ids, skip_special_tokens=True) == text


def test_bpe_dropout_segments_each_epoch_anew_without_changing_the_text():
    raw = numbers_dataset(seed=0, train_size=300, eval_size=10, max_digits=3)
    tokenizer = train_bpe_tokenizer(training_texts(raw, "en", "de"), vocab_size=300)
    args = data_args(max_source_length=64, max_target_length=64)
    pairs_ = BpeDropoutPairs(raw["train"], tokenizer, args, dropout=0.5)
    plain = tokenize_datasets(raw, tokenizer, args, learned_positions=False)[0]["train"]
    assert (pairs_.input_ids, pairs_.labels) == (plain["input_ids"], plain["labels"])  # before the first draw

    accelerator = Accelerator(cpu=True)
    pairs_.resegment(0, accelerator)
    first = (pairs_.input_ids, pairs_.labels)
    pairs_.resegment(1, accelerator)
    second = (pairs_.input_ids, pairs_.labels)
    assert first[1] != plain["labels"] and second[1] != first[1]
    assert sum(map(len, first[1])) > sum(map(len, plain["labels"]))  # skipped merges leave more, shorter pieces
    for sampled, reference in ((first[0], plain["input_ids"]), (second[1], plain["labels"])):
        assert [ids[-1] for ids in sampled] == [tokenizer.eos_token_id] * len(sampled)

        def texts(segmentations):
            return [tokenizer.decode(ids, skip_special_tokens=True) for ids in segmentations]

        assert texts(sampled) == texts(reference)
    assert tokenizer.backend_tokenizer.model.dropout is None  # the tokenizer that is saved segments as trained
    item = pairs_[3]
    assert item == {"input_ids": second[0][3], "labels": second[1][3]}

    # a sampled segmentation longer than the length limit falls back to the plain one, which fits
    short = data_args(
        max_source_length=max(map(len, plain["input_ids"])), max_target_length=max(map(len, plain["labels"]))
    )
    capped = BpeDropoutPairs(raw["train"], tokenizer, short, dropout=0.9)
    capped.resegment(0, accelerator)
    assert max(map(len, capped.input_ids)) <= short.max_source_length
    assert max(map(len, capped.labels)) <= short.max_target_length

    words = Tokenizer(models.WordLevel({"<unk>": 0, "a": 1}, unk_token="<unk>"))
    with pytest.raises(DataError, match=r"--bpe-dropout 0.1 needs a BPE tokenizer.*WordLevel"):
        BpeDropoutPairs(raw["train"], PreTrainedTokenizerFast(tokenizer_object=words), args, dropout=0.1)


def test_word_dropout_replaces_about_its_rate_of_the_tokens_and_never_the_kept_ones():
    pad, bos, eos, unk = 0, 1, 2, 3
    torch.manual_seed(0)
    ids = torch.randint(4, 100, (64, 50))  # (batch, len)
    ids[:, 0], ids[:, -1], ids[:8, 30:] = bos, eos, pad
    before = ids.clone()
    dropped = drop_words(ids, 0.2, unk, (pad, bos, eos))
    assert torch.equal(ids, before)  # the batch itself is untouched
    special = (ids == pad) | (ids == bos) | (ids == eos)
    assert torch.equal(dropped[special], ids[special])
    changed = dropped != ids
    assert (dropped[changed] == unk).all()
    share = changed.sum().item() / (~special).sum().item()
    assert 0.18 < share < 0.22, share  # 2,800 draws: 0.2 +- 4 standard deviations
    assert torch.equal(drop_words(ids, 0.0, unk, (pad, bos, eos)), ids)
    torch.manual_seed(1)
    again = drop_words(ids, 0.2, unk, (pad, bos, eos))
    torch.manual_seed(1)
    assert torch.equal(drop_words(ids, 0.2, unk, (pad, bos, eos)), again)  # the seed fixes the draws


def test_the_bpe_learns_from_a_seeded_sample_while_every_pair_is_tokenised():
    raw = numbers_dataset(seed=0, train_size=400, eval_size=10, max_digits=4)
    all_texts = list(training_texts(raw, "en", "de"))
    first = raw["train"][0]["translation"]
    assert len(all_texts) == 800 and all_texts[:2] == [first["en"], first["de"]]
    assert list(training_texts(raw, "en", "de", sample_size=1000)) == all_texts  # a corpus within the sample: whole
    sample = list(training_texts(raw, "en", "de", sample_size=50, seed=3))
    assert len(sample) == 100 and sample == list(training_texts(raw, "en", "de", sample_size=50, seed=3))
    assert sample != list(training_texts(raw, "en", "de", sample_size=50, seed=4))
    assert set(sample) <= set(all_texts)
    tokenizer = train_bpe_tokenizer(iter(sample), vocab_size=150, length=len(sample))
    tokenized, rows = tokenize_datasets(raw, tokenizer, data_args(max_source_length=64, max_target_length=64), False)
    assert tokenized["train"].num_rows == len(rows.indices) == 400 and rows.dropped == 0


def test_a_json_array_file_with_a_byte_that_is_not_utf8_names_that_line(tmp_path):
    rows = [{"translation": {"en": english(n), "de": german(n)}} for n in range(4)]
    text = json.dumps(rows, indent=2).replace("three", "thr\udce9e")  # a lone Latin-1 byte, several lines down
    path = tmp_path / "train.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    line = next(i for i, row in enumerate(text.splitlines(), start=1) if "\udce9" in row)
    assert line > 1
    with pytest.raises(DataError, match=rf"train.json: line {line} is not UTF-8 \(byte 0xe9"):
        load_raw_datasets(data_args(train_file=str(path)), SEED)


def test_evaluation_refuses_a_pair_without_text_instead_of_scoring_fewer_pairs(tmp_path):
    rows = pairs(range(5))
    rows[2]["translation"]["de"] = ""
    path = write_jsonl(tmp_path / "test.jsonl", rows)
    with pytest.raises(DataError, match=r"split 'test', row 2 \(counting from 0\): no text on a side"):
        load_pairs(data_args(test_file=str(path)), SEED, require_train=False)


def resident_kib(path: str) -> int:
    """KiB of `path` mapped and resident in this process (its mappings' Rss lines in /proc/self/smaps)."""
    total, current = 0, None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if not fields[0].endswith(":"):  # a mapping's header: address range, permissions, ..., path
                current = fields[5] if len(fields) > 5 else None
            elif fields[0] == "Rss:" and current == path:
                total += int(fields[1])
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="reads Linux's /proc/self/smaps")
def test_released_file_pages_leave_the_process_and_the_rows_read_the_same(tmp_path):
    rows = [
        {"translation": {"en": f"a sentence number {i} " * 4, "de": f"ein Satz Nummer {i} " * 4}} for i in range(50_000)
    ]
    files = {"train": str(write_jsonl(tmp_path / "train.jsonl", rows)), "validation": None, "test": None}
    raw = load_files(files, "en", "de")
    path = os.path.realpath(raw["train"].cache_files[0]["filename"])
    raw["train"].data.column("translation").combine_chunks()  # a pass over the whole column, as the checks make
    assert resident_kib(path) > os.path.getsize(path) // 2048  # more than half the file is resident
    assert release_file_pages(raw) > 0
    assert resident_kib(path) == 0
    assert raw["train"][49_999]["translation"] == rows[49_999]["translation"]  # read again from the page cache
    assert 0 < resident_kib(path) < os.path.getsize(path) // 1024


def test_a_pipe_given_as_a_data_file_is_named_as_not_a_regular_file(tmp_path):
    import os

    pipe = tmp_path / "train.jsonl"
    os.mkfifo(pipe)
    with pytest.raises(DataError, match=f"--train-file {pipe}: not a regular file"):
        load_raw_datasets(data_args(train_file=str(pipe)), SEED)


def test_a_vocabulary_size_below_the_characters_is_warned_of():
    tokenizer = train_bpe_tokenizer(iter(["abcdefgh ijkl", "mnop"]), vocab_size=5)
    assert len(tokenizer) > 5 and vocabulary_note(tokenizer, 5) == (
        f"warning: --vocab-size 5 is below the training data's characters and the special tokens: the vocabulary "
        f"has {len(tokenizer)} types"
    )
    assert vocabulary_note(tokenizer, len(tokenizer)) is None
