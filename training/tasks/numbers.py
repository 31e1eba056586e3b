"""The embedded default task: English number words to German number words.

"forty-two" -> "zweiundvierzig", "three thousand one hundred five" -> "dreitausendeinhundertfünf", for every number
from 0 to 999,999. German writes a number as one word and puts units before tens ("two-and-forty"), so the model has
to reorder and to build compounds out of subwords: a small but real translation problem that needs no download.
Each digit count is an equal share of every split, so that "seven" is learned and measured as well as "seven hundred
thousand"; evaluation reports exact match per digit count (the `digits` column).
"""

import random

import datasets

EN_ONES = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
EN_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
DE_ONES = [
    "null",
    "eins",
    "zwei",
    "drei",
    "vier",
    "fünf",
    "sechs",
    "sieben",
    "acht",
    "neun",
    "zehn",
    "elf",
    "zwölf",
    "dreizehn",
    "vierzehn",
    "fünfzehn",
    "sechzehn",
    "siebzehn",
    "achtzehn",
    "neunzehn",
]
DE_TENS = ["", "", "zwanzig", "dreißig", "vierzig", "fünfzig", "sechzig", "siebzig", "achtzig", "neunzig"]


def english(n: int) -> str:
    """0 <= n < 1,000,000 in English words, American style: 'one thousand two hundred thirty-four'."""
    if n < 20:
        return EN_ONES[n]
    if n < 100:
        return EN_TENS[n // 10] + ("-" + EN_ONES[n % 10] if n % 10 else "")
    if n < 1000:
        return EN_ONES[n // 100] + " hundred" + (" " + english(n % 100) if n % 100 else "")
    return english(n // 1000) + " thousand" + (" " + english(n % 1000) if n % 1000 else "")


def german(n: int) -> str:
    """0 <= n < 1,000,000 in German words, written as one word: 'eintausendzweihundertvierunddreißig'."""
    if n < 20:
        return DE_ONES[n]
    if n < 100:
        units = n % 10
        return ("ein" if units == 1 else DE_ONES[units]) + "und" + DE_TENS[n // 10] if units else DE_TENS[n // 10]
    if n < 1000:
        rest = n % 100
        return _prefix(n // 100) + "hundert" + (german(rest) if rest else "")
    rest = n % 1000
    return _prefix(n // 1000) + "tausend" + (german(rest) if rest else "")


def _prefix(n: int) -> str:
    """A multiplier in front of 'hundert' or 'tausend': 'ein', 'zwei', ..., 'dreiundzwanzig', 'einhundertein'. A
    final 'eins' is 'ein' inside a word: 501,000 is 'fünfhunderteintausend'."""
    word = german(n)
    return word[:-1] if word.endswith("eins") else word


def digit_count(n: int) -> int:
    """1 for 0 to 9, 2 for 10 to 99, ..."""
    return len(str(n))


ZERO_DIGIT = 0.3  # the chance of each digit after the first being 0: round numbers are common in use, rare if uniform


def draw_number(rng: random.Random, digits: int) -> int:
    """A number of `digits` digits, each digit after the first 0 with probability ZERO_DIGIT, else 1 to 9; so "eight
    hundred", "one hundred thousand" or "three hundred thousand one hundred five" come up often, as people write them,
    where uniform draws would almost never give them."""
    if digits == 1:
        return rng.randrange(10)
    number = rng.randrange(1, 10)
    for _ in range(digits - 1):
        number = 10 * number + (0 if rng.random() < ZERO_DIGIT else rng.randrange(1, 10))
    return number


def split_numbers(seed: int, train_size: int, eval_size: int, max_digits: int) -> dict[str, list[int]]:
    """Numbers of every magnitude, each digit count an equal share of every split.

    The held-out splits take, per digit count, eval_size / max_digits numbers drawn uniformly without repeats, but
    never more than a fifth of that digit count's numbers each (there are only 10 one-digit and 90 two-digit numbers).
    Training draws its share of each digit count from the others with `draw_number`, with repeats: the short numbers
    are few, and the round ones frequent. Zero and one are never held out: "null" occurs in no other number, and
    "eins" alone is "ein" inside almost every other ("einhundert"), so no model could infer them.
    """
    rng = random.Random(seed)
    splits = {"train": [], "validation": [], "test": []}
    for digits in range(1, max_digits + 1):
        how_many = 10 if digits == 1 else 9 * 10 ** (digits - 1)  # numbers of this digit count, 0 and 1 included
        size = min(eval_size // max_digits, how_many // 5)
        held_out = rng.sample(range(2 if digits == 1 else 10 ** (digits - 1), 10**digits), 2 * size)
        splits["validation"] += held_out[:size]
        splits["test"] += held_out[size:]
        excluded, drawn = set(held_out), []
        while len(drawn) < train_size // max_digits:
            number = draw_number(rng, digits)
            if number not in excluded:
                drawn.append(number)
        splits["train"] += drawn
    for numbers in splits.values():
        rng.shuffle(numbers)
    return splits


def numbers_dataset(seed: int = 0, train_size: int = 30000, eval_size: int = 600, max_digits: int = 6):
    """Train, validation and test splits of number translations (0 to 10**max_digits - 1), with a `digits` column
    (the number's digit count) by which evaluation reports exact match per magnitude.

    Validation and test numbers never occur in training; the same seed gives the same splits.
    """
    features = datasets.Features(
        {
            "translation": datasets.Translation(languages=["en", "de"]),
            "digits": datasets.Value("int32"),
        }
    )
    splits = split_numbers(seed, train_size, eval_size, max_digits)
    return datasets.DatasetDict(
        {
            split: datasets.Dataset.from_dict(
                {
                    "translation": [{"en": english(n), "de": german(n)} for n in numbers],
                    "digits": [digit_count(n) for n in numbers],
                },
                features=features,
            )
            for split, numbers in splits.items()
        }
    )
