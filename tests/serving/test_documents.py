"""Texts into sentences and back: the layout between sentences is kept verbatim; `translate` splits its lines."""

import random

import pytest

from vanilla_transformer.serving import documents
from vanilla_transformer.serving.documents import PLAIN_SENTENCE, segmenter, split_document, split_sentences

LAYOUTS = [
    "Hello there. How are you?\n\nFine.",
    "  Mr. Smith went to Washington D.C. yesterday.  He paid $3.50!\r\n\r\nNew paragraph",
    "",
    "\n\n",
    "one line without a full stop",
    "Dr. Who e.g. is fine. Yes",
]


@pytest.mark.parametrize("text", LAYOUTS)
def test_the_sentences_put_back_give_the_text_itself(text):
    document = split_document(text, "en")
    assert document.assemble(document.sentences) == text
    assert all(sentence == sentence.strip() and sentence for sentence in document.sentences)


def test_sentences_are_split_by_the_rules_of_their_language():
    text = "Mr. Smith went to Washington D.C. yesterday.  He paid $3.50!\n\nNew paragraph"
    assert split_document(text, "en").sentences == [
        "Mr. Smith went to Washington D.C. yesterday.",
        "He paid $3.50!",
        "New paragraph",
    ]
    german = "Das ist z.B. ein Satz. Am 3. Oktober ging er heim."
    assert split_document(german, "de").sentences == ["Das ist z.B. ein Satz.", "Am 3. Oktober ging er heim."]
    assert split_document("One. Two.", "xx").sentences == ["One.", "Two."]  # no rules of its own: English's


def plain_lines(count: int) -> list[str]:
    """Lines of words (several scripts, abbreviations that a full stop would end), spaces and commas, with or
    without a final mark; some are not plain (a list's item, a full stop inside, a space before the mark)."""
    words = ["A", "man", "Mr", "Dr", "St", "No", "vs", "p", "iv", "ii", "x", "USA", "etc", "z", "B", "usw", "Nr"]
    words += ["M", "Mme", "fig", "3", "22", "Straße", "été", "мир", "مرحبا", "नमस्ते", "你好", "こんにちは", "γεια", "Ճ"]
    words += ["b)", "1)", "U.S.", "x.", "3.5", "—", "।", "؟"]  # not plain: the lines with them go to pysbd
    ends = ["", ".", "!", "?", " .", ","]
    draw = random.Random(0)
    return [
        draw.choice(["", " "]) + draw.choice([" ", ", ", ","]).join(draw.choices(words, k=draw.randint(1, 8)))
        + draw.choice(ends) for _ in range(count)
    ]  # fmt: skip


@pytest.mark.parametrize("language", ["en", "de", "fr", "ar", "hi", "zh", "ja", "el", "hy", "xx"])
def test_a_plain_line_is_the_one_sentence_pysbd_finds_there(language):
    """Such a line is not given to pysbd: what it would give is the line itself."""
    lines = [line for line in plain_lines(400) if PLAIN_SENTENCE.fullmatch(line.strip())]
    assert len(lines) > 100
    for line in lines:
        by_pysbd = [sentence.strip() for sentence in segmenter(language).segment(line) if sentence.strip()]
        assert split_sentences(line, language) == by_pysbd == [line.strip()], line


def test_pysbd_splits_every_other_line(monkeypatch):
    asked = []
    asking = type("Asking", (), {"segment": staticmethod(lambda line: asked.append(line) or [])})()
    monkeypatch.setattr(documents, "segmenter", lambda language: asking)
    for line in ("A man is looking at one of his four flat screen computers.", "Zwei Hunde, ein Ball!"):
        split_sentences(line, "en")
    assert asked == []
    for line in ("Mr. Smith went home.", "a) one b) two", "One.. Two", "Why ?", "x । y", "A - B", "It's", "Wait:"):
        split_sentences(line, "en")
    assert len(asked) == 8


