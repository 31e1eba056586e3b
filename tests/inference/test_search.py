"""Lexically constrained decoding: every translation contains its terms (in their order with `ordered`), batched as
alone; with no terms the search is beam search with fairseq's stopping rule, which generate() has as
`early_stopping=True`; where a term cannot be encoded, or CTranslate2 is asked for terms, the error says so. The
agreement with fairseq-interactive's `--constraints` is in tests/test_fairseq_reference.py."""

import re
from dataclasses import replace

import pytest
import torch
from vanilla_transformer.training.tasks.numbers import english

from vanilla_transformer.cli import main
from vanilla_transformer.inference.constraints import OrderedState, UnorderedState
from vanilla_transformer.inference.options import FAIRSEQ, SearchOptions
from vanilla_transformer.inference.search import beam_search
from vanilla_transformer.inference.translators import load_translator

SEARCH = SearchOptions(num_beams=4, length_penalty=1.0, max_length=30, rules=FAIRSEQ)
SOURCES = [english(n) for n in (101, 152, 203, 254, 305, 42)]
# terms the translations do not have of themselves: one word, two words, a word twice, none
TERMS = [["sieben"], ["acht", "hundert"], ["neun", "neun"], [], ["zwanzig"], ["drei", "tausend"]]


def walk(state, tokens):
    for token in tokens:
        state = state.advance(token)
    return state


def test_an_ordered_state_meets_its_terms_in_order_with_any_tokens_between():
    terms = [[5, 6], [7]]
    assert walk(OrderedState.create(terms), [5, 9, 6, 7]).bank == 0  # 5 6 broken: 7 cannot come first
    assert walk(OrderedState.create(terms), [5, 9, 5, 6, 7]).finished  # a term broken part-way starts again
    assert not walk(OrderedState.create(terms), [7, 5, 6]).finished  # the second term first does not count
    done = walk(OrderedState.create(terms), [5, 6, 1, 2, 7])
    assert done.finished and done.bank == 3 and done.next_tokens() == {5}


def test_an_unordered_state_meets_its_terms_in_any_order_each_as_often_as_given():
    terms = [[5, 6], [7], [7]]
    assert walk(UnorderedState.create(terms), [7, 5, 6, 7]).finished
    assert not walk(UnorderedState.create(terms), [7, 5, 6]).finished  # 7 is asked for twice
    assert not walk(UnorderedState.create(terms), [5, 7, 6, 7]).finished  # 5 6 broken by 7: not met
    state = walk(UnorderedState.create(terms), [5])
    assert state.next_tokens() == {5, 6, 7} and state.bank == 1


def contains(tokens: list[int], term: list[int]) -> bool:
    return any(tokens[i : i + len(term)] == term for i in range(len(tokens) - len(term) + 1))


@pytest.mark.parametrize("ordered", [False, True])
def test_every_translation_contains_its_terms(trained_folder, ordered):
    translator = load_translator(str(trained_folder))
    plain = translator.translate(SOURCES, num_beams=4)
    found = translator.translate(SOURCES, num_beams=4, terms=TERMS, ordered=ordered)
    for terms, [translation], [unconstrained] in zip(TERMS, found, plain):
        assert all(term in translation.text for term in terms), (terms, translation.text)
        if not terms:
            assert translation.text == unconstrained.text
        if ordered and len(terms) == 2 and terms[0] != terms[1]:
            assert translation.text.index(terms[0]) < translation.text.rindex(terms[1]), (terms, translation.text)


def test_a_term_given_twice_appears_twice(trained_folder):
    translator = load_translator(str(trained_folder))
    [[translation]] = translator.translate([SOURCES[2]], num_beams=4, terms=[["neun", "neun"]])
    assert translation.text.count("neun") >= 2, translation.text


def test_terms_are_met_token_for_token_and_batches_give_what_one_sentence_gives(trained_folder):
    translator = load_translator(str(trained_folder))
    model, tokenizer = translator.model, translator.tokenizer
    terms = translator.term_ids(TERMS)
    batch = tokenizer(SOURCES, padding=True, return_tensors="pt")
    together = beam_search(model, batch["input_ids"], batch["attention_mask"], SEARCH, terms)
    for index, source in enumerate(SOURCES):
        alone = tokenizer([source], return_tensors="pt")
        [hypotheses] = beam_search(model, alone["input_ids"], alone["attention_mask"], SEARCH, [terms[index]])
        assert [h.tokens for h in hypotheses] == [h.tokens for h in together[index]]
        assert [h.score for h in hypotheses] == pytest.approx([h.score for h in together[index]], abs=1e-5)
        for hypothesis in hypotheses:  # every finished hypothesis, not only the best, holds every term
            assert all(contains(hypothesis.tokens, term) for term in terms[index])


def test_with_no_terms_the_search_is_beam_search_with_fairseqs_stopping_rule(trained_folder):
    translator = load_translator(str(trained_folder))
    model, tokenizer = translator.model, translator.tokenizer
    batch = tokenizer(SOURCES, padding=True, return_tensors="pt")
    found = beam_search(model, batch["input_ids"], batch["attention_mask"], SEARCH)
    with torch.no_grad():
        out = model.generate(**batch, num_beams=4, early_stopping=True, max_new_tokens=31, length_penalty=1.0,
                             num_return_sequences=1, output_scores=True, return_dict_in_generate=True)  # fmt: skip
    special = {model.config.pad_token_id, model.config.eos_token_id}
    for hypotheses, row, score in zip(found, out.sequences.tolist(), out.sequences_scores.tolist()):
        assert hypotheses[0].tokens[:-1] == [i for i in row[1:] if i not in special]
        assert hypotheses[0].score == pytest.approx(score, abs=1e-4)


