"""End-to-end runs of `vanilla-transformer train` on tiny settings: the folder it leaves, exact resumption,
checkpoint averaging, and clear errors for bad command lines."""

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from accelerate.state import AcceleratorState
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
from vanilla_transformer.training.optim.schedule import inverse_sqrt_lr, lr_lambda
from vanilla_transformer.training.options.arguments import PRESETS
from vanilla_transformer.training.run.checkpoints import STATE_FILE, average_checkpoints, list_checkpoints

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.cli import main

from .conftest import TINY_MODEL_FLAGS, data_flags, pairs, train_cli, write_jsonl


def losses(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as handle:
        return {r["step"]: r["loss"] for r in map(json.loads, handle)}


def test_train_on_files_leaves_a_loadable_model_folder(tmp_path, data_files, capsys):
    out = tmp_path / "run"
    code = train_cli(data_files, out, "--max-steps 6 --save-steps 3 --eval-steps 3", *TINY_MODEL_FLAGS)
    assert code == 0
    printed = capsys.readouterr().out
    assert "test: BLEU" in printed and "->" in printed  # results and sample translations are shown
    for name in (
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "tokenizer.json",
        "eval_results.json",
        "metrics.jsonl",
        "training_curves.png",
    ):
        assert (out / name).is_file(), name
    assert not list(out.glob("*.bin"))
    results = json.loads((out / "eval_results.json").read_text())
    assert set(results["test"]) >= {"bleu", "bleu_lowercase", "chrf", "exact_match", "bleu_signature"}
    model = AutoModelForSeq2SeqLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert model.generation_config.num_beams == 2
    batch = tokenizer(["one hundred one"], return_tensors="pt")
    assert model.generate(**batch, max_new_tokens=5).shape[0] == 1
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6]
    assert all({"loss", "nll_loss", "lr", "tokens_per_second"} <= r.keys() for r in records)
    assert "validation_bleu" in records[2]
    assert [os.path.basename(p) for p in list_checkpoints(str(out))] == ["checkpoint-3", "checkpoint-6"]


def test_train_on_csv_files_with_one_column_per_language(tmp_path, capsys):
    from vanilla_transformer.training.tasks.numbers import english, german

    files = {}
    for split, numbers in {"train": range(100, 200), "validation": range(20, 26), "test": range(40, 46)}.items():
        files[split] = tmp_path / f"{split}.csv"
        files[split].write_text("de,en\n" + "".join(f"{german(n)},{english(n)}\n" for n in numbers), encoding="utf-8")
    out = tmp_path / "run"
    code = train_cli(files, out, "--max-steps 2 --save-steps 0 --eval-steps 0", *TINY_MODEL_FLAGS)
    assert code == 0
    results = json.loads((out / "eval_results.json").read_text())
    assert {"validation", "test"} <= results.keys() and "bleu" in results["test"]
    printed = capsys.readouterr().out  # a sample: the first validation pair, each side from its own column
    assert "  twenty\n    -> " in printed and "(reference: zwanzig)" in printed


def test_resume_continues_exactly_where_the_run_stopped_and_counts_the_time_of_both_runs(tmp_path, data_files, capsys):
    common = [*data_flags(data_files), "--save-steps", "3", "--eval-steps", "0", "--dropout", "0.2", *TINY_MODEL_FLAGS]
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    assert main(["train", *common, "--output-dir", str(straight), "--max-steps", "8"]) == 0
    assert main(["train", *common, "--output-dir", str(interrupted), "--max-steps", "5"]) == 0
    # continue the second run from its step-3 checkpoint to step 8, as after a crash at step 5
    checkpoint = os.path.join(interrupted, "checkpoints", "checkpoint-3")
    state_file = os.path.join(checkpoint, STATE_FILE)
    with open(state_file) as handle:
        state = json.load(handle)
    assert 0 < state["train_seconds"] < 600  # the time of the first three updates, set up and data not counted
    state["train_seconds"] = 1000.0  # as if they had taken longer: the resumed run adds its own time to it
    with open(state_file, "w") as handle:
        json.dump(state, handle)
    resume = ["train", *common, "--output-dir", str(interrupted), "--max-steps", "8", "--resume-from", checkpoint]
    assert main(resume) == 2  # its step-5 checkpoint, of the course abandoned, would outlive the new course's
    assert f"holds checkpoints after {checkpoint} (checkpoint-5)" in capsys.readouterr().err
    resumed_at = time.time()
    assert main([*resume, "--overwrite-output-dir"]) == 0  # which removes them, once the data is read
    seconds = json.loads((interrupted / "eval_results.json").read_text())["train_seconds"]
    assert 1000.0 < seconds <= 1000.0 + time.time() - resumed_at
    a, b = losses(straight), losses(interrupted)
    assert [a[s] for s in range(1, 9)] == [b[s] for s in range(1, 9)]
    assert sorted(os.listdir(interrupted / "checkpoints")) == sorted(os.listdir(straight / "checkpoints"))
    wa, wb = load_file(straight / "model.safetensors"), load_file(interrupted / "model.safetensors")
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    for flag, value in (("--seed", "7"), ("--max-tokens", "512")):  # the rest of the data in another order: refused
        other = ["--output-dir", str(tmp_path / f"other{flag}"), "--max-steps", "8", "--resume-from", checkpoint]
        assert main(["train", *common, *other, flag, value]) == 2
        assert f"ordered its batches with {flag} " in capsys.readouterr().err


