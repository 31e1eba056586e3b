import json

import pytest
from vanilla_transformer.training.tasks.numbers import english, german

from ..conftest import TINY_ARCHITECTURE_FLAGS, data_flags, train_cli  # noqa: F401  (the training tests' helpers)

TINY_MODEL_FLAGS = [
    *TINY_ARCHITECTURE_FLAGS,
    "--max-tokens",
    "256",
    "--warmup-steps",
    "5",
    "--lr",
    "3e-3",
    "--num-beams",
    "2",
    "--eval-batch-size",
    "16",
    "--report-to",
    "none",
    "--max-source-length",
    "16",
    "--max-target-length",
    "16",
    "--log-steps",
    "1",
    "--show-samples",
    "1",
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def pairs(numbers):
    return [{"translation": {"en": english(n), "de": german(n)}} for n in numbers]


@pytest.fixture
def data_files(tmp_path):
    """A few hundred number pairs as local JSON-lines files."""
    folder = tmp_path / "data"
    folder.mkdir()
    return {
        "train": write_jsonl(folder / "train.jsonl", pairs(range(100, 400))),
        "validation": write_jsonl(folder / "validation.jsonl", pairs(range(20, 36))),
        "test": write_jsonl(folder / "test.jsonl", pairs(range(40, 56))),
    }