def test_a_beam_wider_than_half_the_vocabulary_searches_as_generate_does(trained_folder):
    """The first step has one hypothesis, so fewer than 2k candidates: the rest are dead (-inf), not an error."""
    translator = load_translator(str(trained_folder))
    model, tokenizer = translator.model, translator.tokenizer
    k = model.config.vocab_size // 2 + 1
    batch = tokenizer(SOURCES[:2], padding=True, return_tensors="pt")
    found = beam_search(model, batch["input_ids"], batch["attention_mask"], replace(SEARCH, num_beams=k, max_length=12))
    with torch.no_grad():
        out = model.generate(**batch, num_beams=k, early_stopping=True, max_new_tokens=13, length_penalty=1.0)
    special = {model.config.pad_token_id, model.config.eos_token_id}
    for hypotheses, row in zip(found, out.tolist()):
        assert hypotheses[0].tokens[:-1] == [i for i in row[1:] if i not in special]
    for translation, terms in zip(translator.translate(SOURCES[:2], num_beams=k, terms=TERMS[:2]), TERMS[:2]):
        assert all(term in translation[0].text for term in terms)


def test_a_term_the_vocabulary_cannot_spell_is_named_with_its_sentence(trained_folder):
    translator = load_translator(str(trained_folder))
    with pytest.raises(ValueError, match=r"sentence 2: the term '€€' has a token the target vocabulary lacks"):
        translator.translate(SOURCES[:2], terms=[["sieben"], ["€€"]])
    for blank in ("", " ", "\u200b"):  # a term of spaces was written as a word of its own, of them
        with pytest.raises(ValueError, match=re.escape(f"sentence 1: the term {blank!r} has no text")):
            translator.translate(SOURCES[:1], terms=[[blank]])
    with pytest.raises(ValueError, match="2 lists of terms for 1 sentences"):
        translator.translate(SOURCES[:1], terms=[[], []])
    with pytest.raises(ValueError, match="terms and prefix together"):
        translator.translate(SOURCES[:1], terms=[["sieben"]], prefix=["sieben"])


def test_ctranslate2_refuses_terms_naming_the_pytorch_model(exported_folder):
    with pytest.raises(ValueError, match="the ctranslate2 engine has no lexically constrained search"):
        load_translator(str(exported_folder)).translate(SOURCES[:1], terms=[["sieben"]])


def test_the_translate_command_reads_a_line_of_terms_per_sentence(trained_folder, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("\n".join(SOURCES[:3]) + "\n", encoding="utf-8")
    (tmp_path / "terms.txt").write_text("sieben\nacht\thundert\n\n", encoding="utf-8")
    flags = ["--input", str(tmp_path / "in.txt"), "--constraints-file", str(tmp_path / "terms.txt")]
    assert main(["translate", "--model", str(trained_folder), *flags, "--constraints-order", "ordered"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and "sieben" in lines[0] and "acht" in lines[1] and "hundert" in lines[1]
    (tmp_path / "short.txt").write_text("sieben\n", encoding="utf-8")
    flags[-1] = str(tmp_path / "short.txt")
    assert main(["translate", "--model", str(trained_folder), *flags]) == 2
    error = capsys.readouterr().err
    assert "in.txt has 3, --constraints-file" in error and "short.txt has 1 lines: expected as many" in error
    (tmp_path / "empty.txt").write_text("sieben\t\tacht\n\n\n", encoding="utf-8")
    flags[-1] = str(tmp_path / "empty.txt")
    assert main(["translate", "--model", str(trained_folder), *flags]) == 2
    assert "line 1: an empty term" in capsys.readouterr().err
    (tmp_path / "many.txt").write_text("sieben\tacht\thundert\n\n\n", encoding="utf-8")
    flags[-1] = str(tmp_path / "many.txt")
    assert main(["translate", "--model", str(trained_folder), *flags, "--max-length", "2"]) == 2
    assert (
        "many.txt, line 1: its terms have 7 tokens; its translation has at most 2 (max_length)"
        in capsys.readouterr().err
    )
    assert main(["translate", "--model", str(trained_folder), "--constraints-order", "ordered", "seven"]) == 2
    assert "--constraints-order orders the terms of --constraints-file: give that file" in capsys.readouterr().err


@pytest.mark.parametrize("length_penalty", [10.0, -10.0])
def test_a_length_penalty_at_its_bounds_gives_translations_and_one_past_them_is_refused(
    trained_folder, length_penalty, tmp_path, capsys
):
    """length ** penalty stays within float32's range up to the bounds, in every search of the package; past them,
    the division overflows (a search would write padding), and the flag refuses the value."""
    (tmp_path / "in.txt").write_text("six\n", encoding="utf-8")
    (tmp_path / "terms.txt").write_text("sechs\n", encoding="utf-8")
    constrained = ["--num-beams", "3", "--constraints-file", str(tmp_path / "terms.txt")]
    for flags in (["--num-beams", "1"], ["--num-beams", "3"], constrained):
        argv = ["translate", "--model", str(trained_folder), "--input", str(tmp_path / "in.txt"), *flags]
        assert main([*argv, "--length-penalty", str(length_penalty)]) == 0, capsys.readouterr().err
        assert len(capsys.readouterr().out.splitlines()) == 1
    with pytest.raises(SystemExit):
        main([*argv, "--length-penalty", str(length_penalty * 40)])
    assert "--length-penalty: expected a number from -10 to 10" in capsys.readouterr().err
