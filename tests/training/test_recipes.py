"""The Multi30k recipe's exact configuration, at both budgets, trained for a few steps on a few hundred sentences."""

import json
import os
import subprocess
import sys

import pytest
from transformers import AutoModelForSeq2SeqLM

from .conftest import pairs, write_jsonl

RECIPE = os.path.join(os.path.dirname(__file__), "..", "..", "training", "recipes", "multi30k.sh")
# the recipe's flags, shortened to a few steps and a small vocabulary for the smoke test
SHORTENED = ["--max-steps", "4", "--eval-steps", "2", "--vocab-size", "200", "--report-to", "none"]
SHORTENED += ["--eval-batch-size", "20", "--keep-checkpoints", "2", "--average-checkpoints", "2"]
SEARCH = ["--tune-length-penalty", "1.0", "1.2"]


def run_recipe(tmp_path, *flags: str, dropouts=(0.1, 0.1)) -> tuple[subprocess.CompletedProcess, dict]:
    data = tmp_path / "multi30k"
    data.mkdir()
    rows = [{"translation": {"en": p["translation"]["en"], "fr": p["translation"]["de"]}} for p in pairs(range(300))]
    write_jsonl(data / "train.jsonl", rows[:260])
    write_jsonl(data / "validation.jsonl", rows[260:280])
    write_jsonl(data / "test_2016_flickr.jsonl", rows[280:])
    out = tmp_path / "run"
    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ["PATH"], "HF_HUB_OFFLINE": "1"}
    command = ["bash", RECIPE, str(data), "fr", str(out), *flags, *SHORTENED]
    command += SEARCH if "reference" not in flags else []
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "eval_results.json").read_text())
    assert {"validation", "test", "length_penalty"} <= results.keys()
    config = AutoModelForSeq2SeqLM.from_pretrained(out).config
    # Transformer-Tiny: 4+4 layers, d_model 128, h 4, d_ff 256, P_drop 0.3; the recipe adds 0.1 on the attention
    # weights and after the ReLU, the reference settings leave them out
    assert (
        config.encoder_layers,
        config.decoder_layers,
        config.d_model,
        config.num_heads,
        config.d_ff,
        config.dropout,
    ) == (4, 4, 128, 4, 256, 0.3)
    assert (config.attention_dropout, config.activation_dropout) == dropouts
    return done, results


def test_multi30k_recipe_runs_its_configuration(tmp_path):
    done, results = run_recipe(tmp_path, "--cooldown-steps", "2", "--save-steps", "2")
    assert set(results["length_penalty_search"]) == {"1.0", "1.2"}
    assert "Averaged the last 2 checkpoints." in done.stdout
    assert "averaging_search" not in results
    assert "up to 2048 tokens per process" in (tmp_path / "run" / "README.md").read_text()  # 4096 an update


@pytest.mark.parametrize("budget", ["published"])
def test_multi30k_recipe_at_the_published_budget(tmp_path, budget):
    """8192 tokens per update over the two processes, no cool-down, epoch checkpoints, and the average of the last
    ones weighed against the last update on validation."""
    done, results = run_recipe(tmp_path, "--budget", budget)
    assert set(results["averaging_search"]) == {"last_update", "average", "checkpoints_averaged", "chosen"}
    assert "last update: validation" in done.stdout and "average: validation" in done.stdout
    checkpoints = sorted((tmp_path / "run" / "checkpoints").iterdir())
    states = [json.loads((c / "trainer_state.json").read_text()) for c in checkpoints]
    assert states and all(s["batches_in_epoch"] == s["batches_per_epoch"] for s in states)
    rates = [json.loads(line)["lr"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rates == sorted(rates) and rates[-1] > 0  # still warming up at the last update: no cool-down to 0
    assert "up to 4096 tokens per process" in (tmp_path / "run" / "README.md").read_text()  # 8192 an update


def test_multi30k_recipe_with_the_reference_runs_settings(tmp_path):
    """The published budget with the reference run's settings: no attention or activation dropout, the average of
    the last checkpoints always kept, length penalty 1 without a search."""
    done, results = run_recipe(tmp_path, "--budget", "reference", dropouts=(0.0, 0.0))
    assert "Averaged the last 2 checkpoints." in done.stdout
    assert "averaging_search" not in results and "length_penalty_search" not in results
    assert results["length_penalty"] == 1.0
    assert "up to 4096 tokens per process" in (tmp_path / "run" / "README.md").read_text()


def test_the_reference_runs_settings_one_at_a_time(tmp_path):
    """--follow takes one difference of the reference run at a time into the published budget: here its dropout and
    its averaging, while the length penalty is still searched on validation."""
    done, results = run_recipe(
        tmp_path, "--budget", "published", "--follow", "dropout", "--follow", "averaging", dropouts=(0.0, 0.0)
    )
    assert "Averaged the last 2 checkpoints." in done.stdout
    assert "averaging_search" not in results and set(results["length_penalty_search"]) == {"1.0", "1.2"}


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--budget", "published", "--follow", "warmup"], "--follow warmup: expected dropout, bpe, averaging or"),
        (["--follow", "bpe"], "--follow needs --budget published"),
    ],
)
def test_a_setting_the_recipe_cannot_follow_is_refused(tmp_path, flags, message):
    done = subprocess.run(["bash", RECIPE, str(tmp_path), "de", str(tmp_path / "run"), *flags], text=True,
                          capture_output=True)  # fmt: skip
    assert done.returncode == 2 and message in done.stderr


