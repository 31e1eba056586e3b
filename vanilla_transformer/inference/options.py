"""What the two translators (`translators.py`) share: a `Translation`, the `SearchOptions` a translation asks for
(with the `Guards` on a search's output and the `SearchRules` of the package's own search), and how sentences are
batched and n-best lists made distinct."""

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from .checks import (
    OptionError,
    SentenceError,
    check_finite,
    check_kind,
    check_length_penalty,
    check_whole,
    is_blank,
    sentences_given,
    texts_given,
)

MAX_BEAMS = 1024
WHY_MAX_BEAMS = "a sentence's hypotheses are decoded together, a batch row and a cache each"
ENGINES = ("auto", "torch", "ctranslate2")  # auto: ctranslate2 for an exported folder, torch for a model folder


@dataclass(frozen=True)
class Translation:
    text: str
    score: float | None  # what beam search ranks by (see the module's docstring); None where not computed
    at_limit: bool = False  # the search stopped it at its length limit, before its end of sentence
    tokens: tuple[int, ...] | None = field(default=None, compare=False)  # the target ids written, </s> last if any
    alignment: object = field(default=None, compare=False)  # its `Alignment` (alignment.py), when asked for


GUARDS = ("no_repeat_ngram_size", "repetition_penalty")


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

    def __post_init__(self):
        check_finite("max_len_a", self.max_len_a, at_least=0.0)
        if self.max_len_b is not None:
            check_whole("max_len_b", self.max_len_b, at_least=-(2**31))  # a*length + b may be negative: at least 1
        if self.no_repeat_ngram_size is not None:
            check_whole("no_repeat_ngram_size", self.no_repeat_ngram_size, at_least=0)
        if self.repetition_penalty is not None:
            check_finite("repetition_penalty", self.repetition_penalty, above=0.0)

    def limits(self, source_lengths: list[int], max_length: int) -> list[int]:
        if self.max_len_b is None and not self.max_len_a:
            return [max_length] * len(source_lengths)
        b = self.max_len_b or 0
        return [max(1, int(min(max_length, self.max_len_a * length + b))) for length in source_lengths]  # a*n: inf

    @property
    def repeats(self) -> bool:
        """Whether a guard on repetition is asked for (the generation config's own are not asked for here)."""
        return bool(self.no_repeat_ngram_size) or self.repetition_penalty not in (None, 1.0)

    def repetition(self, generation_config) -> dict:
        """generate()'s and ctranslate2's settings for the repetition guards (their arguments have one name)."""
        size = self.no_repeat_ngram_size
        penalty = self.repetition_penalty
        size = generation_config.no_repeat_ngram_size or 0 if size is None else size
        penalty = generation_config.repetition_penalty or 1.0 if penalty is None else penalty
        if size < 0 or penalty <= 0:
            message = f"no_repeat_ngram_size ({size}) must be >= 0 and repetition_penalty ({penalty}) > 0"
            raise OptionError(GUARDS, message)
        return {"no_repeat_ngram_size": int(size), "repetition_penalty": float(penalty)}


NO_GUARDS = Guards()  # every guard the model's generation config's


@dataclass(frozen=True)
class SearchRules:
    """Where fairseq's and CTranslate2's beam searches differ, as the package's own search (`search`) follows them:
    terms follow fairseq's (`FAIRSEQ`), prefixes CTranslate2's (`CTRANSLATE2`), as the export translates them."""

    name: str
    prefix_in_score: bool  # a prefix's log-probabilities count in the score (--prefix-size), else its length only
    keep_every_end: bool  # every hypothesis that ends at a step is kept, else hypotheses finish until k have
    only_best_ends_after_prefix: bool  # right after a prefix, the end of sentence finishes only the best candidate
    min_length: int  # tokens before the end of sentence may come: fairseq's 1, generate()'s and CTranslate2's 0


FAIRSEQ = SearchRules("fairseq", prefix_in_score=True, keep_every_end=False, only_best_ends_after_prefix=False,
                      min_length=1)  # fmt: skip
CTRANSLATE2 = SearchRules("ctranslate2", prefix_in_score=False, keep_every_end=True, only_best_ends_after_prefix=True,
                          min_length=0)  # fmt: skip


