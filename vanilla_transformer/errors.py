"""Exceptions of the package. Library functions raise them; only the command line (`cli.main`) turns them into an
`error: ...` line on stderr and an exit status."""

MISSING_MATPLOTLIB = "plots need matplotlib: pip install 'vanilla-transformer[plots]'"


class CommandError(Exception):
    """A failure that the command line reports as `error: <message>` and exit status `exit_code`."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


class ModelFolderError(CommandError, ValueError):
    """A model folder that cannot be loaded, or whose tokenizer does not match its config.json."""


class MissingDependencyError(CommandError, ImportError):
    """An optional dependency is not installed; the message says what to install."""
