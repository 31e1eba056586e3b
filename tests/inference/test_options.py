"""A search's options checked where they are made, whichever entry point makes them (the commands, the server, a
Python caller): a number out of range is an OptionError naming the option, NaN and infinity among them."""

import math

import pytest

from vanilla_transformer.inference.options import Guards, OptionError, SearchOptions


@pytest.mark.parametrize(
    "make, option, message",
    [
        (lambda: SearchOptions(length_penalty=math.nan), "length_penalty", "length_penalty (nan) must be a finite"),
        (lambda: SearchOptions(length_penalty=-math.inf), "length_penalty", "(-inf) must be a finite number"),
        (lambda: SearchOptions(patience=0.0), "patience", "patience (0.0) must be > 0"),
        (lambda: SearchOptions(max_length=0), "max_length", "max_length (0) must be at least 1"),
        (lambda: SearchOptions(num_beams=10**9), "num_beams", "num_beams (1000000000) must be at most 1024: "),
        (lambda: Guards(max_len_a=math.inf), "max_len_a", "max_len_a (inf) must be a finite number"),
        (lambda: Guards(max_len_a=-1.0), "max_len_a", "max_len_a (-1.0) must be >= 0"),
        (lambda: Guards(repetition_penalty=math.nan), "repetition_penalty", "(nan) must be a finite number"),
        (lambda: Guards(repetition_penalty=0.0), "repetition_penalty", "repetition_penalty (0.0) must be > 0"),
    ],
)
def test_a_number_out_of_range_is_named_when_the_options_are_made(make, option, message):
    with pytest.raises(OptionError, match=message.replace("(", r"\(").replace(")", r"\)")) as raised:
        make()
    assert raised.value.options == (option,)


def test_finite_numbers_in_range_are_kept_as_given():
    options = SearchOptions(length_penalty=-0.5, patience=1.5, guards=Guards(max_len_a=1.2, repetition_penalty=1.1))
    assert (options.length_penalty, options.patience) == (-0.5, 1.5)
    assert (options.guards.max_len_a, options.guards.repetition_penalty) == (1.2, 1.1)


@pytest.mark.parametrize(
    "make, option, message",
    [
        (lambda: SearchOptions(num_beams=1.5), "num_beams", "num_beams (1.5) must be an integer"),
        (lambda: SearchOptions(num_beams=True), "num_beams", "num_beams (True) must be an integer"),
        (lambda: SearchOptions(max_length=None), "max_length", "max_length (None) must be an integer"),
        (lambda: SearchOptions(batch_size="8"), "batch_size", "batch_size ('8') must be an integer"),
        (lambda: SearchOptions(length_penalty="1"), "length_penalty", "length_penalty ('1') must be a number"),
        (lambda: SearchOptions(distinct="yes"), "distinct", "distinct must be True or False, got 'yes'"),
        (lambda: SearchOptions(guards=None), "guards", "guards must be a Guards, got None"),
        (lambda: SearchOptions(rules="fairseq"), "rules", "rules must be a SearchRules"),
        (lambda: SearchOptions(prefix="dr"), "prefix", "prefix must be a list of one prefix per sentence, got 'dr'"),
        (lambda: SearchOptions(prefix=["a", 3]), "prefix", "prefix[1] must be a string or None, got 3"),
        (lambda: SearchOptions(terms=["sieben"]), "terms", "terms[0] must be a list of strings, got 'sieben'"),
        (lambda: SearchOptions(terms=[["a", None]]), "terms", "terms[0][1] must be a string, got None"),
        (lambda: Guards(no_repeat_ngram_size=1.5), "no_repeat_ngram_size", "(1.5) must be an integer"),
        (lambda: Guards(no_repeat_ngram_size=-1), "no_repeat_ngram_size", "(-1) must be at least 0"),
        (lambda: Guards(max_len_b=2.5), "max_len_b", "max_len_b (2.5) must be an integer"),
    ],
)
def test_a_value_of_the_wrong_kind_is_named_when_the_options_are_made(make, option, message):
    with pytest.raises(
        OptionError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
    ) as raised:
        make()
    assert raised.value.options == (option,)


def test_prefixes_and_terms_may_come_as_any_sequence_and_none_is_no_prefix():
    options = SearchOptions(prefix=("eins", None))
    assert options.prefix == ("eins", "")
    assert SearchOptions(terms=(["a", "b"], ("c",))).terms == (("a", "b"), ("c",))
    assert SearchOptions(terms=[iter(["a"]), {"b": 1}]).terms == (("a",), ("b",))  # any iterable of strings


@pytest.mark.parametrize("alpha", [-400.0, 10.5, -10.01])
def test_a_length_penalty_past_float32s_range_of_length_to_the_alpha_is_refused(alpha):
    with pytest.raises(ValueError, match=rf"length_penalty \({alpha}\) must be from -10 to 10: length \*\* alpha"):
        SearchOptions(length_penalty=alpha)
    assert SearchOptions(length_penalty=-10.0).length_penalty == -10.0
