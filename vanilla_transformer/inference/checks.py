"""The checks of what a caller gives a translator, and their errors: a value of an option of a search (a field of
`options.SearchOptions` or its `Guards`) out of range or of the wrong kind is an `OptionError` naming the option,
which the command line turns into its flag; sentences that are not a list are a TypeError, and one sentence that
is not a string (or whose prefix or terms cannot be searched for) a `SentenceError` naming it."""

import math
import numbers
import unicodedata
from collections.abc import Iterable

from ..errors import is_whole


class OptionError(ValueError):
    """A ValueError about the search's `options` (the names of `SearchOptions`' fields, or of its `Guards`')."""

    def __init__(self, options: tuple[str, ...], message: str):
        super().__init__(message)
        self.options = options


def check_finite(name: str, value: float, at_least: float | None = None, above: float | None = None) -> None:
    """An OptionError naming option `name` unless `value` is a finite number (and at least `at_least`, or above
    `above`): NaN and infinity compare as no number should, and would pass a plain range check."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise OptionError((name,), f"{name} ({value!r}) must be a number")
    if not math.isfinite(value):
        raise OptionError((name,), f"{name} ({value}) must be a finite number")
    if (at_least is not None and value < at_least) or (above is not None and value <= above):
        bound = f">= {at_least:g}" if at_least is not None else f"> {above:g}"
        raise OptionError((name,), f"{name} ({value}) must be {bound}")


# the most a length penalty alpha may be either way: a translation's length ** alpha (1,024 tokens, say) stays within
# float32's range, in which a search divides its scores; far past it, the division overflows and the search writes
# padding with a placeholder score
MOST_LENGTH_PENALTY = 10.0


def check_length_penalty(value: float) -> None:
    """An OptionError naming length_penalty unless it is a finite number within +-`MOST_LENGTH_PENALTY`."""
    check_finite("length_penalty", value)
    if abs(value) > MOST_LENGTH_PENALTY:
        bound = f"{MOST_LENGTH_PENALTY:g}"
        raise OptionError(("length_penalty",), f"length_penalty ({value}) must be from -{bound} to {bound}: length "
                          "** alpha leaves float32's range beyond")  # fmt: skip


def check_whole(name: str, value: int, at_least: int = 1) -> None:
    """An OptionError naming option `name` unless `value` is an integer of at least `at_least` (a bool, or a float
    such as 1.5, is not)."""
    if not is_whole(value):
        raise OptionError((name,), f"{name} ({value!r}) must be an integer")
    if value < at_least:
        raise OptionError((name,), f"{name} ({value}) must be at least {at_least}")


def check_kind(name: str, value, kind: type | tuple[type, ...], expected: str) -> None:
    """An OptionError naming option `name` unless `value` is a `kind` (`expected` says what that is)."""
    if not isinstance(value, kind):
        raise OptionError((name,), f"{name} must be {expected}, got {value!r}")


class SentenceError(ValueError):
    """A ValueError about one of the sentences given: its `index` (0-based) and the `reason`."""

    def __init__(self, index: int, reason: str):
        super().__init__(f"sentence {index + 1}: {reason}")
        self.index, self.reason = index, reason


def texts_given(
    name: str, values, whole: str, item: str, kind: type | tuple[type, ...] = str, where: str | None = None
) -> list:
    """`values` as a list: an OptionError naming option `name` (at `where` in it, default `name`) where it is one
    string (whose characters would each be taken for a sentence's) or nothing to iterate (`whole` says what it
    should be), or where an item is not a `kind` (`item`)."""
    where = where or name
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise OptionError((name,), f"{where} must be {whole}, got {values!r}")
    values = list(values)
    for index, value in enumerate(values):
        if not isinstance(value, kind):
            raise OptionError((name,), f"{where}[{index}] must be {item}, got {value!r}")
        if isinstance(value, str) and (problem := not_unicode(value)):
            raise OptionError((name,), f"{where}[{index}]: {problem}")
    return values


def not_unicode(text: str) -> str | None:
    """Why `text` is no Unicode text a tokenizer can read (a lone surrogate: half of a UTF-16 pair, or a byte that
    was not UTF-8, kept by errors="surrogateescape"), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return (f"not Unicode text: {text[error.start]!r} at character {error.start + 1} is a lone surrogate (a byte "
                "that is not UTF-8, or half of a UTF-16 pair)")  # fmt: skip
    return None


def is_blank(text: str) -> bool:
    """Whether `text` has nothing to translate: empty, or spaces and invisible format characters (a byte-order
    mark, a zero-width space or joiner: Unicode's category Cf) alone, which tokenizers read as an unknown token."""
    return all(character.isspace() or unicodedata.category(character) == "Cf" for character in text)


def sentences_given(sentences, name: str = "sentences") -> list[str]:
    """`sentences` as a list of strings: a TypeError where it is one string (a list of its characters would be
    translated) or nothing to iterate, a `SentenceError` naming one that is not a string."""
    if isinstance(sentences, (str, bytes)) or not isinstance(sentences, Iterable):
        raise TypeError(f"{name} must be a list of strings, got {sentences!r}: put one sentence in a list")
    sentences = list(sentences)
    for index, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise SentenceError(index, f"{name} must be strings, got {sentence!r}")
        if problem := not_unicode(sentence):
            raise SentenceError(index, problem)
    return sentences


def check_prefixes(prefix, rows: list[list], unknown, unknown_name: str, limit: int | None = None) -> None:
    """A `SentenceError` naming the first sentence whose target prefix, as `rows` of tokens (ids or strings, as
    `unknown` is), has the unknown token (`unknown_name`: the search would write it, and the translation would not
    start with the prefix), or leaves no room in the model's `limit` learned positions. (A special token's text in a
    prefix is text: `text_as_text`.)"""
    for index, row in enumerate(rows):
        if unknown is not None and unknown in row:
            reason = f"the prefix {prefix[index]!r} has a token the target vocabulary lacks ({unknown_name})"
            raise SentenceError(index, reason)
        if limit is not None and len(row) >= limit:
            reason = (f"the prefix has {len(row)} tokens; the model writes at most {limit} (its learned positions), "
                      "the end of sentence included")  # fmt: skip
            raise SentenceError(index, reason)


def check_terms(terms, rows: list[list[list[int]]], tokenizer, rooms: list[int] | None) -> None:
    """A `SentenceError` naming the first sentence with a term of no text (blank), or whose token ids (`rows`) are
    none or hold the unknown token, or whose terms need more tokens than `rooms[i]`, the most its translation may
    have. (A special token's text in a term is text: `text_as_text`.)"""
    for index, (sentence_terms, sentence_rows) in enumerate(zip(terms, rows)):
        for term, row in zip(sentence_terms, sentence_rows):
            problem = "no text" if is_blank(term) else term_problem(row, tokenizer)
            if problem:
                raise SentenceError(index, f"the term {term!r} has {problem}")
        needed = sum(map(len, sentence_rows))
        if rooms is not None and needed > rooms[index]:
            raise SentenceError(
                index, f"its terms have {needed} tokens; its translation has at most {rooms[index]} (max_length)"
            )


def term_problem(row: list[int], tokenizer) -> str | None:
    """What keeps a term's token ids from being written: none, or the unknown token."""
    if not row:
        return "no tokens"
    if tokenizer.unk_token_id is not None and tokenizer.unk_token_id in row:
        return f"a token the target vocabulary lacks ({tokenizer.unk_token})"
    return None
