"""What runs a model for `translate` and `evaluate`: the `--backend`, `--threads` and `--inter-threads` flags, and
the translator they choose (PyTorch for a model folder, CTranslate2 for an exported one)."""

import argparse

from ..errors import CommandError, ModelFolderError
from ..inference.translators import load_translator, uses_ctranslate2
from ..training.options.arguments import PositiveInt


def add_backend_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--backend",
        choices=["auto", "pytorch", "ctranslate2"],
        default="auto",
        help="what runs the model: 'auto' uses CTranslate2 for a folder written by `export --to ctranslate2`, "
        "PyTorch for a model folder",
    )
    command.add_argument(
        "--threads", type=PositiveInt, help="CPU threads on each batch (default: the backend's own choice)"
    )
    command.add_argument(
        "--inter-threads",
        type=PositiveInt,
        default=1,
        metavar="K",
        help="CTranslate2 only: translate K batches at once, each on --threads threads; for many sentences on N "
        "cores, K=N with --threads 1 is the faster layout in BENCHMARKS.md for int8 and for larger models",
    )


def runs_on_pytorch(model: str, backend: str, inter_threads: int) -> bool:
    """Whether --model runs on PyTorch; a `CommandError` if a flag asks for what only CTranslate2 does."""
    if uses_ctranslate2(model, backend):
        return False
    if inter_threads != 1:
        raise CommandError(
            f"--inter-threads {inter_threads}: batches in parallel need a CTranslate2 folder "
            f"(export --to ctranslate2), and --model {model} runs on PyTorch",
            exit_code=2,
        )
    return True


def translator_for(model: str, backend: str, threads: int | None, inter_threads: int):
    """The translator of --model with --backend, --threads and --inter-threads, or a `CommandError` naming the
    flag."""
    runs_on_pytorch(model, backend, inter_threads)  # checks the flags
    try:
        return load_translator(model, backend=backend, threads=threads, inter_threads=inter_threads)
    except ModelFolderError as error:  # already names the folder and what is wrong with it
        raise ModelFolderError(f"--model {error} (--backend {backend})") from error
    except (OSError, ValueError) as error:
        raise ModelFolderError(f"--model {model}: could not load it for --backend {backend}: {error}") from error
