"""Empty, blank and undecodable input at the inference entry points: the Python translators of both backends, and the
`translate` and `score` commands (files, arguments and stdin). Each case is answered cleanly: a blank sentence has an
empty translation, no sentences have no translations, and bytes that are not UTF-8 are named by file and line. (The
server's own cases are in tests/serving/test_hostile_requests.py.)"""

import subprocess
import sys

import pytest
from vanilla_transformer.training.tasks.numbers import english

from vanilla_transformer.cli import main
from vanilla_transformer.inference.translators import load_translator

SIX, SEVEN = english(106), english(107)


@pytest.fixture(scope="module", params=["torch", "ctranslate2"])
def translator(request, trained_folder, exported_folder):
    return load_translator(str(trained_folder if request.param == "torch" else exported_folder))


@pytest.mark.parametrize(
    "sentences, blank",
    [
        ([], []),
        ([""], [0]),
        (["   "], [0]),
        ([SIX, "", SEVEN], [1]),
        (["", SIX, " \t"], [0, 2]),
        (["\ufeff", SIX, "\u200b \u2060"], [0, 2]),
    ],
    ids=["no sentences", "empty", "spaces", "empty among others", "blanks around one", "invisible characters"],
)
def test_a_blank_sentence_gets_an_empty_translation_and_the_others_theirs(translator, sentences, blank):
    found = translator.translate(sentences, num_beams=2, n_best=2)
    others = [sentence for index, sentence in enumerate(sentences) if index not in blank]
    expected = iter(translator.translate(others, num_beams=2, n_best=2) if others else [])
    assert len(found) == len(sentences)
    for index, translations in enumerate(found):
        if index in blank:
            assert [t.text for t in translations] == [""]
        else:
            assert translations == next(expected)


def test_prefixes_and_terms_go_with_their_sentences_past_a_blank_one(trained_folder):
    translator = load_translator(str(trained_folder))
    with_blank = translator.translate([SIX, "", SEVEN], num_beams=2, prefix=["sechs", "x", None])
    assert with_blank == [*translator.translate([SIX], num_beams=2, prefix=["sechs"]), with_blank[1],
                          *translator.translate([SEVEN], num_beams=2, prefix=[None])]  # fmt: skip
    assert with_blank[1][0].text == ""
    with pytest.raises(ValueError, match="2 prefixes for 3 sentences"):  # the wrong length is still named
        translator.translate([SIX, "", SEVEN], prefix=["a", "b"])


def command(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


NOT_UTF8 = b"six\nsieben \xff\xfe\n"


@pytest.mark.parametrize(
    "arguments, data, status, output, error",
    [
        (["", ""], None, 0, "\n\n", ""),
        (["   "], None, 0, "   \n", ""),  # the layout around sentences is kept, as the server keeps it
        (["--input", "FILE"], b"", 0, "", ""),
        (["--input", "FILE"], b"\n\n", 0, "\n\n", ""),
        (["--input", "FILE"], NOT_UTF8, 2, "", "--input FILE, line 2: not UTF-8 text (byte 0xff)"),
        (["--input", "FILE", "--n-best", "2"], b"\n", 0, "0\t0.0000\t\n", ""),
    ],
    ids=["empty arguments", "spaces", "an empty file", "empty lines", "not UTF-8", "n-best of a blank line"],
)
def test_translate_answers_empty_blank_and_undecodable_input(
    trained_folder, tmp_path, capsys, arguments, data, status, output, error
):
    path = tmp_path / "input.txt"
    if data is not None:
        path.write_bytes(data)
    argv = [str(path) if word == "FILE" else word for word in arguments]
    found = command(capsys, "translate", "--model", str(trained_folder), *argv)
    assert found[:2] == (status, output)
    assert error.replace("FILE", str(path)) in found[2] and "Traceback" not in found[2]


def test_translate_names_stdin_that_is_not_utf8(trained_folder):
    done = subprocess.run(
        [sys.executable, "-m", "vanilla_transformer.cli", "translate", "--model", str(trained_folder)],
        input=NOT_UTF8, capture_output=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2 and b"error: stdin, line 2: not UTF-8 text (byte 0xff)" in done.stderr


@pytest.mark.parametrize(
    "sources, targets, status, lines, error",
    [
        (b"", b"", 0, 0, ""),
        (b"\n", b"\n", 0, 1, ""),
        (b"six\n", NOT_UTF8[4:], 2, 0, "--target-file TARGETS, line 1: not UTF-8 text"),
    ],
    ids=["empty files", "an empty pair", "not UTF-8"],
)
def test_score_answers_empty_blank_and_undecodable_input(trained_folder, tmp_path, capsys, sources, targets,
                                                         status, lines, error):  # fmt: skip
    (tmp_path / "sources.txt").write_bytes(sources)
    (tmp_path / "targets.txt").write_bytes(targets)
    files = ["--source-file", str(tmp_path / "sources.txt"), "--target-file", str(tmp_path / "targets.txt")]
    found = command(capsys, "score", "--model", str(trained_folder), *files)
    assert found[0] == status and len(found[1].splitlines()) == lines
    assert error.replace("TARGETS", str(tmp_path / "targets.txt")) in found[2] and "Traceback" not in found[2]
