"""API keys (`serve --api-keys FILE`) and their requests-per-minute limits.

The file holds one key a line, optionally followed by the key's limit in requests per minute; `#` starts a comment.
It is read as a user means it: a UTF-8 byte order mark (as Windows editors write it), CRLF line ends and spaces
around the fields are ignored.

    # key                 requests per minute (none: no limit)
    3f1c0e6a-team-a       120
    8d2b7f90-batch-jobs
"""

import collections
import threading
import time
from dataclasses import dataclass, field

from .fields import WHOLE_NUMBER

WINDOW = 60.0  # seconds: the limits are per minute
LARGEST = 16 * 2**20  # bytes of a key file: some hundred thousand keys


class KeyFileError(ValueError):
    """A key file that cannot be read: names the file, the line and what was expected."""


def read_key_file(path: str) -> dict[str, int | None]:
    """{key: requests per minute, or None for no limit}."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(LARGEST + 1)
    except OSError as error:
        raise KeyFileError(f"{path}: {error.strerror}") from error
    if len(data) > LARGEST:  # a device that never ends (/dev/zero), or another file named by mistake
        raise KeyFileError(f"{path}: over {LARGEST // 2**20} MiB, so not a key file")
    try:
        lines = data.decode("utf-8-sig").splitlines()
    except UnicodeDecodeError as error:
        number = data.count(b"\n", 0, error.start) + 1
        raise KeyFileError(f"{path}, line {number}: not UTF-8 ({error.reason})") from None
    keys = {}
    for number, line in enumerate(lines, 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) > 2 or (len(fields) == 2 and not (WHOLE_NUMBER.fullmatch(fields[1]) and int(fields[1]) > 0)):
            raise KeyFileError(
                f"{path}, line {number}: expected a key and optionally its requests per minute (a positive whole "
                f"number), got {line.strip()!r}"
            )
        if fields[0] in keys:
            raise KeyFileError(f"{path}, line {number}: the key {fields[0][:4]}... is listed twice")
        keys[fields[0]] = int(fields[1]) if len(fields) == 2 else None
    if not keys:
        raise KeyFileError(f"{path}: no keys in the file")
    return keys


@dataclass
class KeyRing:
    """Which keys may translate, and how often: `admit` answers 'ok', 'forbidden' or the seconds to wait."""

    limits: dict[str, int | None]
    recent: dict[str, collections.deque] = field(default_factory=lambda: collections.defaultdict(collections.deque))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def admit(self, key: str | None, now: float | None = None) -> str | float:
        if key not in self.limits:
            return "forbidden"
        limit = self.limits[key]
        if limit is None:
            return "ok"
        now = time.monotonic() if now is None else now
        with self.lock:
            times = self.recent[key]
            while times and times[0] <= now - WINDOW:
                times.popleft()
            if len(times) >= limit:
                return times[0] + WINDOW - now
            times.append(now)
        return "ok"