@dataclass(frozen=True)
class SearchOptions:
    """Everything a translation asks of the search, in one record that the commands, the server, both translators
    and the search take whole (as CTranslate2's `TranslationOptions`):

    - `num_beams`, `length_penalty`: None is the model's generation config's;
    - `max_length` new tokens at most (a prefix's not counted), and the `guards` on length and repetition;
    - `n_best` translations a sentence, best first; `distinct`: each text once (the list may be shorter);
      `scores`: computed (None: when n_best > 1; CTranslate2 always computes them);
    - `prefix`: a target prefix per sentence ("" for none), where each translation starts;
    - `terms`: a list of terms per sentence, which each translation contains, in order when `ordered`;
    - `alignment`: each translation's word alignment with its source, from the tokens the search wrote;
    - `batch_size` sentences at most a batch, and `max_tokens` source tokens at most (padding included; None: no
      budget, fairseq's --max-tokens): the sentences are sorted by length before they are cut into batches;
      `patience` (CTranslate2's: it stops once num_beams * patience
      hypotheses have finished; None: 1 where generate() stops early, else 2);
    - `rules`: where the package's own search (terms, prefixes) follows fairseq or CTranslate2 (None: fairseq's for
      terms, CTranslate2's for prefixes).

    A ValueError names a value out of range when the record is made."""

    num_beams: int | None = None
    length_penalty: float | None = None
    max_length: int = 256
    n_best: int = 1
    distinct: bool = False
    scores: bool | None = None
    prefix: tuple[str, ...] | None = None
    terms: tuple[tuple[str, ...], ...] | None = None
    ordered: bool = False
    alignment: bool = False
    guards: Guards = NO_GUARDS
    batch_size: int = 32
    max_tokens: int | None = None
    patience: float | None = None
    rules: SearchRules | None = None

    def __post_init__(self):
        if self.prefix is not None:
            prefix = texts_given("prefix", self.prefix, "a list of one prefix per sentence", "a string or None",
                                 (str, type(None)))  # fmt: skip
            # a blank prefix (spaces, invisible characters) is none, as a blank sentence is nothing to translate
            object.__setattr__(self, "prefix", tuple("" if text is None or is_blank(text) else text for text in prefix))
        if self.terms is not None:
            terms = texts_given(
                "terms", self.terms, "a list of one list of terms per sentence", "a list of strings", Iterable
            )  # fmt: skip  (a string among them is refused below)
            terms = (texts_given("terms", t, "a list of strings", "a string", where=f"terms[{i}]")
                     for i, t in enumerate(terms))  # fmt: skip
            object.__setattr__(self, "terms", tuple(tuple(t) for t in terms))
        for name in ("max_length", "n_best", "batch_size", "max_tokens", "num_beams"):
            if getattr(self, name) is not None or name not in ("max_tokens", "num_beams"):  # those two: None for none
                check_whole(name, getattr(self, name))
        for name in ("distinct", "ordered", "alignment", "scores"):
            if getattr(self, name) is not None:
                check_kind(name, getattr(self, name), bool, "True or False")
        check_kind("guards", self.guards, Guards, "a Guards")
        if self.rules is not None:
            check_kind("rules", self.rules, SearchRules, "a SearchRules (FAIRSEQ or CTRANSLATE2) or None")
        if self.num_beams is not None:
            check_search(self.num_beams, self.n_best)
        if self.length_penalty is not None:
            check_length_penalty(self.length_penalty)
        if self.patience is not None:
            check_finite("patience", self.patience, above=0.0)
        if self.terms is not None and self.prefix is not None:
            raise ValueError("terms and prefix together: give one of them")

    def resolved(self, generation_config) -> "SearchOptions":
        """The options with the beam size and length penalty that the search uses: those asked for, else the
        model's generation config's; checked against n_best."""
        num_beams = self.num_beams or generation_config.num_beams or 1
        length_penalty = self.length_penalty
        if length_penalty is None:  # generate()'s default where the generation config leaves it unset
            length_penalty = 1.0 if generation_config.length_penalty is None else generation_config.length_penalty
        check_search(num_beams, self.n_best)
        return replace(self, num_beams=num_beams, length_penalty=length_penalty)

    @property
    def kept(self) -> int:
        """How many hypotheses a sentence's search returns: every beam's when distinct texts are picked from them."""
        return self.num_beams if self.distinct else self.n_best

    def for_sentences(self, indices: list[int]) -> "SearchOptions":
        """The options of the sentences at `indices`: their prefixes and terms only."""
        picked = {name: [getattr(self, name)[i] for i in indices] for name in ("prefix", "terms")
                  if getattr(self, name) is not None}  # fmt: skip
        return replace(self, **picked)

    def guides(self, index: int) -> bool:
        """Whether sentence `index` has a prefix or terms, which its search must follow ("" and no terms: none)."""
        return bool(self.prefix and self.prefix[index]) or bool(self.terms and self.terms[index])

    @property
    def unguided(self) -> "SearchOptions":
        """The options without prefixes or terms."""
        return replace(self, prefix=None, terms=None)

    def check_count(self, count: int) -> None:
        """A ValueError where the prefixes or the lists of terms are not one per sentence."""
        for name, what in (("prefix", "prefixes"), ("terms", "lists of terms")):
            values = getattr(self, name)
            if values is not None and len(values) != count:
                raise ValueError(f"{len(values)} {what} for {count} sentences: give one per sentence")


