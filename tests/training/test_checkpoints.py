"""Checkpoints hold each distinct weight once and reload whole, and writing them puts no notice about shared tensors
in the training log."""

import logging
import os
import shutil

import pytest
import torch
from accelerate import Accelerator
from safetensors.torch import load_file
from vanilla_transformer.training.run.checkpoints import WEIGHTS_FILE, list_checkpoints, save_checkpoint

from tests.conftest import tiny_config
from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.cli import main

from .conftest import TINY_MODEL_FLAGS, data_flags

NOTICE = "Removed shared tensor"  # what accelerate logs when it drops the other names of a shared tensor
NOTHING_WRONG = {"missing_keys": set(), "unexpected_keys": set(), "mismatched_keys": set(), "error_msgs": []}


def notices(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if NOTICE in record.getMessage()]


@pytest.mark.parametrize("share", [True, False])
def test_a_run_logs_no_shared_tensor_notice_and_its_checkpoints_and_model_reload_whole(
    tmp_path, data_files, caplog, capfd, share
):
    out = tmp_path / "run"
    with caplog.at_level(logging.WARNING):
        code = main(
            [
                "train",
                *data_flags(data_files),
                "--output-dir",
                str(out),
                "--max-steps",
                "4",
                "--save-steps",
                "2",
                "--eval-steps",
                "0",
                *TINY_MODEL_FLAGS,
                *([] if share else ["--no-share-embeddings"]),
            ]
        )
    assert code == 0
    printed = capfd.readouterr()
    assert NOTICE not in printed.out + printed.err
    assert notices(caplog) == []

    final, info = VanillaTransformerForConditionalGeneration.from_pretrained(out, output_loading_info=True)
    assert info == NOTHING_WRONG
    checkpoints = list_checkpoints(str(out))
    assert [os.path.basename(path) for path in checkpoints] == ["checkpoint-2", "checkpoint-4"]
    for checkpoint in checkpoints:  # each checkpoint's weights with the run's config, as from_pretrained reads them
        folder = tmp_path / "reloaded" / os.path.basename(checkpoint)
        folder.mkdir(parents=True)
        shutil.copy(out / "config.json", folder)
        shutil.copy(os.path.join(checkpoint, WEIGHTS_FILE), folder)
        model, info = VanillaTransformerForConditionalGeneration.from_pretrained(folder, output_loading_info=True)
        assert info == NOTHING_WRONG, checkpoint
        assert (model.lm_head.weight is model.model.encoder.embed.embed_tokens.weight) == share
    for name, value in final.state_dict().items():  # the last checkpoint is the model the run wrote
        assert torch.equal(model.state_dict()[name], value), name


def test_the_checkpoint_holds_what_accelerate_writes_and_only_declared_ties_are_quiet(tmp_path, caplog):
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True)
    accelerator.prepare(VanillaTransformerForConditionalGeneration(tiny_config()))
    with caplog.at_level(logging.WARNING):
        accelerator.save_state(str(tmp_path / "plain"), safe_serialization=True)
        assert len(notices(caplog)) == 1  # accelerate's own save of the tied model gives the notice
        caplog.clear()
        save_checkpoint(accelerator, str(tmp_path / "run"), 1, {"step": 1}, keep=1)
        assert notices(caplog) == []
    plain = load_file(tmp_path / "plain" / WEIGHTS_FILE)
    ours = load_file(tmp_path / "run" / "checkpoints" / "checkpoint-1" / WEIGHTS_FILE)
    assert ours.keys() == plain.keys() and "model.shared.weight" in ours and "lm_head.weight" not in ours
    assert all(torch.equal(ours[name], plain[name]) for name in ours)

    # a tensor shared under names the model does not declare tied is still reported
    untied = VanillaTransformerForConditionalGeneration(tiny_config(share_embeddings=False))
    untied.lm_head.weight = untied.model.decoder.get_input_embeddings().weight
    accelerator = Accelerator(cpu=True)
    accelerator.prepare(untied)
    with caplog.at_level(logging.WARNING):
        save_checkpoint(accelerator, str(tmp_path / "undeclared"), 1, {"step": 1}, keep=1)
    assert len(notices(caplog)) == 1 and "lm_head.weight" in notices(caplog)[0]
