"""`vanilla-transformer ablate`: a study's runs are planned from a base run, trained as train commands, resumed where
they stopped, and reported as a table and a figure. The runs here are the embedded task at a unit-test size."""

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from vanilla_transformer.configuration import STUDY_SWITCHES
from vanilla_transformer.training.options.argument_types import ArgumentsError
from vanilla_transformer.training.options.arguments import TrainArguments, resolve
from vanilla_transformer.training.studies.arguments import StudyArguments
from vanilla_transformer.training.studies.results import main_metric, markdown_table, variant_row
from vanilla_transformer.training.studies.runs import (
    RECORD,
    Launch,
    PlannedRun,
    end_run,
    plan_runs,
    read_record,
    unique_runs,
)
from vanilla_transformer.training.studies.study import run_study
from vanilla_transformer.training.studies.variants import BASE, LESSONS, STUDIES, TABLE3

from vanilla_transformer.cli import build_parser, main
from vanilla_transformer.commands.ablate import base_options as ablate_base_options

TINY = dict(  # a base run of a few seconds
    d_model=16, num_heads=2, d_ff=32, encoder_layers=1, decoder_layers=1, max_tokens=512, max_steps=8,
    warmup_steps=4, eval_steps=4, save_steps=0, num_beams=1, layer_gradients=3, preset="study",
)  # fmt: skip
TINY_FLAGS = [
    *("--d-model 16 --num-heads 2 --d-ff 32 --encoder-layers 1 --decoder-layers 1 --max-tokens 512".split()),
    *("--max-steps 8 --warmup-steps 4 --eval-steps 4 --num-beams 1 --layer-gradients 3".split()),
]


def base_options(**overrides) -> dict:
    return resolve(TrainArguments.from_options(**{**TINY, **overrides})).options()


def no_residual():
    return next(variant for variant in LESSONS if variant.key == "no-residual")


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory):
    """Two variants (the base, no residuals), two seeds each, two runs at a time."""
    study_dir = str(tmp_path_factory.mktemp("study"))
    study = StudyArguments(seeds=2, study_dir=study_dir, jobs=2)
    lines = []
    paths = run_study(base_options(), study, {"tiny": (BASE, no_residual())}, write=lines.append)
    return study_dir, paths, lines


def test_a_tiny_study_trains_each_variant_with_each_seed_and_writes_its_table_and_figure(tiny_study):
    study_dir, paths, lines = tiny_study
    assert [os.path.basename(path) for path in paths] == ["results.md", "results.csv", "results.json", "results.png"]
    assert lines[0].startswith("4 runs (2 seeds of each variant)") and len(lines) == 5
    assert all(" finished in " in line for line in lines[1:])
    results = json.loads(open(os.path.join(study_dir, "results.json")).read())
    rows = results["studies"]["tiny"]
    assert [row["variant"] for row in rows] == ["base", "no-residual"]
    for row in rows:
        assert row["runs"] == 2 and not row["stopped"]
        assert row["figures"]["test_exact_match"]["count"] == 2
        assert row["figures"]["parameters"]["min"] == row["figures"]["parameters"]["max"] > 0
        assert row["figures"]["seconds_per_update"]["mean"] > 0
    table = open(os.path.join(study_dir, "results.md")).read()
    assert "| row | variant | validation exact match % | test exact match % |" in table
    assert "| base | base |" in table and "| lesson | no residual |" in table
    assert "the residual connections carry the gradient to the early layers" in table
    assert os.path.getsize(os.path.join(study_dir, "results.png")) > 10_000


def test_each_run_records_its_layer_gradients_for_the_early_updates_and_the_seconds_of_every_update(tiny_study):
    study_dir = tiny_study[0]
    records = [json.loads(line) for line in open(os.path.join(study_dir, "runs/no-residual/seed-42/metrics.jsonl"))]
    names = {f"grad_norm_{stack}_{end}" for stack in ("encoder", "decoder") for end in ("first", "last")}
    assert [r["step"] for r in records if names <= r.keys()] == [1, 2, 3]  # --layer-gradients 3
    assert all(r["update_seconds"] > 0 for r in records) and len(records) == 8
    assert all(r[name] > 0 for r in records[:3] for name in names)


