"""Two CPU processes train the same model one process trains with the same data per update."""

import json

import pytest
import torch
from safetensors.torch import load_file

from vanilla_transformer.cli import main

from ..conftest import two_processes
from .conftest import TINY_MODEL_FLAGS, data_flags


@pytest.mark.parametrize("streaming", [False, True], ids=["map-style", "streamed"])
def test_two_processes_match_one_process_with_accumulation(tmp_path, data_files, streaming):
    """Streamed, every process reads the same pools and takes alternate batches: the same updates again."""
    flags = [
        *data_flags(data_files),
        *(["--streaming"] if streaming else []),
        "--max-steps",
        "4",
        "--eval-steps",
        "0",
        "--save-steps",
        "0",
        "--dropout",
        "0",
        "--cpu",
        *TINY_MODEL_FLAGS,
    ]
    two, one = tmp_path / "two", tmp_path / "one"
    two_processes(29533, "-m", "vanilla_transformer.cli", "train", *flags, "--output-dir", str(two), check=True)
    # each update of the 2-process run takes one batch per process; one process sees both batches by accumulating
    assert main(["train", *flags, "--output-dir", str(one), "--gradient-accumulation-steps", "2"]) == 0

    def records(run):
        return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]

    a, b = records(one), records(two)
    assert [r["target_tokens"] for r in a] == [r["target_tokens"] for r in b]  # same data, gathered from both
    for x, y in zip(a, b):
        assert abs(x["loss"] - y["loss"]) < 1e-3
    wa, wb = load_file(one / "model.safetensors"), load_file(two / "model.safetensors")
    for key in wa:
        torch.testing.assert_close(wa[key], wb[key], atol=1e-5, rtol=1e-4)
    ra, rb = (json.loads((run / "eval_results.json").read_text()) for run in (one, two))
    assert ra["test"]["chrf"] == rb["test"]["chrf"]  # evaluation gathered from both processes, in order
    for split in ("validation", "test"):  # summed over both processes' pairs, each pair once
        assert abs(ra[split]["cross_entropy"] - rb[split]["cross_entropy"]) < 1e-4
    assert (ra["processes"], rb["processes"]) == (1, 2)
    assert "data-parallel" not in (one / "README.md").read_text()
    assert "tokens per process, 2 data-parallel processes" in (two / "README.md").read_text()


BPE_DROPOUT_SCRIPT = """
import json, sys
from accelerate import Accelerator
from vanilla_transformer.training.options.arguments import DataArguments
from vanilla_transformer.training.tasks.numbers import numbers_dataset
from vanilla_transformer.training.data.bpe import train_bpe_tokenizer, training_texts
from vanilla_transformer.processes import end_processes
from vanilla_transformer.training.data.tokenizing import BpeDropoutPairs

accelerator = Accelerator(cpu=True)
raw = numbers_dataset(seed=0, train_size=200, eval_size=10, max_digits=3)
tokenizer = train_bpe_tokenizer(training_texts(raw, "en", "de"), vocab_size=300)
data = DataArguments(max_source_length=64, max_target_length=64)
pairs = BpeDropoutPairs(raw["train"], tokenizer, data, dropout=0.5)
drawn = []
for epoch in range(2):
    pairs.resegment(epoch, accelerator)
    drawn.append([pairs.input_ids, pairs.labels])
with open(f"{sys.argv[1]}/rank{accelerator.process_index}.json", "w") as handle:
    json.dump({"drawn": drawn, "plain": pairs.plain}, handle)
end_processes()
"""


def test_bpe_dropout_gives_every_process_the_same_segmentation(tmp_path):
    script = tmp_path / "segment.py"
    script.write_text(BPE_DROPOUT_SCRIPT)
    two_processes(29534, str(script), str(tmp_path), check=True)
    rank0, rank1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert rank0["drawn"] == rank1["drawn"]  # the segmentations the two processes batch are the same draw
    assert rank0["drawn"][0] != rank0["drawn"][1]  # a new draw per epoch
    assert rank0["drawn"][0][1] != rank0["plain"][1]


def test_repeated_runs_over_the_same_folder_on_two_processes_all_succeed(tmp_path, data_files):
    """--overwrite-output-dir under two processes: one process clears the earlier run (its checkpoints'
    optimizer.bin and random_states_1.pkl included), the other waits for it; every run says how many processes it
    trains with."""
    out = tmp_path / "run"
    flags = [*data_flags(data_files), "--max-steps", "2", "--save-steps", "1", "--eval-steps", "0", "--cpu"]
    for attempt in range(3):
        done = two_processes(
            29541 + attempt, "-m", "vanilla_transformer.cli", "train", *flags, *TINY_MODEL_FLAGS,
            "--output-dir", str(out), "--overwrite-output-dir", text=True,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.count("Training with 2 processes on cpu") == 1
        assert json.loads((out / "eval_results.json").read_text())["processes"] == 2
        assert (out / "checkpoints" / "checkpoint-2" / "random_states_1.pkl").is_file()
