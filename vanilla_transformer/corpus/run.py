"""A corpus job from its records to its output: the windows read in turn, each of this process's share handed to
the job and its output written; progress on stderr."""

from .jobs import Done
from .output import Share
from .progress import Progress
from .reading import Corpus


def share_lines(total: int, window: int, share: Share, windows: int | None = None) -> int:
    """The lines of a corpus of `total` lines in this share's windows (its first `windows` of them, default all)."""
    owned = range(share.rank, -(-total // window), share.world)
    return sum(min(window, total - index * window) for index in list(owned)[:windows])


def run_corpus(corpus: Corpus, job, output, window: int, share: Share, show: str = "auto") -> int:
    """Every window of `corpus` that is this process's and not yet done, through `job` into `output`; the number
    of records the job left blank (`skip_invalid`), counted over every process and start where `output` keeps
    them."""
    total = corpus.count()
    label = job.label if share.world == 1 else f"{job.label} (process {share.rank + 1} of {share.world})"
    shown = show if share.rank == 0 else "never"
    mine = share_lines(total, window, share) if total is not None else None
    done = share_lines(total, window, share, output.resumed_windows) if total is not None else 0
    progress = Progress(mine, shown, label, done)
    try:
        for index, records in enumerate(corpus.windows(window)):
            if share.owns(index) and not output.done(index):
                result: Done = job(records)
                output.write(index, result)
                progress.update(result.lines, result.tokens)
    finally:
        progress.close()
    return output.finish()
