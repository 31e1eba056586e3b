"""The Multi30k recipe's exact configuration, trained for a few steps on a few hundred sentences."""

import json
import os
import subprocess
import sys

from transformers import AutoModelForSeq2SeqLM

from .conftest import pairs, write_jsonl

RECIPE = os.path.join(os.path.dirname(__file__), "..", "..", "training", "recipes", "multi30k.sh")


def test_multi30k_recipe_runs_its_configuration(tmp_path):
    data = tmp_path / "multi30k"
    data.mkdir()
    rows = [{"translation": {"en": p["translation"]["en"], "fr": p["translation"]["de"]}} for p in pairs(range(300))]
    write_jsonl(data / "train.jsonl", rows[:260])
    write_jsonl(data / "validation.jsonl", rows[260:280])
    write_jsonl(data / "test_2016_flickr.jsonl", rows[280:])
    out = tmp_path / "run"
    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ["PATH"], "HF_HUB_OFFLINE": "1"}
    # the recipe's flags, shortened to a few steps and a small vocabulary for the smoke test
    done = subprocess.run(
        [
            "bash",
            RECIPE,
            str(data),
            "fr",
            str(out),
            "--max-steps",
            "4",
            "--cooldown-steps",
            "2",
            "--save-steps",
            "2",
            "--eval-steps",
            "2",
            "--vocab-size",
            "200",
            "--report-to",
            "none",
            "--eval-batch-size",
            "20",
            "--keep-checkpoints",
            "2",
            "--average-checkpoints",
            "2",
            "--tune-length-penalty",
            "1.0",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "eval_results.json").read_text())
    assert {"validation", "test", "length_penalty_search"} <= results.keys()
    assert "Averaged the last 2 checkpoints." in done.stdout
    config = AutoModelForSeq2SeqLM.from_pretrained(out).config
    # Transformer-Tiny: 4+4 layers, d_model 128, h 4, d_ff 256, P_drop 0.3, and 0.1 on attention weights and ReLU
    assert (
        config.encoder_layers,
        config.decoder_layers,
        config.d_model,
        config.num_heads,
        config.d_ff,
        config.dropout,
    ) == (4, 4, 128, 4, 256, 0.3)
    assert (config.attention_dropout, config.activation_dropout) == (0.1, 0.1)
