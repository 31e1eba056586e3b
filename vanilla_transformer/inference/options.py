"""What the two translators (`translators.py`) share: a `Translation`, the `Guards` on a search's output, the search
settings asked for, and how sentences are batched and n-best lists made distinct."""

import functools
from dataclasses import dataclass


@dataclass(frozen=True)
class Translation:
    text: str
    score: float | None  # what beam search ranks by (see the module's docstring); None where not computed
    at_limit: bool = False  # the search stopped it at its length limit, before its end of sentence


@dataclass(frozen=True)
class Guards:
    """Fairseq's and CTranslate2's guards on a search's output: each sentence's limit is
    min(max_length, int(max_len_a * source tokens + max_len_b)) new tokens (the source counted with its </s>, as
    fairseq counts it; max_len_b None: max_length alone); no n-gram of `no_repeat_ngram_size` tokens twice; tokens
    already written have their probabilities divided by `repetition_penalty` (CTRL's). None: the model's generation
    config's."""

    max_len_a: float = 0.0
    max_len_b: int | None = None
    no_repeat_ngram_size: int | None = None
    repetition_penalty: float | None = None

    def limits(self, source_lengths: list[int], max_length: int) -> list[int]:
        if self.max_len_b is None and not self.max_len_a:
            return [max_length] * len(source_lengths)
        b = self.max_len_b or 0
        return [max(1, min(max_length, int(self.max_len_a * length + b))) for length in source_lengths]

    def repetition(self, generation_config) -> dict:
        """generate()'s and ctranslate2's settings for the repetition guards (their arguments have one name)."""
        size = self.no_repeat_ngram_size
        penalty = self.repetition_penalty
        size = generation_config.no_repeat_ngram_size or 0 if size is None else size
        penalty = generation_config.repetition_penalty or 1.0 if penalty is None else penalty
        if size < 0 or penalty <= 0:
            raise ValueError(f"no_repeat_ngram_size ({size}) must be >= 0 and repetition_penalty ({penalty}) > 0")
        return {"no_repeat_ngram_size": int(size), "repetition_penalty": float(penalty)}


NO_GUARDS = Guards()  # every guard the model's generation config's


def search_settings(generation_config, num_beams, length_penalty, n_best: int) -> tuple[int, float]:
    """The beam size and length penalty asked for, else the model's generation config's; checked against n_best."""
    num_beams = num_beams or generation_config.num_beams or 1
    if length_penalty is None:  # generate()'s default where the generation config leaves it unset
        length_penalty = 1.0 if generation_config.length_penalty is None else generation_config.length_penalty
    check_search(num_beams, n_best)
    return num_beams, length_penalty


def check_search(num_beams: int, n_best: int) -> None:
    if n_best < 1 or num_beams < 1:
        raise ValueError(f"n_best ({n_best}) and num_beams ({num_beams}) must be at least 1.")
    if n_best > num_beams:
        raise ValueError(
            f"n_best {n_best}: beam search keeps only num_beams={num_beams} hypotheses; use a larger beam."
        )


def prefix_texts(prefix: list[str | None], count: int) -> list[str]:
    """One target prefix per sentence, "" for none; a ValueError where their numbers differ."""
    if len(prefix) != count:
        raise ValueError(f'{len(prefix)} prefixes for {count} sentences: give one per sentence ("" for none)')
    return [text or "" for text in prefix]


def grouped_batches(keys: list, batch_size: int) -> list[list[int]]:
    """The sentences' indices in batches of at most `batch_size`, each of one key (their prefixes' length, their
    length limit), in input order within a key."""
    groups = {}
    for index, key in enumerate(keys):
        groups.setdefault(key, []).append(index)
    return [group[i : i + batch_size] for group in groups.values() for i in range(0, len(group), batch_size)]


def distinct_texts(results: list[list[Translation]], n_best: int) -> list[list[Translation]]:
    """Each sentence's translations with each text once, the best-scored kept (they come best first), at most
    `n_best`."""
    kept = []
    for translations in results:
        texts, unique = set(), []
        for translation in translations:
            if translation.text not in texts:
                texts.add(translation.text)
                unique.append(translation)
        kept.append(unique[:n_best])
    return kept


def blank_stays_blank(translate):
    """A translator's `translate` that answers a blank sentence (empty, or spaces only) with one empty translation
    (score 0.0) without searching, whatever its prefix or terms, and no sentences with no translations: a search
    from an empty source writes whatever the model likes best, not nothing. The prefixes and terms of the other
    sentences go with them; lists of the wrong length go to `translate` whole, which names them."""

    @functools.wraps(translate)
    def translate_the_others(self, sentences, *args, prefix=None, constraints=None, **kwargs):
        sentences = list(sentences)
        others = [index for index, sentence in enumerate(sentences) if sentence.strip()]
        if not sentences:
            return []
        if len(others) == len(sentences) or any(
            values is not None and len(values) != len(sentences) for values in (prefix, constraints)
        ):
            return translate(self, sentences, *args, prefix=prefix, constraints=constraints, **kwargs)

        def picked(values):
            return None if values is None else [values[index] for index in others]

        found = iter(
            translate(self, picked(sentences), *args, prefix=picked(prefix), constraints=picked(constraints), **kwargs)
            if others
            else []
        )
        return [next(found) if sentence.strip() else [Translation("", 0.0, False)] for sentence in sentences]

    return translate_the_others
