"""The "translation" pipeline registered by importing vanilla_transformer."""

import logging

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

from tests.conftest import long_sentence
from vanilla_transformer import TranslationPipeline

SOURCES = ["one hundred twenty-three", "three hundred", "two hundred fifty-one", "one hundred one", "three hundred six"]


def reference(folder, sentences, **generate_kwargs):
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    out = []
    for sentence in sentences:  # one at a time: no padding involved
        ids = model.generate(**tokenizer([sentence], return_tensors="pt"), **generate_kwargs)
        out.append(tokenizer.decode(ids[0], skip_special_tokens=True))
    return out


def test_translation_pipeline_matches_generate_batched_and_unbatched(trained_folder):
    translate = pipeline("translation", model=str(trained_folder))
    assert isinstance(translate, TranslationPipeline)
    expected = reference(trained_folder, SOURCES)  # the folder's generation_config: beam 2
    assert [r["translation_text"] for r in translate(SOURCES)] == expected
    assert [r["translation_text"] for r in translate(SOURCES, batch_size=4)] == expected
    single = translate(SOURCES[0])
    assert single == [{"translation_text": expected[0]}]


def test_translation_pipeline_passes_generation_arguments(trained_folder):
    translate = pipeline("translation", model=str(trained_folder))
    greedy = reference(trained_folder, SOURCES[:2], num_beams=1, max_new_tokens=3)
    assert [r["translation_text"] for r in translate(SOURCES[:2], num_beams=1, max_new_tokens=3)] == greedy
    several = translate(SOURCES[0], num_beams=3, num_return_sequences=3)
    assert len(several) == 3 and all("translation_text" in r for r in several)


def test_translation_pipeline_rejects_other_inputs(trained_folder):
    translate = pipeline("translation", model=str(trained_folder))
    with pytest.raises(ValueError, match="translation pipeline: input 1 is Tensor, not a string"):
        list(translate(torch.tensor([1, 2, 3])))  # an iterator: each input is checked as it is read
    with pytest.raises(ValueError, match="translation pipeline: input 3 is int, not a string"):
        list(translate(iter(["six", "seven", 8])))
    with pytest.raises(ValueError, match="expected a string or a sequence or iterator of strings, got int"):
        translate(7)
    with pytest.raises(ValueError, match="input 2 is NoneType, not a string"):
        translate(["six", None])


def test_translation_pipeline_reads_columns_datasets_and_iterators_as_transformers_4_did(trained_folder, monkeypatch):
    from datasets import Dataset
    from transformers.pipelines.pt_utils import KeyDataset

    translate = pipeline("translation", model=str(trained_folder))
    expected = [{"translation_text": text} for text in reference(trained_folder, SOURCES)]
    dataset = Dataset.from_dict({"text": SOURCES})
    assert translate(dataset["text"]) == translate(tuple(SOURCES)) == expected  # sequences: a list
    monkeypatch.setattr("vanilla_transformer.inference.pipeline.STREAM_CHUNK", 2)  # 3 chunks of 5 texts
    streamed = translate(iter(SOURCES), batch_size=2)
    assert not isinstance(streamed, list) and list(streamed) == [[result] for result in expected]
    assert list(translate(KeyDataset(dataset, "text"))) == [[result] for result in expected]
    iterable = type("Texts", (torch.utils.data.IterableDataset,), {"__iter__": lambda self: iter(SOURCES)})()
    assert list(translate(iterable)) == [[result] for result in expected]
    with pytest.raises(ValueError, match="max_source_length must be a positive integer"):
        translate(iter(SOURCES), max_source_length=0)  # at the call, before any result is asked for


def test_translation_pipeline_takes_the_arguments_of_transformers_4s(trained_folder):
    translate = pipeline("translation", model=str(trained_folder))
    tokenizer = AutoTokenizer.from_pretrained(trained_folder)
    (both,) = translate([SOURCES[0]], return_tensors=True)
    assert both["translation_text"] == tokenizer.decode(both["translation_token_ids"], skip_special_tokens=True)
    assert translate(SOURCES[0], return_tensors=True, return_text=False)[0].keys() == {"translation_token_ids"}
    with_ids = pipeline("translation", model=str(trained_folder), return_tensors=True)  # the pipeline's own setting
    assert with_ids(SOURCES[0])[0].keys() == with_ids(" ")[0].keys() == {"translation_token_ids", "translation_text"}
    blanks = translate(["", " "])
    blanks[0]["translation_text"] = "changed"
    assert blanks[1] == {"translation_text": ""}  # each blank input its own answer
    tokenizer.model_max_length = 2
    cut = pipeline("translation", model=str(trained_folder), tokenizer=tokenizer)
    assert cut(SOURCES[0], truncation=True) == cut(SOURCES[0], max_source_length=2) != cut(SOURCES[0])
    assert cut(SOURCES[0], clean_up_tokenization_spaces=True) == translate(SOURCES[0])


def test_translation_pipeline_reads_a_special_tokens_text_as_text_on_a_trained_folder(trained_folder):
    """The folder's tokenizer saves `split_special_tokens`, which `AutoTokenizer` reads: a `</s>` in a sentence is
    the characters (here ones the vocabulary lacks, as `|` is), not the end of sentence."""
    translate = pipeline("translation", model=str(trained_folder))
    texts = ["seven </s> forty-two", "three <pad> thousand"]
    alike = [text.replace("<", "|").replace("/", "|").replace(">", "|") for text in texts]
    assert translate(texts, num_beams=2) == translate(alike, num_beams=2)
    assert [translate.tokenizer(text)["input_ids"] for text in texts] == translate.tokenizer(alike)["input_ids"]


