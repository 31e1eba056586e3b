"""Writing an output folder so that a failure leaves nothing half-written and nothing on disk is lost by accident."""

import contextlib
import os
import re
import shutil
import signal
import threading
import uuid

from .errors import WriteError


def check_writable(out: str, overwrite: bool, error_type: type[Exception], reading=None) -> None:
    """`out` must be new or an empty folder, unless `overwrite`; and never the folder or file being read
    (`reading`: a path, or anything else, such as a model object, which is not checked), a folder that holds it,
    since `out` is replaced whole, nor a path that exists inside the folder being read, or a file beside the file
    being read (a fairseq checkpoint's dictionaries), which it would replace (a new name there is fine). Raises
    `error_type` naming it otherwise."""
    if isinstance(reading, (str, os.PathLike)) and os.path.exists(reading):
        if holds(out, reading):
            raise error_type(f"{out} holds {reading}, which is being read: write to another folder.")
        folder = reading if os.path.isdir(reading) else os.path.dirname(os.path.abspath(reading))
        if holds(folder, out) and os.path.exists(out) and (os.path.isdir(reading) or os.path.isfile(out)):
            raise error_type(f"{out} is inside {folder}, which is being read: write to another folder.")
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)) and not overwrite:
        raise error_type(f"{out} exists and is not empty: choose a new folder, or overwrite it (--overwrite).")
    reason = why_unmakeable(os.path.dirname(os.path.abspath(out)))  # where the staging folder beside `out` goes
    if reason:
        raise error_type(f"{out} cannot be made, since {reason}.")


def why_unmakeable(folder: str) -> str | None:
    """Why `folder` (with the parents it lacks) cannot be made or written into here; None where it can."""
    existing = os.path.abspath(folder)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return f"{existing} is a file"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    return None


def holds(folder: str, path) -> bool:
    """Whether `path` is `folder` or lies inside it (links resolved)."""
    folder, path = os.path.realpath(folder), os.path.realpath(path)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


@contextlib.contextmanager
def staged_folder(out: str):
    """A new temporary folder beside `out` to write into: when the block ends, it replaces `out`; if the block
    raises, it is removed and `out` is left as it was (an OSError on the way, a full disk, is a `WriteError`
    naming `out`). One that a killed write of `out` left is removed first. The folder gets the permissions a new
    folder gets (the umask's), not a temporary folder's (the owner's only)."""
    from safetensors import SafetensorError  # the weights' writer reports an OSError as its own

    parent, prefix = os.path.dirname(os.path.abspath(out)), f".{os.path.basename(os.path.abspath(out))}.staging-"
    staging = os.path.join(parent, prefix + uuid.uuid4().hex[:12])
    try:
        os.makedirs(parent, exist_ok=True)
        remove_left_over(parent, prefix, out)
        os.mkdir(staging)
        yield staging
        move_into_place(staging, out)
    except (OSError, SafetensorError) as error:
        shutil.rmtree(staging, ignore_errors=True)
        raise WriteError.of(out, error) from error
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def remove_left_over(parent: str, prefix: str, out: str) -> None:
    """The staging folders of `out` that killed writes left in `parent`; an old `out` moved aside is kept while no
    `out` replaced it."""
    left = re.compile(re.escape(prefix) + r"[0-9a-f]{12}(\.replaced)?")
    for name in os.listdir(parent):
        found = left.fullmatch(name)
        if found and (not found.group(1) or os.path.lexists(out)):
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)


def move_into_place(staging: str, out: str) -> None:
    """`staging` renamed to `out`; what `out` was is moved aside first (a Ctrl-C waits for both renames), and back if
    the rename fails, then removed (what cannot be removed is left to the next write's clean-up)."""
    aside = staging + ".replaced"
    with signals_held():
        if not os.path.lexists(out):
            os.replace(staging, out)
            return
        os.replace(out, aside)
        try:
            os.replace(staging, out)
        except OSError:
            os.replace(aside, out)
            raise
    if os.path.isdir(aside) and not os.path.islink(aside):
        shutil.rmtree(aside, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.remove(aside)


def new_file_beside(path: str) -> str:
    """The name of a new, empty file in `path`'s folder, made for this call only (so that no file of the user's is
    replaced), to write and then rename over `path`. It gets the mode `open()` gives a new file: 0666 less the
    umask, which the system applies."""
    folder, name = os.path.split(os.path.abspath(path))
    while True:
        temporary = os.path.join(folder, f".{name}.{uuid.uuid4().hex[:12]}")
        try:
            os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return temporary
        except FileExistsError:
            continue


@contextlib.contextmanager
def replacing(path: str, binary: bool = False, newline: str | None = None):
    """A file to write `path`'s new content into (UTF-8 text, or bytes if `binary`): written beside it, on disk
    (fsync) and renamed over it when the block ends, so that `path` is the old file or the new one whole. If the
    block raises, the new file is removed and `path` is left as it was."""
    temporary = new_file_beside(path)
    try:
        text = {} if binary else {"encoding": "utf-8", "newline": newline}
        with open(temporary, "wb" if binary else "w", **text) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)
        raise


def write_atomically(path: str, text: str) -> None:
    """`text` in `path`, written beside it and renamed over it: the file is the old one or the new one whole."""
    with replacing(path) as handle:
        handle.write(text)


@contextlib.contextmanager
def signals_held(signals=(signal.SIGINT, signal.SIGTERM)):
    """The block runs whole: a Ctrl-C or SIGTERM that comes meanwhile is raised again once it ends, to the handler
    there was before it (in the main thread, which Python's signal handlers run in; elsewhere the block runs as it
    is). A final model folder moved in, or a run's process started and known to the study that stops it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    previous = {number: signal.signal(number, lambda got, frame: caught.append(got)) for number in signals}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)  # None: set outside Python
        if caught:
            signal.raise_signal(caught[0])
