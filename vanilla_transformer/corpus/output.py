"""Where a corpus job's windows go: stdout in input order, or `--output FILE` through a folder of parts that makes
the run resumable.

Each process appends its windows' text to its own part (`FILE.partial/process-R.txt`) and, once the bytes are on
disk (fsync), records their length in its journal (`process-R.json`, replaced whole, never half-written). A run
killed at any point and started again with the same command truncates each part to what its journal records and
goes on from the next window: no window is lost or written twice, and no partial line survives. The journal also
records the inputs' fingerprints, the settings and the number of processes; a resumed run whose inputs or settings
differ is refused, naming what changed (a start that wrote nothing is started afresh). Once every process is done,
the first joins the parts in input order into FILE (written in the folder, then renamed over it) and removes the
folder. Each process holds a lock on its part while it runs (`process-R.lock`), so that a second run into the same
FILE is refused rather than appending to the same part. An output that cannot be set up is an `OutputError` naming
the file; one that fails on the way (a full disk) a `WriteError`."""

import contextlib
import json
import os
import sys
from dataclasses import dataclass

from ..errors import OutputError, ReaderGone, WriteError
from ..folders import new_file_beside, why_unmakeable, write_atomically
from ..processes import processes


@dataclass(frozen=True)
class Share:
    """Which windows a process translates: window i is process (i mod `world`)'s, so that each process takes
    contiguous blocks of lines spread over the file. `wait` holds the processes together (accelerate's)."""

    rank: int = 0
    world: int = 1

    def owns(self, window: int) -> bool:
        return window % self.world == self.rank

    def wait(self) -> None:
        if self.world > 1:
            processes().wait_for_everyone()


def this_process() -> Share:
    """This process's share, from the environment that `accelerate launch` or `torchrun` sets."""
    if int(os.environ.get("WORLD_SIZE", "1")) == 1:
        return Share()
    state = processes()
    return Share(state.process_index, state.num_processes)


@contextlib.contextmanager
def stdout_errors():
    """Writes to standard output whose failures the command line reports: a broken pipe (its reader went away, as
    `| head` does) is `ReaderGone`, for the command to end quietly; another OSError (a full disk) a `WriteError`
    naming standard output."""
    try:
        yield
    except BrokenPipeError as error:
        raise ReaderGone() from error
    except OSError as error:
        raise WriteError(f"standard output: {error.strerror}") from error


class StandardOutput:
    """Each window's text on stdout as soon as it is done (one process, in input order); nothing to resume."""

    resumed_windows = 0

    def __init__(self):
        """An OutputError where stdout is closed (`>&-`), before any work is done."""
        if sys.stdout is None:
            raise OutputError("standard output: closed; redirect it to a file, or give --output FILE")
        self.skipped = 0

    def done(self, window: int) -> bool:
        return False

    def write(self, window: int, done) -> None:
        """The window's text as UTF-8 bytes, as --output writes them, whatever the locale (see `stdout_errors`)."""
        with stdout_errors():
            sys.stdout.flush()  # what was printed before comes first
            sys.stdout.buffer.write(done.text.encode("utf-8", errors="surrogateescape"))
            sys.stdout.buffer.flush()
        self.skipped += done.skipped

    def finish(self) -> int:
        """The records left blank."""
        return self.skipped

    def abandon(self) -> None:
        """Nothing to undo: what was printed stays printed."""


