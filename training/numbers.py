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


def digit_count(n: int) -> int:
    return len(str(n))


def digit_buckets(max_digits: int) -> dict[int, range]:
    """The numbers with 1, 2, ..., max_digits digits: {1: range(0, 10), 2: range(10, 100), ...}."""
    return {d: range(0 if d == 1 else 10 ** (d - 1), 10**d) for d in range(1, max_digits + 1)}


def split_numbers(seed: int, train_size: int, eval_size: int, max_digits: int) -> dict[str, list[int]]:
    """Numbers of every magnitude, each digit count about equally represented in every split.

    Each digit count gets an equal share of each split. The held-out splits take, per digit count, up to
    eval_size / max_digits numbers, but never more than a fifth of that digit count's numbers each (there are only
    10 one-digit and 90 two-digit numbers); the rest of the digit count is the training pool, drawn without
    replacement, or cycled through in shuffled passes where the pool is smaller than the share (the short numbers).
    Zero is never held out: "null" occurs in no other number, so no model could infer it.
    """
    rng = random.Random(seed)
    splits = {"train": [], "validation": [], "test": []}
    for digits, numbers in digit_buckets(max_digits).items():
        pool = [n for n in numbers if n != 0]
        rng.shuffle(pool)
        held_out = min(eval_size // max_digits, len(numbers) // 5)
        splits["validation"] += pool[:held_out]
        splits["test"] += pool[held_out : 2 * held_out]
        train_pool = pool[2 * held_out :] + ([0] if digits == 1 else [])
        share = train_size // max_digits
        drawn = []
        while len(drawn) < share:
            rng.shuffle(train_pool)
            drawn += train_pool[: share - len(drawn)]
        splits["train"] += drawn
    for numbers in splits.values():
        rng.shuffle(numbers)
    return splits


def numbers_dataset(seed: int = 0, train_size: int = 30000, eval_size: int = 600, max_digits: int = 6):
    """Train, validation and test splits of number translations (0 to 10**max_digits - 1), with a `digits` column
    (the number's digit count) by which evaluation reports exact match per magnitude.

    Validation and test numbers never occur in training; the same seed gives the same splits.
    """
    features = datasets.Features({
        "translation": datasets.Translation(languages=["en", "de"]),
        "digits": datasets.Value("int32"),
    })
    splits = split_numbers(seed, train_size, eval_size, max_digits)
    return datasets.DatasetDict({
        split: datasets.Dataset.from_dict({
            "translation": [{"en": english(n), "de": german(n)} for n in numbers],
            "digits": [digit_count(n) for n in numbers],
        }, features=features)
        for split, numbers in splits.items()
    })
