"""What a corpus job makes of one window of records: `TranslateJob` translates its lines, `ScoreJob` scores its
pairs. Each gives the window's output in input order (`Done`): one output line per record (with an n-best list of
K, K lines; one, empty, for a blank line). It names a record it cannot read (not UTF-8, not a pair) by its input and
line; with `skip_invalid` it leaves that record's output blank (an empty line; `null` for a score) and counts it
instead, as it does for a line over the model's positions (which the translator otherwise reads from its first
tokens, with a warning)."""

import json
import sys
from dataclasses import dataclass, replace

from ..errors import CorpusError
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


def warn(line: str) -> None:
    print(f"warning: {line}", file=sys.stderr)


@dataclass(frozen=True)
class Layout:
    """How a `TranslateJob` reads its records and writes their translations: each line split into its sentences by
    the rules of `split_language` (None: each line whole); the second input of each record, if any, is a target
    `prefix` or its `terms` (tab-separated) (`extra`); `skip_invalid` leaves a line that cannot be translated blank
    instead of stopping."""

    split_language: str | None = None
    extra: str | None = None
    skip_invalid: bool = False


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


def too_long(counts: list[int], limit: int | None) -> int | None:
    """The token count of the longest of `counts` over `limit`, if any."""
    over = [count for count in counts if limit is not None and count > limit]
    return max(over) if over else None


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
        """Under `skip_invalid`, a line with a sentence over the model's positions is skipped; else the translator
        translates the sentence from its first tokens and names it in a warning."""
        limit = self.translator.max_source_tokens
        if limit is None or not usable.skip_invalid:
            return
        counts = iter(self.translator.count_tokens([s for d in documents for s in d.sentences]))
        for index, (record, document) in enumerate(zip(records, documents)):
            longest = too_long([next(counts) for _ in document.sentences], limit)
            if longest is not None:
                usable.refuse(index, f"{self.inputs[0].where(record.number)}: a sentence of {longest} tokens, over the "
                                     f"model's {limit} positions; shorten or split it")  # fmt: skip

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

    def __init__(self, translator, batch_size: int, skip_invalid: bool, inputs: list[TextInput]):
        self.translator, self.batch_size, self.skip_invalid, self.inputs = translator, batch_size, skip_invalid, inputs

    def __call__(self, records: list[Record]) -> Done:
        usable = Usable(records, self.skip_invalid)
        self.check_lengths(records, usable)
        kept = [i for i in range(len(records)) if i not in usable.skipped]
        sources, targets = [records[i].fields[0] for i in kept], [records[i].fields[1] for i in kept]
        scores = dict(zip(kept, self.translator.score(sources, targets, batch_size=self.batch_size)))
        lines = [json.dumps(scores[i].as_dict(), ensure_ascii=False) if i in scores else "null" for i in
                 range(len(records))]  # fmt: skip
        tokens = sum(len(score.tokens) for score in scores.values())
        return Done("".join(line + "\n" for line in lines), len(records), tokens, len(usable.skipped))

    def check_lengths(self, records: list[Record], usable: Usable) -> None:
        """As `TranslateJob.check_lengths`: a pair with a side over the positions skipped under `skip_invalid`."""
        limit = self.translator.max_source_tokens
        if limit is None or not usable.skip_invalid:
            return
        kept = [i for i in range(len(records)) if i not in usable.skipped]
        sources = self.translator.count_tokens([records[i].fields[0] for i in kept])
        targets = self.translator.count_tokens([records[i].fields[1] for i in kept], target=True)
        for index, source, target in zip(kept, sources, targets):
            longest = too_long([source, target], limit)
            if longest is not None:
                usable.refuse(index, f"{self.inputs[0].where(records[index].number)}: a side of {longest} tokens, "
                                     f"over the model's {limit} positions")  # fmt: skip
