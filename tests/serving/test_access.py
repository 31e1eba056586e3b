"""API keys: the key file's format, its errors, and each key's requests per minute."""

import pytest

from vanilla_transformer.serving.access import KeyFileError, KeyRing, read_key_file


def test_a_key_file_lists_keys_and_their_limits(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text("# team keys\nalpha 60  # the web site\n\nbeta\n", encoding="utf-8")
    assert read_key_file(str(path)) == {"alpha": 60, "beta": None}


def test_a_key_file_is_read_as_its_user_means_it(tmp_path):
    """A byte order mark (as Windows editors write UTF-8), CRLF line ends and spaces around the fields."""
    path = tmp_path / "keys.txt"
    path.write_bytes("alpha 60 \r\n  beta\t\r\n".encode("utf-8-sig"))
    assert read_key_file(str(path)) == {"alpha": 60, "beta": None}


@pytest.mark.parametrize(
    "text, message",
    [
        ("alpha 60\nbeta sixty\n", "line 2: expected a key and optionally its requests per minute"),
        ("alpha 0\n", "line 1: expected a key"),
        ("alpha ²\n", "line 1: expected a key"),  # a digit to str.isdigit, not a number
        ("alpha 1 2\n", "line 1: expected a key"),
        ("alpha\nalpha 3\n", "line 2: the key alph... is listed twice"),
        ("# nothing\n", "no keys in the file"),
    ],
)
def test_a_bad_key_file_names_its_line(tmp_path, text, message):
    path = tmp_path / "keys.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(KeyFileError, match=message):
        read_key_file(str(path))
    with pytest.raises(KeyFileError, match="no-such-file"):
        read_key_file(str(tmp_path / "no-such-file"))


def test_each_key_has_its_requests_per_minute():
    ring = KeyRing({"alpha": 2, "beta": None})
    assert [ring.admit("alpha", now=t) for t in (0.0, 1.0)] == ["ok", "ok"]
    assert ring.admit("alpha", now=30.0) == pytest.approx(30.0)  # seconds until the first of the two is a minute old
    assert ring.admit("alpha", now=60.5) == "ok"
    assert all(ring.admit("beta", now=float(t)) == "ok" for t in range(100))
    assert ring.admit("gamma") == ring.admit(None) == "forbidden"


def test_a_key_file_that_is_not_utf8_names_its_line(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_bytes(b"alpha 60\nbeta\n\xffgamma\n")
    with pytest.raises(KeyFileError, match=r"keys.txt, line 3: not UTF-8 \(invalid start byte\)"):
        read_key_file(str(path))


def test_a_key_file_that_never_ends_is_refused_once_it_is_too_long_for_one():
    with pytest.raises(KeyFileError, match=r"^/dev/zero: over 16 MiB, so not a key file$"):
        read_key_file("/dev/zero")  # read for ever, into all memory
