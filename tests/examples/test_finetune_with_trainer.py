"""The Seq2SeqTrainer example: a few steps of fine-tuning with evaluation by generation, safetensors checkpoints,
resumption and the best model loaded at the end."""

import importlib.util
import json
import os
from pathlib import Path

from transformers import AutoModelForSeq2SeqLM
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


def test_seq2seq_trainer_fine_tunes_saves_resumes_and_loads_the_best(trained_folder, tmp_path):
    example = load_example()
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
    assert {"eval_bleu", "eval_chrf", "eval_exact_match", "eval_loss"} <= set(result["after"])
    assert result["best_checkpoint"] in {str(out / "checkpoint-2"), str(out / "checkpoint-4")}
    for checkpoint in ("checkpoint-2", "checkpoint-4"):
        files = set(os.listdir(out / checkpoint))
        assert "model.safetensors" in files and set(CODE_FILES) <= files, files
        assert not any(name.endswith(".bin") and name != "training_args.bin" for name in files)
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4 and len([e for e in state["log_history"] if "eval_bleu" in e]) >= 2

    resumed = example.main([*flags, "--resume-from-checkpoint", str(out / "checkpoint-2")])
    assert resumed["after"]["eval_loss"] > 0
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    model = AutoModelForSeq2SeqLM.from_pretrained(out)
    assert type(model).__name__ == "VanillaTransformerForConditionalGeneration"