def test_a_run_of_the_study_is_the_train_command_its_record_shows(tiny_study):
    study_dir = tiny_study[0]
    record = read_record(os.path.join(study_dir, "runs/no-residual/seed-43"))
    command = shlex.split(record["command"])
    assert command[:2] == ["vanilla-transformer", "train"] and "--no-residual" in command and "--seed" in command
    parsed = build_parser().parse_args(command[1:])
    assert resolve(TrainArguments.from_namespace(parsed)).options() == record["options"]


def test_the_switches_reach_the_saved_configuration_of_the_run_that_used_them_only(tiny_study):
    study_dir = tiny_study[0]
    base = json.loads(open(os.path.join(study_dir, "runs/base/seed-42/config.json")).read())
    changed = json.loads(open(os.path.join(study_dir, "runs/no-residual/seed-42/config.json")).read())
    assert not set(STUDY_SWITCHES) & set(base)
    assert {name: changed[name] for name in STUDY_SWITCHES if name in changed} == {"residual": False}


def test_a_finished_study_is_tabulated_again_without_training(tiny_study):
    study_dir = tiny_study[0]
    before = {path: os.path.getmtime(path) for path in [f"{study_dir}/runs/base/seed-42/model.safetensors"]}
    lines = []
    study = StudyArguments(seeds=2, study_dir=study_dir, jobs=2, threshold=0.0)
    run_study(base_options(), study, {"tiny": (BASE, no_residual())}, write=lines.append)
    assert all(" before;" in line for line in lines[1:]) and len(lines) == 5
    assert {path: os.path.getmtime(path) for path in before} == before
    rows = json.loads(open(os.path.join(study_dir, "results.json")).read())["studies"]["tiny"]
    assert rows[0]["figures"]["updates_to_threshold"]["mean"] == 4  # the first validation, at update 4, reaches 0


def test_a_run_without_its_weights_still_counts_and_one_without_its_scores_or_a_figure_unwritten_is_named(
    tiny_study, tmp_path
):
    study_dir = str(tmp_path / "study")
    shutil.copytree(tiny_study[0], study_dir, symlinks=True)
    study, variants = StudyArguments(seeds=2, study_dir=study_dir, jobs=2), {"tiny": (BASE, no_residual())}
    os.remove(f"{study_dir}/runs/base/seed-42/model.safetensors")  # removed to save room: its scores still count
    run_study(base_options(), study, variants, write=lambda line: None)
    base = json.loads(open(f"{study_dir}/results.json").read())["studies"]["tiny"][0]["figures"]
    assert base["parameters"]["count"] == 1 and base["test_exact_match"]["count"] == 2
    os.remove(f"{study_dir}/results.png")
    os.mkdir(f"{study_dir}/results.png")
    with pytest.raises(RuntimeError, match=r"results cannot be written \(.*results.png: Is a directory\); the runs"):
        run_study(base_options(), study, variants, write=lambda line: None)
    assert not [name for name in os.listdir(study_dir) if name.startswith(".")]  # nothing half-written left
    os.rmdir(f"{study_dir}/results.png")
    os.remove(f"{study_dir}/runs/no-residual/seed-43/eval_results.json")
    with pytest.raises(ValueError, match=r"no-residual/seed-43/eval_results.json: No such file or directory; the"):
        run_study(base_options(), study, variants, write=lambda line: None)


def test_a_study_of_other_options_in_the_same_folder_is_refused(tiny_study):
    study = StudyArguments(seeds=2, study_dir=tiny_study[0], jobs=2)
    with pytest.raises(ArgumentsError, match=r"runs/base/seed-42 holds a run trained with other options \(d_ff\)"):
        run_study(base_options(d_ff=48), study, {"tiny": (BASE, no_residual())}, write=lambda line: None)


