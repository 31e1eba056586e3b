"""What a corpus job makes of one window of records: `TranslateJob` translates its lines, `ScoreJob` scores its
pairs. Each gives the window's output in input order (`Done`): one output line per record (with an n-best list of
K, K lines; one, empty, for a blank line). It names a record it cannot read (not UTF-8, not a pair) by its input and
line; with `skip_invalid` it leaves that record's output blank (an empty line; `null` for a score) and counts it
instead, as it does for a line over the model's positions (which the translator otherwise reads from its first
tokens, with a warning). A sentence over `max_sentence_tokens` is named too (or blanked): the memory it would take
grows with the square of its length."""

import json
from dataclasses import dataclass, replace

from ..errors import CorpusError, warn
from ..inference.options import SearchOptions, SentenceError, Translation
from ..serving.documents import Document, split_document
from .reading import Record, TextInput


@dataclass(frozen=True)
class Done:
    """A window's output `text`, and what the progress and the summary count: its records (`lines`), the target
    tokens written or scored, and the records left blank under `skip_invalid`."""

    text: str
    lines: int
    tokens: int
    skipped: int


@dataclass(frozen=True)
class Layout:
    """How a `TranslateJob` reads its records and writes their translations: each line split into its sentences by
    the rules of `split_language` (None: each line whole); the second input of each record, if any, is a target
    `prefix` or its `terms` (tab-separated) (`extra`); `skip_invalid` leaves a line that cannot be translated blank
    instead of stopping; a sentence of more than `max_sentence_tokens` tokens cannot be translated."""

    split_language: str | None = None
    extra: str | None = None
    skip_invalid: bool = False
    max_sentence_tokens: int | None = None


class Usable:
    """The records of a window with a problem, named or (under `skip_invalid`) blanked and counted."""

    def __init__(self, records: list[Record], skip_invalid: bool):
        self.skipped: set[int] = set()  # indices in the window
        self.skip_invalid = skip_invalid
        for index, record in enumerate(records):
            if record.problem:
                self.refuse(index, record.problem)

    def refuse(self, index: int, problem: str) -> None:
        if not self.skip_invalid:
            raise CorpusError(f"{problem}; or pass --skip-invalid to leave it blank")
        self.skipped.add(index)


def length_problem(counts: list[int], positions: int | None, most: int | None, skip_invalid: bool,
                   what: str = "a sentence") -> str | None:  # fmt: skip
    """Why a record whose sentences (or sides, `what`) have `counts` tokens cannot be used: one over `most`
    (--max-sentence-tokens), or under `skip_invalid` over the model's `positions` (else the translator reads its
    first tokens, with a warning)."""
    longest = max(counts, default=0)
    if most is not None and longest > most:
        return f"{what} of {longest} tokens, over --max-sentence-tokens {most}; shorten or split it, or raise the limit"
    if skip_invalid and positions is not None and longest > positions:
        return f"{what} of {longest} tokens, over the model's {positions} positions; shorten or split it"
    return None


def lengths_checked(translator, most: int | None, skip_invalid: bool) -> bool:
    """Whether a window's token counts are needed: for `length_problem` to find anything."""
    return most is not None or (skip_invalid and translator.max_source_tokens is not None)


