"""Exceptions of the package. Library functions raise them; only the command line (`cli.main`) turns them into an
`error: ...` line on stderr and an exit status; and `HeldLog`, which holds a library's report of a load that is then
refused, so that the refusal alone says what is wrong."""

import logging
import numbers
import sys

MISSING_MATPLOTLIB = "plots need matplotlib: pip install 'vanilla-transformer[plots]'"


def is_whole(value) -> bool:
    """Whether `value` is an integer (numpy's too), not a bool nor a float such as 2.0: what a count must be."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def one_line(error: BaseException) -> str:
    """A library's error message, which can run over several lines, on one: for an error this package names."""
    return " ".join(str(error).split())


def warn(message: str) -> None:
    """A warning on stderr, as every command words one: `warning: <message>`."""
    print(f"warning: {message}", file=sys.stderr)


def first_few(names: list[str], most: int = 3) -> str:
    """The first `most` names and how many more there are, for a message: "a, b, c and 4 more"."""
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


class CommandError(Exception):
    """A failure that the command line reports as `error: <message>` and exit status `exit_code`."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


class ModelFolderError(CommandError, ValueError):
    """A model folder that cannot be loaded, or whose tokenizer does not match its config.json."""


class WriteError(CommandError, OSError):
    """An output, a folder or a file, that could not be written (a full disk, a file too large for the system, a
    folder of the kernel's): the message names it and why; what was there before is left as it was."""

    @classmethod
    def of(cls, path: str, error: BaseException) -> "WriteError":
        """`path`'s write, which `error` (an OSError, or the like from a library's writer) stopped."""
        return cls(f"{path}: could not be written: {one_line(error)}")


class MissingDependencyError(CommandError, ImportError):
    """An optional dependency is not installed; the message says what to install."""


class CorpusError(CommandError, ValueError):
    """A corpus that cannot be translated or scored as it is: the message names the input, its line and why."""

    def __init__(self, message: str):
        super().__init__(message, exit_code=2)


class ReaderGone(Exception):
    """The reader of standard output went away (`| head`): the command ends quietly, as Unix tools do."""


class OutputError(CorpusError):
    """An output that cannot be set up (its file cannot be made, another run writes it), or a run that cannot be
    resumed: the message names the file and why. A write that fails on the way is a `WriteError`."""


class HeldLog(logging.Filter):
    """Holds what a logger logs while in use; `release()` logs it then, and what is not released is dropped (a
    report of a load that is then refused: the refusal says what is wrong, in one line)."""

    def __init__(self, name: str):
        super().__init__()
        self.logger, self.records = logging.getLogger(name), []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False

    def __enter__(self) -> "HeldLog":
        self.logger.addFilter(self)
        return self

    def __exit__(self, *exc) -> None:
        self.logger.removeFilter(self)

    def release(self) -> None:
        self.logger.removeFilter(self)
        for record in self.records:
            self.logger.handle(record)
        self.records = []
