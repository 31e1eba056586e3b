"""Training curves (training and validation loss, validation BLEU, learning rate over steps) drawn from a run's
metrics.jsonl."""

import json
import os

from ...errors import MISSING_MATPLOTLIB, MissingDependencyError, WriteError
from ...folders import replacing

# what every update's record holds (training/run/loop.py's `update_record`), and the curves draw
RECORD_FIELDS = ("step", "loss", "nll_loss", "lr")
# what an evaluation's record adds, which the curves draw too
VALIDATION_FIELDS = (
    "validation_bleu",
    "validation_bleu_lowercase",
    "validation_exact_match",
    "validation_cross_entropy",
)


def read_metrics(run_dir: str) -> list[dict]:
    """The records of the run's metrics.jsonl; a ValueError names the file and line of one that is not a record
    of a training run's update (its fields numbers). Only the last line may fail to parse: a run still in progress
    may be writing it."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        raise ValueError(f"{run_dir}: no metrics.jsonl, so this is not a training run folder.")
    records, cut = [], None
    with open(path, "rb") as handle:  # read at once: a line still being written is the last one read
        lines = handle.read().split(b"\n")
    for number, raw in enumerate(lines, start=1):
        try:
            line = raw.decode("utf-8").strip()
        except UnicodeDecodeError as error:
            raise ValueError(f"{path} line {number}: not UTF-8 ({error.reason} at byte {error.start})") from None
        if not line:
            continue
        if cut is not None:
            raise ValueError(f"{path} line {cut}: not JSON, and records follow it")
        try:
            records.append(checked_record(json.loads(line), f"{path} line {number}"))
        except (json.JSONDecodeError, RecursionError):  # RecursionError: nested too deeply
            cut = number
    return records


def checked_record(record, where: str) -> dict:
    """`record` if it has an update's fields (RECORD_FIELDS), each a number, as is each validation figure drawn that
    it has (VALIDATION_FIELDS); a ValueError naming `where` otherwise."""
    missing = [name for name in RECORD_FIELDS if not isinstance(record, dict) or name not in record]
    if missing:
        raise ValueError(f"{where}: no {', '.join(missing)}; an update's record has {', '.join(RECORD_FIELDS)}")
    for name in (*RECORD_FIELDS, *(name for name in VALIDATION_FIELDS if name in record)):
        if isinstance(record[name], bool) or not isinstance(record[name], (int, float)):
            raise ValueError(f"{where}: {name} is {record[name]!r:.60}; expected a number")
    return record


def plot_run(run_dir: str, out: str | None = None, quiet: bool = False) -> str | None:
    """Write `training_curves.png` (or `out`) for the run in `run_dir`; works while the run is in progress.

    Raises `ValueError` if `run_dir` is not a run folder or `out` not an image file's name (.png, .svg, .pdf...), and
    `MissingDependencyError` without matplotlib (unless `quiet`, which then returns None). The image is written
    beside `out` and renamed over it: a failure leaves no half-written file."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        if quiet:
            return None
        raise MissingDependencyError(MISSING_MATPLOTLIB) from None
    check_image_name(out)
    records = read_metrics(run_dir)
    steps = [r["step"] for r in records]
    evals = [r for r in records if "validation_bleu" in r]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    axes[0].plot(steps, [r["loss"] for r in records], label="training loss (label-smoothed)", linewidth=0.8)
    axes[0].plot(steps, [r["nll_loss"] for r in records], label="training NLL", linewidth=0.8)
    scored = [r for r in evals if "validation_cross_entropy" in r]
    if scored:
        axes[0].plot(
            [r["step"] for r in scored],
            [r["validation_cross_entropy"] for r in scored],
            marker="o",
            label="validation NLL (dropout off)",
        )
    axes[0].set(title="Loss", xlabel="step", ylabel="nats per target token")
    axes[0].legend()
    draw_validation_score(axes[1], evals)
    axes[2].plot(steps, [r["lr"] for r in records])
    axes[2].set(title="Learning rate", xlabel="step")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    out = out or os.path.join(run_dir, "training_curves.png")
    try:
        with replacing(out, binary=True) as handle:
            fig.savefig(handle, format=os.path.splitext(out)[1][1:].lower(), dpi=100)
    except OSError as error:  # a folder that is not writable, a full disk: nothing was replaced
        raise WriteError.of(out, error) from error
    finally:
        plt.close(fig)
    return out


def draw_validation_score(ax, evals: list[dict]) -> None:
    """The greedy validation score by update: exact match for the embedded task (whose one-word outputs BLEU scores
    0 however right), else BLEU, cased and lowercased."""
    steps = [r["step"] for r in evals]
    if any("validation_exact_match_by_digits" in r for r in evals):  # the embedded task's alone
        ax.plot(steps, [r.get("validation_exact_match") for r in evals], marker="o")
        ax.set(title="Validation exact match (greedy)", xlabel="step", ylabel="% of sentences")
        return
    ax.plot(steps, [r["validation_bleu"] for r in evals], marker="o", label="cased")
    if any("validation_bleu_lowercase" in r for r in evals):
        ax.plot(steps, [r.get("validation_bleu_lowercase") for r in evals], marker="o", label="lowercased")
        ax.legend()
    ax.set(title="Validation BLEU (greedy)", xlabel="step", ylabel="BLEU")


def check_image_name(out: str | None, where: str = "") -> None:
    """A ValueError, its message starting with `where` (the flag), unless `out` (None: the run folder's PNG) ends
    as an image format matplotlib writes."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependencyError(MISSING_MATPLOTLIB) from None
    formats = Figure().canvas.get_supported_filetypes()
    if out is not None and os.path.splitext(out)[1].lower().lstrip(".") not in formats:
        raise ValueError(f"{where}{out}: expected an image file name ending in .{', .'.join(sorted(formats))}")