class TranslateJob:
    label = "translated"

    def __init__(self, translator, options: SearchOptions, layout: Layout, inputs: list[TextInput]):
        """`inputs`: the corpus's (the sentences', then the prefixes' or terms'), which messages name."""
        self.translator, self.options, self.layout, self.inputs = translator, options, layout, inputs

    def __call__(self, records: list[Record]) -> Done:
        usable = Usable(records, self.layout.skip_invalid)
        documents = [self.document(record, index in usable.skipped) for index, record in enumerate(records)]
        self.check_lengths(records, documents, usable)
        documents = [self.document(r, True) if i in usable.skipped else d for i, (r, d) in
                     enumerate(zip(records, documents))]  # fmt: skip
        sentences = [sentence for document in documents for sentence in document.sentences]
        try:
            results = self.translator.translate(sentences, self.window_options(records, usable))
        except SentenceError as error:  # a prefix or terms: one sentence a line
            raise CorpusError(f"{self.inputs[1].where(records[error.index].number)}: {error.reason}") from error
        texts = self.written(records, documents, results)
        tokens = sum(len(found[0].tokens or ()) for found in results if found)
        return Done("".join(texts), len(records), tokens, len(usable.skipped))

    def document(self, record: Record, skipped: bool) -> Document:
        """The line's sentences and layout: split by the language's rules, else the line whole as one sentence
        (a blank one too, so that each line has its prefix or terms); blank where it is skipped."""
        text = "" if skipped else record.fields[0]
        if self.layout.split_language is None:
            return Document([text], [0])
        return split_document(text, self.layout.split_language)

    def check_lengths(self, records: list[Record], documents: list[Document], usable: Usable) -> None:
        """Each line with a sentence that cannot be translated (`length_problem`) named, or skipped."""
        most, positions = self.layout.max_sentence_tokens, self.translator.max_source_tokens
        sentences = [sentence for document in documents for sentence in document.sentences]
        if not sentences or not lengths_checked(self.translator, most, usable.skip_invalid):
            return
        counts = iter(self.translator.count_tokens(sentences))
        for index, (record, document) in enumerate(zip(records, documents)):
            lengths = [next(counts) for _ in document.sentences]
            problem = length_problem(lengths, positions, most, usable.skip_invalid)
            if problem is not None and index not in usable.skipped:
                usable.refuse(index, f"{self.inputs[0].where(record.number)}: {problem}")
        if self.layout.extra == "prefix":
            self.check_prefix_lengths(records, usable)

    def check_prefix_lengths(self, records: list[Record], usable: Usable) -> None:
        """Each line whose target prefix (read token by token, as the translation's first tokens) is over
        --max-sentence-tokens or, under `skip_invalid`, the model's positions, named or skipped."""
        kept = [i for i in range(len(records)) if i not in usable.skipped and records[i].fields[1]]
        counts = self.translator.count_tokens([records[i].fields[1] for i in kept], target=True) if kept else []
        most, positions = self.layout.max_sentence_tokens, self.translator.max_source_tokens
        for index, count in zip(kept, counts):
            problem = length_problem([count], positions, most, usable.skip_invalid, "a prefix")
            if problem is not None:
                usable.refuse(index, f"{self.inputs[1].where(records[index].number)}: {problem}")

    def window_options(self, records: list[Record], usable: Usable) -> SearchOptions:
        """The options with this window's prefixes or terms (none for a line left blank)."""
        extra = self.layout.extra
        if extra is None:
            return self.options
        lines = ["" if i in usable.skipped else record.fields[1] for i, record in enumerate(records)]
        if extra == "prefix":
            return replace(self.options, prefix=tuple(lines))
        terms = [line.split("\t") if line else [] for line in lines]
        for record, row in zip(records, terms):
            if any(not term.strip() for term in row):
                raise CorpusError(f"{self.inputs[1].where(record.number)}: an empty term (two tabs in a row?)")
        return replace(self.options, terms=tuple(tuple(row) for row in terms))

    def written(self, records: list[Record], documents: list[Document], results) -> list[str]:
        """The window's output lines, in input order; a warning names each line whose translation stopped at its
        length limit."""
        found, lines = iter(results), []
        for record, document in zip(records, documents):
            translations = [next(found) for _ in document.sentences]
            if any(t and t[0].at_limit for t in translations):
                warn(f"{self.inputs[0].where(record.number)}: the translation stopped at its length limit before its "
                     "end; raise --max-length (or --max-len-a/--max-len-b)")  # fmt: skip
            lines += self.formatted(record, document, translations)
        return lines

    def formatted(self, record: Record, document: Document, translations: list[list[Translation]]) -> list[str]:
        if self.options.n_best > 1:  # one sentence a line
            return [f"{record.number - 1}\t{t.score:.4f}\t{t.text}\n" for t in translations[0]]
        if self.options.alignment:
            best = translations[0][0]
            return [f"{best.text}\t{best.alignment.pharaoh()}\n"]
        return [document.assemble([t[0].text for t in translations]) + "\n"]


class ScoreJob:
    """Each pair's scores as a JSON line (`PairScore.as_dict`)."""

    label = "scored"

    def __init__(self, translator, batch_size: int, layout: Layout, inputs: list[TextInput]):
        """`layout`: its `skip_invalid` and `max_sentence_tokens` (a pair is read whole, never split)."""
        self.translator, self.batch_size, self.inputs = translator, batch_size, inputs
        self.skip_invalid, self.max_sentence_tokens = layout.skip_invalid, layout.max_sentence_tokens

    def __call__(self, records: list[Record]) -> Done:
        usable = Usable(records, self.skip_invalid)
        self.check_lengths(records, usable)
        kept = [i for i in range(len(records)) if i not in usable.skipped and not records[i].blank]  # blank: null
        sources, targets = [records[i].fields[0] for i in kept], [records[i].fields[1] for i in kept]
        scores = dict(zip(kept, self.translator.score(sources, targets, batch_size=self.batch_size)))
        lines = [json.dumps(scores[i].as_dict(), ensure_ascii=False) if i in scores else "null" for i in
                 range(len(records))]  # fmt: skip
        tokens = sum(len(score.tokens) for score in scores.values())
        return Done("".join(line + "\n" for line in lines), len(records), tokens, len(usable.skipped))

    def check_lengths(self, records: list[Record], usable: Usable) -> None:
        """As `TranslateJob.check_lengths`, for each pair's longer side."""
        if not lengths_checked(self.translator, self.max_sentence_tokens, usable.skip_invalid):
            return
        kept = [i for i in range(len(records)) if i not in usable.skipped]
        if not kept:
            return
        sources = self.translator.count_tokens([records[i].fields[0] for i in kept])
        targets = self.translator.count_tokens([records[i].fields[1] for i in kept], target=True)
        positions = self.translator.max_source_tokens
        for index, lengths in zip(kept, zip(sources, targets)):
            for side, length in enumerate(lengths):  # the side's own file, where each side has one
                problem = length_problem([length], positions, self.max_sentence_tokens, usable.skip_invalid,
                                         ("the source", "the target")[side])  # fmt: skip
                if problem is not None:
                    where = self.inputs[min(side, len(self.inputs) - 1)].where(records[index].number)
                    usable.refuse(index, f"{where}: {problem}")
                    break
