"""A small English-German parallel corpus, made here: the number words of the embedded number task ("forty-two" ->
"zweiundvierzig") and short sentences with numbers in digits, punctuation that Moses splits or escapes (`:` `%` `"`
`'` `-` `(`), and decimal commas ("3.5 kg" -> "3,5 kg").

The held-out sentences name people who never occur in training, some spelled with letters that occur nowhere else
(Zoltán, Bjørn, Ångström): words the BPE splits down to characters, and characters the dictionaries lack (<unk>).
"""

import random

from vanilla_transformer.training.tasks.numbers import draw_number, english, german, split_numbers

NOUNS = [
    ("bottles", "Flaschen"),
    ("books", "Bücher"),
    ("apples", "Äpfel"),
    ("chairs", "Stühle"),
    ("tickets", "Tickets"),
    ("cars", "Autos"),
    ("houses", "Häuser"),
    ("cats", "Katzen"),
    ("dogs", "Hunde"),
    ("letters", "Briefe"),
    ("eggs", "Eier"),
    ("trees", "Bäume"),
]
TRAIN_NAMES = ["Anna", "Peter", "Maria", "Tom", "Lisa", "Jan", "Sophie", "Max"]
HELD_OUT_NAMES = ["Zoltán", "Xiomara", "Bjørn", "Quirin", "Yusuf", "Ångström", "Kwame", "Fjodor"]
# (English, German); {n} and {m} are numbers, {name} a person, {en}/{de} a noun, {x}/{x_de} a decimal, {hh}:{mm} a time
TEMPLATES = [
    ("I have {n} {en}.", "Ich habe {n} {de}."),
    ("Do you have {n} {en}?", "Hast du {n} {de}?"),
    ("{name} bought {n} {en}, not {m}.", "{name} kaufte {n} {de}, nicht {m}."),
    ("We need {n} {en} by Monday!", "Wir brauchen {n} {de} bis Montag!"),
    ("Page {n}: {en} (new)", "Seite {n}: {de} (neu)"),
    ("It is {m}% cheaper.", "Es ist {m}% billiger."),
    ("The train leaves at {hh}:{mm}.", "Der Zug fährt um {hh}:{mm} ab."),
    ("Call {name} at 555-{n}.", "Ruf {name} unter 555-{n} an."),
    ('{name} said: "{n} {en}!"', '{name} sagte: "{n} {de}!"'),
    ("It's {m} o'clock, isn't it?", "Es ist {m} Uhr, nicht wahr?"),
    ("{name} has {x} kg of {en}.", "{name} hat {x_de} kg {de}."),
]
TRAIN_SIZE = 3000  # pairs: 40% number words, 60% sentences
HELD_OUT_SIZE = 300  # the test split: half number words, half sentences with held-out names
VALID_SIZE = 100


def sentence(rng: random.Random, names: list[str], number: int) -> tuple[str, str]:
    """One template filled in; `number` is the template's {n}, sometimes spelled out in words."""
    en, de = rng.choice(TEMPLATES)
    noun_en, noun_de = rng.choice(NOUNS)
    whole, tenth = rng.randrange(1, 100), rng.randrange(10)
    in_words = rng.random() < 0.2
    slots = dict(
        n=english(number) if in_words else str(number),
        m=str(rng.randrange(2, 100)),
        name=rng.choice(names),
        hh=str(rng.randrange(24)),
        mm=f"{rng.randrange(60):02d}",
        x=f"{whole}.{tenth}",
        x_de=f"{whole},{tenth}",
    )
    german_number = german(number) if in_words else str(number)
    return en.format(en=noun_en, **slots), de.format(de=noun_de, **{**slots, "n": german_number})


def pairs(rng: random.Random, numbers: list[int], size: int, names: list[str]) -> list[tuple[str, str]]:
    """`size` pairs: 40% the number words of the first of `numbers`, the rest sentences that name `names`."""
    words = [(english(n), german(n)) for n in numbers[: size * 2 // 5]]
    digits = [draw_number(rng, rng.randint(1, 5)) for _ in range(size - len(words))]
    made = words + [sentence(rng, names, n) for n in digits]
    rng.shuffle(made)
    return made


def corpus(seed: int = 0) -> dict[str, list[tuple[str, str]]]:
    """The train, valid and test splits as (English, German) pairs; the same seed gives the same corpus."""
    rng = random.Random(seed)
    numbers = split_numbers(seed, train_size=TRAIN_SIZE, eval_size=2 * HELD_OUT_SIZE, max_digits=6)
    test_words = [(english(n), german(n)) for n in numbers["test"][: HELD_OUT_SIZE // 2]]
    test_sentences = [sentence(rng, HELD_OUT_NAMES, draw_number(rng, rng.randint(1, 6))) for _ in test_words]
    return {
        "train": pairs(rng, numbers["train"], TRAIN_SIZE, TRAIN_NAMES),
        "valid": pairs(rng, numbers["validation"], VALID_SIZE, TRAIN_NAMES),
        "test": [pair for both in zip(test_words, test_sentences) for pair in both],
    }


def write_corpus(folder, seed: int = 0) -> None:
    """`train.en`, `train.de`, `valid.*` and `test.*` in `folder`: one sentence a line, raw text."""
    for split, made in corpus(seed).items():
        for index, language in enumerate(("en", "de")):
            text = "".join(pair[index] + "\n" for pair in made)
            (folder / f"{split}.{language}").write_text(text, encoding="utf-8")