def search_options(options: SearchOptions | None, changes: dict) -> SearchOptions:
    """`options` (default: `SearchOptions()`) with the keyword `changes` a caller gave instead: a TypeError names
    a keyword that is not an option."""
    if options is not None and not isinstance(options, SearchOptions):
        raise TypeError(f"options must be a SearchOptions or None, got {options!r}: give its fields as keywords")
    return replace(options or SearchOptions(), **changes) if changes else options or SearchOptions()


def check_search(num_beams: int, n_best: int) -> None:
    if n_best < 1 or num_beams < 1:
        raise OptionError(("n_best", "num_beams"), f"n_best ({n_best}) and num_beams ({num_beams}) must be at least 1.")
    if num_beams > MAX_BEAMS:
        raise OptionError(("num_beams",), f"num_beams ({num_beams}) must be at most {MAX_BEAMS}: {WHY_MAX_BEAMS}")
    if n_best > num_beams:
        raise OptionError(
            ("n_best", "num_beams"),
            f"n_best {n_best}: beam search keeps only num_beams={num_beams} hypotheses; use a larger beam.",
        )


def key_groups(keys: list, order=None) -> list[list[int]]:
    """The indices of `keys` (in `order`, default input order) grouped by key."""
    groups = {}
    for index in range(len(keys)) if order is None else order:
        groups.setdefault(keys[index], []).append(index)
    return list(groups.values())


def grouped_batches(keys: list, lengths: list[int], options: "SearchOptions") -> list[list[int]]:
    """The sentences' indices in batches, each of one key (their prefixes' length, their length limit): within a
    key, longest first (so that a batch's sentences have near lengths and little padding), at most
    `options.batch_size` sentences and `options.max_tokens` tokens of `lengths` a batch, padding included. A
    sentence longer than the budget is a batch of its own."""
    budget, batches = options.max_tokens or float("inf"), []
    for group in key_groups(keys, order=sorted(range(len(keys)), key=lambda i: -lengths[i])):
        batch = []
        for index in group:
            if batch and (len(batch) == options.batch_size or (len(batch) + 1) * lengths[batch[0]] > budget):
                batches.append(batch)
                batch = []
            batch.append(index)
        batches.append(batch)
    return batches


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


def in_parts(parts: list[list[int]], translate_part) -> list:
    """The results of `translate_part(indices)` for each part of the sentences (lists of their indices, together
    each sentence once), put back in the sentences' order; a `SentenceError` names its sentence among them all."""
    results = [None] * sum(map(len, parts))
    for indices in filter(None, parts):
        try:
            found = translate_part(indices)
        except SentenceError as error:
            raise SentenceError(indices[error.index], error.reason) from error
        for index, result in zip(indices, found):
            results[index] = result
    return results


def blank_translation(options: SearchOptions) -> Translation:
    """A blank sentence's translation: empty, score 0.0, with an empty alignment when asked for."""
    if not options.alignment:
        return Translation("", 0.0, False, ())
    from .alignment import Alignment

    return Translation("", 0.0, False, (), Alignment([], []))


def blank_stays_blank(translate):
    """A translator's `translate(sentences, options=None, **changes)` that answers a blank sentence (empty, or
    spaces only) with one empty translation (score 0.0) without searching, whatever its prefix or terms, and no
    sentences with no translations: a search from an empty source writes whatever the model likes best, not nothing.
    Invisible format characters count as spaces (`checks.is_blank`).
    The options are checked against the engine (`check`) and resolved against its generation config first, blank
    sentences or not; the other sentences go to `translate` with their prefixes and terms, and those whole
    `SearchOptions`."""

    @functools.wraps(translate)
    def translate_the_others(self, sentences, options: SearchOptions | None = None, **changes):
        sentences, options = sentences_given(sentences), search_options(options, changes)
        options.check_count(len(sentences))
        self.check(options)  # what the engine cannot do, and the beams, refused also when every sentence is blank
        options = options.resolved(self.generation_config)
        others = [index for index, sentence in enumerate(sentences) if not is_blank(sentence)]
        if not sentences:
            return []
        if len(others) == len(sentences):
            return translate(self, sentences, options)
        try:
            found = iter(
                translate(self, [sentences[i] for i in others], options.for_sentences(others)) if others else []
            )
        except SentenceError as error:  # named among the sentences given, blank ones included
            raise SentenceError(others[error.index], error.reason) from error
        return [[blank_translation(options)] if is_blank(sentence) else next(found) for sentence in sentences]

    return translate_the_others
