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
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
CLI = [sys.executable, "-m", "vanilla_transformer.cli"]  # `vanilla-transformer`, in this Python


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
