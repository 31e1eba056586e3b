"""The Seq2SeqTrainer example: a few steps of fine-tuning with evaluation by generation, safetensors checkpoints,
resumption and the best model loaded at the end."""

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest
from transformers import AutoModelForSeq2SeqLM, Seq2SeqTrainer
from vanilla_transformer.modeling.hub_vanilla_transformer import CODE_FILES

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "finetune_with_trainer.py"


def load_example():
    spec = importlib.util.spec_from_file_location("finetune_with_trainer", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_british_numbers_are_a_new_phrasing_of_the_same_task():
    example = load_example()
    assert example.british(123456) == "one hundred and twenty-three thousand four hundred and fifty-six"
    assert example.british(100100) == "one hundred thousand one hundred"
    data = example.british_numbers(20, 5, seed=0)
    assert len(data["train"]) == 20 and len(data["validation"]) == 5
    assert all(" and " in row["translation"]["en"] for row in data["train"])
    assert not {r["translation"]["en"] for r in data["train"]} & {r["translation"]["en"] for r in data["validation"]}


def record_training_steps(monkeypatch) -> list[int]:
    """The global step at which each optimisation step starts, in every Seq2SeqTrainer run from here on (no gradient
    accumulation: one training_step per update)."""
    steps = []
    original = Seq2SeqTrainer.training_step

    def training_step(self, *args, **kwargs):
        steps.append(self.state.global_step)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Seq2SeqTrainer, "training_step", training_step)
    return steps


def test_seq2seq_trainer_fine_tunes_saves_resumes_and_loads_the_best(trained_folder, tmp_path, monkeypatch):
    example = load_example()
    steps = record_training_steps(monkeypatch)
    out = tmp_path / "finetuned"
    flags = [
        "--model",
        str(trained_folder),
        "--output-dir",
        str(out),
        "--train-size",
        "64",
        "--eval-size",
        "16",
        "--max-steps",
        "4",
        "--eval-steps",
        "2",
        "--batch-size",
        "16",
        "--learning-rate",
        "1e-3",
    ]
    result = example.main(flags)
    assert steps == [0, 1, 2, 3]
    assert {"eval_bleu", "eval_chrf", "eval_exact_match", "eval_loss"} <= set(result["after"])
    assert result["best_checkpoint"] in {str(out / "checkpoint-2"), str(out / "checkpoint-4")}
    for checkpoint in ("checkpoint-2", "checkpoint-4"):
        files = set(os.listdir(out / checkpoint))
        assert "model.safetensors" in files and set(CODE_FILES) <= files, files
        assert not any(name.endswith(".bin") and name != "training_args.bin" for name in files)
    uninterrupted = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert uninterrupted["global_step"] == 4 and len([e for e in uninterrupted["log_history"] if "eval_bleu" in e]) >= 2

    # The run is cut short after its step-2 checkpoint: what it wrote later is gone. Resuming from that checkpoint
    # must load its weights and state and train only steps 3 and 4, not start over.
    shutil.rmtree(out / "checkpoint-4")
    at_step_2 = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    assert at_step_2["global_step"] == 2
    written = {path.name: path.stat().st_mtime_ns for path in (out / "checkpoint-2").iterdir()}
    steps.clear()
    resumed = example.main([*flags, "--resume-from-checkpoint", str(out / "checkpoint-2")])
    assert steps == [2, 3]  # only the steps after the checkpoint were trained
    assert resumed["after"]["eval_loss"] > 0
    # the step-2 checkpoint was read, not written again: the resumed run began after it
    assert {path.name: path.stat().st_mtime_ns for path in (out / "checkpoint-2").iterdir()} == written
    # the step-4 checkpoint is the resumed run's: its history is the checkpoint's, then steps 3 and 4
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    history = state["log_history"]
    assert history[: len(at_step_2["log_history"])] == at_step_2["log_history"]
    later = history[len(at_step_2["log_history"]) :]
    assert {entry["step"] for entry in later} == {3, 4} and any("eval_bleu" in entry for entry in later)
    # and it continued the interrupted run exactly as that run went on: the same data, updates and losses
    assert [e["loss"] for e in later if "loss" in e] == pytest.approx(
        [e["loss"] for e in uninterrupted["log_history"] if "loss" in e and e["step"] > 2], rel=1e-4
    )
    model = AutoModelForSeq2SeqLM.from_pretrained(out)
    assert type(model).__name__ == "VanillaTransformerForConditionalGeneration"
