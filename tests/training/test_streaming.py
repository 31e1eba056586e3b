"""--streaming: the training split read as a datasets IterableDataset and batched by tokens from a bounded pool."""

import collections
import csv
import json

import pytest
import torch
from safetensors.torch import load_file
from vanilla_transformer.training.data.bpe import train_bpe_tokenizer
from vanilla_transformer.training.data.streaming import StreamingBatches, reservoir_sample, train_stream_source
from vanilla_transformer.training.data.tokenizing import make_collator
from vanilla_transformer.training.options.arguments import ArgumentsError, TrainArguments, resolve
from vanilla_transformer.training.tasks.numbers import english

from vanilla_transformer.cli import main

from .conftest import TINY_MODEL_FLAGS, pairs, write_jsonl


@pytest.fixture(scope="module")
def tokenizer():
    texts = [text for pair in pairs(range(0, 1000)) for text in pair["translation"].values()]
    return train_bpe_tokenizer(texts, 120)


def stream_args(train, **kwargs):
    defaults = {"train_file": str(train), "streaming": True, "max_steps": 10, "seed": 3, "max_tokens": 200}
    return resolve(TrainArguments.from_options(**{**defaults, **kwargs}))


def streamed(args: TrainArguments, tokenizer, accelerator=None) -> StreamingBatches:
    """The streamed training batches of a run with these arguments, as the training command builds them."""
    source, collate = train_stream_source(args.data), make_collator(tokenizer)
    return StreamingBatches(
        *source, tokenizer, collate, args.data, args.optimisation.max_tokens, args.run.seed, accelerator
    )


def batches_of(batches: StreamingBatches) -> list[list[str]]:
    """Each batch as the source sentences it holds (its rows, decoded), so that batches compare across objects."""
    return [[tuple(row[row != 0].tolist()) for row in batch["input_ids"]] for batch in batches]