def test_translation_pipeline_reads_a_sentence_far_longer_than_any_it_was_trained_on(trained_folder):
    translate = pipeline("translation", model=str(trained_folder))  # sinusoidal positions (§3.5): no limit
    expected = reference(trained_folder, [long_sentence()], max_new_tokens=40)
    assert translate(long_sentence(), max_new_tokens=40) == [{"translation_text": expected[0]}]


def test_translation_pipeline_truncates_a_sentence_longer_than_the_learned_positions_and_names_it(
    learned_folder, caplog
):
    translate = pipeline("translation", model=str(learned_folder))
    sentence = long_sentence()
    with caplog.at_level(logging.WARNING):
        results = translate([sentence, SOURCES[0]])
    warned = [r.getMessage() for r in caplog.records if r.getMessage().startswith("translation pipeline:")]
    assert len(warned) == 1
    assert warned[0].startswith(f"translation pipeline: '{sentence[:57]}...' has ")
    assert warned[0].endswith(
        "more than the model's max_position_embeddings=18 learned positions; truncated to 18 tokens."
    )
    model = AutoModelForSeq2SeqLM.from_pretrained(learned_folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(learned_folder)
    truncated = model.generate(**tokenizer([sentence], truncation=True, max_length=18, return_tensors="pt"))
    assert results[0] == {"translation_text": tokenizer.decode(truncated[0], skip_special_tokens=True)}
    assert translate(sentence, max_source_length=5) == translate(sentence[:40], max_source_length=5)  # still honoured


def test_translation_pipeline_answers_blank_and_no_inputs_without_a_search(trained_folder):
    translate = pipeline("translation", model=str(trained_folder))
    expected = reference(trained_folder, SOURCES[:2])
    assert translate([]) == []
    assert translate("  ") == translate("\ufeff") == [{"translation_text": ""}]  # a byte-order mark is no text
    with pytest.raises(ValueError, match="translation pipeline: the input is bytes, not a string: decode it"):
        translate(SOURCES[0].encode())
    both = translate([SOURCES[0], "", SOURCES[1]])
    assert [r["translation_text"] for r in both] == [expected[0], "", expected[1]]
    several = translate(["", SOURCES[0]], num_beams=3, num_return_sequences=2)
    assert several[0] == [{"translation_text": ""}] * 2 and len(several[1]) == 2


@pytest.mark.parametrize("length", [0, -1, 2.5, True])
def test_translation_pipeline_refuses_a_source_length_that_is_no_positive_integer(trained_folder, length):
    translate = pipeline("translation", model=str(trained_folder))
    for inputs in (SOURCES[0], ["", " "]):  # blank inputs, which are not searched, too
        with pytest.raises(ValueError, match="max_source_length must be a positive integer"):
            translate(inputs, max_source_length=length)


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"num_beams": 0}, "num_beams must be a positive integer, got 0"),
        ({"max_new_tokens": 0}, "`max_new_tokens` must be greater than 0"),
        ({"num_beams": 2, "num_return_sequences": 3}, r"`num_return_sequences` \(3\) has to be smaller or equal"),
        ({"return_dict_in_generate": True}, "return_dict_in_generate: the pipeline returns texts"),
    ],
)
def test_generation_settings_generate_refuses_are_refused_at_the_call_whatever_the_inputs(trained_folder, settings,
                                                                                         message):  # fmt: skip
    translate = pipeline("translation", model=str(trained_folder))
    for inputs in (SOURCES[0], ["", " "], iter(SOURCES)):  # blank inputs, or an iterator not read yet
        with pytest.raises(ValueError, match=f"^translation pipeline: {message}"):
            translate(inputs, **settings)


def test_an_input_that_is_not_unicode_text_is_named(trained_folder):
    with pytest.raises(ValueError, match=r"input 2: not Unicode text: '\\ud800' at character 2 is a lone surrogate"):
        pipeline("translation", model=str(trained_folder))(["one", "a\ud800"])


def test_settings_given_when_the_pipeline_is_made_apply_to_every_call_under_the_calls_own(trained_folder):
    from transformers import GenerationConfig

    made = pipeline("translation", model=str(trained_folder), num_beams=1, max_new_tokens=2)
    assert [r["translation_text"] for r in made(SOURCES[:2])] == reference(trained_folder, SOURCES[:2], num_beams=1,
                                                                           max_new_tokens=2)  # fmt: skip
    assert made(SOURCES[0], max_new_tokens=8) == [{"translation_text": reference(trained_folder, SOURCES[:1],
                                                                                 num_beams=1)[0]}]  # fmt: skip
    several = pipeline("translation", model=str(trained_folder), num_beams=4)(SOURCES[0], num_return_sequences=3)
    assert len(several) == 3  # four beams, made so: three sequences may be returned
    given = GenerationConfig(num_beams=6, decoder_start_token_id=1, eos_token_id=2, pad_token_id=0)
    assert len(pipeline("translation", model=str(trained_folder))(SOURCES[0], generation_config=given,
                                                                    num_return_sequences=5)) == 5  # fmt: skip
    with pytest.raises(ValueError, match="`max_new_tokens` must be greater than 0"):  # made (5.17) or called
        pipeline("translation", model=str(trained_folder), max_new_tokens=0)(["", " "])