def test_translations_take_the_places_of_their_sentences():
    document = split_document("Hello there. How are you?\n\n  Fine.\n", "en")
    assert document.assemble(["Hallo.", "Wie geht's?", "Gut."]) == "Hallo. Wie geht's?\n\n  Gut.\n"
    with pytest.raises(ValueError, match="2 translations for 3 sentences"):
        document.assemble(["Hallo.", "Gut."])


def test_translate_splits_each_line_into_its_sentences_and_writes_one_line(trained_folder, capsys):
    from vanilla_transformer.training.tasks.numbers import english

    from vanilla_transformer.cli import main

    first, second = english(512), english(87)
    assert main(["translate", "--model", str(trained_folder), "--num-beams", "2", f"{first}.", f"{second}!"]) == 0
    one, two = capsys.readouterr().out.splitlines()
    assert main(["translate", "--model", str(trained_folder), "--num-beams", "2", f"{first}. {second}!"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{one} {two}"]
    assert (
        main(["translate", "--model", str(trained_folder), "--num-beams", "2", "--no-split", f"{first}. {second}!"])
        == 0
    )
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_a_line_on_which_pysbds_rules_fail_is_one_sentence():
    for text in ("\x1e1. b?", "\x1c2. c!", "x \x1f3. d?"):
        with pytest.raises(ValueError):  # pysbd's own failure, which the splitter stands in for
            segmenter("en").segment(text)
        document = split_document(text, "en")
        assert document.sentences == [text.strip()] and document.assemble(document.sentences) == text


def test_a_long_line_gives_the_sentences_pysbd_finds_in_it_whole():
    sentence = 'Dr. Smith said: "It works!" Then he left (quietly). '
    for line in ("The quick brown fox jumps over the lazy dog. " * 3 + sentence * 10, "这是第一句。这是第二句！" * 40):
        language = "en" if line.isascii() else "zh"
        assert len(line) > documents.LONGEST_PIECE
        whole = [found.strip() for found in segmenter(language).segment(line) if found.strip()]
        document = split_document(line, language)
        assert document.sentences == whole and document.assemble(document.sentences) == line


def test_a_sentence_longer_than_pysbds_window_ends_at_its_full_stop():
    long = " ".join(["nine hundred ninety-nine thousand"] * 40) + "."  # 1,359 characters
    line = f"{long} Then a short one. {long}"
    assert split_document(line, "en").sentences == [long, "Then a short one.", long]
    assert split_document(long[:-1], "en").sentences == [long[:-1]]  # no full stop: the rest of the line


def test_pysbd_reads_a_long_line_of_list_items_a_piece_at_a_time(monkeypatch):
    """pysbd's list rules take time that grows as a power of what they read ("a) b) " * 800, whole: a minute)."""
    read = []
    segment = segmenter("en").segment
    monkeypatch.setattr(segmenter("en"), "segment", lambda text: read.append(len(text)) or segment(text))
    document = split_document("a) b) " * 800, "en")
    assert document.assemble(document.sentences) == "a) b) " * 800
    assert max(read) <= documents.LONGEST_PIECE and sum(read) < 2 * 4800


def test_a_sentence_ending_at_the_windows_edge_is_not_joined_to_the_next():
    line = "(" + "z" * 396 + "). Then a short one. And another."  # the first ends at character 399
    whole = [found.strip() for found in segmenter("en").segment(line)]
    assert split_document(line, "en").sentences == whole and len(whole) == 3


def test_threads_split_texts_at_once_each_with_its_own_segmenter():
    """The server splits texts in worker threads; a pysbd segmenter keeps the text it segments."""
    import threading

    texts = ["Dr. Smith went home. He was tired! Was he? Yes, he was (very).",
             "The cat sat (quietly). The dog ran! Did it? Yes, it did (fast)."]  # fmt: skip
    found, theirs = {text: [] for text in texts}, []

    def split(text):
        theirs.append(segmenter("en"))
        found[text] += [len(split_document(text, "en").sentences) for _ in range(200)]

    threads = [threading.Thread(target=split, args=(text,)) for text in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert theirs[0] is not theirs[1] and segmenter("en") not in theirs
    assert all(counts == [4] * 200 for counts in found.values())
