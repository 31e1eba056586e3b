"""Progress of a corpus job on stderr, with tqdm (as transformers and datasets show theirs): lines done, lines per
second, target tokens per second and, where the number of lines is known, the time left. Shown when stderr is a
terminal, or when asked; each update on a line of its own when stderr is not a terminal."""

import sys
import time

PROGRESS = ("auto", "always", "never")


class Progress:
    def __init__(self, total: int | None, show: str = "auto", label: str = "translated", done: int = 0):
        from tqdm.auto import tqdm

        terminal = sys.stderr.isatty()
        enabled = show == "always" or (show == "auto" and terminal)
        self.started, self.tokens = time.perf_counter(), 0
        stream = sys.stderr if terminal else LineEnds(sys.stderr)  # in a log: each update a line of its own
        self.bar = tqdm(total=total, initial=done, unit=" lines", desc=label, file=stream, disable=not enabled,
                        dynamic_ncols=terminal, mininterval=0.5 if terminal else 0, ascii=not terminal)  # fmt: skip

    def update(self, lines: int, tokens: int) -> None:
        self.tokens += tokens
        seconds = max(time.perf_counter() - self.started, 1e-9)
        self.bar.set_postfix_str(f"{self.tokens / seconds:,.0f} target tokens/s", refresh=False)
        self.bar.update(lines)

    def close(self) -> None:
        self.bar.close()


class LineEnds:
    """A stream on which tqdm's carriage returns start new lines."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> None:
        text = text.replace("\x1b[A", "").strip()
        if text:
            self.stream.write(text + "\n")

    def flush(self) -> None:
        self.stream.flush()