def test_a_run_recorded_by_an_earlier_version_is_still_the_run_the_study_plans(tmp_path):
    """A study started before the folded switches recorded `layer_norm: false` beside `norm_position: "post"`, and no
    `activation` (an option that came since): resumed, its finished run is the one planned, not another."""
    from vanilla_transformer.training.studies.runs import check_finished_run, planned_run

    variant = next(variant for variant in LESSONS if variant.key == "no-layer-norm")
    run = planned_run(variant, {**base_options(), **variant.options(base_options())}, 42, str(tmp_path))
    old = {name: value for name, value in run.options.items() if name != "activation"}
    check_finished_run(run, {"options": {**old, "norm_position": "post", "layer_norm": False}})
    with pytest.raises(ArgumentsError, match=r"holds a run trained with other options \(norm_position\)"):
        check_finished_run(run, {"options": {**old, "norm_position": "post"}})


def test_variants_apply_to_the_base_they_are_given():
    planned = plan_runs(base_options(d_model=24, num_heads=4), {"table3": TABLE3}, 2, "study")
    runs = {variant.key: seeded for variant, seeded in planned["table3"]}
    assert runs["heads-4"] is runs["base"]  # the base's own setting: the same runs
    assert runs["heads-16"] is None  # 24 is not a multiple of 16
    assert runs["heads-8"][0].options["num_heads"] == 8 and runs["d_k-half"][0].options["d_k"] == 3
    assert runs["d_model-double"][1].options["d_model"] == 48 and runs["d_model-double"][1].options["seed"] == 43
    assert (
        runs["dropout-double"][0].options["dropout"] == 0.2 and runs["smoothing-off"][0].options["label_smoothing"] == 0
    )
    assert runs["layers-half"] is None  # one layer cannot be halved
    assert len(unique_runs(planned)) == 2 * (len(TABLE3) - 3)
    assert set(STUDIES) == {"table3", "lessons"}
    high = plan_runs(base_options(dropout=0.6, label_smoothing=0.5), {"table3": TABLE3}, 1, "study")["table3"]
    runs = {variant.key: seeded for variant, seeded in high}
    assert runs["dropout-double"] is None and runs["smoothing-double"] is None  # a rate of 1.2 or 1.0: left out
    assert runs["dropout-off"][0].options["dropout"] == 0.0


def test_a_variant_that_does_not_apply_is_said_and_a_study_of_none_that_do_is_refused(tmp_path):
    """They were left out of the tables without a word, and a study of them alone trained the base and ended 0."""
    lines = []
    study = StudyArguments(study=["table3"], variants=["heads-16", "layers-half"], seeds=1, study_dir=str(tmp_path))
    with pytest.raises(ArgumentsError, match=r"^--variants heads-16 layers-half: none applies to the base run"):
        run_study(base_options(d_model=24, num_heads=4), study, write=lines.append)
    assert lines == [f"{key}: does not apply to the base run (its sizes or rates); left out of the study"
                     for key in ("heads-16", "layers-half")]  # fmt: skip
    assert not os.listdir(tmp_path)  # refused before any run


@pytest.mark.parametrize(
    "flags, instead",
    [(["--output-dir", "somewhere"], "--study-dir"), (["--report-to", "wandb"], "each run's metrics.jsonl"),
     (["--show-samples", "3"], "vanilla-transformer translate on a run's folder")],
)  # fmt: skip
def test_flags_that_a_study_sets_for_its_runs_are_refused(capsys, flags, instead):
    with pytest.raises(SystemExit) as stopped:
        main(["ablate", *flags])
    assert stopped.value.code == 2
    assert f"{flags[0]}: a study sets it for each of its runs; use {instead}" in capsys.readouterr().err


def test_a_flag_given_the_value_a_study_sets_for_its_runs_is_no_change():
    namespace = build_parser().parse_args(["ablate", "--report-to", "none", "--show-samples", "0"])
    options = ablate_base_options(namespace, StudyArguments.from_namespace(namespace))
    assert options["report_to"] == ["none"] and options["show_samples"] == 0
    namespace = build_parser().parse_args(["ablate", "--overwrite-output-dir"])  # what a study never does
    with pytest.raises(ValueError, match="--overwrite-output-dir: a study sets it for each of its runs"):
        ablate_base_options(namespace, StudyArguments.from_namespace(namespace))


