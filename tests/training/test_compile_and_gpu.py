"""`vanilla-transformer train --compile` runs the training step under torch.compile and leaves the same kind of run
folder and checkpoints as an eager run; on a CUDA device the command trains with what a GPU user expects (TF32
matmuls, bf16 autocast, compiled steps)."""

import json

import pytest
import torch
from accelerate.state import AcceleratorState
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM
from vanilla_transformer.training.optim import criterion

from .conftest import TINY_MODEL_FLAGS, train_cli


def train(data_files, out, *flags) -> list[dict]:
    """Run `train` for a few updates and return its metrics records."""
    AcceleratorState._reset_state(True)  # accelerate keeps one device and precision per process
    try:
        code = train_cli(data_files, out, *flags, *TINY_MODEL_FLAGS)
    finally:
        AcceleratorState._reset_state(True)
    assert code == 0
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_compile_runs_the_training_step_compiled_and_keeps_the_checkpoints_names(tmp_path, data_files, monkeypatch):
    # the graph capture and autograd tracing of --compile, without code generation (a minute per shape on a CPU)
    monkeypatch.setattr(criterion, "COMPILE_BACKEND", "aot_eager")
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    out = tmp_path / "run"
    records = train(data_files, out, "--compile", "--cpu", "--max-steps", "4", "--save-steps", "2", "--eval-steps", "0")
    assert [r["step"] for r in records] == [1, 2, 3, 4] and all(r["loss"] > 0 for r in records)
    # the step was compiled, and compiled again only as a dimension turned out to vary (the batch's sentences, then
    # its target length), not for every batch of another shape: four updates of four token counts, three graphs
    assert len({r["target_tokens"] for r in records}) == 4
    assert 1 <= torch._dynamo.utils.counters["stats"]["unique_graphs"] <= 3
    # the model itself is not wrapped: checkpoints and the model folder hold the model's own names
    checkpoint = load_file(out / "checkpoints" / "checkpoint-4" / "model.safetensors")
    assert checkpoint and not [name for name in checkpoint if "_orig_mod" in name]
    assert AutoModelForSeq2SeqLM.from_pretrained(out).config.d_model == 32


@pytest.mark.gpu
def test_on_cuda_train_uses_tf32_bf16_and_compiled_steps(tmp_path, data_files):
    torch._dynamo.reset()
    out = tmp_path / "run"
    flags = ("--compile", "--mixed-precision", "bf16", "--max-steps", "20", "--save-steps", "0", "--eval-steps", "0")
    records = train(data_files, out, *flags)
    assert torch.get_float32_matmul_precision() == "high"  # TF32 matmuls
    assert records[-1]["loss"] < records[0]["loss"]
    assert {w.dtype for w in load_file(out / "model.safetensors").values()} == {torch.float32}


def test_the_fused_loss_trains_as_the_plain_one_and_the_bf16_stream_is_the_models(tmp_path, data_files):
    """--fused-loss computes the same loss a chunk of tokens at a time: the same updates to float rounding.
    --no-residual-in-fp32 with bf16 autocast carries the residual stream in bf16 and says so in the model's
    configuration."""
    common = ("--cpu", "--max-steps", "4", "--save-steps", "0", "--eval-steps", "0", "--num-beams", "1")
    plain = train(data_files, tmp_path / "plain", *common)
    fused = train(data_files, tmp_path / "fused", *common, "--fused-loss")
    assert [r["loss"] for r in fused] == pytest.approx([r["loss"] for r in plain], rel=1e-4)
    assert [r["nll_loss"] for r in fused] == pytest.approx([r["nll_loss"] for r in plain], rel=1e-4)
    plain_weights, fused_weights = (load_file(tmp_path / name / "model.safetensors") for name in ("plain", "fused"))
    assert all(torch.allclose(plain_weights[k], fused_weights[k], atol=1e-5) for k in plain_weights)
    stream = train(data_files, tmp_path / "stream", *common, "--mixed-precision", "bf16", "--no-residual-in-fp32")
    assert stream[0]["loss"] == pytest.approx(plain[0]["loss"], rel=2e-2)
    config = json.loads((tmp_path / "stream" / "config.json").read_text())
    assert config["residual_in_fp32"] is False
    assert {w.dtype for w in load_file(tmp_path / "stream" / "model.safetensors").values()} == {torch.float32}


@pytest.mark.gpu
def test_on_cuda_the_fused_loss_and_the_bf16_stream_train_as_the_plain_step(tmp_path, data_files):
    """The step's changes on the card, compiled (the fused loss runs eager between the compiled graphs): the same
    losses as the plain bf16 step, to bf16's rounding."""
    torch._dynamo.reset()
    common = ("--mixed-precision", "bf16", "--max-steps", "20", "--save-steps", "0", "--eval-steps", "0")
    plain = train(data_files, tmp_path / "plain", *common, "--num-beams", "1")
    changed = train(
        data_files,
        tmp_path / "changed",
        *common,
        "--num-beams",
        "1",
        "--compile",
        "--fused-loss",
        "--no-residual-in-fp32",
    )
    assert changed[0]["loss"] == pytest.approx(plain[0]["loss"], rel=2e-2)
    assert changed[-1]["loss"] < changed[0]["loss"] and changed[-1]["loss"] == pytest.approx(plain[-1]["loss"], rel=0.1)
