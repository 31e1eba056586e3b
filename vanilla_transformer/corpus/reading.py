"""A corpus read in windows: one or several line-aligned text inputs (a file, stdin or the command's arguments), or
a JSON-lines file of pairs, decoded line by line as UTF-8, so that memory holds one window whatever the file's size.
A line that cannot be read is not an exception at once: its record carries the problem, which the job names, or
counts and leaves blank under `skip_invalid`."""

import errno
import hashlib
import io
import json
import os
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice, zip_longest

from ..errors import CorpusError
from ..inference.checks import not_unicode

CHUNK = 1 << 20
STANDARD_STREAM = "-"  # a file flag's value that names stdin (an input) or stdout (an output)
# characters a line may hold: a thousand long sentences, far over what --max-sentence-tokens lets through; a file of
# one endless line (/dev/zero, a binary file) is named at this length instead of filling the memory
LONGEST_LINE = 1_000_000


@dataclass(frozen=True)
class Record:
    """One unit of a corpus: its line `number` (1-based) and the text of each input on that line (`fields`);
    `problem` says why it cannot be used (a message naming the input and the line), else None; `blank`, a blank line
    of pairs, which holds none (its output line says so, `null` for a score, to keep the lines aligned)."""

    number: int
    fields: tuple[str, ...]
    problem: str | None = None
    blank: bool = False


