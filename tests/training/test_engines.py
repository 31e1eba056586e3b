"""The training command under accelerate's sharding engines, on two CPU processes (gloo), with the repository's
accelerate config files (examples/accelerate/): FSDP2 and FSDP1, each with sharded and with full state dicts
(accelerate selects FSDP on GPU processes only; tests/training/fsdp_on_cpu.py lifts that choice), and DeepSpeed ZeRO-2
and ZeRO-3 (DS_ACCELERATOR=cpu). Under each, with the default shared embeddings and two micro-batches an update, a run
trains, checkpoints, averages its last two checkpoints and writes a folder that loads and translates as the folder
of one process accumulating the same batches does; resumed from its middle checkpoint it ends bit for bit where it
ended, and so does a run with dropout. FSDP as accelerate runs it on CUDA, unchanged, is a `gpu` test.

DeepSpeed is an optional dependency (`pip install "vanilla-transformer[deepspeed]"`): without it its cases are
skipped, saying so, unless VANILLA_TRANSFORMER_DEEPSPEED is `required` (as in CI)."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from vanilla_transformer.cli import main

from .conftest import TINY_MODEL_FLAGS, data_flags, pairs, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "examples" / "accelerate"
FSDP_ON_CPU = str(Path(__file__).with_name("fsdp_on_cpu.py"))
HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None
NEEDS_DEEPSPEED = pytest.mark.skipif(
    not HAS_DEEPSPEED and os.environ.get("VANILLA_TRANSFORMER_DEEPSPEED") != "required",
    reason="DeepSpeed is not installed (pip install 'vanilla-transformer[deepspeed]')",
)
# name: (config file, extra `accelerate launch` flags, what runs in each process, extra `train` flags, environment)
ENGINES = {
    "fsdp2": ("fsdp2.yaml", [], [FSDP_ON_CPU], ["--cpu"], {}),
    "fsdp2-full": ("fsdp2.yaml", ["--fsdp_state_dict_type", "FULL_STATE_DICT"], [FSDP_ON_CPU], ["--cpu"], {}),
    "fsdp1": ("fsdp1.yaml", [], [FSDP_ON_CPU], ["--cpu"], {}),
    "fsdp1-full": ("fsdp1.yaml", ["--fsdp_state_dict_type", "FULL_STATE_DICT"], [FSDP_ON_CPU], ["--cpu"], {}),
    "zero2": ("zero2.yaml", [], ["-m", "vanilla_transformer.cli"], [], {"DS_ACCELERATOR": "cpu"}),
    "zero3": ("zero3.yaml", [], ["-m", "vanilla_transformer.cli"], [], {"DS_ACCELERATOR": "cpu"}),
}
PORTS = {name: 29561 + index for index, name in enumerate(ENGINES)}
RESUME_PORTS = {name: 29601 + index for index, name in enumerate(ENGINES)}
DROPOUT_PORTS = (29621, 29622)  # a run with dropout and its resumption


def flags(files) -> list[str]:
    """Four updates of two micro-batches on each of two processes, all within the first epoch; validation and a
    checkpoint at 2 and 4, the checkpoints averaged at the end."""
    return [
        *data_flags(files),
        *TINY_MODEL_FLAGS,
        "--max-steps", "4", "--save-steps", "2", "--average-checkpoints", "2", "--eval-steps", "2", "--dropout", "0",
    ]  # fmt: skip


def launch(engine: str, arguments: list[str], port: int, **variables: str) -> subprocess.CompletedProcess:
    config, launch_flags, program, train_flags, environment = ENGINES[engine]
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CONFIGS / config),
        "--num_processes", "2", "--main_process_port", str(port), *launch_flags, *program, "train", *arguments,
        *train_flags,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", **environment, **variables}
    return subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT, timeout=600)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    return {
        "train": write_jsonl(folder / "train.jsonl", pairs(range(100, 1000))),
        "validation": write_jsonl(folder / "validation.jsonl", pairs(range(20, 36))),
        "test": write_jsonl(folder / "test.jsonl", pairs(range(40, 56))),
    }


@pytest.fixture(scope="module")
def one_process(files, tmp_path_factory):
    """The reference: one process, four micro-batches an update (the two processes' two each)."""
    out = tmp_path_factory.mktemp("one") / "run"
    assert main(["train", *flags(files), "--cpu", "--gradient-accumulation-steps", "4", "--output-dir", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def engine_runs(files, tmp_path_factory):
    """Each engine's run, trained once for the module's tests (`run(name)` gives its folder)."""
    done = {}

    def run(engine: str) -> Path:
        if engine not in done:
            out = tmp_path_factory.mktemp(engine) / "run"
            arguments = [*flags(files), "--gradient-accumulation-steps", "2", "--output-dir", str(out)]
            # where torch keeps the C++ ops it compiles on the fly (DeepSpeed's among them), empty at the start
            extensions = out.parent / "torch_extensions"
            finished = launch(engine, arguments, PORTS[engine], TORCH_EXTENSIONS_DIR=str(extensions))
            assert finished.returncode == 0, finished.stderr[-3000:]
            assert finished.stdout.count("Training with 2 processes on cpu") == 1
            (out.parent / "launch.txt").write_text(finished.stdout + finished.stderr)
            done[engine] = out
        return done[engine]

    return run


def translations(folder: Path, sources: list[str]) -> list[str]:
    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    return tokenizer.batch_decode(model.generate(**batch, num_beams=2, max_new_tokens=16), skip_special_tokens=True)


@pytest.mark.parametrize(
    "engine", [pytest.param(name, marks=NEEDS_DEEPSPEED if "zero" in name else ()) for name in ENGINES]
)
def test_an_engine_trains_averages_and_writes_the_folder_one_process_writes(engine, engine_runs, one_process):
    out = engine_runs(engine)
    sharded, whole = load_file(out / "model.safetensors"), load_file(one_process / "model.safetensors")
    assert sharded.keys() == whole.keys()  # the shared embedding saved once, as one process saves it
    for name in whole:
        torch.testing.assert_close(sharded[name], whole[name], atol=1e-5, rtol=1e-4)
    records = [[json.loads(line) for line in (run / "metrics.jsonl").open()] for run in (out, one_process)]
    assert [r["target_tokens"] for r in records[0]] == [r["target_tokens"] for r in records[1]]  # the same batches
    for key in ("validation_chrf", "validation_cross_entropy"):  # validation during training, on a whole copy
        scores = [[r[key] for r in run if key in r] for run in records]
        assert len(scores[0]) == 2 and scores[0] == pytest.approx(scores[1], abs=1e-3)
    results = json.loads((out / "eval_results.json").read_text())
    reference = json.loads((one_process / "eval_results.json").read_text())
    assert results["processes"] == 2 and results["engine"].startswith(("FSDP", "DeepSpeed"))
    card = (out / "README.md").read_text()
    assert f"2 data-parallel processes, sharded with {results['engine'].split(' on ')[0]}" in card
    assert results["test"]["chrf"] == reference["test"]["chrf"]  # beam search on every process, gathered in order
    assert results["checkpoints_averaged"] == 2 and (out / "checkpoints" / "checkpoint-2").is_dir()
    for checkpoint in ("checkpoint-2", "checkpoint-4"):  # the whole weights beside the engine's own files
        state = json.loads((out / "checkpoints" / checkpoint / "trainer_state.json").read_text())
        assert state["engine"]["processes"] == 2
        assert load_file(out / "checkpoints" / checkpoint / "model.safetensors").keys() == whole.keys()
    sources = [pair["translation"]["en"] for pair in pairs(range(20, 28))]
    assert translations(out, sources) == translations(one_process, sources)


@NEEDS_DEEPSPEED
@pytest.mark.parametrize("engine", ["zero2", "zero3"])
def test_deepspeed_on_cpu_processes_builds_no_op_its_training_never_calls(engine, engine_runs):
    """DeepSpeed's shared-memory all-reduce serves only its inference (`skip_deepspeeds_inference_op`)."""
    folder = engine_runs(engine).parent
    assert not (folder / "torch_extensions").exists()  # nothing compiled
    assert "built successfully" not in (folder / "launch.txt").read_text()


def resumed_from_the_middle(engine: str, out: Path, arguments: list[str], folder: Path, port: int) -> Path:
    """The run in `out` trained again into `folder` from its middle checkpoint (checkpoint-2), under `engine`."""
    shutil.copytree(out / "checkpoints", folder / "checkpoints")
    shutil.rmtree(folder / "checkpoints" / "checkpoint-4")
    checkpoint = folder / "checkpoints" / "checkpoint-2"
    finished = launch(engine, [*arguments, "--output-dir", str(folder), "--resume-from", str(checkpoint)], port)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "Resumed from" in finished.stdout
    return folder


def assert_ends_alike(out: Path, resumed: Path) -> None:
    for name in ("checkpoints/checkpoint-4/model.safetensors", "model.safetensors"):
        first, again = load_file(out / name), load_file(resumed / name)
        assert all(torch.equal(first[key], again[key]) for key in first), name


@pytest.mark.parametrize(
    "engine",
    [pytest.param(name, marks=NEEDS_DEEPSPEED if "zero" in name else ()) for name in ENGINES],
)
def test_an_engine_resumes_its_middle_checkpoint_bit_for_bit(engine, engine_runs, files, tmp_path):
    """The engine's own state (sharded weights and optimizer, or ZeRO's partitions), the schedule and the batches'
    order come back: the run resumed from its middle checkpoint ends where the uninterrupted one ended."""
    arguments = [*flags(files), "--gradient-accumulation-steps", "2"]
    out = engine_runs(engine)
    resumed = resumed_from_the_middle(engine, out, arguments, tmp_path / "resumed", RESUME_PORTS[engine])
    assert_ends_alike(out, resumed)


def test_a_run_with_dropout_resumes_its_middle_checkpoint_bit_for_bit(files, tmp_path):
    """With dropout, the random generators come back too: the masks after the checkpoint are the uninterrupted run's.
    Each process's generators are saved and loaded with the checkpoint the same way under every engine; one is run."""
    out = tmp_path / "run"
    arguments = [*flags(files), "--gradient-accumulation-steps", "2", "--dropout", "0.1"]
    first_port, resumed_port = DROPOUT_PORTS
    finished = launch("fsdp2", [*arguments, "--output-dir", str(out)], first_port)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert_ends_alike(out, resumed_from_the_middle("fsdp2", out, arguments, tmp_path / "resumed", resumed_port))


@NEEDS_DEEPSPEED
def test_a_checkpoint_resumes_only_under_the_engine_and_process_count_that_wrote_it(engine_runs, files, tmp_path):
    checkpoint = engine_runs("zero2") / "checkpoints" / "checkpoint-2"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29572",
        "-m", "vanilla_transformer.cli", "train", *flags(files), "--cpu", "--output-dir", str(tmp_path / "ddp"),
        "--resume-from", str(checkpoint),
    ]  # fmt: skip
    finished = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
    assert finished.returncode != 0
    assert (
        f"error: --resume-from {checkpoint}: the checkpoint was written by DeepSpeed ZeRO-2 on 2 processes, this run "
        "trains with DDP on 2 processes; resume it under the launch that wrote it" in finished.stderr
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a launch without --cpu on a machine with no GPU")
def test_a_launch_of_two_processes_that_would_train_each_alone_stops(files, tmp_path):
    """Without --cpu and without a GPU, accelerate would train each process as a run of its own."""
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29573",
        "-m", "vanilla_transformer.cli", "train", *flags(files), "--output-dir", str(tmp_path / "run"),
    ]  # fmt: skip
    finished = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
    assert finished.returncode != 0
    assert "error: the launcher started 2 processes, but accelerate trains with 1, each on its own" in finished.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


@NEEDS_DEEPSPEED
@pytest.mark.parametrize(
    "flag, message",
    [
        (["--cpu"], "the launch's accelerate config asks for DeepSpeed, but this run would train without it; leave "
         "out --cpu"),
        (["--mixed-precision", "bf16"], "--mixed-precision bf16 under DeepSpeed: its engine keeps the model's weights"),
    ],
    ids=["cpu", "mixed-precision"],
)  # fmt: skip
def test_deepspeed_stops_where_it_would_train_otherwise_than_asked(flag, message, files, tmp_path):
    """With --cpu accelerate would train without DeepSpeed; with bf16 DeepSpeed's weights, and so the saved folder,
    would be rounded to bf16."""
    finished = launch("zero2", [*flags(files), *flag, "--output-dir", str(tmp_path / "run")], 29574)
    assert finished.returncode != 0
    assert f"error: {message}" in finished.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.gpu
@pytest.mark.parametrize("state_dict_type", ["SHARDED_STATE_DICT", "FULL_STATE_DICT"])
@pytest.mark.parametrize("config", ["fsdp1.yaml", "fsdp2.yaml"])
def test_fsdp_on_cuda_trains_resumes_and_writes_the_folder_one_process_writes(config, state_dict_type, files, tmp_path):
    """accelerate's own FSDP on the GPUs there are (one is enough: a group of one shards nothing, but wraps, gathers,
    saves and loads as a larger one does), against one process on one GPU without it."""
    processes = torch.cuda.device_count()
    arguments = flags(files)  # one micro-batch an update on each process; the plain run accumulates them all
    plain = tmp_path / "plain"
    assert main(["train", *arguments, "--gradient-accumulation-steps", str(processes), "--output-dir", str(plain)]) == 0
    out, resumed = tmp_path / "fsdp", tmp_path / "resumed"
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CONFIGS / config),
        "--num_processes", str(processes), "--fsdp_state_dict_type", state_dict_type, "-m", "vanilla_transformer.cli",
        "train", *arguments,
    ]  # fmt: skip
    for folder, extra in ((out, []), (resumed, ["--resume-from", str(resumed / "checkpoints" / "checkpoint-2")])):
        if extra:
            shutil.copytree(out / "checkpoints", resumed / "checkpoints")
        finished = subprocess.run([*command, "--output-dir", str(folder), *extra], capture_output=True, text=True)
        assert finished.returncode == 0, finished.stderr[-3000:]
    first, again, reference = (load_file(folder / "model.safetensors") for folder in (out, resumed, plain))
    assert all(torch.equal(first[key], again[key]) for key in first)
    for key in reference:
        torch.testing.assert_close(first[key], reference[key], atol=1e-4, rtol=1e-3)
    sources = [pair["translation"]["en"] for pair in pairs(range(20, 28))]
    assert translations(out, sources) == translations(plain, sources)
