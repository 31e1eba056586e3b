"""Texts into sentences and back. A text is cut at its line breaks, each line into sentences by pysbd (rule-based,
the "Golden Rules" of sentence boundaries, 22 languages; other languages get its English rules); what lies between
the sentences (spaces, line breaks, blank lines) is kept verbatim, so that the translations are put back in the
text's own layout.

    document = split_document("Hello there. How are you?\\n\\nFine.", "en")
    document.sentences   # ['Hello there.', 'How are you?', 'Fine.']
    document.assemble(["Hallo.", "Wie geht's?", "Gut."])   # "Hallo. Wie geht's?\\n\\nGut."
"""

import re
import threading
from dataclasses import dataclass
from functools import cache

LINE_BREAK = re.compile(r"(\r\n|\r|\n)")
# Words (letters and digits) between spaces and commas, and at most one ".", "!" or "?" at the end: one sentence in
# the rules of every language pysbd has, which is not asked then (it takes about 0.2 ms a line, on the server's event
# loop, where such lines are most requests)
PLAIN_SENTENCE = re.compile(r"[^\W_]+(?:[ ,]+[^\W_]+)*[.!?]?")
LONGEST_PIECE = 400  # characters pysbd reads at once (`split_sentences`)
END_MARKS = ".!?\"'”’»)]。！？」』"
SENTENCE_END = re.compile(r"[.!?]+[\"'”’»)\]]*(?:\s|$)|[。！？]+[」』”’)]*")


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


def segmenter(language: str):
    """pysbd's segmenter for `language`, one a thread: a segmenter keeps the text it segments (`segment`), so two
    threads sharing one (the server splits texts in its worker threads) would read each other's."""
    return thread_segmenter(language, threading.get_ident())


@cache
def thread_segmenter(language: str, thread: int):
    import pysbd
    from pysbd.languages import LANGUAGE_CODES

    return pysbd.Segmenter(language=language if language in LANGUAGE_CODES else "en", clean=False)


def split_sentences(line: str, language: str) -> list[str]:
    """The sentences of one line of text, without their surrounding spaces, as pysbd finds them. pysbd reads at
    most `LONGEST_PIECE` characters at once: its time grows as a power of what it reads (its list rules: "a) b) " *
    800, 4,800 characters, took a minute; 400 take 0.1 s). Of a longer line it keeps the sentences that end within
    the window and reads on from the start of the last one; a sentence longer than the window ends at the next
    ".", "!" or "?" (then closing quotes or brackets, then a space or the line's end; or "。", "！", "？")."""
    stripped = line.strip()
    if PLAIN_SENTENCE.fullmatch(stripped):
        return [stripped]
    sentences = []
    while len(line) > LONGEST_PIECE:
        window = line[:LONGEST_PIECE]
        found = segmented(window, language)[:-1]  # the last may go on past the window
        end = end_of(window, found) if found else None
        if end is None:  # one sentence fills the window (or pysbd changed its text): it ends at the next full stop
            ending = SENTENCE_END.search(line, len(window.rstrip().rstrip(END_MARKS)))  # a full stop at the edge too
            end = ending.end() if ending else len(line)
            found = [line[:end].strip()]
        sentences += found
        line = line[end:]
    return sentences + segmented(line, language)


def segmented(text: str, language: str) -> list[str]:
    """pysbd's sentences of `text`, stripped; where its rules fail (a ValueError on "\x1e1. b?"), `text` whole."""
    try:
        found = segmenter(language).segment(text)
    except Exception:  # a heuristic's failure: the text whole is the safe answer
        found = [text]
    return [sentence.strip() for sentence in found if sentence.strip()]


def end_of(text: str, sentences: list[str]) -> int | None:
    """Where the last of `sentences` ends in `text`, which holds them in order; None where one is not found."""
    cursor = 0
    for sentence in sentences:
        start = text.find(sentence, cursor)
        if start < 0:
            return None
        cursor = start + len(sentence)
    return cursor


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
