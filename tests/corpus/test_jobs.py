"""A window's records through the jobs: output in input order, a record that cannot be used named by its input and
line, or left blank and counted under skip_invalid."""

import json
import re
from dataclasses import replace

import pytest

from tests.conftest import long_sentence
from vanilla_transformer.corpus.jobs import Layout, ScoreJob, TranslateJob
from vanilla_transformer.corpus.reading import Record, TextInput
from vanilla_transformer.errors import CorpusError
from vanilla_transformer.inference.options import SearchOptions
from vanilla_transformer.inference.translators import load_translator

NAMES = [TextInput.file("in.txt", "--input"), TextInput.file("terms.txt", "--constraints-file")]
BAD = "--input in.txt, line 8: not UTF-8 text (byte 0xff); save the file as UTF-8"


@pytest.fixture(scope="module")
def translator(trained_folder):
    return load_translator(str(trained_folder))


def records(*lines: str, first: int = 7) -> list[Record]:
    return [Record(first + i, (line,)) for i, line in enumerate(lines)]


def test_a_window_is_translated_in_input_order_with_its_lines_numbers(translator):
    options = SearchOptions(num_beams=2, n_best=2)
    done = TranslateJob(translator, options, Layout(), NAMES)(records("six", "", "seven"))
    lines = done.text.splitlines()
    assert [line.split("\t")[0] for line in lines] == ["6", "6", "7", "8", "8"]  # from 0: lines 7 to 9
    assert lines[2] == "7\t0.0000\t" and done.lines == 3 and done.skipped == 0 and done.tokens > 0
    alone = [translator.translate([s], options)[0][0].text for s in ("six", "seven")]
    assert [lines[0].split("\t")[2], lines[3].split("\t")[2]] == alone


def test_a_line_that_cannot_be_read_is_named_or_left_blank_and_counted(translator):
    window = [*records("six"), Record(8, ("x",), BAD), *records("seven", first=9)]
    with pytest.raises(CorpusError, match=re.escape(f"{BAD}; or pass --skip-invalid to leave it blank")):
        TranslateJob(translator, SearchOptions(num_beams=1), Layout(), NAMES)(window)
    done = TranslateJob(translator, SearchOptions(num_beams=1), Layout(skip_invalid=True), NAMES)(window)
    assert done.text.splitlines()[1] == "" and len(done.text.splitlines()) == 3 and done.skipped == 1


def test_split_lines_keep_their_layout(translator):
    done = TranslateJob(translator, SearchOptions(num_beams=1), Layout("en"), NAMES)(records("six. seven", "  "))
    alone = [translator.translate([s], num_beams=1)[0][0].text for s in ("six.", "seven")]
    assert done.text == f"{alone[0]} {alone[1]}\n  \n"


def test_a_term_the_model_cannot_write_is_named_by_its_file_and_line(translator):
    window = [Record(7, ("six", "")), Record(8, ("", "")), Record(9, ("seven", "sieben\tQQQ"))]
    with pytest.raises(CorpusError, match=r"--constraints-file terms.txt, line 9: the term 'QQQ' has"):
        TranslateJob(translator, SearchOptions(num_beams=2), Layout(extra="terms"), NAMES)(window)
    with pytest.raises(CorpusError, match=r"terms.txt, line 9: an empty term"):
        TranslateJob(translator, SearchOptions(num_beams=2), Layout(extra="terms"), NAMES)(
            [Record(9, ("seven", "sieben\t\tsechs"))])  # fmt: skip


def test_a_line_over_the_positions_is_left_blank_under_skip_invalid(learned_folder, capsys):
    translator = load_translator(str(learned_folder))
    window = records("forty-two", long_sentence())
    done = TranslateJob(translator, SearchOptions(num_beams=1, max_length=4), Layout(skip_invalid=True), NAMES)(window)
    assert done.text.splitlines()[1] == "" and done.skipped == 1
    assert "truncated" not in capsys.readouterr().err
    done = TranslateJob(translator, SearchOptions(num_beams=1, max_length=4), Layout(), NAMES)(window)
    err = capsys.readouterr().err  # read from its first 18 tokens, named by the translator, and translated
    assert done.skipped == 0 and "truncated to 18 tokens" in err and "in.txt, line 8: the translation stopped" in err


def test_scores_are_json_lines_and_a_pair_that_cannot_be_read_a_null(translator):
    window = [Record(1, ("six", "sechs")), Record(2, ("", ""), "--pairs p.jsonl, line 2: expected ..."),
              Record(3, ("seven", "sieben"))]  # fmt: skip
    with pytest.raises(CorpusError, match="--pairs p.jsonl, line 2"):
        ScoreJob(translator, 8, Layout(), [TextInput.file("p.jsonl", "--pairs")])(window)
    done = ScoreJob(translator, 8, Layout(skip_invalid=True), [TextInput.file("p.jsonl", "--pairs")])(window)
    lines = done.text.splitlines()
    assert lines[1] == "null" and done.skipped == 1
    expected = translator.score(["six", "seven"], ["sechs", "sieben"])
    assert [json.loads(lines[0]), json.loads(lines[2])] == [json.loads(json.dumps(s.as_dict())) for s in expected]


def test_a_sentence_over_max_sentence_tokens_is_named_or_left_blank_before_any_search(translator):
    """With the sinusoids there is no positions' limit: a line of a million characters asked for terabytes."""
    window = records("six", "seven " * 40, "eight")
    most = Layout(max_sentence_tokens=20)
    words = r"--input in.txt, line 8: a sentence of \d+ tokens, over --max-sentence-tokens 20; shorten or split"
    with pytest.raises(CorpusError, match=words):
        TranslateJob(translator, SearchOptions(num_beams=1), most, NAMES)(window)
    done = TranslateJob(translator, SearchOptions(num_beams=1), replace(most, skip_invalid=True), NAMES)(window)
    assert done.text.splitlines()[1] == "" and done.skipped == 1 and done.text.splitlines()[2]
    prefixes = [TextInput.file("in.txt", "--input"), TextInput.file("p.txt", "--prefix-file")]
    window = [Record(7, ("six", "sechs")), Record(8, ("seven", "sieben " * 40)), Record(9, ("eight", ""))]
    prefixed = replace(most, extra="prefix")  # a prefix is read token by token: its time grows with its square
    with pytest.raises(CorpusError, match=r"--prefix-file p.txt, line 8: a prefix of \d+ tokens, over --max-sen"):
        TranslateJob(translator, SearchOptions(num_beams=1), prefixed, prefixes)(window)
    done = TranslateJob(translator, SearchOptions(num_beams=1), replace(prefixed, skip_invalid=True), prefixes)(window)
    assert done.skipped == 1 and done.text.splitlines()[1] == "" and done.text.splitlines()[0].startswith("sechs")
    pairs = [Record(1, ("six", "sechs")), Record(2, ("seven", "sieben " * 40))]
    with pytest.raises(CorpusError, match=r"--pairs p.jsonl, line 2: the target of \d+ tokens, over --max-senten"):
        ScoreJob(translator, 8, most, [TextInput.file("p.jsonl", "--pairs")])(pairs)
