"""The model behaves like an in-library transformers encoder-decoder: Auto classes, safetensors round trip,
tied and resized embeddings, gradient checkpointing."""

import json
import logging
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM
from transformers.utils import logging as hf_logging
from vanilla_transformer.modeling.modeling_vanilla_transformer import CACHE_FIELD

from tests.conftest import tiny_config, tiny_model
from vanilla_transformer import (
    VanillaTransformerConfig,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerModel,
)


def test_auto_classes_build_the_model_from_config():
    settings = {k: v for k, v in tiny_config().to_diff_dict().items() if k != "model_type"}
    config = AutoConfig.for_model("vanilla_transformer", **settings)
    assert isinstance(config, VanillaTransformerConfig)
    assert isinstance(AutoModel.from_config(config), VanillaTransformerModel)
    assert isinstance(AutoModelForSeq2SeqLM.from_config(config), VanillaTransformerForConditionalGeneration)


@pytest.mark.parametrize(
    "overrides", [{}, {"share_embeddings": False}, {"norm_position": "pre", "position_encoding": "learned"}]
)
def test_save_and_load_through_auto_classes_is_exact(tmp_path, overrides):
    model = tiny_model(**overrides)
    model.save_pretrained(tmp_path)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert "model.safetensors" in files and "config.json" in files
    assert not any(name.endswith((".bin", ".pt", ".pkl")) for name in files)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "vanilla_transformer"
    saved = load_file(tmp_path / "model.safetensors")
    assert not any(key.endswith(".pe") for key in saved)  # the sinusoidal table is not a weight

    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert isinstance(loaded, VanillaTransformerForConditionalGeneration)
    original_state, loaded_state = model.state_dict(), loaded.state_dict()
    assert original_state.keys() == loaded_state.keys()
    for key in original_state:
        assert torch.equal(original_state[key], loaded_state[key]), key
    src = torch.randint(3, 50, (2, 6))
    assert torch.equal(
        model.generate(input_ids=src, max_new_tokens=6), loaded.generate(input_ids=src, max_new_tokens=6)
    )

    base = AutoModel.from_pretrained(tmp_path)
    assert isinstance(base, VanillaTransformerModel)
    assert torch.equal(base.encoder.embed.embed_tokens.weight, model.model.encoder.embed.embed_tokens.weight)


def test_loads_in_a_fresh_process(tmp_path):
    model = tiny_model()
    model.save_pretrained(tmp_path)
    src = torch.randint(3, 50, (2, 6))
    expected = model.generate(input_ids=src, max_new_tokens=6).tolist()
    code = (
        "import sys, json, torch, vanilla_transformer, transformers as t;"
        f"m = t.AutoModelForSeq2SeqLM.from_pretrained({str(tmp_path)!r});"
        f"print(json.dumps(m.generate(input_ids=torch.tensor({src.tolist()}), max_new_tokens=6).tolist()))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(result.stdout.strip().splitlines()[-1]) == expected


def test_embeddings_are_shared_and_tied():
    model = tiny_model()
    shared = model.model.shared.weight
    assert model.get_input_embeddings().weight is shared
    assert model.model.decoder.get_input_embeddings().weight is shared
    assert model.get_output_embeddings() is model.lm_head and model.lm_head.weight is shared

    separate = tiny_model(share_embeddings=False)
    weights = {
        id(separate.model.encoder.get_input_embeddings().weight),
        id(separate.model.decoder.get_input_embeddings().weight),
        id(separate.lm_head.weight),
    }
    assert len(weights) == 3


@pytest.fixture
def transformers_log(caplog):
    """The records transformers logs at WARNING and above (its loggers do not propagate to pytest's by default)."""
    hf_logging.enable_propagation()
    try:
        with caplog.at_level(logging.WARNING):
            yield lambda: [r.getMessage() for r in caplog.records if r.name.startswith("transformers")]
    finally:
        hf_logging.disable_propagation()


@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("model_class", [VanillaTransformerModel, VanillaTransformerForConditionalGeneration])
def test_a_saved_model_reloads_with_no_missing_unexpected_or_ignored_keys(
    tmp_path, transformers_log, model_class, share
):
    torch.manual_seed(0)
    model = model_class(tiny_config(share_embeddings=share)).eval()
    model.save_pretrained(tmp_path)
    loaded, info = model_class.from_pretrained(tmp_path, output_loading_info=True)
    assert info == {"missing_keys": set(), "unexpected_keys": set(), "mismatched_keys": set(), "error_msgs": []}
    assert transformers_log() == []  # no load report, no word about tied or ignored weights
    # what is saved is each distinct weight once, under the name the tie declaration reads from
    saved = set(load_file(tmp_path / "model.safetensors"))
    assert saved == set(model.state_dict()) - set(model.all_tied_weights_keys)
    prefix = "model." if model_class is VanillaTransformerForConditionalGeneration else ""
    assert (f"{prefix}shared.weight" in saved) == share  # a real parameter, written and read back
    base = loaded.model if prefix else loaded
    embeddings = [base.encoder.get_input_embeddings().weight, base.decoder.get_input_embeddings().weight]
    if prefix:
        embeddings.append(loaded.lm_head.weight)
    assert len({id(weight) for weight in embeddings}) == (1 if share else len(embeddings))
    if share:
        assert embeddings[0] is base.shared.weight
    for name, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name


@pytest.mark.parametrize("share", [True, False])
def test_resize_token_embeddings_keeps_the_tie(share):
    model = tiny_model(share_embeddings=share)
    old = model.get_input_embeddings().weight.detach().clone()
    model.resize_token_embeddings(60)
    assert model.config.vocab_size == 60
    assert model.get_input_embeddings().weight.shape == (60, 32)
    assert model.model.decoder.get_input_embeddings().weight.shape == (60, 32)
    assert model.lm_head.weight.shape == (60, 32)
    assert torch.equal(model.get_input_embeddings().weight[:50], old)
    if share:
        assert model.lm_head.weight is model.get_input_embeddings().weight
        assert model.model.decoder.get_input_embeddings() is model.get_input_embeddings()
    out = model(input_ids=torch.randint(3, 60, (1, 4)), decoder_input_ids=torch.full((1, 2), 55))
    assert out.logits.shape == (1, 2, 60)


def test_gradient_checkpointing_gives_the_same_gradients():
    src = torch.randint(3, 50, (2, 7))
    labels = torch.randint(3, 50, (2, 5))
    grads = []
    for checkpointing in (False, True):
        model = tiny_model().train()
        if checkpointing and hasattr(model, "activation_checkpointing_enable"):  # transformers 5.24's name
            model.activation_checkpointing_enable()
            assert model.is_activation_checkpointing
        elif checkpointing:
            model.gradient_checkpointing_enable()
            assert model.is_gradient_checkpointing
        model(input_ids=src, labels=labels).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 0
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], atol=1e-6, rtol=1e-5)