class TextInput:
    """One input of a corpus, `name`d as the command line names it ("--input FILE", "stdin", "the arguments"): read
    line by line as UTF-8, ends of line \\n, \\r\\n or \\r removed."""

    def __init__(self, name: str, path: str | None = None, texts: list[str] | None = None):
        self.name, self.path, self.texts = name, path, texts

    @classmethod
    def file(cls, path: str, flag: str) -> "TextInput":
        """The file `flag` names (`-`: stdin, as Unix tools read it); an OSError from `check` or `lines` where it
        cannot be read."""
        return cls(f"{flag} - (stdin)") if path == STANDARD_STREAM else cls(f"{flag} {path}", path=path)

    @classmethod
    def stdin(cls) -> "TextInput":
        return cls("stdin")

    @classmethod
    def arguments(cls, texts: list[str]) -> "TextInput":
        return cls("the arguments", texts=list(texts))

    @property
    def reads_stdin(self) -> bool:
        return self.path is None and self.texts is None

    @property
    def kind(self) -> str:
        """What it reads, whatever the file: "stdin", "arguments", or the flag that names a file ("--prefix-file")."""
        if self.reads_stdin:
            return "stdin"
        return "arguments" if self.texts is not None else self.name.removesuffix(f" {self.path}")

    @property
    def rereadable(self) -> bool:
        """Whether it can be read again (every process of several reads it whole): a regular file or arguments, not
        stdin or a named pipe."""
        return self.texts is not None or (self.path is not None and os.path.isfile(self.path))

    def where(self, number: int) -> str:
        """How a message names line `number`: "--input FILE, line 7", or "sentence 7" of the arguments."""
        return f"sentence {number}" if self.texts is not None else f"{self.name}, line {number}"

    def check(self) -> None:
        """An OSError (its message naming the input) where the file cannot be opened, or stdin is closed. A named
        pipe is not opened: its writer would be gone before it is read."""
        if self.path is None:
            if self.texts is None and sys.stdin is None:  # `<&-`
                raise OSError(errno.EBADF, "closed; expected text to read: redirect it, or give a file")
            return
        if os.path.exists(self.path) and not os.path.isfile(self.path) and not os.path.isdir(self.path):
            if stat.S_ISSOCK(os.stat(self.path).st_mode):
                raise OSError(errno.EINVAL, "a socket; expected a file or a named pipe", self.path)
            if not os.access(self.path, os.R_OK):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), self.path)
            return
        with open(self.path, "rb"):
            pass

    def lines(self) -> Iterator[tuple[str | None, str | None]]:
        """Each line's text and its problem (None, or why it is not UTF-8 text); a UTF-8 byte order mark that starts
        the input is not text. A line over `LONGEST_LINE` characters has no text (None) and that problem: memory
        holds that much of it at most, and the rest is passed over only once the next line is asked for."""
        if self.texts is not None:  # the command's arguments: bytes that are not UTF-8 kept as surrogates
            yield from ((text, self.undecodable(text, number)) for number, text in enumerate(self.texts, 1))
            return
        handle = open(self.path, "rb") if self.path is not None else sys.stdin.buffer
        text = io.TextIOWrapper(handle, encoding="utf-8", errors="surrogateescape", newline=None)
        try:
            number = 0
            while line := text.readline(LONGEST_LINE + 1):
                number += 1
                if len(line) > LONGEST_LINE and not line.endswith("\n"):
                    yield None, self.too_long(number)
                    while (rest := text.readline(CHUNK)) and not rest.endswith("\n"):
                        pass
                    continue
                line = line[:-1] if line.endswith("\n") else line
                if number == 1 and line.startswith("\ufeff"):  # a byte order mark (Windows editors write one)
                    line = line[1:]
                yield line, None if line.isascii() else self.undecodable(line, number)
        finally:
            text.detach()
            if self.path is not None:
                handle.close()

    def too_long(self, number: int) -> str:
        return f"{self.where(number)}: over {LONGEST_LINE:,} characters; expected a sentence or a paragraph a line"

    def undecodable(self, line: str, number: int) -> str | None:
        """None for UTF-8 text; else a message naming the line and its first byte that is not UTF-8."""
        try:
            line.encode("utf-8")
        except UnicodeEncodeError as error:
            byte = ord(line[error.start]) - 0xDC00
            advice = "give UTF-8 text" if self.texts is not None else "save the file as UTF-8"
            return f"{self.where(number)}: not UTF-8 text (byte 0x{byte:02x}); {advice}"
        return None

    def count(self) -> int | None:
        """Its number of lines (a last line without an end counts), or None where it cannot be known beforehand."""
        if self.texts is not None:
            return len(self.texts)
        if self.path is None or not os.path.isfile(self.path):
            return None
        count, last = 0, b"\n"
        with open(self.path, "rb") as handle:
            while chunk := handle.read(CHUNK):
                split_crlf = last == b"\r" and chunk[:1] == b"\n"  # a \r\n across two chunks: one end
                count += chunk.count(b"\n") + chunk.count(b"\r") - chunk.count(b"\r\n") - split_crlf
                last = chunk[-1:]
        return count + (last not in (b"\n", b"\r"))

    def fingerprint(self, lines: int) -> dict | None:
        """What tells this file from an edited one: its size and the SHA-256 of its first `lines` lines (None for
        stdin and arguments, which cannot be read again)."""
        if self.path is None or not os.path.isfile(self.path):
            return None
        digest = hashlib.sha256()
        with open(self.path, "rb") as handle:
            while lines and (piece := handle.readline(CHUNK)):  # a line in pieces: memory holds one at most
                digest.update(piece)
                lines -= piece.endswith(b"\n")
        return {"input": self.name, "bytes": os.path.getsize(self.path), "first_window_sha256": digest.hexdigest()}


