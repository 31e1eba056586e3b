"""A request's fields, decoded and checked in one place: from the query string and the body (JSON or a form), as
LibreTranslate reads them, with every way a client can get them wrong answered by a `RequestError` that names the
field and what was expected.

- The body: at most `max_bytes` (413, by its Content-Length before it is read, or as it arrives), within
  `read_timeout` seconds (408); JSON that does not parse, or nests deeper than Python's parser goes, is 400.
- Text: every string must be encodable, so a lone UTF-16 surrogate (half a character, as JavaScript's `slice` can
  leave one in a `\\ud83d` escape) is refused with 400 naming the field and the character. It is refused rather than
  replaced: a translation of silently altered text would look right to the client and differ from what it sent.
- Forms, url-encoded or multipart: read within the same limits as any body (a multipart file too, which is named in
  errors and never kept); names and values decoded from UTF-8 strictly, 400 naming the field otherwise. A multipart
  body's preamble and epilogue are ignored, as RFC 2046 has them.
- Numbers: ASCII digits only (`'²'.isdigit()` is true in Python), at most nine of them; the caller checks the range.
- Lists of texts: a string or a list of strings; an empty list is a valid request with an empty answer."""

import asyncio
import json
import logging
import re
import urllib.parse
from dataclasses import dataclass

from python_multipart.multipart import MultipartParseError, MultipartParser, parse_options_header
from starlette.requests import Request

# python-multipart's own messages on a body it cannot read are warnings without the request they are of; the client's
# 400 names the fault, and the server's log has them at debug level only
MULTIPART_LOG = logging.getLogger(__name__)


class DebugLog(logging.LoggerAdapter):
    """A logger's adapter that writes every message at debug level."""

    def log(self, level, msg, *args, **kwargs):
        super().log(logging.DEBUG, msg, *args, **kwargs)


# a whole number as a client writes it: ASCII digits, at most nine (larger is out of every range here)
WHOLE_NUMBER = re.compile(r"\s*([0-9]{1,9})\s*")


class RequestError(Exception):
    """A request the server refuses: its HTTP status, a message naming the field, and when to try again."""

    def __init__(self, status: int, message: str, retry_after: int | None = None):
        super().__init__(message)
        self.status, self.retry_after = status, retry_after


async def read_fields(request: Request, max_bytes: int, read_timeout: float) -> dict:
    """The request's fields: the query string's, then the body's (JSON or a form) over them; each string checked.
    A body of another Content-Type is 415, rather than ignored (the fields it holds would be reported missing)."""
    fields = url_encoded(request.scope["query_string"], "the query string")
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > max_bytes:
        raise RequestError(413, f"the body has {int(declared)} bytes; this server takes at most {max_bytes}")
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding != "identity":
        raise RequestError(415, f"a body of Content-Encoding {described(encoding)}: send it uncompressed")
    try:
        async with asyncio.timeout(read_timeout):
            if content_type == "application/json":
                fields.update(parse_json(await read_body(request, max_bytes)))
            elif content_type == "application/x-www-form-urlencoded":
                fields.update(url_encoded(await read_body(request, max_bytes), "the form"))
            elif content_type == "multipart/form-data":
                fields.update(multipart(await read_body(request, max_bytes), request.headers["content-type"]))
            elif await read_body(request, max_bytes):
                what = f"of Content-Type {described(content_type)}" if content_type else "without a Content-Type"
                raise RequestError(415, f"a body {what}: send JSON (application/json) or a form")
    except TimeoutError:
        raise RequestError(408, f"the request's body did not arrive within {read_timeout:g} s") from None
    check_text(fields)
    return fields


def url_encoded(data: bytes, where: str) -> dict:
    """The fields of url-encoded `data` (the query string, a form's body), each name and value decoded from UTF-8
    strictly: 400 naming the field whose text is not UTF-8, rather than text with replacement characters."""
    pairs = {}
    for pair in data.split(b"&"):
        if pair:
            name, _, value = (urllib.parse.unquote_to_bytes(part.replace(b"+", b" ")) for part in pair.partition(b"="))
            name = utf8(name, f"{where}: a field's name")
            pairs.setdefault(name, []).append(utf8(value, f"{where}: field {described(name)}"))
    return fields_of(pairs.keys(), pairs.get)


@dataclass(frozen=True)
class FilePart:
    """A multipart form's file. The server reads text fields only, so a file is kept only to be named in an error."""

    filename: str


class Multipart:
    """The parts of a multipart form's body as python-multipart's parser calls them: each part's headers and bytes,
    and whether the closing boundary came."""

    def __init__(self, boundary: bytes):
        self.parts, self.ended = [], False
        self.header_name = self.header_value = b""
        callbacks = dict(
            on_part_begin=lambda: self.parts.append(({}, bytearray())),
            on_part_data=lambda data, start, end: self.parts[-1][1].extend(data[start:end]),
            on_header_field=self.on_header_field,
            on_header_value=self.on_header_value,
            on_header_end=self.on_header_end,
            on_end=self.on_end,
        )
        self.parser = MultipartParser(boundary, callbacks)
        self.parser.logger = DebugLog(MULTIPART_LOG)

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self.header_name += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self.header_value += data[start:end]

    def on_header_end(self) -> None:
        self.parts[-1][0][self.header_name.strip().lower()] = self.header_value.strip()
        self.header_name = self.header_value = b""

    def on_end(self) -> None:
        self.ended = True


