"""`vanilla-transformer evaluate` on a trained model folder: its scores, and the reference cross-entropy checked
against the model's own loss."""

import json
import math

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from vanilla_transformer.training.cli import main

from .conftest import TINY_MODEL_FLAGS, data_flags


def read_pairs(path):
    return [json.loads(line)["translation"] for line in path.read_text(encoding="utf-8").splitlines()]


def test_evaluate_needs_only_the_scored_split_and_its_cross_entropy_is_the_models_own_loss(trained_folder, tmp_path):
    test_file = trained_folder.parent / "test.jsonl"
    out = tmp_path / "scores.json"
    assert main(["evaluate", "--model", str(trained_folder), "--test-file", str(test_file), "--split", "test",
                 "--num-beams", "1", "--output", str(out)]) == 0  # no --train-file
    scores = json.loads(out.read_text())
    assert {"bleu", "chrf", "exact_match", "cross_entropy", "perplexity", "cross_entropy_per_word"} <= scores.keys()

    # the same quantity through another path: the model's own loss (mean token cross-entropy) on one padded batch
    model = AutoModelForSeq2SeqLM.from_pretrained(trained_folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(trained_folder)
    pairs = read_pairs(test_file)
    batch = tokenizer([p["en"] for p in pairs], text_target=[p["de"] for p in pairs], padding=True,
                      return_tensors="pt")
    labels = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
    with torch.no_grad():
        loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels).loss.item()
    assert scores["cross_entropy"] == pytest.approx(loss, abs=1e-3)
    assert scores["perplexity"] == pytest.approx(math.exp(loss), rel=1e-3)
    tokens, words = (labels != -100).sum().item(), sum(len(p["de"].split()) for p in pairs)
    assert scores["cross_entropy_per_word"] == pytest.approx(loss * tokens / words, abs=1e-3)
    assert 0 < scores["cross_entropy"] < math.log(model.config.vocab_size)  # trained: better than uniform

    # the training command's final scores computed it the same way, for the same weights
    results = json.loads((trained_folder / "eval_results.json").read_text())
    assert results["test"]["cross_entropy"] == pytest.approx(scores["cross_entropy"], abs=1e-3)
    assert "perplexity" in (trained_folder / "README.md").read_text()


def test_validation_cross_entropy_is_logged_at_every_evaluation(tmp_path, data_files):
    out = tmp_path / "run"
    assert main(["train", *data_flags(data_files), "--output-dir", str(out), "--max-steps", "4", "--eval-steps", "2",
                 "--save-steps", "0", "--dropout", "0.5", *TINY_MODEL_FLAGS]) == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evaluated = [r for r in records if "validation_cross_entropy" in r]
    assert [r["step"] for r in evaluated] == [2, 4]
    # dropout is off for it: the value at the last update is the final weights' validation cross-entropy
    results = json.loads((out / "eval_results.json").read_text())
    assert evaluated[-1]["validation_cross_entropy"] == pytest.approx(results["validation"]["cross_entropy"],
                                                                      abs=1e-4)


def test_evaluate_names_a_split_the_data_does_not_have(trained_folder, capsys):
    test_file = trained_folder.parent / "test.jsonl"
    assert main(["evaluate", "--model", str(trained_folder), "--test-file", str(test_file),
                 "--split", "validation"]) == 2
    assert "--split validation" in capsys.readouterr().err
