"""LoRA with PEFT, as docs/finetuning.md does it: PEFT has no default target modules for this model (nor for
MarianMTModel), so the recipe names them: the attention's input and output projections (`in_proj`, W^Q, W^K, W^V
together, and `out_proj`, W^O) and the feed-forward network's two linear layers (`w_1`, `w_2`)."""

import pytest
import torch
from datasets import Dataset
from peft import LoraConfig, get_peft_model
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, default_data_collator

from vanilla_transformer import VanillaTransformerForConditionalGeneration

from .conftest import tiny_config

TARGETS = ["in_proj", "out_proj", "w_1", "w_2"]  # docs/finetuning.md's


def lora_model(seed: int = 0):
    torch.manual_seed(seed)
    model = VanillaTransformerForConditionalGeneration(tiny_config())
    return get_peft_model(model, LoraConfig(task_type="SEQ_2_SEQ_LM", r=4, lora_alpha=8, target_modules=TARGETS))


def test_peft_asks_for_the_target_modules_of_this_model():
    model = VanillaTransformerForConditionalGeneration(tiny_config())
    with pytest.raises(ValueError, match="target_modules"):
        get_peft_model(model, LoraConfig(task_type="SEQ_2_SEQ_LM"))


def test_every_projection_the_recipe_names_carries_an_adapter_and_only_adapters_train():
    model = lora_model()
    config = model.base_model.model.config
    # per encoder layer: self-attention (2) and FFN (2); per decoder layer: self- and cross-attention (4) and FFN (2)
    expected = 4 * config.encoder_layers + 6 * config.decoder_layers
    adapted = [n for n, module in model.named_modules() if hasattr(module, "lora_A") and n.split(".")[-1] in TARGETS]
    assert len(adapted) == expected
    trainable = [name for name, parameter in model.named_parameters() if parameter.requires_grad]
    assert trainable and all("lora_" in name for name in trainable)


def test_the_recipe_fine_tunes_with_seq2seq_trainer_and_merges_into_a_plain_model(tmp_path):
    model = lora_model()
    frozen = {name: p.detach().clone() for name, p in model.named_parameters() if not p.requires_grad}
    # a toy task: copy the source
    sources = [[5 + (i + j) % 40 for j in range(6)] + [2] for i in range(64)]
    rows = [{"input_ids": ids, "attention_mask": [1] * len(ids), "labels": ids} for ids in sources]
    data, batch = Dataset.from_list(rows), default_data_collator(rows[:16])

    def loss() -> float:
        with torch.no_grad():
            return model(**batch).loss.item()

    before = loss()
    arguments = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path / "lora"), max_steps=30, learning_rate=1e-2, per_device_train_batch_size=16,
        report_to=[], save_strategy="no", use_cpu=True, logging_strategy="no",
    )  # fmt: skip
    Seq2SeqTrainer(model=model, args=arguments, train_dataset=data, data_collator=default_data_collator).train()
    model.eval()
    assert loss() < 0.8 * before
    for name, parameter in model.named_parameters():  # the model's own weights are untouched
        if name in frozen:
            assert torch.equal(parameter, frozen[name]), name
    with torch.no_grad():
        adapted = model(**batch).logits
    merged = model.merge_and_unload()  # the adapters folded into the weights: a plain model again
    assert type(merged) is VanillaTransformerForConditionalGeneration
    merged.save_pretrained(tmp_path / "merged")
    reloaded = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path / "merged").eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits, adapted, atol=1e-5, rtol=1e-4)


def test_every_adapter_counts_in_the_output_cross_attentions_too():
    """Cross-attention reads W^Q and [W^K; W^V] of `in_proj` from two inputs: its adapters must count there as well,
    so that each gets a gradient and the merged model gives the adapted model's logits."""
    model = lora_model()
    for name, parameter in model.named_parameters():
        if "lora_B" in name:  # adapters start at zero; make them count
            torch.nn.init.normal_(parameter, std=0.1)
    source, target = torch.randint(3, 40, (2, 6)), torch.randint(3, 40, (2, 5))
    model(input_ids=source, labels=target).loss.backward()
    cross = [(n, p) for n, p in model.named_parameters() if "cross_attn.in_proj.lora_" in n]
    assert cross and all(p.grad is not None and p.grad.abs().sum() > 0 for _, p in cross)
    model.eval()
    with torch.no_grad():
        adapted = model(input_ids=source, decoder_input_ids=target).logits
        merged = model.merge_and_unload()(input_ids=source, decoder_input_ids=target).logits
    torch.testing.assert_close(adapted, merged, rtol=1e-4, atol=1e-4)
