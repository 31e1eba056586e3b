"""Texts into sentences and back. A text is cut at its line breaks, each line into sentences by pysbd (rule-based,
the "Golden Rules" of sentence boundaries, 22 languages; other languages get its English rules); what lies between
the sentences (spaces, line breaks, blank lines) is kept verbatim, so that the translations are put back in the
text's own layout.

    document = split_document("Hello there. How are you?\\n\\nFine.", "en")
    document.sentences   # ['Hello there.', 'How are you?', 'Fine.']
    document.assemble(["Hallo.", "Wie geht's?", "Gut."])   # "Hallo. Wie geht's?\\n\\nGut."
"""

import re
from dataclasses import dataclass
from functools import cache

LINE_BREAK = re.compile(r"(\r\n|\r|\n)")
# Words (letters and digits) between spaces and commas, and at most one ".", "!" or "?" at the end: one sentence in
# the rules of every language pysbd has, which is not asked then (it takes about 0.2 ms a line, on the server's event
# loop, where such lines are most requests)
PLAIN_SENTENCE = re.compile(r"[^\W_]+(?:[ ,]+[^\W_]+)*[.!?]?")


@dataclass(frozen=True)
class Document:
    """A text's sentences, and its layout: the text between them verbatim (str) and each sentence's index (int)."""

    sentences: list[str]
    layout: list[str | int]

    def assemble(self, translations: list[str]) -> str:
        """The text with each sentence replaced by its translation."""
        if len(translations) != len(self.sentences):
            raise ValueError(f"{len(translations)} translations for {len(self.sentences)} sentences")
        return "".join(translations[piece] if isinstance(piece, int) else piece for piece in self.layout)


@cache
def segmenter(language: str):
    import pysbd
    from pysbd.languages import LANGUAGE_CODES

    return pysbd.Segmenter(language=language if language in LANGUAGE_CODES else "en", clean=False)


def split_sentences(line: str, language: str) -> list[str]:
    """The sentences of one line of text, without their surrounding spaces."""
    stripped = line.strip()
    if PLAIN_SENTENCE.fullmatch(stripped):
        return [stripped]
    return [sentence.strip() for sentence in segmenter(language).segment(line) if sentence.strip()]


def split_document(text: str, language: str) -> Document:
    """`text`'s sentences in the rules of `language` (an ISO 639-1 code), and the layout to put them back."""
    sentences, layout = [], []
    for line in LINE_BREAK.split(text):
        if LINE_BREAK.fullmatch(line) or not line.strip():
            layout.append(line)
            continue
        cursor = 0
        for sentence in split_sentences(line, language):
            start = line.find(sentence, cursor)
            if start < 0:  # the splitter changed the text: the rest of the line is one sentence
                break
            layout += [line[cursor:start], len(sentences)]
            sentences.append(sentence)
            cursor = start + len(sentence)
        rest = line[cursor:]
        if rest.strip():
            layout += [rest[: len(rest) - len(rest.lstrip())], len(sentences)]
            sentences.append(rest.strip())
            rest = rest[len(rest.rstrip()) :]
        layout.append(rest)
    return Document(sentences, [piece for piece in layout if piece != ""])
