"""The translations that evaluation scores: generate()'s, sentence for sentence, in input order, with the sentences
of a batch that are done leaving it."""

import copy
import math

import datasets
import pytest
import torch
from accelerate import Accelerator
from vanilla_transformer.training.report.evaluation import cross_entropy_figures, padded, translate_dataset
from vanilla_transformer.training.tasks.numbers import english

from vanilla_transformer.model_folder import load_model_folder

NUMBERS = (7, 101, 152, 2003, 254, 99999, 42, 318, 5, 61)


@pytest.mark.parametrize("search", [dict(num_beams=1), dict(num_beams=3, length_penalty=0.6)], ids=["greedy", "beam"])
def test_a_split_is_translated_as_generate_translates_each_batch(trained_folder, search):
    model, tokenizer = load_model_folder(str(trained_folder))
    sentences = [english(n) for n in NUMBERS]
    tokenized = datasets.Dataset.from_dict({"input_ids": tokenizer(sentences)["input_ids"]})
    model.train()  # as evaluation finds it during training: dropout is off for the translations, then back on
    found = translate_dataset(model, tokenizer, tokenized, Accelerator(cpu=True), 4, max_new_tokens=12, **search)
    assert model.training
    expected = []
    for start in range(0, len(sentences), 4):
        batch = tokenizer(sentences[start : start + 4], padding=True, return_tensors="pt")
        with torch.no_grad():
            out = copy.deepcopy(model).eval().generate(**batch, max_new_tokens=12, **search)
        expected += [text.strip() for text in tokenizer.batch_decode(out, skip_special_tokens=True)]
    assert found == expected
    lengths = {len(ids) for ids in tokenizer(text_target=found)["input_ids"]}
    assert len(lengths) > 2  # the sentences of a batch end at different steps


def test_token_rows_are_padded_to_the_longest():
    assert padded([[5, 6, 2], [7, 2]], 0, "cpu").tolist() == [[5, 6, 2], [7, 2, 0]]
    assert padded([], 0, "cpu").shape == (0, 1)


def test_a_diverged_models_perplexity_is_infinite_not_an_overflow():
    assert cross_entropy_figures(2.0 * 10, 10, 5) == {
        "cross_entropy": 2.0,
        "perplexity": 7.389,
        "cross_entropy_per_word": 4.0,
    }
    figures = cross_entropy_figures(800.0 * 10, 10, 5)  # exp(800) is past a float's range
    assert figures["perplexity"] == float("inf") and figures["cross_entropy"] == 800.0
    assert math.isnan(cross_entropy_figures(float("nan"), 10, 5)["perplexity"])  # no number: not infinity
