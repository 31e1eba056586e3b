"""The pieces the argument dataclasses are made of: checked types, which argparse calls on a flag's text and
`Checked.__post_init__` on values given in Python (each returns a plain int or float, which checkpoints, trackers and
JSON take as they are); `option`, a dataclass field with its help line; and `ArgumentParser`, transformers'
`HfArgumentParser` with each field as one dashed option."""

import argparse
import dataclasses
import math
import numbers
import os
import types
import typing
from collections.abc import Iterable
from dataclasses import field

import numpy
from transformers import HfArgumentParser

from ...errors import is_whole
from ...inference.checks import MOST_LENGTH_PENALTY
from ...inference.options import MAX_BEAMS, WHY_MAX_BEAMS


def integer(value) -> int:
    """A flag's text as an integer, or an integer given in Python; a float (2.5, even 2.0) or a bool is refused
    rather than rounded."""
    if not isinstance(value, str) and not is_whole(value):
        raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}")
    return int(value)


def real(value) -> float:
    """A flag's text as a float, or a number given in Python; a bool or a string of another kind is refused."""
    if isinstance(value, bool) or not isinstance(value, (str, numbers.Real)):
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}")
    return float(value)


class PositiveInt(int):
    def __new__(cls, value):
        number = integer(value)
        if number <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
        return number


MOST_SEED = 2**32 - 1  # numpy's generators take seeds below 2**32


class Seed(int):
    def __new__(cls, value):
        number = integer(value)
        if not 0 <= number <= MOST_SEED:
            raise argparse.ArgumentTypeError(f"expected a seed from 0 to {MOST_SEED} (2**32 - 1), got {value}")
        return number


class BeamSize(int):
    def __new__(cls, value):
        number = integer(value)
        if not 1 <= number <= MAX_BEAMS:
            raise argparse.ArgumentTypeError(
                f"expected a beam size from 1 to {MAX_BEAMS} ({WHY_MAX_BEAMS}), got {value}"
            )
        return number


MOST_VOCABULARY = 2**20  # pieces: four times the largest BPE vocabularies in use; the trainer allocates per piece


class VocabularySize(int):
    def __new__(cls, value):
        number = integer(value)
        if not 1 <= number <= MOST_VOCABULARY:
            raise argparse.ArgumentTypeError(
                f"expected a vocabulary size from 1 to {MOST_VOCABULARY:,} (the BPE trainer's memory grows with it), "
                f"got {value}"
            )
        return number


class NonNegativeInt(int):
    def __new__(cls, value):
        number = integer(value)
        if number < 0:
            raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
        return number


class Probability(float):
    def __new__(cls, value):
        number = real(value)
        if not 0.0 <= number < 1.0:
            raise argparse.ArgumentTypeError(f"expected a value in [0, 1), got {value}")
        return number


class PositiveFloat(float):
    def __new__(cls, value):
        number = real(value)
        if not 0 < number < math.inf:
            raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {value}")
        return number


class NonNegativeFloat(float):
    def __new__(cls, value):
        number = real(value)
        if not 0 <= number < math.inf:
            raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {value}")
        return number


class FiniteFloat(float):
    def __new__(cls, value):
        number = real(value)
        if not math.isfinite(number):
            raise argparse.ArgumentTypeError(f"expected a finite number, got {value}")
        return number


class LengthPenalty(float):
    """A length penalty alpha the searches can use (`MOST_LENGTH_PENALTY` either way at most)."""

    def __new__(cls, value):
        number = FiniteFloat(value)
        if abs(number) > MOST_LENGTH_PENALTY:
            raise argparse.ArgumentTypeError(f"expected a number from -{MOST_LENGTH_PENALTY:g} to "
                                             f"{MOST_LENGTH_PENALTY:g}, got {value}")  # fmt: skip
        return number


class Port(int):
    def __new__(cls, value):
        number = integer(value)
        if not 1 <= number <= 65535:
            raise argparse.ArgumentTypeError(f"expected a port from 1 to 65535, got {value}")
        return number


def at_most(kind, most, why: str):
    """A checked type (`kind`) whose values are at most `most` too (`why`, for its message)."""

    def checked(value):
        number = kind(value)
        if number > most:
            raise argparse.ArgumentTypeError(f"expected at most {most} ({why}), got {value}")
        return number

    checked.__name__ = kind.__name__  # argparse names a type by it: "invalid PositiveInt value"
    return checked


CHECKED_TYPES = (
    PositiveInt,
    VocabularySize,
    NonNegativeInt,
    Probability,
    PositiveFloat,
    NonNegativeFloat,
    FiniteFloat,
    LengthPenalty,
    Port,
    Seed,
)


class ArgumentsError(ValueError):
    """Flags that cannot be used together; the message names them."""