def test_cooldown_brings_the_learning_rate_to_zero_at_the_last_update(tmp_path, data_files, capsys):
    flags = [
        *data_flags(data_files),
        "--eval-steps",
        "0",
        "--save-steps",
        "0",
        *TINY_MODEL_FLAGS,
        "--warmup-steps",
        "2",
        "--lr",
        "1e-3",
    ]
    out = tmp_path / "run"
    assert main(["train", *flags, "--output-dir", str(out), "--max-steps", "6", "--cooldown-steps", "3"]) == 0
    logged = [json.loads(line)["lr"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    # each record holds the rate for the next update; updates 4, 5, 6 take 3/3, 2/3 and 1/3 of the usual rate
    expected = lr_lambda(32, 2, 1e-3, total_steps=6, cooldown_steps=3)
    assert logged == pytest.approx([expected(step) for step in range(1, 7)])
    assert logged[-1] == 0.0 and logged[3] == pytest.approx(inverse_sqrt_lr(5, 32, 2, 1e-3) * 2 / 3)
    # a run measured in epochs learns its length only from the data: a longer cool-down is named, not clipped
    code = main(
        ["train", *flags, "--output-dir", str(tmp_path / "epochs"), "--num-epochs", "1", "--cooldown-steps", "1000"]
    )
    assert code == 2 and "--cooldown-steps 1000 is longer than the run" in capsys.readouterr().err


def test_checkpoint_averaging(tmp_path, data_files):
    out = tmp_path / "run"
    assert (
        train_cli(
            data_files, out, "--max-steps 7 --save-steps 2 --average-checkpoints 3 --eval-steps 0", *TINY_MODEL_FLAGS
        )
        == 0
    )
    # the final state is checkpointed too, so the average holds the last updates
    assert [os.path.basename(p) for p in list_checkpoints(str(out))] == [
        "checkpoint-2",
        "checkpoint-4",
        "checkpoint-6",
        "checkpoint-7",
    ]
    paths = list_checkpoints(str(out))[-3:]
    saved = [load_file(os.path.join(p, "model.safetensors")) for p in paths]
    averaged = average_checkpoints(paths)
    for key in averaged:
        torch.testing.assert_close(averaged[key], sum(s[key] for s in saved) / 3)
    final = AutoModelForSeq2SeqLM.from_pretrained(out).state_dict()
    for key, value in averaged.items():
        torch.testing.assert_close(final[key], value)


DIGITS = {"en": "zero one two three four five six seven eight nine".split()}
DIGITS["de"] = "null eins zwei drei vier fünf sechs sieben acht neun".split()


def digit_sequences(seed: int, count: int) -> list[dict]:
    """Sequences of 3-6 digit words and their German words: multi-word sentences, so that BLEU tells models apart."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(count):
        digits = torch.randint(10, (int(torch.randint(3, 7, (1,), generator=generator)),), generator=generator)
        rows.append({"translation": {lang: " ".join(words[d] for d in digits) for lang, words in DIGITS.items()}})
    return rows


def epoch_run_flags(train_file) -> list[str]:
    # 7 batches of at most 256 tokens an epoch: 120 updates end in the middle of the 18th epoch
    return [
        "--train-file",
        str(train_file),
        "--max-steps",
        "120",
        "--max-tokens",
        "256",
        "--lr",
        "1e-2",
        "--warmup-steps",
        "5",
        "--save-strategy",
        "epoch",
        "--keep-checkpoints",
        "3",
        "--eval-steps",
        "0",
        *TINY_MODEL_FLAGS,
    ]


def test_epoch_checkpoints_end_whole_epochs_and_average_them(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", digit_sequences(0, 300))
    out = tmp_path / "run"
    flags = ["--validation-file", str(write_jsonl(tmp_path / "validation.jsonl", digit_sequences(1, 16)))]
    assert main(["train", *epoch_run_flags(train), *flags, "--output-dir", str(out), "--average-checkpoints", "3"]) == 0
    paths = list_checkpoints(str(out))
    states = [json.loads(open(os.path.join(p, "trainer_state.json")).read()) for p in paths]
    # each checkpoint closes an epoch; the last updates, past the last whole epoch, are not checkpointed
    assert all(s["batches_in_epoch"] == s["batches_per_epoch"] for s in states)
    epoch = states[0]["batches_per_epoch"]
    assert [s["step"] for s in states] == [epoch * n for n in range(120 // epoch - 2, 120 // epoch + 1)]
    assert 120 % epoch  # the run ends inside an epoch
    final = AutoModelForSeq2SeqLM.from_pretrained(out).state_dict()
    for key, value in average_checkpoints(paths).items():
        torch.testing.assert_close(final[key], value)
    assert "the average of the last 3 epoch checkpoints" in (out / "README.md").read_text()
    # a run resumed from an epoch checkpoint goes on with the next epoch, with the same losses and weights
    first = losses(out)
    resume = ["--resume-from", paths[1], "--average-checkpoints", "3", "--overwrite-output-dir"]  # the later ones go
    assert main(["train", *epoch_run_flags(train), *flags, "--output-dir", str(out), *resume]) == 0
    second = losses(out)
    assert [second[step] for step in range(states[1]["step"] + 1, 121)] == [
        first[step] for step in range(states[1]["step"] + 1, 121)
    ]
    torch.testing.assert_close(AutoModelForSeq2SeqLM.from_pretrained(out).state_dict(), final)


def test_tune_averaging_keeps_the_weights_that_score_higher_on_validation(tmp_path, capsys):
    """The validation references are the last update's own translations, as the run printed them: the last update
    scores BLEU 100 on them, so it must be kept over the average of the last 3 epochs (which translates differently),
    and the choice shows in the results and the card."""
    train = write_jsonl(tmp_path / "train.jsonl", digit_sequences(0, 300))
    validation = digit_sequences(1, 16)
    first = tmp_path / "first"
    flags = [*epoch_run_flags(train), "--show-samples", "16"]
    original = ["--validation-file", str(write_jsonl(tmp_path / "original.jsonl", validation))]
    capsys.readouterr()
    assert main(["train", *flags, *original, "--output-dir", str(first)]) == 0
    own = [line.removeprefix("    -> ") for line in capsys.readouterr().out.splitlines() if line.startswith("    -> ")]
    for row, hypothesis in zip(validation, own, strict=True):
        row["translation"]["de"] = hypothesis
    out = tmp_path / "run"
    validation_file = write_jsonl(tmp_path / "validation.jsonl", validation)
    tuned = ["--validation-file", str(validation_file), "--average-checkpoints", "3", "--tune-averaging"]
    assert main(["train", *flags, *tuned, "--output-dir", str(out)]) == 0
    search = json.loads((out / "eval_results.json").read_text())["averaging_search"]
    assert search["last_update"]["validation_bleu"] == 100.0 > search["average"]["validation_bleu"]
    assert search["chosen"] == "last_update"
    kept = AutoModelForSeq2SeqLM.from_pretrained(out).state_dict()
    for key, value in AutoModelForSeq2SeqLM.from_pretrained(first).state_dict().items():
        torch.testing.assert_close(kept[key], value)  # the same seed and data, so the same last update
    card = (out / "README.md").read_text()
    assert "the final weights are those of the last update, chosen on the validation split" in card


def test_length_penalty_is_chosen_on_validation_and_saved(tmp_path, data_files, capsys):
    out = tmp_path / "run"
    assert (
        train_cli(data_files, out, "--max-steps 4 --eval-steps 0 --tune-length-penalty 0.5 2.0", *TINY_MODEL_FLAGS) == 0
    )
    results = json.loads((out / "eval_results.json").read_text())
    search = results["length_penalty_search"]
    assert set(search) == {"0.5", "2.0"}
    best = max(search, key=lambda alpha: (search[alpha], -float(alpha)))  # ties go to the first value
    assert results["length_penalty"] == float(best)
    assert results["validation"]["bleu"] == search[best]
    assert AutoModelForSeq2SeqLM.from_pretrained(out).generation_config.length_penalty == float(best)
    assert f"Chose length penalty {best}" in capsys.readouterr().out


def test_bf16_mixed_precision_trains_under_autocast_and_evaluates_in_float32(tmp_path, data_files, monkeypatch):
    seen = []  # (computing gradients, autocast on) for every forward call of the run
    forward = VanillaTransformerForConditionalGeneration.forward

    def recording_forward(self, *args, **kwargs):
        seen.append((torch.is_grad_enabled(), torch.is_autocast_enabled("cpu")))
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(VanillaTransformerForConditionalGeneration, "forward", recording_forward)
    out = tmp_path / "run"
    AcceleratorState._reset_state(True)  # accelerate keeps one precision per process; other tests' runs used none
    try:
        assert (
            train_cli(
                data_files,
                out,
                "--max-steps 20 --eval-steps 0 --save-steps 0 --mixed-precision bf16 --cpu",
                *TINY_MODEL_FLAGS,
            )
            == 0
        )
    finally:
        AcceleratorState._reset_state(True)
    training = [autocast for grad, autocast in seen if grad]
    decoding = [autocast for grad, autocast in seen if not grad]  # the final validation and test decodes
    assert len(training) == 20 and all(training)
    assert decoding and not any(decoding)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["loss"] < records[0]["loss"]
    assert {w.dtype for w in load_file(out / "model.safetensors").values()} == {torch.float32}


def test_rdrop_without_dropout_trains_as_the_plain_loss_and_with_dropout_is_named_in_the_card(tmp_path, data_files):
    common = [
        *data_flags(data_files),
        "--max-steps",
        "4",
        "--eval-steps",
        "0",
        "--save-steps",
        "0",
        "--num-beams",
        "1",
        *TINY_MODEL_FLAGS,
    ]
    no_dropout = ["--dropout", "0", "--attention-dropout", "0", "--activation-dropout", "0"]
    runs = {name: tmp_path / name for name in ("plain", "rdrop", "dropout", "rdrop-dropout")}
    assert main(["train", *common, *no_dropout, "--output-dir", str(runs["plain"])]) == 0
    assert main(["train", *common, *no_dropout, "--rdrop-alpha", "5", "--output-dir", str(runs["rdrop"])]) == 0
    # without dropout the two passes agree, the KL term is 0, and the cross-entropy of the doubled batch normalised
    # by its doubled token count is the plain loss: the same updates, up to float rounding
    plain, rdrop = losses(runs["plain"]), losses(runs["rdrop"])
    assert plain.keys() == rdrop.keys() == {1, 2, 3, 4}
    assert [rdrop[s] for s in plain] == pytest.approx([plain[s] for s in plain], abs=2e-4)
    wa, wb = load_file(runs["plain"] / "model.safetensors"), load_file(runs["rdrop"] / "model.safetensors")
    assert all(torch.allclose(wa[k], wb[k], atol=1e-5) for k in wa)
    assert "R-Drop" not in (runs["plain"] / "README.md").read_text()
    # with dropout the two passes differ, and R-Drop trains differently from the same run without it
    assert main(["train", *common, "--dropout", "0.3", "--output-dir", str(runs["dropout"])]) == 0
    assert (
        main(["train", *common, "--dropout", "0.3", "--rdrop-alpha", "5", "--output-dir", str(runs["rdrop-dropout"])])
        == 0
    )
    wc = load_file(runs["rdrop-dropout"] / "model.safetensors")
    wd = load_file(runs["dropout"] / "model.safetensors")
    assert not all(torch.allclose(wa[k], wc[k], atol=1e-3) for k in wa)
    assert not all(torch.allclose(wd[k], wc[k], atol=1e-3) for k in wd)
    assert "R-Drop" in (runs["rdrop-dropout"] / "README.md").read_text()


def test_word_dropout_changes_what_the_model_sees_in_training_only(tmp_path, data_files):
    common = [
        *data_flags(data_files),
        "--max-steps",
        "3",
        "--eval-steps",
        "0",
        "--save-steps",
        "0",
        "--num-beams",
        "1",
        "--dropout",
        "0",
        "--attention-dropout",
        "0",
        "--activation-dropout",
        "0",
        *TINY_MODEL_FLAGS,
    ]
    runs = {name: tmp_path / name for name in ("plain", "again", "word-dropout")}
    for name, extra in (("plain", []), ("again", []), ("word-dropout", ["--word-dropout", "0.5"])):
        assert main(["train", *common, *extra, "--output-dir", str(runs[name])]) == 0
    plain, again, dropped = (losses(runs[name]) for name in runs)
    # with no other dropout the run is deterministic, so the first update's loss (before any weight changed) can
    # only differ because half the input tokens became <unk>
    assert plain == again
    assert dropped[1] != pytest.approx(plain[1], abs=1e-3)
    # the final scores see whole sentences: the saved model re-scored by `evaluate` matches the run's own figures
    results = json.loads((runs["word-dropout"] / "eval_results.json").read_text())
    out = tmp_path / "rescored.json"
    assert (
        main(
            [
                "evaluate",
                "--model",
                str(runs["word-dropout"]),
                "--validation-file",
                str(data_files["validation"]),
                "--split",
                "validation",
                "--num-beams",
                "1",
                "--output",
                str(out),
            ]
        )
        == 0
    )
    rescored = json.loads(out.read_text())
    assert rescored["cross_entropy"] == pytest.approx(results["validation"]["cross_entropy"], abs=1e-4)
    assert "word dropout 0.5" in (runs["word-dropout"] / "README.md").read_text()
    assert "word dropout" not in (runs["plain"] / "README.md").read_text()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--max-steps", "0"], "--max-steps: expected a positive integer"),
        (["--d-model", "-8"], "--d-model: expected a positive integer"),
        (["--dropout", "1.5"], "--dropout: expected a value in [0, 1)"),
        (["--rdrop-alpha", "-1"], "--rdrop-alpha: expected a finite number >= 0"),
        (["--word-dropout", "1"], "--word-dropout: expected a value in [0, 1)"),
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["--dataset-name", "x", "--train-file", "y.jsonl"], "--dataset-name and --train-file are mutually exclusive"),
        (["--tokenizer-name", "t", "--vocab-size", "10"], "cannot be combined with --tokenizer-name"),
        (["--d-model", "30", "--num-heads", "4"], "--d-model 30 must be divisible by --num-heads 4"),
        (["--source-lang", "en", "--target-lang", "en"], "are both 'en'"),
        (["--max-steps", "5", "--cooldown-steps", "6"], "--cooldown-steps 6 is longer than the run"),
        (
            ["--preset", "tiny", "--max-steps", "5"],
            f"--cooldown-steps {PRESETS['tiny'].cooldown_steps} (set by --preset tiny) is longer",
        ),
        (["--average-checkpoints", "9"], "--average-checkpoints 9 needs at least as many kept checkpoints"),
        (["--tune-averaging"], "--tune-averaging compares the average with the last update"),
        (
            ["--train-file", "t.jsonl", "--average-checkpoints", "2", "--tune-averaging"],
            "--tune-averaging picks on the validation split: give --validation-file",
        ),
        (
            ["--train-file", "t.jsonl", "--streaming", "--max-steps", "9", "--save-strategy", "epoch"],
            "--save-strategy epoch needs epochs",
        ),
        (["--save-strategy", "month"], "--save-strategy: invalid choice"),
        (["--tune-length-penalty", "0.6", "--num-beams", "1"], "--tune-length-penalty needs beam search"),
        (["--train-file", "t.jsonl", "--tune-length-penalty", "0.6"], "give --validation-file"),
    ],
)
def test_bad_command_lines_are_refused_before_training(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as stop:
        main(["train", "--output-dir", str(tmp_path / "run"), *flags])
    assert stop.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_output_folder_of_another_run_is_refused(tmp_path, data_files, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text("{}")
    code = train_cli(data_files, out, "--max-steps 1", *TINY_MODEL_FLAGS)
    assert code == 2
    assert "already holds a run" in capsys.readouterr().err
    assert (out / "config.json").read_text() == "{}"


def test_a_folder_of_the_users_files_is_refused_and_an_earlier_run_outlives_bad_data(tmp_path, data_files, capsys):
    out = tmp_path / "notes"
    out.mkdir()
    (out / "README.md").write_text("# my notes")
    assert train_cli(data_files, out, "--max-steps 1", *TINY_MODEL_FLAGS) == 2
    assert f"--output-dir {out} holds files (README.md) and no run" in capsys.readouterr().err
    assert os.listdir(out) == ["README.md"] and (out / "README.md").read_text() == "# my notes"
    (out / "README.md").unlink()
    (out / "data").mkdir()  # a folder of the user's own: its data, beside which the run writes
    kept = {split: out / "data" / path.name for split, path in data_files.items()}
    for split, path in data_files.items():
        kept[split].write_bytes(path.read_bytes())
    assert train_cli(kept, out, "--max-steps 1 --eval-steps 0", *TINY_MODEL_FLAGS) == 0
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")  # an earlier run's
    bad = {**data_files, "train": tmp_path / "bad.jsonl"}
    bad["train"].write_text('{"translation": {"en": "one", "de": "eins"}}\n{not json\n')
    assert train_cli(bad, run, "--max-steps 1 --overwrite-output-dir", *TINY_MODEL_FLAGS) == 2
    assert "bad.jsonl: line 2 is not valid JSON" in capsys.readouterr().err
    assert os.listdir(run) == ["config.json"]  # removed only once the new run's data is read
    (run / "checkpoints" / "checkpoint-1").mkdir(parents=True)
    (run / "tokenizer").mkdir()
    (run / "tokenizer" / "tokenizer.json").write_text("the earlier run's")
    # refused once the data is read, a tokenizer trained and the run sized (longer than a cool-down of 100,000
    # updates, which --num-epochs cannot size before): the earlier run is put back, whole
    flags = "--num-epochs 1 --cooldown-steps 100000 --overwrite-output-dir"
    assert train_cli(data_files, run, flags, *TINY_MODEL_FLAGS) == 2
    assert "--cooldown-steps 100000 is longer than the run" in capsys.readouterr().err
    assert sorted(os.listdir(run)) == ["checkpoints", "config.json", "tokenizer"]
    assert (run / "tokenizer" / "tokenizer.json").read_text() == "the earlier run's"
    assert (run / "checkpoints" / "checkpoint-1").is_dir() and (run / "config.json").read_text() == "{}"
    stale = tmp_path / "stale" / ".earlier-run"  # set aside by a start killed before it was set up: not this run's
    (stale / "checkpoints" / "checkpoint-3").mkdir(parents=True)
    assert train_cli(data_files, stale.parent, "--max-steps 1 --eval-steps 0", *TINY_MODEL_FLAGS) == 0
    assert (stale / "checkpoints" / "checkpoint-3").is_dir()


@pytest.mark.parametrize(
    "files, named",
    [
        ({"config.json": '{"model_type": "bert"}'}, "config.json (not a vanilla_transformer model's)"),
        ({"checkpoints/my_model.pt": "weights", "config.json": "{}"}, "checkpoints/my_model.pt"),
        ({"tokenizer/vocab.txt": "words", "model.safetensors": "x"}, "tokenizer/ (no tokenizer.json in it)"),
    ],
    ids=["another model's config", "the user's checkpoints", "the user's tokenizer"],
)
def test_files_named_as_a_runs_that_no_run_wrote_are_never_overwritten(tmp_path, data_files, capsys, files, named):
    out = tmp_path / "mine"
    for name, text in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    assert train_cli(data_files, out, "--max-steps 1 --overwrite-output-dir", *TINY_MODEL_FLAGS) == 2
    assert f"--output-dir {out} holds {named}, which no run of this package writes" in capsys.readouterr().err
    assert all((out / name).read_text() == text for name, text in files.items())


def test_an_output_folder_holding_an_input_is_refused_before_anything_is_removed(tmp_path, data_files, capsys):
    import shutil

    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text("{}")
    inside = {split: out / f"{split}.jsonl" for split in data_files}
    for split, path in data_files.items():
        shutil.copy(path, inside[split])
    code = train_cli(inside, out, "--max-steps 1 --overwrite-output-dir", *TINY_MODEL_FLAGS)
    assert code == 2
    assert f"--output-dir {out} holds --train-file {inside['train']}" in capsys.readouterr().err
    assert (out / "config.json").read_text() == "{}" and all(path.is_file() for path in inside.values())
    (out / "data").mkdir()  # a folder of the user's own inside it: not among the run's files
    kept = {split: out / "data" / path.name for split, path in inside.items()}
    for split, path in inside.items():
        path.rename(kept[split])
    assert train_cli(kept, out, "--max-steps 1 --eval-steps 0 --overwrite-output-dir", *TINY_MODEL_FLAGS) == 0
    assert all(path.is_file() for path in kept.values())


def test_a_resume_from_another_folder_whose_name_starts_alike_is_refused(tmp_path, data_files, capsys):
    out, other = tmp_path / "run", tmp_path / "run-b" / "checkpoints" / "checkpoint-4"
    out.mkdir()
    (out / "config.json").write_text("{}")
    other.mkdir(parents=True)
    code = train_cli(data_files, out, f"--max-steps 1 --resume-from {other}", *TINY_MODEL_FLAGS)
    assert code == 2 and "already holds a run" in capsys.readouterr().err
    assert (out / "config.json").read_text() == "{}"


def test_resume_from_something_that_is_not_a_checkpoint(tmp_path, data_files, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "trainer_state.json").write_text("{}")  # a checkpoint's file, not its folder
    for target, message in (
        (tmp_path / "empty", "not a checkpoint"),
        (tmp_path / "missing", "no such folder"),
        (tmp_path / "trainer_state.json", "a file; expected a checkpoint folder (checkpoints/checkpoint-N) or a run"),
    ):
        code = main(
            [
                "train",
                *data_flags(data_files),
                "--output-dir",
                str(tmp_path / "run"),
                "--max-steps",
                "1",
                "--resume-from",
                str(target),
                *TINY_MODEL_FLAGS,
            ]
        )
        assert code == 2
        assert f"--resume-from {target}: {message}" in capsys.readouterr().err
        assert not (tmp_path / "run").exists()  # the folder the run made is gone with it


def test_missing_data_file_is_named(tmp_path, capsys):
    code = main(
        [
            "train",
            "--train-file",
            str(tmp_path / "absent.jsonl"),
            "--output-dir",
            str(tmp_path / "run"),
            *TINY_MODEL_FLAGS,
        ]
    )
    assert code == 2
    assert "absent.jsonl: no such file" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_length_filter_that_leaves_nothing_is_named(tmp_path, data_files, capsys):
    flags = [f for f in TINY_MODEL_FLAGS]
    flags[flags.index("--max-source-length") + 1] = "1"
    code = train_cli(data_files, tmp_path / "run", *flags)
    assert code == 2
    assert "no training pair is left after length filtering (--max-source-length 1" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # nor the tokenizer trained before the failure


def test_a_failed_run_leaves_a_folder_it_did_not_make_as_it_was(tmp_path, data_files, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    flags = [f for f in TINY_MODEL_FLAGS]
    flags[flags.index("--max-source-length") + 1] = "1"
    assert train_cli(data_files, out, *flags) == 2
    assert (out / "notes.txt").read_text() == "mine"


def test_a_non_finite_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, data_files, capsys, monkeypatch):
    from vanilla_transformer.training.optim import criterion

    calls = {"n": 0}
    real = criterion.label_smoothed_nll_loss

    def criterion_that_overflows_at_step_5(logits, labels, epsilon, *args, **kwargs):
        calls["n"] += 1
        loss_sum, nll_sum, tokens = real(logits, labels, epsilon, *args, **kwargs)
        return (loss_sum * float("inf") if calls["n"] == 5 else loss_sum), nll_sum, tokens

    monkeypatch.setattr(criterion, "label_smoothed_nll_loss", criterion_that_overflows_at_step_5)
    out = tmp_path / "run"
    command = ["train", *data_flags(data_files), "--output-dir", str(out), "--max-steps", "8", "--save-steps", "2"]
    command += ["--eval-steps", "0", *TINY_MODEL_FLAGS]
    assert main(command) == 1
    err = capsys.readouterr().err
    assert "the loss became inf at step 5" in err and "checkpoint-4" in err
    assert [os.path.basename(p) for p in list_checkpoints(out)] == ["checkpoint-2", "checkpoint-4"]
    assert not (out / "model.safetensors").exists()  # no final model is written from a diverged run
    resumed = main([*command, "--resume-from", str(out)])
    assert resumed == 0 and (out / "model.safetensors").is_file()  # the overflow was a one-off: resuming finishes


def last_number_printed_on_and_off(probe: str) -> dict[str, float]:
    """Run a process-wide setting's probe in two fresh processes, with the setting ("on") and without it ("off")."""
    printed = {}
    for mode in ("on", "off"):
        done = subprocess.run([sys.executable, "-c", probe, mode], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        printed[mode] = float(done.stdout.split()[-1])
    return printed


def test_freed_training_tensors_stay_mapped_for_the_next_step():
    """After the training command's allocator setting, a freed 256 MiB tensor stays in the process (the next step
    reuses its pages) instead of being unmapped and faulted in again; without it, glibc returns the block at once.
    Checked in fresh processes, since the setting is process-wide."""
    probe = textwrap.dedent("""
        import sys, torch
        from vanilla_transformer.commands.process_settings import keep_freed_memory_mapped
        if sys.argv[1] == "on":
            assert keep_freed_memory_mapped()
        def resident_mib():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4096 / 2**20
        before = resident_mib()
        x = torch.ones(64 * 2**20)  # 256 MiB, every page touched
        del x
        print(resident_mib() - before)
    """)
    kept = last_number_printed_on_and_off(probe)
    assert kept["on"] > 200 and kept["off"] < 50, kept


def test_bpe_dropout_changes_the_segmentation_from_epoch_to_epoch(tmp_path, data_files):
    def tokens_per_epoch(run, *extra):
        assert (
            train_cli(data_files, run, "--max-steps 55 --eval-steps 0 --save-steps 0", *TINY_MODEL_FLAGS, *extra) == 0
        )
        totals = {}
        for record in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()):
            totals[record["epoch"]] = totals.get(record["epoch"], 0) + record["target_tokens"]
        return totals

    plain = tokens_per_epoch(tmp_path / "plain")
    sampled = tokens_per_epoch(tmp_path / "sampled", "--bpe-dropout", "0.3")
    assert len(plain) >= 4 and len(sampled) >= 4  # epochs 0-2 are complete
    assert plain[0] == plain[1] == plain[2]  # every epoch holds the same target tokens...
    # ...unless each draws its own, longer segmentation (two draws can tie by chance; three hardly ever do)
    assert len({sampled[0], sampled[1], sampled[2]}) > 1 and min(sampled[0], sampled[1]) > plain[0]
    assert "BPE-dropout 0.3" in (tmp_path / "sampled" / "README.md").read_text()


def test_a_resumed_bpe_dropout_run_keeps_the_length_and_schedule_of_its_first_draw(tmp_path, data_files):
    run = tmp_path / "run"
    flags = [
        *data_flags(data_files),
        "--output-dir",
        str(run),
        "--num-epochs",
        "3",
        "--save-steps",
        "5",
        "--keep-checkpoints",
        "20",
        "--eval-steps",
        "0",
        "--cooldown-steps",
        "10",
        "--bpe-dropout",
        "0.6",
        *TINY_MODEL_FLAGS,
    ]
    assert main(["train", *flags]) == 0
    first = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    state = json.loads((run / "checkpoints" / "checkpoint-5" / "trainer_state.json").read_text())
    assert state["batches_per_epoch"] * 3 == first[-1]["step"]
    # the resumed run draws new segmentations, but runs to the same last update, its learning rate reaching 0 there
    earlier = ["--resume-from", str(run / "checkpoints" / "checkpoint-5"), "--overwrite-output-dir"]
    assert main(["train", *flags, *earlier]) == 0
    second = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in second] == [r["step"] for r in first]
    assert [r["lr"] for r in second] == [r["lr"] for r in first] and second[-1]["lr"] == 0.0


def test_denormals_are_flushed_to_zero_after_the_training_commands_setting():
    """A product below float32's smallest normal number (1.2e-38) comes out as 0 after the training command's CPU
    setting (denormal operands slow the CPU's arithmetic several times over), and as the denormal itself without it.
    Checked in fresh processes, since the setting is process-wide."""
    probe = textwrap.dedent("""
        import sys, torch
        from vanilla_transformer.commands.process_settings import flush_denormals
        if sys.argv[1] == "on":
            assert flush_denormals()
        print((torch.tensor([1e-30]) * torch.tensor([1e-10])).item())
    """)
    product = last_number_printed_on_and_off(probe)
    assert product["on"] == 0.0 and 0 < product["off"] < 1.2e-38, product


def test_noisy_pairs_are_dropped_counted_and_recorded(tmp_path, data_files, capsys):
    rows = pairs(range(100, 200))
    rows[10]["translation"]["de"] = ""  # an empty target, as real corpora have
    rows[20] = {"translation": {"en": "thirty", "de": "   "}}
    rows[30]["translation"]["en"] = " ".join(["nine hundred ninety-nine"] * 20)  # far beyond --max-source-length 16
    write_jsonl(data_files["train"], rows)
    out = tmp_path / "run"
    flags = ["--max-steps", "2", "--save-steps", "0", "--eval-steps", "0", *TINY_MODEL_FLAGS]
    assert train_cli(data_files, out, *flags) == 0
    err = capsys.readouterr().err
    assert "split 'train': dropped 2 of 100 pairs (0 without 'en' text (--source-lang), 2 without 'de' text" in err
    assert "split 'train': dropped 1 of 98 pairs longer than --max-source-length 16 or --max-target-length 16" in err
    results = json.loads((out / "eval_results.json").read_text())
    assert results["dropped_pairs"] == {"empty_side": {"train": 2}, "too_long": {"train": 1}}


def test_a_second_run_on_the_same_files_reuses_the_bpe_and_the_tokenised_corpus(tmp_path, data_files, capsys):
    flags = [*data_flags(data_files), "--max-steps", "1", "--save-steps", "0", "--eval-steps", "0", *TINY_MODEL_FLAGS]
    assert main(["train", *flags, "--output-dir", str(tmp_path / "first")]) == 0
    first = capsys.readouterr()
    assert "Tokenising" in first.err and "Reusing the BPE" not in first.out
    assert main(["train", *flags, "--output-dir", str(tmp_path / "second")]) == 0
    second = capsys.readouterr()
    assert "Reusing the BPE trained on the same data with the same settings" in second.out
    assert "Tokenising" not in second.err  # every split read from the datasets cache
    for name in ("tokenizer.json", "tokenizer/tokenizer.json"):
        assert (tmp_path / "first" / name).read_bytes() == (tmp_path / "second" / name).read_bytes()
    assert main(["train", *flags, "--vocab-size", "110", "--output-dir", str(tmp_path / "third")]) == 0
    assert "Reusing the BPE" not in capsys.readouterr().out  # other settings: trained anew
    # another seed draws no other sample from a corpus within --bpe-sample-size: the same BPE
    assert main(["train", *flags, "--seed", "7", "--output-dir", str(tmp_path / "fourth")]) == 0
    reused = capsys.readouterr().out
    assert "Reusing the BPE" in reused
    # a kept BPE that cannot be read is trained again, not trusted
    cached = reused.split("Reusing the BPE trained on the same data with the same settings: ")[1].split("\n")[0]
    (tmp_path / cached / "tokenizer.json").write_text("{not json")
    assert main(["train", *flags, "--output-dir", str(tmp_path / "fifth")]) == 0
    assert "Reusing the BPE" not in capsys.readouterr().out
    assert (tmp_path / "fifth" / "tokenizer.json").read_bytes() == (tmp_path / "first" / "tokenizer.json").read_bytes()


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda c: (c / STATE_FILE).unlink(), f"the checkpoint has no {STATE_FILE}"),
        (lambda c: (c / STATE_FILE).write_text('{"step": 2, "ep'), f"{STATE_FILE} cannot be read"),
        (lambda c: (c / STATE_FILE).write_text('{"step": 2}'), f"{STATE_FILE} lacks epoch, batches_in_epoch"),
        (lambda c: (c / "optimizer.bin").write_bytes((c / "optimizer.bin").read_bytes()[:100]),
         "its optimizer, schedule or random states cannot be restored"),
        (lambda c: (c / "random_states_0.pkl").unlink(), "no random_states_0.pkl, the random generators' states"),
        (lambda c: (c / "random_states_0.pkl").write_bytes((c / "random_states_0.pkl").read_bytes()[:100]),
         "random_states_0.pkl, the random generators' states, cannot be read"),
        (lambda c: (c / STATE_FILE).write_text('{"step": "2", "epoch": 0, "batches_in_epoch": 2}'),
         f"{STATE_FILE}: step is '2'; expected a whole number, at least 0"),
        (lambda c: (c / STATE_FILE).write_text('{"step": 2, "epoch": 0, "batches_in_epoch": 2, "engine": "zz"}'),
         f"{STATE_FILE}: engine is 'zz'; expected an object"),
    ],
    ids=["no state", "state cut short", "state without its fields", "optimizer cut short", "no random states",
         "random states cut short", "a step as text", "an engine as text"],
)  # fmt: skip
def test_a_damaged_checkpoint_is_named_when_a_run_resumes_from_it(tmp_path, data_files, capsys, damage, message):
    out = tmp_path / "run"
    assert train_cli(data_files, out, "--max-steps 2 --save-steps 2 --eval-steps 0", *TINY_MODEL_FLAGS) == 0
    checkpoint = out / "checkpoints" / "checkpoint-2"
    damage(checkpoint)
    capsys.readouterr()
    code = train_cli(data_files, out, f"--max-steps 3 --eval-steps 0 --resume-from {out}", *TINY_MODEL_FLAGS)
    error = capsys.readouterr().err
    assert code == 2 and message in error and "Traceback" not in error, error