def processes_with(text: str) -> list[str]:
    """The command lines of the running processes that contain `text` (read from /proc)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        if text in line:
            found.append(line)
    return found


def test_an_interrupted_study_resumes_without_training_its_finished_runs_again(tmp_path):
    """Three of the lessons and the base with one seed, stopped (SIGTERM) once two runs have finished: the runs under
    way stop too, and the study run again trains the other runs only."""
    command = [sys.executable, "-m", "vanilla_transformer", "ablate", "--study", "lessons", "--seeds", "1"]
    command += ["--variants", "no-residual", "no-scaling", "no-decoder-mask"]
    command += ["--jobs", "2", "--study-dir", str(tmp_path), *TINY_FLAGS]
    variants = 4
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def records():
        return sorted((tmp_path / "runs").glob("*/seed-42/" + RECORD))

    deadline = time.time() + 300
    while len(records()) < 2 and time.time() < deadline and first.poll() is None:
        time.sleep(0.2)
    first.send_signal(signal.SIGTERM)
    output = first.communicate(timeout=60)[0]
    assert first.returncode == 128 + signal.SIGTERM and output.endswith("ablate: terminated\n"), output
    finished = {path: path.stat().st_mtime for path in records()}
    assert 2 <= len(finished) < variants
    assert not processes_with(f"{tmp_path}/runs")  # no train process of the study is left
    second = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr
    progress = [line for line in second.stdout.splitlines() if line.startswith("[")]
    assert sum(" before;" in line for line in progress) == len(finished)
    assert sum(" finished in " in line for line in progress) == variants - len(finished)
    assert {path: path.stat().st_mtime for path in finished} == finished
    assert len(records()) == variants
    table = (tmp_path / "results.md").read_text()
    assert "| lesson | no decoder mask |" in table and "| lesson | no LayerNorm |" not in table


def test_a_run_that_stops_on_purpose_is_a_result_and_a_crash_stops_the_study(tmp_path):
    (tmp_path / "runs" / "x").mkdir(parents=True)
    run = PlannedRun("x", 42, {**TrainArguments().options(), "seed": 42}, str(tmp_path / "runs" / "x"))
    log = tmp_path / "x-seed-42.log"
    log.write_text("Training:  3%|\rerror: the loss became nan at step 7; training stopped. The last good ...\n")
    record = end_run(run, 1, 12.0, str(tmp_path))
    assert record["status"] == "stopped: the loss became nan at step 7; training stopped. The last good ..."
    assert read_record(run.folder) == record  # a result of the study: not trained again on resume
    log.write_text("Traceback (most recent call last):\n  ...\nKeyError: 'x'\n")
    with pytest.raises(RuntimeError, match=r"runs/x failed \(exit status 1\); its output is in .*x-seed-42.log"):
        end_run(run, 1, 12.0, str(tmp_path))
    with pytest.raises(RuntimeError, match=r"exit status 2"):
        end_run(run, 2, 12.0, str(tmp_path))


def test_runs_share_the_cores_and_with_as_many_gpus_as_jobs_each_trains_on_its_own():
    run = PlannedRun("x", 42, {**TrainArguments().options(), "seed": 42}, "study/runs/x/seed-42")
    two = Launch(jobs=2, gpus=2)
    assert two.command(run) == [sys.executable, "-m", "vanilla_transformer", "train", *run.flags()]
    assert [two.environment(slot)["CUDA_VISIBLE_DEVICES"] for slot in (0, 1)] == ["0", "1"]
    assert two.environment(0)["OMP_NUM_THREADS"] == str(max(1, os.cpu_count() // 2))
    unchanged = os.environ.get("CUDA_VISIBLE_DEVICES")
    assert Launch(jobs=2, gpus=1).environment(1).get("CUDA_VISIBLE_DEVICES") == unchanged  # too few to share out
    accelerate = Launch(jobs=2, gpus=2, launcher=("accelerate", "launch", "-m", "vanilla_transformer"))
    assert accelerate.command(run)[:5] == ["accelerate", "launch", "-m", "vanilla_transformer", "train"]
    assert accelerate.environment(1).get("CUDA_VISIBLE_DEVICES") == unchanged  # the launcher places its processes


def test_a_study_of_translation_files_compares_bleu_and_runs_through_a_launcher(data_files, tmp_path):
    """The base is any run train takes: here local files, scored by BLEU, each run started by `accelerate launch`."""
    files = {f"{split}_file": str(path) for split, path in data_files.items() if split != "train"}
    base = resolve(
        TrainArguments.from_options(
            train_file=str(data_files["train"]), **files, **{**TINY, "preset": "small", "vocab_size": 120}
        )
    ).options()
    launcher = f"{sys.executable} -m accelerate.commands.launch --cpu --num_processes 1 -m vanilla_transformer"
    study = StudyArguments(seeds=1, study_dir=str(tmp_path / "study"), launcher=launcher)
    run_study(base, study, {"tiny": (BASE,)}, write=lambda line: None)
    log = (tmp_path / "study" / "logs" / "base-seed-42.log").read_text()
    assert "Training with 1 process on cpu" in log
    table = (tmp_path / "study" / "results.md").read_text()
    assert "| row | variant | validation BLEU | test BLEU | test chrF |" in table
    row = json.loads((tmp_path / "study" / "results.json").read_text())["studies"]["tiny"][0]
    assert row["figures"]["test_bleu"]["count"] == 1 and row["figures"]["validation_bleu"]["count"] == 1


def test_every_planned_run_of_both_studies_is_a_train_command_that_gives_back_its_options():
    planned = plan_runs(base_options(), STUDIES, 1, "study")
    for run in unique_runs(planned):
        parsed = build_parser().parse_args(shlex.split(run.command_line())[1:])
        assert resolve(TrainArguments.from_namespace(parsed)).options() == run.options, run.key


def figures_of(seed, status="finished", first=2.0, last=1.0, reached=25, score=90.0):
    return {
        "key": "v", "seed": seed, "status": status, "command": f"vanilla-transformer train --seed {seed}",
        "metric": "exact_match", "test_exact_match": score if status == "finished" else None,
        "grad_norm_encoder_first": first, "grad_norm_encoder_last": last,
        "grad_norm_decoder_first": first / 2, "grad_norm_decoder_last": last,
        "updates_to_threshold": reached, "validation_curve": [], "loss_curve": [],
    }  # fmt: skip


def test_a_row_gives_each_figures_mean_and_range_and_says_which_runs_stopped_or_never_reached():
    runs = [figures_of(42), figures_of(43, first=4.0, reached=None, score=80.0), figures_of(44, status="stopped: x")]
    row = variant_row("tiny", no_residual(), runs)
    assert row["figures"]["gradient_ratio_encoder"] == {"mean": 8 / 3, "min": 2.0, "max": 4.0, "count": 3}
    assert row["figures"]["gradient_ratio_decoder"]["mean"] == pytest.approx(4 / 3)
    assert row["figures"]["test_exact_match"] == {"mean": 85.0, "min": 80.0, "max": 90.0, "count": 2}
    assert row["never_reached"] == 1 and row["stopped"] == ["seed 44: stopped: x"]
    line = markdown_table([row], "exact_match", 50.0).splitlines()[-1]
    assert line.startswith("| lesson | no residual (1 of 3 stopped) | - | 85.0 (80.0-90.0) |")
    assert "| 25; never in 1 of 3 |" in line and "| 2.67 (2.00-4.00) |" in line


def test_the_compared_score_comes_from_the_data_not_from_the_first_run():
    assert main_metric(base_options()) == "exact_match"
    assert main_metric({**base_options(), "train_file": "train.jsonl"}) == "bleu"
    # a lowercasing tokenizer: lowercased BLEU, as train reports it (cased, its outputs lose every capital)
    assert main_metric({**base_options(), "train_file": "train.jsonl", "lowercase": True}) == "bleu_lowercase"


def test_a_base_a_study_cannot_score_or_launch_is_refused(capsys):
    for flags, message in (
        (["--train-file", "t.jsonl", "--validation-file", "v.jsonl"], "give --validation-file and --test-file"),
        (["--launcher", "accelerate launch -m vanilla_transformer", "--jobs", "2"], "launched runs train one at a"),
    ):
        with pytest.raises(SystemExit) as stopped:
            main(["ablate", *flags])
        assert stopped.value.code == 2 and message in capsys.readouterr().err
