"""Tied weights on reload, checked as transformers' own common model tests check them
(`ModelTesterMixin.test_model_weights_reload_no_missing_tied_weights` of tests/test_modeling_common.py, ported here
without importing the library's test suite), with MarianModel and MarianMTModel as the library's reference."""

import collections
import re

import pytest
import torch
from safetensors.torch import save_file
from transformers import MarianModel, MarianMTModel
from transformers.pytorch_utils import id_tensor_storage

from tests.conftest import tiny_config, tiny_marian_config
from vanilla_transformer import VanillaTransformerForConditionalGeneration, VanillaTransformerModel


def reload_with_no_weights_on_file(model_class, config, folder):
    """The common test's steps: save, overwrite model.safetensors with a file that holds none of the model's weights,
    reload. Returns (what it reports missing but the model lacks, what the model has but it does not report missing,
    what the model's `_keys_to_ignore_on_load_missing` allows not to be reported)."""
    model_class(config).save_pretrained(folder)
    save_file({"tensor": torch.tensor([1, 2])}, folder / "model.safetensors", metadata={"format": "pt"})
    reloaded, infos = model_class.from_pretrained(folder, output_loading_info=True)

    params = dict(reloaded.named_parameters())
    params.update(dict(reloaded.named_buffers()))
    param_names = set(params)
    missing_keys = set(infos["missing_keys"])

    # tied weights may be reported under any of their names: a group is excused unless all of its names are extra
    extra_missing = missing_keys - param_names
    ptrs = collections.defaultdict(list)
    for name, tensor in reloaded.state_dict().items():
        ptrs[id_tensor_storage(tensor)].append(name)
    for group in [names for names in ptrs.values() if len(names) > 1]:
        if len(set(group) - extra_missing) > 0:
            extra_missing = extra_missing - set(group)

    missed_missing = param_names - missing_keys
    nonpersistent_buffers = {n for n, _ in reloaded.named_buffers() if n not in reloaded.state_dict()}
    missed_missing = missed_missing - nonpersistent_buffers

    expected_missing = set()
    for pattern in reloaded._keys_to_ignore_on_load_missing or ():
        expected_missing.update({k for k in param_names if re.search(pattern, k) is not None})
    return extra_missing, missed_missing, expected_missing


@pytest.mark.parametrize(
    "model_class, config",
    [
        (
            MarianModel,
            tiny_marian_config,
        ),  # the library's reference: what its common test expects of a shared embedding
        (MarianMTModel, tiny_marian_config),
        (VanillaTransformerModel, lambda: tiny_config(share_embeddings=True)),
        (VanillaTransformerModel, lambda: tiny_config(share_embeddings=False)),
        (VanillaTransformerForConditionalGeneration, lambda: tiny_config(share_embeddings=True)),
        (VanillaTransformerForConditionalGeneration, lambda: tiny_config(share_embeddings=False)),
    ],
    ids=["marian-base", "marian-mt", "base-shared", "base-separate", "lm-shared", "lm-separate"],
)
def test_model_weights_reload_no_missing_tied_weights(tmp_path, model_class, config):
    extra_missing, missed_missing, expected_missing = reload_with_no_weights_on_file(model_class, config(), tmp_path)
    assert extra_missing == set(), f"{model_class.__name__} reports missing keys it does not have: {extra_missing}"
    # with no weight on file every parameter is missing, the shared embedding (the tie's source) included
    assert missed_missing == expected_missing, (
        f"{model_class.__name__} ignores keys {missed_missing - expected_missing} but they look like real parameters"
    )


@pytest.mark.parametrize("model_class", [VanillaTransformerModel, VanillaTransformerForConditionalGeneration])
def test_the_shared_embedding_is_reported_missing_and_still_tied(tmp_path, model_class):
    model_class(tiny_config(share_embeddings=True)).save_pretrained(tmp_path)
    save_file({"tensor": torch.tensor([1, 2])}, tmp_path / "model.safetensors", metadata={"format": "pt"})
    reloaded, infos = model_class.from_pretrained(tmp_path, output_loading_info=True)
    prefix = "model." if model_class is VanillaTransformerForConditionalGeneration else ""
    assert f"{prefix}shared.weight" in infos["missing_keys"]
    base = reloaded.model if prefix else reloaded
    assert base.encoder.get_input_embeddings().weight is base.shared.weight
    assert base.decoder.get_input_embeddings().weight is base.shared.weight
    assert base.shared.weight.device.type == "cpu"  # re-initialised, not left a placeholder
    if prefix:
        assert reloaded.lm_head.weight is base.shared.weight