def test_training_with_gradient_checkpointing_returns_no_cache_rather_than_an_empty_one():
    """Checkpointed layers drop the cache; an empty one returned would start the next call at position 0."""
    model = tiny_model().train()
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()
    src, tgt = torch.randint(3, 50, (2, 7)), torch.randint(3, 50, (2, 5))
    assert getattr(model(input_ids=src, decoder_input_ids=tgt, use_cache=True), CACHE_FIELD) is None
    with torch.no_grad():  # no backward pass to checkpoint: the cache is kept
        kept = getattr(model(input_ids=src, decoder_input_ids=tgt, use_cache=True), CACHE_FIELD)
        assert kept.get_seq_length() == 5


def test_the_trainer_finds_the_labels_column_alone_and_reports_the_eval_loss_and_metrics(tmp_path):
    """The Trainer takes every `forward` argument named `label...` for a column of labels, and a batch lacking one
    for a batch without labels: no loss, no metrics. Its predictions hold the logits and the encoder's output, as
    for MarianMTModel (no `nll_loss` without label smoothing, no cache)."""
    from datasets import Dataset
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

    model = tiny_model()
    rows = {"input_ids": torch.randint(3, 50, (4, 6)).tolist(), "labels": torch.randint(3, 50, (4, 5)).tolist()}
    shapes = []

    def metrics(prediction):
        shapes.extend(p.shape for p in prediction.predictions)
        return {"rows": len(prediction.label_ids)}

    arguments = Seq2SeqTrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    trainer = Seq2SeqTrainer(model=model, args=arguments, compute_metrics=metrics)
    assert trainer.label_names == ["labels"]
    result = trainer.evaluate(Dataset.from_dict(rows))
    assert result["eval_rows"] == 4 and result["eval_loss"] > 0
    assert shapes == [(4, 5, 50), (4, 6, 32)]  # the logits, the encoder's last hidden states
    assert len(model(input_ids=torch.tensor(rows["input_ids"]), labels=torch.tensor(rows["labels"])).to_tuple()) == 3


def test_every_parameter_is_initialised_and_trainable():
    model = tiny_model()
    src = torch.randint(3, 50, (2, 7))
    labels = torch.randint(3, 50, (2, 5))
    model.train()
    model(input_ids=src, labels=labels).loss.backward()
    for name, p in model.named_parameters():
        assert torch.isfinite(p).all(), name
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_attn_implementation_is_chosen_the_library_way(tmp_path):
    tiny_model().save_pretrained(tmp_path)
    for implementation in ("eager", "sdpa"):
        model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path, attn_implementation=implementation)
        assert model.config._attn_implementation == implementation


def test_the_encoder_and_decoder_load_alone_and_no_other_modality_is_found(tmp_path):
    """As MarianEncoder and MarianDecoder: each stack saved alone loads alone, with an embedding of its own; and the
    library's lookup of an image or audio encoder (its exporters split a multimodal model) finds none, as in
    MarianMTModel."""
    from transformers import MarianConfig, MarianMTModel

    model = tiny_model().eval()
    source, target = torch.tensor([[5, 6, 7, 2]]), torch.tensor([[1, 8, 9]])
    encoded = model.get_encoder()(source).last_hidden_state
    for stack, inputs in ((model.get_encoder(), {}), (model.get_decoder(), {"encoder_hidden_states": encoded})):
        stack.save_pretrained(tmp_path / type(stack).__name__)
        alone = type(stack).from_pretrained(tmp_path / type(stack).__name__).eval()
        ids = source if not inputs else target
        assert torch.equal(alone(ids, **inputs).last_hidden_state, stack(ids, **inputs).last_hidden_state)
    marian = MarianMTModel(MarianConfig(d_model=16, encoder_attention_heads=2, decoder_attention_heads=2,
                                        encoder_ffn_dim=32, decoder_ffn_dim=32, encoder_layers=1, decoder_layers=1,
                                        vocab_size=50, pad_token_id=0, decoder_start_token_id=0))  # fmt: skip
    for ours, theirs in ((model, marian), (model.model, marian.model)):
        assert ours.get_encoder() is ours.get_encoder(None) and type(ours.get_encoder()).__name__ == "Encoder"
        for modality in ("image", "audio"):
            assert (ours.get_encoder(modality) is ours) == (theirs.get_encoder(modality) is theirs) is True