def check_output_file(flag: str, path: str) -> None:
    """That the file `flag` names can be written (its folder exists and takes a new file, tried with one made and
    removed; it is not a folder), checked before any work is done; an OutputError names the flag, the file and what
    is wrong."""
    if not path:
        raise OutputError(f"{flag}: an empty name; expected a file name")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise OutputError(f"{flag} {path}: its folder {directory} does not exist")
    if os.path.isdir(path):
        raise OutputError(f"{flag} {path}: is a folder; expected a file name")
    if os.path.exists(path) and not os.path.isfile(path):
        raise OutputError(f"{flag} {path}: is not a regular file (a device or a pipe), which would be replaced; "
                          "write to a file, or to stdout and redirect it")  # fmt: skip
    if os.path.islink(path):  # the file is written beside it and renamed over it: the link would be replaced
        raise OutputError(f"{flag} {path}: is a symbolic link; give the file it points to, {os.path.realpath(path)}")
    if not os.access(directory, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise OutputError(f"{flag} {path}: not writable")
    try:  # a folder the system keeps (/sys, /proc) refuses what access() allows, root's writes among them
        os.remove(new_file_beside(path))
    except OSError as error:
        raise OutputError(f"{flag} {path}: not writable ({error.strerror})") from error


def check_output_folder(flag: str, path: str) -> None:
    """That the folder `flag` names can be written into, or made (with its parents) where it does not exist yet;
    an OutputError names the flag, the folder and what is wrong."""
    if not path:
        raise OutputError(f"{flag}: an empty name; expected a folder")
    if os.path.exists(path) and not os.path.isdir(path):
        raise OutputError(f"{flag} {path}: is a file; expected a folder")
    reason = why_unmakeable(path)
    if reason:
        raise OutputError(f"{flag} {path}: cannot be made, since {reason}")


class Parts:
    """`--output FILE` written through `FILE.partial/`, resumable (see the module's docstring). A resumed
    run must match the first start's `inputs` (their fingerprints), `settings` (those that change the output) and
    number of processes."""

    def __init__(self, output: str, share: Share, inputs: list, settings: dict):
        self.output, self.share = output, share
        self.run = {"inputs": inputs, "settings": settings, "processes": share.world}
        self.folder = f"{output}.partial"
        self.text = os.path.join(self.folder, f"process-{share.rank}.txt")
        self.journal = os.path.join(self.folder, f"process-{share.rank}.json")
        self.lengths: list[int] = []
        self.skipped, self.finished, self.lock = 0, False, None
        with named_errors(self.output, OutputError):
            self.open()

    def open(self) -> None:
        """Check that FILE can be written, then start the part or resume it; an OutputError names the problem."""
        check_output_file("--output", self.output)
        os.makedirs(self.folder, exist_ok=True)
        self.lock = held_lock(os.path.join(self.folder, f"process-{self.share.rank}.lock"))
        if self.lock is None:
            raise OutputError(f"--output {self.output}: another run is writing it ({self.folder} is in use); wait "
                              "for it to end, or give another --output")  # fmt: skip
        journal = self.read_journal(self.share.rank)
        if journal is not None and (journal["lengths"] or journal["finished"]):
            self.resume(journal)
        else:  # a first start, or one that wrote nothing (it stopped before its first window): start afresh
            self.check_processes()
            with open(self.text, "wb"):
                pass
            self.record()

    def read_journal(self, rank: int) -> dict | None:
        """Process `rank`'s journal (None where it has none); an OutputError names one that cannot be read."""
        path = os.path.join(self.folder, f"process-{rank}.json")
        if not os.path.exists(path):
            return None
        try:
            with open(path, encoding="utf-8") as handle:
                journal = json.load(handle)
            if is_journal(journal):
                return journal
        except ValueError:
            pass
        raise OutputError(f"--output {self.output}: {path} is not a journal this package wrote; remove "
                          f"{self.folder} to start over")  # fmt: skip

    def resume(self, journal: dict) -> None:
        """Go on from what the journal records: the part cut to its recorded length, the settings checked."""
        self.check_same(journal["run"])
        self.lengths, self.skipped, self.finished = journal["lengths"], journal["skipped"], journal["finished"]
        length = sum(self.lengths)
        if not os.path.exists(self.text) or os.path.getsize(self.text) < length:
            raise OutputError(f"--output {self.output}: {self.text} is shorter than its journal records; remove "
                              f"{self.folder} to start over")  # fmt: skip
        with open(self.text, "r+b") as handle:
            handle.truncate(length)

    def check_same(self, started: dict) -> None:
        """An OutputError naming each input that changed and each setting that differs since the run's first
        start."""
        inputs = zip(started["inputs"], self.run["inputs"])
        changes = [f"{now['input']} changed since the run started (its size or its first window)"
                   for then, now in inputs if now and not same_input(then, now)]  # fmt: skip
        settings, before = self.run["settings"], started["settings"]
        changes += [f"{key} was {before.get(key)!r} at the first start, now {settings.get(key)!r}"
                    for key in sorted(set(before) | set(settings))  # a flag newer than the first start: not compared
                    if key in before and before.get(key) != settings.get(key)]  # fmt: skip
        if started["processes"] != self.run["processes"]:
            changes.append(f"it started on {started['processes']} processes, now {self.run['processes']}")
        if changes:
            raise OutputError(f"--output {self.output}: {self.folder} holds a run that cannot go on: "
                              f"{'; '.join(changes)}. Run the first command again to resume it, or remove "
                              f"{self.folder} to start over")  # fmt: skip

    def check_processes(self) -> None:
        for name in os.listdir(self.folder):
            rank = name[8:-5] if name.startswith("process-") and name.endswith(".json") else ""
            if rank.isdigit() and int(rank) >= self.share.world:
                raise OutputError(f"--output {self.output}: {self.folder} holds a run of more processes than "
                                  f"{self.share.world}; resume it with as many as it started with")  # fmt: skip

    @property
    def resumed_windows(self) -> int:
        return len(self.lengths)

    def done(self, window: int) -> bool:
        """Whether this process already wrote `window` (one of its own) in an earlier start."""
        return window // self.share.world < len(self.lengths)

    def write(self, window: int, done) -> None:
        """A window's `Done` output appended, on disk, then recorded."""
        data = done.text.encode("utf-8", errors="surrogateescape")
        with named_errors(self.output):
            with open(self.text, "ab") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            self.lengths.append(len(data))
            self.skipped += done.skipped
            self.record()

    def record(self) -> None:
        journal = {"run": self.run, "lengths": self.lengths, "skipped": self.skipped, "finished": self.finished}
        write_atomically(self.journal, json.dumps(journal))

    def finish(self) -> int:
        """Mark this process done; once every process is, the first joins the parts into FILE. The records left
        blank by every process (counted by the first; 0 on the others)."""
        self.finished = True
        with named_errors(self.output):
            self.record()
        self.share.wait()
        with named_errors(self.output):
            skipped = self.join() if self.share.rank == 0 else 0
        self.share.wait()
        self.release(remove=True)
        with contextlib.suppress(OSError):  # another process's lock is still there
            os.rmdir(self.folder)
        return skipped

    def release(self, remove: bool = False) -> None:
        """The part's lock let go (the process's end lets it go too), and its file removed with `remove`: closed
        first, as a system that cannot remove an open file (Windows) needs."""
        if self.lock is None:
            return
        self.lock.close()
        if remove:
            with contextlib.suppress(OSError):
                os.remove(self.lock.name)
        self.lock = None

    def join(self) -> int:
        """The parts' windows in input order (window i from process i mod world), into FILE at once (written in the
        folder, then renamed); the folder's files then removed, and the folder if nothing else is in it."""
        journals = [self.read_journal(rank) for rank in range(self.share.world)]
        if not all(journal and journal["finished"] for journal in journals):
            raise OutputError(f"--output {self.output}: a process of the run has not finished; run it again")
        temporary, world = os.path.join(self.folder, "joined.txt"), self.share.world
        parts = [open(os.path.join(self.folder, f"process-{rank}.txt"), "rb") for rank in range(world)]
        try:
            with open(temporary, "wb") as joined:
                for window in range(sum(len(journal["lengths"]) for journal in journals)):
                    joined.write(parts[window % world].read(journals[window % world]["lengths"][window // world]))
                joined.flush()
                os.fsync(joined.fileno())
        finally:
            for part in parts:
                part.close()
        os.replace(temporary, self.output)
        self.remove_parts()
        return sum(journal["skipped"] for journal in journals)

    def abandon(self) -> None:
        """Undo a start that stopped before it wrote a window (its model could not be loaded, its first window
        failed): this process's empty part and journal removed, and the folder where nothing else is in it, so that
        the failed start leaves nothing behind. A start that wrote a window keeps everything, to be resumed."""
        if self.lengths or self.finished or self.lock is None:  # a start refused: another run's files
            self.release()
            return
        for path in (self.text, self.journal):
            with contextlib.suppress(OSError):  # the error that stopped the start is the one to report
                os.remove(path)
        self.release(remove=True)
        with contextlib.suppress(OSError):  # another process's files are still there
            os.rmdir(self.folder)

    def remove_parts(self) -> None:
        for name in os.listdir(self.folder):
            ours = name.startswith("process-") and name.endswith((".txt", ".json", ".json.tmp"))  # locks: `release`
            if ours or name.startswith(".process-"):  # .process-R.json.XXXX: a journal's write a kill cut short
                os.remove(os.path.join(self.folder, name))
        if not os.listdir(self.folder):
            os.rmdir(self.folder)


def same_input(then: dict | None, now: dict) -> bool:
    """Whether an input's fingerprints are the same, however its flag spelled the path ("in.txt", "./in.txt")."""
    return then is not None and {**then, "input": None} == {**now, "input": None}


def is_journal(journal) -> bool:
    """Whether `journal` (read from JSON) is one `Parts.record` wrote: each field of its kind."""
    kinds = {"run": dict, "lengths": list, "skipped": int, "finished": bool}
    return (isinstance(journal, dict) and all(isinstance(journal.get(key), kind) for key, kind in kinds.items())
            and all(isinstance(length, int) for length in journal["lengths"])
            and {"inputs", "settings", "processes"} <= set(journal["run"]))  # fmt: skip


def held_lock(path: str):
    """The file at `path`, opened and locked (flock) for this process alone; None where another holds it. Where the
    system has no flock, the file unlocked."""
    handle = open(path, "a")
    try:
        import fcntl
    except ImportError:  # not a Unix system
        return handle
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    except OSError:  # a file system without locks (ENOLCK, EOPNOTSUPP): the run goes on unguarded, as it did
        return handle
    return handle


@contextlib.contextmanager
def named_errors(output: str, kind: type = WriteError):
    """An OSError (a full disk, a folder that went away) as a `kind` naming --output, and the file where another."""
    try:
        yield
    except WriteError:  # named already
        raise
    except OSError as error:
        where = "" if error.filename in (None, output) else f"{error.filename}: "
        raise kind(f"--output {output}: {where}{error.strerror or error}") from error