class Corpus:
    """Records from line-aligned inputs (a source file and its prefixes, sources and targets), or from one input
    whose lines `parse` turns into fields (a JSON-lines file of pairs; a blank line there is a `blank` record)."""

    def __init__(self, inputs: list[TextInput], parse: Callable[[str, int], tuple[str, ...]] | None = None,
                 skip_invalid: bool = False):  # fmt: skip
        """`skip_invalid`: a line too long to read is a record with its problem, left blank by the job; else a
        `CorpusError` as soon as it is met (the rest of an endless line is never read)."""
        standard = [source.name for source in inputs if source.reads_stdin]
        if len(standard) > 1:
            raise CorpusError(f"{' and '.join(standard)}: stdin can be read by one input only; give files instead")
        self.inputs, self.parse, self.skip_invalid = inputs, parse, skip_invalid
        self.counts: list[int | None] | None = None  # each input's lines, once `check` or `count` has read them

    def records(self) -> Iterator[Record]:
        missing = object()
        rows = zip_longest(*(source.lines() for source in self.inputs), fillvalue=missing)
        for number, row in enumerate(rows, start=1):
            if missing in row:
                raise CorpusError(self.uneven(row, missing, number))
            unread = next((problem for text, problem in row if text is None), None)
            if unread and not self.skip_invalid:
                raise CorpusError(f"{unread}; or pass --skip-invalid to leave it blank")
            problem = next((problem for _, problem in row if problem), None)
            fields = tuple(text or "" for text, _ in row)
            if self.parse is None or problem:
                yield Record(number, fields, problem)
            elif fields[0].strip():
                yield self.parsed(fields[0], number)
            else:
                yield Record(number, ("", ""), blank=True)

    def parsed(self, line: str, number: int) -> Record:
        try:
            return Record(number, self.parse(line, number))
        except ValueError as error:
            return Record(number, ("", ""), f"{self.inputs[0].where(number)}: {error}")

    def uneven(self, row: tuple, missing, number: int) -> str:
        ended = [source.name for source, line in zip(self.inputs, row) if line is missing]
        going = [source.name for source, line in zip(self.inputs, row) if line is not missing]
        return f"{', '.join(ended)} ends at line {number - 1} and {', '.join(going)} goes on: expected one line each"

    def windows(self, size: int) -> Iterator[list[Record]]:
        """The records in windows of `size`."""
        records = self.records()
        while window := list(islice(records, size)):
            yield window

    def count(self) -> int | None:
        """Its number of records where it can be known beforehand (lines, for line-aligned inputs)."""
        return self.line_counts()[0] if self.parse is None else None

    def line_counts(self) -> list[int | None]:
        """Each input's lines (None for stdin), each file read once."""
        if self.counts is None:
            self.counts = [source.count() for source in self.inputs]
        return self.counts

    def fingerprints(self, lines: int) -> list[dict | None]:
        return [source.fingerprint(lines) for source in self.inputs]

    def check(self) -> None:
        """A `CorpusError` naming an input that cannot be opened, or line-aligned files of different numbers of
        lines (found before anything is translated; with stdin, once it ends)."""
        for source in self.inputs:
            try:
                source.check()
            except OSError as error:
                raise CorpusError(f"{source.name}: {error.strerror}") from error
        counts = self.line_counts()
        if len(counts) > 1 and None not in counts and len(set(counts)) > 1:
            lines = ", ".join(f"{source.name} has {count}" for source, count in zip(self.inputs, counts))
            raise CorpusError(f"{lines} lines: expected as many lines in each")


def translation_pair(source_lang: str, target_lang: str) -> Callable[[str, int], tuple[str, str]]:
    """How a line of a JSON-lines file in the datasets translation schema gives its (source, target) pair."""

    def parse(line: str, number: int) -> tuple[str, str]:
        try:
            pair = json.loads(line)["translation"]
            source, target = pair[source_lang], pair[target_lang]
        except RecursionError:
            raise ValueError("not valid JSON: nested too deeply") from None
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(
                f'expected {{"translation": {{"{source_lang}": ..., "{target_lang}": ...}}}} '
                f"({type(error).__name__}: {error})"
            ) from error
        if not (isinstance(source, str) and isinstance(target, str)):
            raise ValueError(f'"{source_lang}" and "{target_lang}" must be strings')
        for language, text in ((source_lang, source), (target_lang, target)):
            if problem := not_unicode(text):  # a JSON escape of half a UTF-16 pair
                raise ValueError(f'"{language}": {problem}')
        return source, target

    return parse
