"""How a command's expected failures reach the command line: as a `CommandError` with the same message and the
exit status the command gives them, which `cli.main` prints as `error: ...` and returns."""

import contextlib
from collections.abc import Iterator

from ..errors import CommandError


@contextlib.contextmanager
def reported_as(exit_code: int, *kinds: type[Exception]) -> Iterator[None]:
    """Inside the block, an exception of one of `kinds` becomes a `CommandError` with its message and `exit_code`;
    a `CommandError` keeps its own status, and anything else (a bug) its traceback."""
    try:
        yield
    except CommandError:
        raise
    except kinds as error:
        raise CommandError(str(error), exit_code=exit_code) from error
