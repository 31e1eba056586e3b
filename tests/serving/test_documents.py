"""Texts into sentences and back: the layout between sentences is kept verbatim; `translate` splits its lines."""

import pytest

from vanilla_transformer.serving.documents import split_document

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