def test_a_checkpoints_record_of_what_built_it_with_parts_of_other_kinds_is_named(tmp_path, data_files, capsys):
    out = tmp_path / "run"
    assert train_cli(data_files, out, "--max-steps 2 --save-steps 2 --eval-steps 0", *TINY_MODEL_FLAGS) == 0
    path = out / "checkpoints" / "checkpoint-2" / STATE_FILE
    state = json.loads(path.read_text())
    for part, value, expected in (
        ("languages", "en", "'en'; expected [source, target], two language codes"),
        ("model", [4], "[4]; expected an object"),
        ("tokenizer", "bpe", "'bpe'; expected an object"),
    ):  # each refused before anything is loaded or written
        path.write_text(json.dumps({**state, "built_with": {**state["built_with"], part: value}}))
        capsys.readouterr()
        code = train_cli(data_files, out, f"--max-steps 3 --eval-steps 0 --resume-from {out}", *TINY_MODEL_FLAGS)
        error = capsys.readouterr().err
        assert code == 2 and f"{STATE_FILE}: built_with.{part} is {expected}" in error and "Traceback" not in error


def test_the_card_names_the_checkpoints_averaged_where_the_run_saved_fewer(tmp_path, data_files):
    out = tmp_path / "run"
    flags = "--max-steps 4 --save-steps 2 --keep-checkpoints 10 --average-checkpoints 5 --eval-steps 0"
    assert train_cli(data_files, out, flags, *TINY_MODEL_FLAGS) == 0
    assert "the final weights are the average of the last 2 checkpoints;" in (out / "README.md").read_text()
    assert json.loads((out / "eval_results.json").read_text())["checkpoints_averaged"] == 2