def option(default=None, help: str = "", **argparse_kwargs):
    """A field of an arguments dataclass: its default and help line (and any choices, metavar, ...)."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help, **argparse_kwargs})
    return field(default=default, metadata={"help": help, **argparse_kwargs})


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def option_flag(name: str, value) -> str:
    """An option's value as the flag that gives it: `--d-model 128`, `--no-share-embeddings`, `no --d-k` (unset)."""
    if value is None:
        return f"no {flag_name(name)}"
    if isinstance(value, bool):
        return flag_name(name if value else f"no_{name}")
    return f"{flag_name(name)} {value}"


class DashedOptions:
    """An argument group that takes each option under its dashed spelling only (`--max-tokens`, not `--max_tokens`):
    the one the README, `--help` and the error messages show."""

    def __init__(self, group):
        self.group = group

    def add_argument(self, *names, **kwargs):
        return self.group.add_argument(*(name for name in names if "_" not in name), **kwargs)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default after its help line, unless the help line says it (or there is none to say)."""

    def _get_help_string(self, action):
        if action.default is None or "default:" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


SHORT_USAGE = 12  # lines: a longer usage is one line before an error


class ArgumentParser(HfArgumentParser):
    """transformers' `HfArgumentParser`, with each dataclass field as one dashed option."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, formatter_class=kwargs.pop("formatter_class", HelpFormatter), **kwargs)

    def error(self, message: str):
        """argparse's usage and error, the usage cut to its first line where it is long (train's runs to some 80
        lines, which push the one line that matters out of sight), and status 2."""
        usage = self.format_usage()
        if usage.count("\n") > SHORT_USAGE:
            usage = f"usage: {self.prog} [options] ({self.prog} --help lists them)\n"
        self.exit(2, f"{usage}{self.prog}: error: {message}\n")

    @staticmethod
    def _parse_dataclass_field(parser, field):
        HfArgumentParser._parse_dataclass_field(DashedOptions(parser), field)
        if field.type == bool | None and field.default is None:  # a switch whose default is not False: --no-* too
            flag = "--no-" + field.name.replace("_", "-")
            parser.add_argument(flag, action="store_false", dest=field.name, default=None, help=field.metadata["help"])


def plain_value(name: str, value, kinds: tuple, listed):
    """A value given in Python for the option `name` of the `kinds` (`listed`: a list's items) that the checked types
    do not check: a bool for a switch (the string "False" would be true), a string for a text (a path as its string;
    not empty), a list for a list (one string would be a list of its characters); a ValueError naming the flag
    otherwise."""
    plain = tuple(kind for kind in kinds if kind in (bool, str))
    if isinstance(value, str) and not value and str in kinds:  # `--output-dir ''`, an unset variable: not the default
        raise ValueError(f"{flag_name(name)}: an empty string; give a value, or leave the flag out for its default")
    if value is None or (plain and isinstance(value, plain)):
        return value
    if bool in kinds and isinstance(value, numpy.bool_):
        return bool(value)
    if str in kinds and isinstance(value, os.PathLike):
        return os.fspath(value)
    if listed is not None and not isinstance(value, (str, bytes)) and isinstance(value, Iterable):
        return list(value)
    if plain or listed is not None:
        expected = {bool: "True or False", str: "a string"}.get(plain[0], "") if plain else "a list"
        raise ValueError(f"{flag_name(name)}: expected {expected}, got {value!r}")
    return value


def check_choice(item: dataclasses.Field, value) -> None:
    """A value given in Python (each, for a list) must be one of the option's choices, as the parser checks a flag's;
    a ValueError naming the flag otherwise."""
    choices = item.metadata.get("choices")
    for each in [] if value is None or choices is None else value if isinstance(value, list) else [value]:
        if each not in choices:
            raise ValueError(f"{flag_name(item.name)}: {each!r}; expected one of {', '.join(map(str, choices))}")


class Checked:
    """Values given in Python are checked by the same types as the command line's, naming the flag."""

    @classmethod
    def from_namespace(cls, namespace: argparse.Namespace):
        """The group of a command's parsed flags: each of its options, by name."""
        return cls(**{item.name: getattr(namespace, item.name) for item in dataclasses.fields(cls)})

    def __post_init__(self):
        for item in dataclasses.fields(self):
            kinds = item.type.__args__ if isinstance(item.type, types.UnionType) else (item.type,)
            kind = next((k for k in kinds if k in CHECKED_TYPES), None)
            listed = next((typing.get_args(k)[0] for k in kinds if typing.get_origin(k) is list), None)
            value = plain_value(item.name, getattr(self, item.name), kinds, listed)
            object.__setattr__(self, item.name, value)
            check_choice(item, value)
            if value is None or (kind is None and listed not in CHECKED_TYPES):
                continue
            try:
                checked = kind(value) if kind is not None else [listed(element) for element in value]
            except (argparse.ArgumentTypeError, TypeError, ValueError) as error:
                raise ValueError(f"{flag_name(item.name)}: {error}") from None
            object.__setattr__(self, item.name, checked)
