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