def test_a_run_that_saved_no_checkpoint_to_average_keeps_its_last_updates_weights(tmp_path, data_files, capsys):
    """An epoch's checkpoint never came: the run trained to its end, then wrote no model."""
    out = tmp_path / "run"
    flags = "--max-steps 2 --save-strategy epoch --average-checkpoints 3 --eval-steps 0"
    assert train_cli(data_files, out, flags, *TINY_MODEL_FLAGS) == 0
    assert "--average-checkpoints 3: the run saved no checkpoint to average" in capsys.readouterr().out
    assert "the final weights are those of the last update;" in (out / "README.md").read_text()
    assert json.loads((out / "eval_results.json").read_text())["checkpoints_averaged"] == 0
    assert (out / "model.safetensors").is_file()


def test_a_resume_with_no_update_left_is_refused_before_anything_is_written(tmp_path, data_files, capsys):
    out = tmp_path / "run"
    assert train_cli(data_files, out, "--max-steps 2 --save-steps 2 --eval-steps 0", *TINY_MODEL_FLAGS) == 0
    again = tmp_path / "again"
    code = train_cli(data_files, again, f"--max-steps 2 --eval-steps 0 --resume-from {out}", *TINY_MODEL_FLAGS)
    error = capsys.readouterr().err
    assert code == 2 and "the checkpoint is at update 2, and the run ends at update 2" in error, error
    assert not again.exists()
    # in its own folder, a checkpoint at the end finishes the run (as after a failure while it evaluated or saved)
    code = train_cli(data_files, out, f"--max-steps 2 --eval-steps 0 --resume-from {out}", *TINY_MODEL_FLAGS)
    assert code == 0, capsys.readouterr().err
