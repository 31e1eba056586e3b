"""`--resume-from` with a model or tokenizer other than the checkpoint's is refused before loading, in one `error:`
line naming the setting, the checkpoint's value and this run's (not torch's multi-line `size mismatch for ...`);
settings that shape no weight, such as the dropout rates, may change."""

import json
import os
import shutil

import pytest
from vanilla_transformer.training.run.checkpoints import STATE_FILE

from .conftest import TINY_MODEL_FLAGS, pairs, train_cli, write_jsonl

CHECKPOINT = os.path.join("checkpoints", "checkpoint-2")


def write_data(folder, train_numbers):
    folder.mkdir()
    return {
        "train": write_jsonl(folder / "train.jsonl", pairs(train_numbers)),
        "validation": write_jsonl(folder / "validation.jsonl", pairs(range(20, 28))),
        "test": write_jsonl(folder / "test.jsonl", pairs(range(40, 48))),
    }


def train(files, out, *extra):
    # the later of two equal flags wins: `extra` overrides TINY_MODEL_FLAGS
    flags = ["--max-steps", "2", "--save-steps", "2", "--eval-steps", "0", "--num-beams", "1", "--show-samples", "0"]
    return train_cli(files, out, *TINY_MODEL_FLAGS, *flags, *extra)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny run with a step-2 checkpoint: d_model 32, 1 encoder layer, a 120-token tokenizer. Refused resumes
    write nothing into it."""
    folder = tmp_path_factory.mktemp("resume-mismatch")
    files = write_data(folder / "data", range(100, 400))
    out = folder / "run"
    assert train(files, out) == 0
    return files, out


def copy_without_record(checkpoint, copy):
    """`checkpoint` copied to `copy` as written before checkpoints recorded what their weights were built with."""
    shutil.copytree(checkpoint, copy)
    state = json.loads((copy / STATE_FILE).read_text())
    del state["built_with"]
    (copy / STATE_FILE).write_text(json.dumps(state))


def the_error(capsys) -> str:
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    assert "size mismatch" not in err and "Traceback" not in err
    return errors[0]


def test_a_checkpoint_records_the_model_and_tokenizer_it_was_trained_with(trained):
    _, out = trained
    record = json.loads((out / CHECKPOINT / STATE_FILE).read_text())["built_with"]
    assert {k: record["model"][k] for k in ("d_model", "encoder_layers", "vocab_size")} == {
        "d_model": 32,
        "encoder_layers": 1,
        "vocab_size": 120,
    }
    assert record["tokenizer"]["size"] == 120 and record["tokenizer"]["vocab_size"] == 120
    assert len(record["tokenizer"]["vocabulary_sha256"]) == 64
    assert record["languages"] == ["en", "de"]


@pytest.mark.parametrize(
    "flags, was, asks",
    [
        (["--d-model", "64"], "--d-model 32", "--d-model 64"),
        (["--encoder-layers", "2"], "--encoder-layers 1", "--encoder-layers 2"),
        (["--num-heads", "2"], "--num-heads 4", "--num-heads 2"),  # no weight changes shape: only the record tells
        (["--no-share-embeddings"], "--share-embeddings", "--no-share-embeddings"),
        (["--vocab-size", "100"], "--vocab-size 120", "--vocab-size 100"),  # the run's tokenizer is reused as it is
        (["--no-residual"], "--residual", "--no-residual"),  # a study switch: no weight changes shape
        (["--d-k", "4"], "no --d-k", "--d-k 4"),
    ],
)
def test_a_resume_with_another_model_setting_names_it(trained, capsys, flags, was, asks):
    files, out = trained
    checkpoint = out / CHECKPOINT
    assert train(files, out, "--max-steps", "4", "--resume-from", str(checkpoint), *flags) == 2
    assert the_error(capsys) == (
        f"error: --resume-from {checkpoint}: the checkpoint was trained with {was}, this run asks for {asks}; give "
        "the checkpoint's value or start a new run"
    )


def test_a_resume_in_the_other_direction_names_the_languages(trained, tmp_path, capsys):
    files, out = trained
    checkpoint = out / CHECKPOINT
    flags = ["--max-steps", "4", "--resume-from", str(checkpoint), "--source-lang", "de", "--target-lang", "en"]
    assert train(files, tmp_path / "new", *flags) == 2
    assert the_error(capsys) == (
        f"error: --resume-from {checkpoint}: the checkpoint was trained from en to de, this run asks for "
        "--source-lang de --target-lang en; give the checkpoint's value or start a new run"
    )


def test_a_resume_into_a_new_folder_with_another_vocabulary_size_names_it(trained, tmp_path, capsys):
    files, out = trained
    checkpoint = out / CHECKPOINT
    code = train(files, tmp_path / "new", "--max-steps", "4", "--resume-from", str(checkpoint), "--vocab-size", "100")
    assert code == 2
    assert "the checkpoint was trained with --vocab-size 120, this run asks for --vocab-size 100" in the_error(capsys)


def test_a_tokenizer_of_the_same_size_but_another_vocabulary_is_named(trained, tmp_path, capsys):
    _, out = trained
    checkpoint = out / CHECKPOINT
    other = write_data(tmp_path / "other-data", range(500, 800))  # trains another 120-token tokenizer
    assert train(other, tmp_path / "new", "--max-steps", "4", "--resume-from", str(checkpoint)) == 2
    error = the_error(capsys)
    assert "this run's tokenizer (--vocab-size 120) differs from the one the checkpoint was trained with" in error
    assert f"(--tokenizer-name {out / 'tokenizer'})" in error


def test_a_tokenizer_trained_again_to_another_size_with_the_same_flags_is_named(trained, tmp_path, capsys):
    _, out = trained
    checkpoint = out / CHECKPOINT
    few = write_data(tmp_path / "few-words", [1, 2])  # too few words for 120 tokens
    assert train(few, tmp_path / "new", "--max-steps", "4", "--resume-from", str(checkpoint)) == 2
    error = the_error(capsys)
    assert "this run's tokenizer (--vocab-size 120) has " in error
    assert " tokens, the one the checkpoint was trained with 120: the same flags, but it was trained again" in error


def test_a_resume_with_other_dropout_rates_goes_on(trained, tmp_path, capsys):
    files, out = trained
    run = tmp_path / "run"
    shutil.copytree(out / "checkpoints", run / "checkpoints")
    shutil.copytree(out / "tokenizer", run / "tokenizer")
    dropouts = ["--dropout", "0.2", "--attention-dropout", "0.1", "--activation-dropout", "0.1"]
    assert train(files, run, "--max-steps", "4", "--resume-from", str(run / CHECKPOINT), *dropouts) == 0
    assert f"Resumed from {run / CHECKPOINT} at step 2." in capsys.readouterr().out
    assert (run / "checkpoints" / "checkpoint-4").is_dir() and (run / "model.safetensors").is_file()


@pytest.mark.parametrize(
    "flags, weight, reason",
    [
        (
            ["--d-model", "64"],
            "model.decoder.layers.0.cross_attn.in_proj.weight [96, 32], this run's model has [192, 64]",
            "the checkpoint was trained with --d-model 32, this run asks for --d-model 64; give the checkpoint's "
            "value or start a new run",
        ),
        (
            ["--encoder-layers", "2"],
            "no model.encoder.layers.1.ffn.w_1.bias, this run's model has [64]",
            "the checkpoint was trained with --encoder-layers 1, this run asks for --encoder-layers 2",
        ),
    ],
)
def test_a_checkpoint_without_the_record_names_the_first_weight_that_does_not_fit(
    trained, tmp_path, capsys, flags, weight, reason
):
    files, out = trained
    checkpoint = tmp_path / "run" / CHECKPOINT
    copy_without_record(out / CHECKPOINT, checkpoint)
    assert train(files, tmp_path / "run", "--max-steps", "4", "--resume-from", str(checkpoint), *flags) == 2
    error = the_error(capsys)
    assert error.startswith(f"error: --resume-from {checkpoint}: the checkpoint's model.safetensors has {weight}: ")
    assert reason in error


def test_a_checkpoint_without_the_record_names_another_vocabulary_size(trained, tmp_path, capsys):
    files, out = trained
    checkpoint = tmp_path / "old" / CHECKPOINT
    copy_without_record(out / CHECKPOINT, checkpoint)
    code = train(files, tmp_path / "new", "--max-steps", "4", "--resume-from", str(checkpoint), "--vocab-size", "100")
    assert code == 2
    assert the_error(capsys) == (
        f"error: --resume-from {checkpoint}: the checkpoint's model.safetensors has model.shared.weight [120, 32], "
        "this run's model has [100, 32]: the checkpoint has a vocabulary of 120 tokens, this run's tokenizer "
        "(--vocab-size 100) has 100; resume with the checkpoint's tokenizer or start a new run"
    )


def test_a_checkpoint_of_an_earlier_version_names_the_folded_switches_as_booleans_and_still_matches():
    """Before `norm_position="none"` and its like, a checkpoint recorded `layer_norm: false` beside
    `norm_position: "post"`: read as the model it was, it matches a run that asks for it, and no other."""
    from vanilla_transformer.training.run.resume_checks import differing_model_setting

    from tests.conftest import tiny_config

    old = {**tiny_config().to_dict(), "layer_norm": False, "norm_position": "post"}
    assert differing_model_setting(old, tiny_config(norm_position="none"), longest=16) is None
    refused = differing_model_setting(old, tiny_config(), longest=16)
    assert refused.startswith("the checkpoint was trained with --norm-position none, this run asks for --norm-position")
