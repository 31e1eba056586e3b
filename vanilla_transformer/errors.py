"""Exceptions of the training package. Library functions raise them; only `cli.main` turns them into an
`error: ...` line on stderr and an exit status."""


class CommandError(Exception):
    """A failure that the command line reports as `error: <message>` and exit status `exit_code`."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


class ModelFolderError(CommandError):
    """--model is not a loadable model folder, or its tokenizer does not match its config.json."""


class MissingDependencyError(CommandError, ImportError):
    """An optional dependency (matplotlib for the figures) is not installed; the message says what to install."""