def multipart(body: bytes, content_type: str) -> dict:
    """The fields of a multipart form's `body` (already read within the server's limits), each name and value
    decoded from UTF-8 strictly, as `url_encoded` does; a file's part is a `FilePart`. A body the parser cannot read,
    or that stops before its closing boundary (a field would be lost), is 400; an empty one has no fields."""
    if not body:
        return {}
    _, options = parse_options_header(content_type)
    if not options.get(b"boundary"):
        raise RequestError(400, "the form: its Content-Type names no boundary (multipart/form-data; boundary=...)")
    charset = options.get(b"charset", b"utf-8").decode("latin-1")
    if charset.lower().replace("_", "-") not in ("utf-8", "utf8"):
        raise RequestError(415, f"the form: charset {described(charset)}; send UTF-8")
    reader = Multipart(options[b"boundary"])
    try:
        reader.parser.write(without_preamble(body, options[b"boundary"]))
        reader.parser.finalize()
    except MultipartParseError as error:
        raise RequestError(400, f"the form is not valid multipart/form-data: {error}") from None
    if not reader.ended:
        raise RequestError(400, "the form is not valid multipart/form-data: it ends before its closing boundary")
    pairs = {}
    for index, (headers, data) in enumerate(reader.parts):
        _, disposition = parse_options_header(headers.get(b"content-disposition", b""))
        if b"name" not in disposition:
            raise RequestError(
                400, f"the form: part {index + 1} has no name (Content-Disposition: form-data; name=...)"
            )
        name = utf8(disposition[b"name"], f"the form: part {index + 1}'s name")
        where = f"the form: field {described(name)}"
        value = FilePart(utf8(disposition[b"filename"], where)) if b"filename" in disposition else utf8(data, where)
        pairs.setdefault(name, []).append(value)
    return fields_of(pairs.keys(), pairs.get)


def without_preamble(body: bytes, boundary: bytes) -> bytes:
    """A multipart body from its first boundary line: what comes before it, the preamble, is not part of the form
    and is ignored (RFC 2046, section 5.1.1), as python-multipart does not. A body without one is left whole, for the
    parser to refuse."""
    if body.startswith(b"--" + boundary):
        return body
    first = body.find(b"\r\n--" + boundary)
    return body if first < 0 else body[first + 2 :]


def utf8(raw: bytes, where: str) -> str:
    """`raw` decoded from UTF-8, or 400 naming `where` and the first byte that is not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise RequestError(
            400, f"{where}: byte {error.start + 1} ({raw[error.start]:#04x}) is not UTF-8 text; send UTF-8"
        ) from None


def fields_of(names, values) -> dict:
    """A form's fields: a name's one value, or its list of values where it is given several times."""
    return {name: values(name)[0] if len(values(name)) == 1 else values(name) for name in names}


async def read_body(request: Request, max_bytes: int) -> bytes:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise RequestError(413, f"the body has more than {max_bytes} bytes; this server takes at most that")
    return bytes(body)


def parse_json(body: bytes) -> dict:
    if not body.strip():
        return {}
    try:
        data = json.loads(body)
    except RecursionError:
        raise RequestError(400, "the body is not valid JSON: it nests too deeply") from None
    except ValueError as error:  # UnicodeDecodeError and integers of more than 4,300 digits included
        raise RequestError(400, f"the body is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise RequestError(400, f"the JSON body must be an object of fields, got {kind(data)}")
    return data


def check_text(fields: dict) -> None:
    """Every string in the fields (names, values, items of lists at any depth) encodable as UTF-8; iterative, so
    that a deeply nested value cannot exhaust the stack."""
    stack = [(value, printable(name)) for name, value in fields.items()]
    stack.extend((name, "a field's name") for name in fields)  # the names first (the last in is the first out)
    while stack:
        value, where = stack.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as error:
                code = f"U+{ord(value[error.start]):04X}"
                raise RequestError(
                    400,
                    f"{where}: character {error.start + 1} is a lone UTF-16 surrogate ({code}, half a character); "
                    "send whole characters",
                ) from None
        elif isinstance(value, list):
            stack.extend((item, f"{where}, item {index + 1}") for index, item in enumerate(value))
        elif isinstance(value, dict):
            stack.extend((key, f"{where}, a key") for key in value)
            stack.extend((item, f"{where}.{printable(key)}") for key, item in value.items())


def printable(name) -> str:
    """A field's name as an error message can show it: a lone surrogate in it written as its escape."""
    return str(name).encode("utf-8", "backslashreplace").decode("utf-8")


def whole_number(value, name: str) -> int:
    """A field that must be a whole number: a JSON integer, or ASCII digits in a string (a form, the query)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**9:
        return value
    digits = WHOLE_NUMBER.fullmatch(value) if isinstance(value, str) else None
    if digits is None:
        raise RequestError(422, f"{name}: expected a whole number (at most 9 ASCII digits), got {described(value)}")
    return int(digits.group(1))


def described(value) -> str:
    """A client's value as JSON writes it (null, true, "text"; a form's file as a file), short enough for an error
    message."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**9:
        return f"a number of {len(str(abs(value)))} digits"
    try:
        shown = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):  # a multipart form's file
        return "a file" if isinstance(value, FilePart) else type(value).__name__
    return shown if len(shown) <= 40 else shown[:37] + "..."


def kind(value) -> str:
    """A value's kind, in JSON's words."""
    kinds = ((bool, "a boolean"), (int | float, "a number"), (str, "a string"), (list, "a list"), (dict, "an object"))
    return "null" if value is None else next((name for t, name in kinds if isinstance(value, t)), described(value))


def texts(fields: dict, name: str) -> list[str]:
    """A field of texts: a string or a list of strings (400 when it is missing, 422 when it is something else)."""
    value = fields.get(name)
    if value is None:
        raise RequestError(400, f"Invalid request: missing {name} parameter")
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise RequestError(422, f"{name}: expected a string or a list of strings, got {kind(value)}")
    for index, text in enumerate(value):
        if not isinstance(text, str):
            raise RequestError(422, f"{name}: item {index + 1} is {kind(text)}; expected a string")
    return value
