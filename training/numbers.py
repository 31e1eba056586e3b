"""The embedded default task: English number words to German number words.

"forty-two" -> "zweiundvierzig", "three thousand one hundred five" -> "dreitausendeinhundertfünf".
German writes a number as one word and puts units before tens ("two-and-forty"), so the model has to reorder and to
build compounds out of subwords: a small but real translation problem that needs no download.
"""

import random

import datasets

EN_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
           "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
EN_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
DE_ONES = ["null", "eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun", "zehn", "elf", "zwölf",
           "dreizehn", "vierzehn", "fünfzehn", "sechzehn", "siebzehn", "achtzehn", "neunzehn"]
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
    """A multiplier in front of 'hundert' or 'tausend': 'ein', 'zwei', ..., 'dreiundzwanzig'."""
    return "ein" if n == 1 else german(n)


def number_pairs(seed: int, size: int, max_number: int, split: str):
    """Yield translation rows for a deterministic, disjoint split of the numbers [0, max_number)."""
    numbers = list(range(max_number))
    random.Random(seed).shuffle(numbers)
    held_out = min(size, max_number // 10)
    chosen = {"validation": numbers[:held_out], "test": numbers[held_out : 2 * held_out],
              "train": numbers[2 * held_out : 2 * held_out + size]}[split]
    for n in chosen:
        yield {"translation": {"en": english(n), "de": german(n)}}


def numbers_dataset(seed: int = 0, train_size: int = 20000, eval_size: int = 500, max_number: int = 100_000):
    """Train, validation and test splits of number translations, generated with `Dataset.from_generator`.

    Validation and test numbers never occur in training; the same seed gives the same splits.
    """
    sizes = {"train": train_size, "validation": eval_size, "test": eval_size}
    return datasets.DatasetDict({
        split: datasets.Dataset.from_generator(
            number_pairs,
            gen_kwargs={"seed": seed, "size": size, "max_number": max_number, "split": split},
            features=datasets.Features({"translation": datasets.Translation(languages=["en", "de"])}),
        )
        for split, size in sizes.items()
    })
