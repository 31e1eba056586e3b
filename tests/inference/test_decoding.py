"""generate()'s searches with finished sentences leaving the batch: the same tokens and scores as generate(), fewer
rows decoded."""

import copy

import pytest
import torch
from transformers import GenerationConfig
from vanilla_transformer.training.tasks.numbers import english

from tests.conftest import tiny_model
from vanilla_transformer.inference.decoding import decode
from vanilla_transformer.model_folder import load_model_folder

SEARCHES = [
    dict(num_beams=1),
    dict(num_beams=1, repetition_penalty=1.3, no_repeat_ngram_size=2),
    dict(num_beams=4),
    dict(num_beams=5, num_return_sequences=3, length_penalty=0.6),
    dict(num_beams=4, early_stopping=True),
    dict(num_beams=3, early_stopping="never", length_penalty=1.2),
    dict(num_beams=4, no_repeat_ngram_size=2, min_length=3),
]


def generated(model, batch, config: GenerationConfig, start: int) -> tuple[list[list[int]], list[float] | None]:
    """generate()'s tokens after the decoder's start, each cut after its end of sentence, and its beam scores."""
    starts = torch.full((len(batch["input_ids"]), 1), start)
    with torch.no_grad():
        out = model.generate(**batch, decoder_input_ids=starts, generation_config=config)
    eos, rows = model.config.eos_token_id, []
    for row in out.sequences[:, 1:].tolist():
        rows.append(row[: row.index(eos) + 1] if eos in row else row)
    return rows, out.sequences_scores.tolist() if config.num_beams > 1 else None


def config_for(model, max_new_tokens: int, **search) -> GenerationConfig:
    config = copy.deepcopy(model.generation_config)
    config.update(max_new_tokens=max_new_tokens, return_dict_in_generate=True, output_scores=True, **search)
    return config


def check_as_generate(model, batch, config: GenerationConfig) -> list:
    found = decode(model, batch["input_ids"], batch["attention_mask"], config)
    rows, scores = generated(model, batch, config, model.config.decoder_start_token_id)
    flat = [d for sentence in found for d in sentence]
    assert [d.tokens for d in flat] == rows
    if scores is not None:
        assert [d.score for d in flat] == pytest.approx(scores, abs=1e-5)
    return flat


def ending_early(eos_bias: float):
    """A random model whose end of sentence is made likely by `eos_bias` on its output bias: some sentences end at
    once, others run to the limit."""
    model = tiny_model(seed=3, output_bias=True)
    with torch.no_grad():
        model.lm_head.bias.zero_()
        model.lm_head.bias[model.config.eos_token_id] = eos_bias
    return model


def random_sources(lengths: list[int]) -> dict:
    """A batch of random source sentences of `lengths` tokens, padded to the longest."""
    ids = torch.randint(3, 50, (len(lengths), max(lengths)), generator=torch.Generator().manual_seed(0))
    mask = (torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]).long()
    return {"input_ids": ids * mask, "attention_mask": mask}


@pytest.mark.parametrize("search", SEARCHES, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_a_random_model_decodes_as_generate_does(search):
    """Untrained: many searches end at once or run to the limit, where generate()'s rules are at their edges."""
    model = ending_early(1.5)
    check_as_generate(model, random_sources([3, 9, 5, 12, 1, 7]), config_for(model, 14, **search))


@pytest.mark.parametrize("search", SEARCHES[2:], ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_hypotheses_that_outgrow_the_beams_first_width_decode_as_generate_does(search, monkeypatch):
    """The beam's tensors start `FIRST_WIDTH` tokens wide and grow as the hypotheses do, up to the length limit."""
    monkeypatch.setattr("vanilla_transformer.inference.decoding.FIRST_WIDTH", 3)  # grown to 6, 12, then the limit
    model = tiny_model(seed=3)
    ids = torch.randint(3, 50, (3, 6), generator=torch.Generator().manual_seed(1))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    flat = check_as_generate(model, batch, config_for(model, 20, **search))
    assert max(len(d.tokens) for d in flat) > 12


@pytest.mark.parametrize("search", SEARCHES[:4], ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_a_trained_model_decodes_as_generate_does(trained_folder, search):
    model, tokenizer = load_model_folder(str(trained_folder))
    sentences = [english(n) for n in (7, 101, 152, 2003, 254, 99999, 42, 318)]
    batch = dict(tokenizer(sentences, padding=True, return_tensors="pt"))
    flat = check_as_generate(model.eval(), batch, config_for(model, 24, **search))
    assert all(d.tokens[-1] == model.config.eos_token_id for d in flat)


def test_greedy_scores_are_the_transition_scores_over_the_length():
    model = tiny_model(seed=1)
    ids, mask = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]]), torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    batch = {"input_ids": ids, "attention_mask": mask}
    config = config_for(model, 6, num_beams=1, length_penalty=0.5)
    found = decode(model, batch["input_ids"], batch["attention_mask"], config, scores=True)
    with torch.no_grad():
        out = model.generate(**batch, generation_config=config)
    steps = model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
    for row, (decoded,) in enumerate(found):
        n = len(decoded.tokens)
        assert decoded.score == pytest.approx(steps[row, :n].sum().item() / n**0.5, abs=1e-5)
    assert decode(model, batch["input_ids"], batch["attention_mask"], config)[0][0].score is None


@pytest.mark.parametrize("beams, eos_bias", [(1, 0.5), (3, 1.5)])
def test_finished_sentences_leave_the_batch(beams, eos_bias):
    """The decoder runs on fewer rows once a sentence is done: a short sentence beside a long one costs its own
    steps, not the long one's. A random model whose end of sentence is made likely (`eos_bias`, as much as each
    search needs) ends one sentence at once and runs the others to the limit, whatever a training run's draws."""
    model, batch = ending_early(eos_bias), random_sources([3, 9, 5, 12])
    rows = []
    hook = model.register_forward_pre_hook(
        lambda module, args, kwargs: rows.append(len(kwargs["decoder_input_ids"])), with_kwargs=True
    )
    try:
        found = decode(model, batch["input_ids"], batch["attention_mask"], config_for(model, 30, num_beams=beams))
    finally:
        hook.remove()
    lengths = [len(sentence[0].tokens) for sentence in found]
    assert max(lengths) > min(lengths)
    assert rows[0] == 4 * beams and rows[-1] < rows[0]  # every sentence at the start, fewer at the end
    assert sum(rows) < 4 * beams * len(rows)


def test_without_max_new_tokens_the_length_is_generate_configs_max_length():
    model = tiny_model(seed=3)
    ids, mask = torch.tensor([[5, 6, 7, 2]]), torch.tensor([[1, 1, 1, 1]])
    config = copy.deepcopy(model.generation_config)
    config.update(max_length=6, num_beams=2, return_dict_in_generate=True, output_scores=True)
    flat = check_as_generate(model, {"input_ids": ids, "attention_mask": mask}, config)
    assert all(len(d.tokens) <= 5 for d in flat)
