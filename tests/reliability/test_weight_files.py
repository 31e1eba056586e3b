"""Weight files that are not what they should be: a clear error naming the folder, never a silent pickle load."""

import re
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForSeq2SeqLM

from ..conftest import tiny_model


@pytest.fixture
def saved(tmp_path):
    model = tiny_model()
    model.save_pretrained(tmp_path / "good")
    return model, tmp_path


def test_a_pickle_only_folder_is_refused_unless_explicitly_allowed(saved):
    model, root = saved
    folder = root / "pickle"
    shutil.copytree(root / "good", folder)
    (folder / "model.safetensors").unlink()
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    with pytest.raises(OSError, match=r"pickle.*pytorch_model\.bin.*use_safetensors=False"):
        AutoModelForSeq2SeqLM.from_pretrained(folder)
    assert (folder / "pytorch_model.bin").is_file()  # nothing on disk is touched
    allowed = AutoModelForSeq2SeqLM.from_pretrained(folder, use_safetensors=False)
    for name, tensor in model.state_dict().items():
        assert torch.equal(allowed.state_dict()[name], tensor), name


def damage(data: bytes, how: str) -> bytes:
    if how == "truncated":
        return data[: len(data) // 2]
    return data[:8] + b"\x00\xff not json \xfe" * 8 + data[8 + 8 * 15 :]  # the JSON header is garbled


@pytest.mark.parametrize("how", ["truncated", "corrupted"])
def test_a_damaged_safetensors_file_is_named_and_left_as_it_was(saved, how):
    _, root = saved
    folder = root / how
    shutil.copytree(root / "good", folder)
    data = damage((folder / "model.safetensors").read_bytes(), how)
    (folder / "model.safetensors").write_bytes(data)
    with pytest.raises(OSError, match=rf"{how}.*safetensors weights cannot be read"):
        AutoModelForSeq2SeqLM.from_pretrained(folder)
    assert (folder / "model.safetensors").read_bytes() == data


def test_a_weight_of_the_wrong_shape_is_an_error(saved):
    _, root = saved
    folder = root / "shape"
    shutil.copytree(root / "good", folder)
    weights = load_file(folder / "model.safetensors")
    name = "model.encoder.layers.0.ffn.w_1.weight"
    assert name in weights
    weights[name] = torch.zeros(3, 3)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(RuntimeError, match=rf"{name} has shape \(3, 3\) in model.safetensors, expected \(64, 32\)"):
        AutoModelForSeq2SeqLM.from_pretrained(folder)


def test_a_missing_shard_is_named(saved):
    model, root = saved
    folder = root / "sharded"
    model.save_pretrained(folder, max_shard_size="20KB")
    shards = sorted(folder.glob("model-*.safetensors"))
    assert len(shards) > 2
    shards[1].unlink()
    with pytest.raises(OSError, match=shards[1].name):
        AutoModelForSeq2SeqLM.from_pretrained(folder)


def test_a_tokenizer_from_another_run_is_refused(trained_folder, tmp_path, capsys):
    from transformers import AutoTokenizer
    from vanilla_transformer.training.data.bpe import train_bpe_tokenizer

    from vanilla_transformer import check_tokenizer_matches
    from vanilla_transformer.cli import main

    folder = tmp_path / "mixed"
    shutil.copytree(trained_folder, folder)
    config = AutoModelForSeq2SeqLM.from_pretrained(folder).config
    bigger = train_bpe_tokenizer([f"word{i} other{i}" for i in range(2000)], config.vocab_size + 100)
    assert len(bigger) > config.vocab_size
    bigger.save_pretrained(folder)
    before = (folder / "config.json").read_text()
    assert main(["translate", "--model", str(folder), "forty-two"]) == 1
    assert re.search(
        rf"error: .*tokenizer has {len(bigger)} tokens but the model's config.json has "
        rf"vocab_size={config.vocab_size}",
        capsys.readouterr().err,
    )
    assert (folder / "config.json").read_text() == before
    tokenizer = AutoTokenizer.from_pretrained(trained_folder)
    config.pad_token_id = tokenizer.pad_token_id + 1  # same size, but padding would be read as a word
    with pytest.raises(
        ValueError,
        match=rf"here: the tokenizer's pad_token_id is {tokenizer.pad_token_id} but the "
        rf"model's config.json has pad_token_id={tokenizer.pad_token_id + 1}",
    ):
        check_tokenizer_matches(config, tokenizer, "here")