def test_a_pass_batches_every_pair_once_within_max_tokens_and_the_seed_fixes_the_batches(tmp_path, tokenizer):
    train = write_jsonl(tmp_path / "train.jsonl", pairs(range(100, 400)))
    args = stream_args(train, stream_pool_pairs=64)
    make = lambda args: streamed(args, tokenizer)  # noqa: E731
    batches = make(args)
    first = list(batches)
    for batch in first:
        padded = max(batch["input_ids"].shape[1], batch["labels"].shape[1])
        assert batch["input_ids"].shape[0] * padded <= args.optimisation.max_tokens
    seen = collections.Counter(row for batch in batches_of(first) for row in batch)
    assert sum(seen.values()) == 300 and set(seen.values()) == {1}  # every pair once
    # pools of 64 pairs: the batches of a pool hold pairs from that pool only
    encoded = {
        tuple(ids): i
        for i, ids in enumerate(tokenizer([p["translation"]["en"] for p in pairs(range(100, 400))])["input_ids"])
    }
    for batch in batches_of(first):
        assert len({encoded[row] // 64 for row in batch}) == 1
    assert batches_of(make(args)) == batches_of(first)  # same seed, same batches
    other = make(stream_args(train, stream_pool_pairs=64, seed=4))
    assert batches_of(other) != batches_of(first)
    batches.set_epoch(1)
    assert batches_of(batches) != batches_of(first)  # each epoch shuffles anew


def test_pools_with_no_pair_that_can_train_are_passed_over_not_taken_for_the_end(tmp_path, tokenizer):
    """A stretch of empty sides, or of pairs over the length limits (a corpus sorted by length), as long as many
    pools: the pass goes on past it to the pairs after it, without a recursion per pool."""
    empty = [{"translation": {"en": english(n), "de": ""}} for n in range(64)]
    long = [{"translation": {"en": " ".join([english(n)] * 20), "de": "x"}} for n in range(3000)]
    train = write_jsonl(tmp_path / "train.jsonl", [*pairs(range(100, 110)), *empty, *long, *pairs(range(200, 220))])
    batches = streamed(stream_args(train, stream_pool_pairs=1, max_source_length=16), tokenizer)
    seen = [row for batch in batches_of(list(batches)) for row in batch]
    assert len(seen) == 30  # the ten before the stretch and the twenty after it
    assert batches.dropped == {"empty_side": 64, "too_long": 3000}


def test_a_resumed_pass_continues_with_the_batch_it_would_have_taken_next(tmp_path, tokenizer):
    train = write_jsonl(tmp_path / "train.jsonl", pairs(range(100, 400)))
    args = stream_args(train, stream_pool_pairs=32)
    make = lambda: streamed(args, tokenizer)  # noqa: E731
    whole = batches_of(make())
    for done in (0, 1, 5, len(whole) // 2, len(whole) - 1, len(whole)):
        batches = make()
        iterator = iter(batches)
        for _ in range(done + 1 if done < len(whole) else done):  # the loop reads one batch ahead of its updates
            next(iterator)
        position = json.loads(json.dumps(batches.position(done)))  # as a checkpoint keeps it
        resumed = make()
        resumed.resume(position)
        assert batches_of(resumed) == whole[done:], done


def test_two_processes_take_alternate_batches_of_the_same_pools(tmp_path, tokenizer):
    train = write_jsonl(tmp_path / "train.jsonl", pairs(range(100, 400)))
    args = stream_args(train, stream_pool_pairs=50)

    class Process:  # what StreamingBatches reads of an Accelerator
        def __init__(self, index):
            self.num_processes, self.process_index, self.device = 2, index, torch.device("cpu")

    shares = [batches_of(streamed(args, tokenizer, Process(i))) for i in (0, 1)]
    assert len(shares[0]) == len(shares[1])
    rows = collections.Counter(row for share in shares for batch in share for row in batch)
    assert len(rows) == 300 and set(rows.values()) <= {1, 2}
    # a pool with an odd number of batches repeats its first one for the second process; nothing else is shared
    repeated = set(map(tuple, shares[0])) & set(map(tuple, shares[1]))
    assert {row for row, count in rows.items() if count == 2} == {row for batch in repeated for row in batch}
    assert len(repeated) <= 300 // 50


def test_the_bpe_sample_is_drawn_from_the_whole_stream_and_fixed_by_the_seed(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", pairs(range(0, 5000)))
    args = stream_args(train)
    open_stream, where = train_stream_source(args.data)
    sample = reservoir_sample(open_stream, where, args.data, args.run.seed, 500)
    assert len(sample) == 500 and len(set(sample)) == 500
    number_of = {english(n): n for n in range(0, 5000)}
    numbers = sorted(number_of[source] for source, _ in sample)
    assert numbers[-1] > 4000 and numbers[0] < 1000  # from the whole file, not its first pairs
    assert reservoir_sample(open_stream, where, args.data, 3, 500) == sample
    assert reservoir_sample(open_stream, where, args.data, 9, 500) != sample
    assert sorted(reservoir_sample(open_stream, where, args.data, 3, 10_000)) == sorted(
        (p["translation"]["en"], p["translation"]["de"]) for p in pairs(range(0, 5000))
    )


def test_streaming_flags_are_checked_against_the_others(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", pairs(range(100, 120)))
    with pytest.raises(ArgumentsError, match="--streaming reads a corpus of unknown length: give --max-steps"):
        resolve(TrainArguments.from_options(train_file=str(train), streaming=True, num_epochs=2))
    with pytest.raises(ArgumentsError, match="--streaming reads --train-file or --dataset-name"):
        resolve(TrainArguments.from_options(streaming=True, max_steps=5))
    with pytest.raises(ArgumentsError, match="--bpe-dropout.*cannot be used with --streaming"):
        resolve(TrainArguments.from_options(train_file=str(train), streaming=True, max_steps=5, bpe_dropout=0.1))


def stream_flags(files, out, *extra):
    return [
        "train",
        "--train-file",
        str(files["train"]),
        "--validation-file",
        str(files["validation"]),
        "--streaming",
        "--stream-pool-pairs",
        "40",
        "--output-dir",
        str(out),
        "--eval-steps",
        "0",
        "--seed",
        "5",
        *TINY_MODEL_FLAGS,
        *extra,
    ]


def test_a_streamed_run_drops_and_counts_noisy_pairs_and_trains(tmp_path, capsys):
    rows = pairs(range(100, 300))
    rows[3]["translation"]["de"] = ""
    rows[50]["translation"]["en"] = " "
    rows[120]["translation"]["en"] = " ".join(["one"] * 40)  # beyond --max-source-length 16
    files = {
        "train": write_jsonl(tmp_path / "train.jsonl", rows),
        "validation": write_jsonl(tmp_path / "validation.jsonl", pairs(range(20, 30))),
    }
    out = tmp_path / "run"
    assert main(stream_flags(files, out, "--max-steps", "25")) == 0  # more than one pass over 197 pairs
    results = json.loads((out / "eval_results.json").read_text())
    assert results["dropped_pairs"] == {"empty_side": {"train": 2}, "too_long": {"train": 1}}
    assert results["train_steps"] == 25
    epochs = [json.loads(line)["epoch"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert epochs[0] == 0 and epochs[-1] >= 1
    assert "dropping pairs with no text on a side" in capsys.readouterr().err


def test_streamed_runs_are_deterministic_under_the_seed(tmp_path):
    files = {
        "train": write_jsonl(tmp_path / "train.jsonl", pairs(range(100, 300))),
        "validation": write_jsonl(tmp_path / "validation.jsonl", pairs(range(20, 30))),
    }
    runs = {}
    for name, seed in (("a", "5"), ("b", "5"), ("c", "6")):
        assert main([*stream_flags(files, tmp_path / name, "--max-steps", "8"), "--seed", seed]) == 0
        runs[name] = [json.loads(line)["loss"] for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    assert runs["a"] == runs["b"] and runs["a"] != runs["c"]
    wa, wb = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_a_streamed_file_with_a_bad_line_is_named_with_the_line(tmp_path, capsys):
    rows = "".join(json.dumps(row) + "\n" for row in pairs(range(100, 130)))
    validation = write_jsonl(tmp_path / "validation.jsonl", pairs(range(20, 30)))
    for name, line, expected in (
        ("latin1", b'{"translation": {"en": "caf\xe9", "de": "x"}}\n', "line 31 is not UTF-8"),
        ("json", b'{"translation": {"en": "x", "de": "y"}\n', "line 31 is not valid JSON"),
    ):
        bad = tmp_path / f"{name}.jsonl"
        bad.write_bytes(rows.encode() + line)
        files = {"train": bad, "validation": validation}
        assert main(stream_flags(files, tmp_path / name, "--max-steps", "3")) != 0
        assert f"--train-file {bad}: {expected}" in capsys.readouterr().err


def test_a_streamed_side_that_is_not_text_is_named_by_its_row_as_when_read_whole(tmp_path, tokenizer):
    rows = pairs(range(100, 130))
    rows[7]["translation"]["de"] = 5
    args = stream_args(write_jsonl(tmp_path / "train.jsonl", rows))
    with pytest.raises(ValueError, match=r"train.jsonl, row 7 \(counting from 0\): its 'de' side is 5; expected text"):
        list(streamed(args, tokenizer))


def test_a_streamed_csv_cell_that_is_not_a_pair_is_named_by_its_row_as_when_read_whole(tmp_path, tokenizer):
    cells = [json.dumps(row["translation"]) for row in pairs(range(100, 130))]
    for bad in ("{'en': 'one'}", "[" * 5000 + "]" * 5000):  # not JSON; nested deeper than Python's parser goes
        cells[4] = bad
        with open(tmp_path / "train.csv", "w", newline="", encoding="utf-8") as handle:
            csv.writer(handle).writerows([["translation"], *([cell] for cell in cells)])
        cell = r"train.csv, row 4 \(counting from 0\): the 'translation' cell .* is not a JSON object of texts"
        with pytest.raises(ValueError, match=cell):
            list(streamed(stream_args(tmp_path / "train.csv"), tokenizer))


def test_a_dataset_folder_streams_its_train_split_and_loads_the_others_whole(tmp_path):
    """--dataset-name with --streaming: the 'train' split is streamed; validation is read through the streaming reader
    too (nothing else is downloaded) and held in memory. A local folder is read as a Hub repository is."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    write_jsonl(folder / "train.jsonl", pairs(range(100, 300)))
    write_jsonl(folder / "validation.jsonl", pairs(range(20, 30)))
    out = tmp_path / "run"
    flags = ["train", "--dataset-name", str(folder), "--streaming", "--max-steps", "4", "--output-dir", str(out)]
    assert main([*flags, "--eval-steps", "0", *TINY_MODEL_FLAGS]) == 0
    results = json.loads((out / "eval_results.json").read_text())
    assert results["train_steps"] == 4 and "bleu" in results["validation"] and "test" not in results
