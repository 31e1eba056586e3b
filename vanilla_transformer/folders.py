"""Writing an output folder so that a failure leaves nothing half-written and nothing on disk is lost by accident."""

import contextlib
import os
import shutil
import tempfile


def check_writable(out: str, overwrite: bool, error_type: type[Exception], reading=None) -> None:
    """`out` must be new or an empty folder, unless `overwrite`; and never the folder or file being read
    (`reading`: a path, or anything else, such as a model object, which is not checked), a folder that holds it,
    since `out` is replaced whole, nor a path inside the folder being read, or a file beside the file being read
    (a fairseq checkpoint's dictionaries), which it could replace. Raises `error_type` naming it otherwise."""
    if isinstance(reading, (str, os.PathLike)) and os.path.exists(reading):
        if holds(out, reading):
            raise error_type(f"{out} holds {reading}, which is being read: write to another folder.")
        folder = reading if os.path.isdir(reading) else os.path.dirname(os.path.abspath(reading))
        if holds(folder, out) and (os.path.isdir(reading) or os.path.isfile(out)):
            raise error_type(f"{out} is inside {folder}, which is being read: write to another folder.")
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)) and not overwrite:
        raise error_type(f"{out} exists and is not empty: choose a new folder, or overwrite it.")


def holds(folder: str, path) -> bool:
    """Whether `path` is `folder` or lies inside it (links resolved)."""
    folder, path = os.path.realpath(folder), os.path.realpath(path)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


@contextlib.contextmanager
def staged_folder(out: str):
    """A new temporary folder beside `out` to write into: when the block ends, it replaces `out`; if the block
    raises, it is removed and `out` is left as it was."""
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".export-", dir=parent)
    try:
        yield staging
        if os.path.isdir(out):
            shutil.rmtree(out)
        elif os.path.exists(out):
            os.remove(out)
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
