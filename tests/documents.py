"""The README and the manual (docs/) as test data: their examples with their shown outputs, the README's first
command, and running them as a user would (in a fresh process, in a given folder, offline)."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
# the manual's pages, by file name; the tutorial is a notebook that tests/test_tutorial.py runs as one
PAGES = {path.name: path.read_text(encoding="utf-8") for path in sorted((ROOT / "docs").glob("*.md"))}
DOCUMENTS = {"README.md": README, **{f"docs/{name}": text for name, text in PAGES.items() if name != "tutorial.md"}}
RECORDED_RUN = ROOT / "training" / "recipes" / "runs" / "numbers_eval_results.json"
# The README's first model as trained once and committed. A run of the first command on another CPU differs in its
# last bits, and so does whatever the model is unsure of (low-ranked hypotheses, forced terms, attention argmaxes);
# the examples that show such outputs (the translator's tools, the server's page) run against this folder, so that
# they depend on inference alone. `python -m tests.documents FOLDER` records a run's folder here.
EXAMPLE_MODEL = ROOT / "examples" / "numbers-en-de"
# what the committed folder keeps of a run's folder: the model, its tokenizer, its settings and its scores; its card
# is cut to the card's metadata (the languages the server reads), and its copy of the package's code is left out, so
# that the repository holds the model's code once (the package, installed, loads the folder)
EXAMPLE_MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "eval_results.json",
)
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
CLI = [sys.executable, "-m", "vanilla_transformer.cli"]  # `vanilla-transformer`, in this Python
# a number with decimals, as an output shows it
DECIMAL = re.compile(r"(-?\d+\.\d+)")


def examples_with_output(text: str) -> list[tuple[str, str, str]]:
    """(language, code, expected output) of every bash or python block that a text block directly follows."""
    blocks = list(FENCE.finditer(text))
    return [
        (code.group(1), code.group(2), output.group(2))
        for code, output in zip(blocks, blocks[1:])
        if code.group(1) in ("bash", "python")
        and output.group(1) == "text"
        and not text[code.end() : output.start()].strip()
    ]


def same_output(printed: str, shown: str) -> bool:
    """Whether a printed output is the one a document shows. Text must be equal; a number with decimals holds only
    within its rounding, so it may differ by one unit in the last decimal shown (with as many decimals): a last-bit
    difference in float32 can round a printed figure either way."""
    printed_parts, shown_parts = DECIMAL.split(printed.strip()), DECIMAL.split(shown.strip())
    if len(printed_parts) != len(shown_parts):
        return False
    for index, (found, expected) in enumerate(zip(printed_parts, shown_parts)):
        if index % 2 == 0:  # text between numbers
            if found != expected:
                return False
            continue
        decimals = len(expected.partition(".")[2])
        if len(found.partition(".")[2]) != decimals or abs(float(found) - float(expected)) > 1.5 * 10**-decimals:
            return False
    return True


def first_command() -> str:
    """The training part of the README's first command (the part after the installs)."""
    block = next(m.group(2) for m in FENCE.finditer(README) if m.group(1) == "bash")
    return block.strip().split("&&")[-1].strip()


def argv(command: str) -> list[str]:
    words = shlex.split(command.replace("\\\n", " "))
    return CLI + words[1:] if words[0] == "vanilla-transformer" else words


def run(args: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def keep_example_model(run_folder: Path) -> None:
    """Copy a run's model folder into `EXAMPLE_MODEL`: `EXAMPLE_MODEL_FILES`, without the `auto_map` that names the
    code left out, and the card's metadata."""
    import json
    import shutil

    shutil.rmtree(EXAMPLE_MODEL, ignore_errors=True)
    EXAMPLE_MODEL.mkdir(parents=True)
    for name in EXAMPLE_MODEL_FILES:
        shutil.copyfile(run_folder / name, EXAMPLE_MODEL / name)
    for name in ("config.json", "tokenizer_config.json"):
        settings = json.loads((EXAMPLE_MODEL / name).read_text(encoding="utf-8"))
        settings.pop("auto_map", None)
        (EXAMPLE_MODEL / name).write_text(json.dumps(settings, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    metadata = (run_folder / "README.md").read_text(encoding="utf-8").split("\n---\n")[0] + "\n---\n"
    (EXAMPLE_MODEL / "README.md").write_text(
        metadata + "\nThe README's first model (`vanilla-transformer train`), kept for the manual's examples: "
        "`pip install vanilla-transformer` loads it.\n",
        encoding="utf-8",
    )


if __name__ == "__main__":
    keep_example_model(Path(sys.argv[1]))
    print(f"kept {sys.argv[1]} in {EXAMPLE_MODEL}")
