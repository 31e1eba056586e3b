"""Reading a corpus in windows: line ends, UTF-8 named by line, line-aligned inputs, pairs, counts and
fingerprints."""

import hashlib
import json
import tracemalloc

import pytest

from vanilla_transformer.corpus import reading
from vanilla_transformer.corpus.reading import Corpus, TextInput, translation_pair
from vanilla_transformer.errors import CorpusError


def file_input(tmp_path, data: bytes, name="input.txt", flag="--input") -> TextInput:
    path = tmp_path / name
    path.write_bytes(data)
    return TextInput.file(str(path), flag)


@pytest.mark.parametrize(
    "data, lines",
    [
        (b"", []),
        (b"a\nb\n", ["a", "b"]),
        (b"a\r\nb", ["a", "b"]),
        (b"a\rb\r", ["a", "b"]),
        (b"\n\n", ["", ""]),
        ("\ufeffa\n\ufeffb\n".encode(), ["a", "\ufeffb"]),
    ],
    ids=["empty", "\\n", "\\r\\n, no last end", "\\r", "empty lines", "a byte order mark, then one in the text"],
)
def test_lines_end_as_text_files_end_and_count_agrees(tmp_path, data, lines):
    source = file_input(tmp_path, data)
    assert [text for text, _ in source.lines()] == lines
    assert source.count() == len(lines)


def test_a_crlf_across_two_reads_is_one_line_end(tmp_path, monkeypatch):
    monkeypatch.setattr(reading, "CHUNK", 4)
    source = file_input(tmp_path, b"abc\r\ndef\r\n")  # the first read ends on \r, the next starts with \n
    assert source.count() == 2 == len(list(source.lines()))


def test_a_line_that_is_not_utf8_is_named_with_its_line_and_byte_and_the_others_are_read(tmp_path):
    source = file_input(tmp_path, "eins\nzw\xc3\xb6lf\n".encode("latin-1") + b"drei \xff\nvier\n")
    found = list(source.lines())
    assert [problem for _, problem in found] == [None, None, f"--input {source.path}, line 3: not UTF-8 text (byte "
                                                 "0xff); save the file as UTF-8", None]  # fmt: skip
    assert found[3][0] == "vier"


def test_windows_hold_every_record_once_in_order(tmp_path):
    source = file_input(tmp_path, "".join(f"{i}\n" for i in range(10)).encode())
    windows = list(Corpus([source]).windows(4))
    assert [len(window) for window in windows] == [4, 4, 2]
    assert [r.fields[0] for window in windows for r in window] == [str(i) for i in range(10)]
    assert [r.number for window in windows for r in window] == list(range(1, 11))


def test_line_aligned_inputs_of_different_lengths_are_named(tmp_path):
    sentences = file_input(tmp_path, b"a\nb\nc\n")
    prefixes = file_input(tmp_path, b"x\ny\n", "prefixes.txt", "--prefix-file")
    records = Corpus([sentences, prefixes]).records()
    assert next(records).fields == ("a", "x")
    with pytest.raises(CorpusError, match=r"--prefix-file .*prefixes.txt ends at line 2 and --input .* goes on"):
        list(records)


def test_pairs_keep_blank_lines_as_blank_records_and_name_a_line_that_is_not_a_pair(tmp_path):
    pair = json.dumps({"translation": {"en": "one", "de": "eins"}})
    half = json.dumps({"translation": {"en": "one", "de": "ein\ud800"}})  # a JSON escape of half a UTF-16 pair
    source = file_input(tmp_path, f"{pair}\n\n{{}}\n{pair}\n{half}\n".encode(), "pairs.jsonl", "--pairs")
    records = list(Corpus([source], translation_pair("en", "de")).records())
    assert [(r.number, r.fields, r.blank) for r in records if not r.problem] == [
        (1, ("one", "eins"), False), (2, ("", ""), True), (4, ("one", "eins"), False)]  # fmt: skip
    assert records[2].number == 3 and "--pairs" in records[2].problem and "line 3: expected" in records[2].problem
    assert records[4].problem.endswith("line 5: \"de\": not Unicode text: '\\ud800' at character 4 is a lone "
                                       "surrogate (a byte that is not UTF-8, or half of a UTF-16 pair)")  # fmt: skip


def test_arguments_that_are_not_utf8_are_named_by_their_place():
    records = list(Corpus([TextInput.arguments(["seven", "sev\udcffen"])], skip_invalid=True).records())
    assert records[1].problem == "sentence 2: not UTF-8 text (byte 0xff); give UTF-8 text"


def test_a_fingerprint_changes_with_the_first_window_or_the_size(tmp_path):
    source = file_input(tmp_path, b"a\nb\nc\n")
    first = source.fingerprint(2)
    (tmp_path / "input.txt").write_bytes(b"a\nb\nc\nd\n")
    assert source.fingerprint(2) != first and source.fingerprint(2)["first_window_sha256"] == first[
        "first_window_sha256"]  # fmt: skip
    (tmp_path / "input.txt").write_bytes(b"a\nB\nc\n")
    assert source.fingerprint(2) != first
    assert TextInput.stdin().fingerprint(2) is None and TextInput.arguments(["a"]).count() == 1


def test_a_line_over_the_longest_is_named_or_left_blank_and_the_next_line_read(tmp_path):
    longest = "x" * reading.LONGEST_LINE
    source = file_input(tmp_path, f"{longest}\n{longest}y\r\nzwei\n".encode())
    with pytest.raises(CorpusError, match=rf"^--input {source.path}, line 2: over 1,000,000 characters; expected a "
                                          "sentence or a paragraph a line; or pass --skip-invalid"):  # fmt: skip
        list(Corpus([source]).records())
    records = list(Corpus([source], skip_invalid=True).records())
    assert [(r.number, r.fields, r.problem) for r in records[1:]] == [
        (2, ("",), f"--input {source.path}, line 2: over 1,000,000 characters; expected a sentence or a paragraph a "
                   "line"), (3, ("zwei",), None)]  # fmt: skip
    assert records[0].fields == (longest,) and source.count() == 3


def test_a_fingerprint_holds_a_piece_of_a_long_line_at_a_time(tmp_path):
    long = b"a" * (16 << 20)
    source = file_input(tmp_path, long + b"\nb\nc\n")
    tracemalloc.start()
    try:
        fingerprint = source.fingerprint(2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20  # bytes; the line is 16 MiB
    assert fingerprint["first_window_sha256"] == hashlib.sha256(long + b"\nb\n").hexdigest()


def test_a_pair_nested_too_deeply_is_named_as_json_that_is_not_valid(tmp_path):
    source = file_input(tmp_path, b"[" * 100_000 + b"\n", "pairs.jsonl", "--pairs")
    (record,) = Corpus([source], translation_pair("en", "de")).records()
    assert record.problem == f"--pairs {source.path}, line 1: not valid JSON: nested too deeply"