def test_an_unknown_budget_is_refused(tmp_path):
    done = subprocess.run(
        ["bash", RECIPE, str(tmp_path), "de", str(tmp_path / "run"), "--budget", "huge"], text=True, capture_output=True
    )
    assert done.returncode == 2 and "--budget huge: expected recipe, published or reference" in done.stderr


def test_an_unknown_device_is_refused(tmp_path):
    env = {**os.environ, "DEVICE": "tpu"}
    command = ["bash", RECIPE, str(tmp_path), "de", str(tmp_path / "run")]
    done = subprocess.run(command, text=True, capture_output=True, env=env)
    assert done.returncode == 2 and "DEVICE=tpu: expected cpu or cuda" in done.stderr


SETS = os.path.join(os.path.dirname(RECIPE), "multi30k_gpu_sets.sh")


def test_a_gpu_set_starts_its_six_runs_resumes_what_was_cut_and_scores_the_held_out_sets(tmp_path):
    """The lent GPU's runs, as a dry run: six recipe runs at once, a finished run skipped, a run with checkpoints
    resumed, and each model scored on the held-out test sets DATA_DIR holds."""
    data, out = tmp_path / "multi30k", tmp_path / "out"
    data.mkdir()
    (data / "test_2017_mscoco.jsonl").write_text("")
    (out / "en_de_gpu_dropout_seed1" / "checkpoints" / "checkpoint-100").mkdir(parents=True)
    (out / "en_de_gpu_bpe_seed2").mkdir(parents=True)
    (out / "en_de_gpu_bpe_seed2" / "eval_results.json").write_text('{"length_penalty": 1.2}')
    (out / "en_de_gpu_bpe_seed2.log").write_text("trained\n")
    record = tmp_path / "record.tar.gz"
    environment = {**os.environ, "DRY_RUN": "1", "PYTHON": sys.executable, "RECORD": str(record)}
    done = subprocess.run(["bash", SETS, "2", str(data), str(out)], text=True, capture_output=True, env=environment)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    runs = [line for line in lines if "multi30k.sh" in line]
    assert len(runs) == 5  # six, less the finished one
    assert f"{out}/en_de_gpu_dropout_seed42 --budget published --follow dropout --seed 42 --eval-steps 2000" in runs[0]
    assert runs[1].endswith(f"--seed 1 --eval-steps 2000 --resume-from {out}/en_de_gpu_dropout_seed1")
    scored = [line for line in lines if " evaluate " in line]
    assert len(scored) == 6 and all("test_2017_mscoco.jsonl" in line for line in scored)
    assert "--length-penalty 1.2" in scored[-1] and "--num-beams 5" in scored[-1]
    # the record of the runs in one archive: what each run has written of its log, results, card and scores
    bundled = f"tar -czf {record} -C {out} en_de_gpu_bpe_seed2.log en_de_gpu_bpe_seed2/eval_results.json"
    assert lines[-1] == bundled
    refused = subprocess.run(["bash", SETS, "4", str(data), str(out)], text=True, capture_output=True)
    assert refused.returncode == 2 and "SET 4: expected 1, 2 or 3" in refused.stderr
