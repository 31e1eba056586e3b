"""Export a model folder with the demo as a Hugging Face Space (https://huggingface.co/docs/hub/spaces).

    vanilla-transformer export --model runs/numbers-en-de --to space --out numbers-space

The folder written runs on its own, as a Space or locally with `python app.py`:

- `model/`: the model (safetensors) with its tokenizer and generation config;
- `vanilla_transformer/`: this package's inference code (the configuration, the model, loading, the demo; no
  training code), which `app.py` imports, so that the Space needs no install of it;
- `app.py`: builds the demo of `vanilla_transformer.demo.app` for `model/` and launches it;
- `requirements.txt`: the package's dependencies and the demo's (Gradio, matplotlib);
- `README.md`: the Space's metadata (Gradio SDK, `app.py`).
"""

import importlib.metadata
import inspect
import json
import os
import re
import shutil

from ..configuration import changed_switches
from ..folders import check_writable, staged_folder
from ..model_folder import load_model_folder

APP = '''"""The vanilla-transformer demo for the model in model/, as a Hugging Face Space (`python app.py` runs it
here too)."""

import os

from vanilla_transformer.demo.app import build_app
from vanilla_transformer.model_folder import load_model_folder

HERE = os.path.dirname(os.path.abspath(__file__))
model, tokenizer = load_model_folder(os.path.join(HERE, "model"))
demo = build_app(model, tokenizer, title={title!r})

if __name__ == "__main__":
    demo.launch()
'''
SPACE_README = """---
title: {quoted_title}
emoji: 🔤
colorFrom: indigo
colorTo: blue
sdk: gradio
sdk_version: {version}
app_file: app.py
pinned: false
---

{title}: a Transformer (Vaswani et al. 2017) trained with vanilla-transformer. Type a sentence, see its translation,
the n-best list, the attention maps and each stage of Figure 1 with the model's own numbers.
"""


class SpaceExportError(ValueError):
    """The Space folder cannot be written; the message says why."""


def requirements(tokenizer) -> list[str]:
    """The package's own requirements and its demo extra's, without markers, from the installed metadata; with the
    import extra's for a `tokenizer` of Python's (an imported Marian's needs sentencepiece, a fairseq one's
    sacremoses), which a fast tokenizer's tokenizer.json does without."""
    extras = ("demo",) if tokenizer.is_fast else ("demo", "import")
    lines = []
    for requirement in importlib.metadata.requires("vanilla-transformer") or []:
        spec, _, marker = requirement.partition(";")
        if not marker or any(re.search(rf"""extra\s*==\s*["']{extra}["']""", marker) for extra in extras):
            lines.append(spec.strip())
    return sorted(set(lines), key=str.lower)


def inference_packages() -> list:
    """The import package and its sub-packages but the training stack (the configuration and the model): everything
    the inference layer runs on. Nothing outside the training stack imports it, and it is never copied."""
    import vanilla_transformer

    return [vanilla_transformer] + [
        module
        for name, module in sorted(vars(vanilla_transformer).items())
        if inspect.ismodule(module)
        and hasattr(module, "__path__")
        and module.__name__ == f"vanilla_transformer.{name}"
        and name != "training"
    ]


def copy_package(out: str) -> None:
    """The inference layer's Python files, in the layout it is imported with."""
    for package in inference_packages():
        name, source = package.__name__, package.__path__[0]
        target = os.path.join(out, *name.split("."))
        os.makedirs(target, exist_ok=True)
        for file in sorted(os.listdir(source)):
            if file.endswith(".py"):
                shutil.copy2(os.path.join(source, file), os.path.join(target, file))


def export_space(model_or_folder, out: str, tokenizer=None, title: str | None = None, overwrite: bool = False) -> str:
    """Write `out` as a Space running the demo for `model_or_folder` (a model folder, or a model with `tokenizer`).
    `out` must be new or empty unless `overwrite`; it is written beside and moved into place."""
    from ..demo.app import import_gradio

    gradio = import_gradio()  # the Space names the Gradio version it was written with
    if isinstance(model_or_folder, (str, os.PathLike)):
        model, tokenizer = load_model_folder(str(model_or_folder))
        title = title or f"vanilla-transformer {os.path.basename(os.path.normpath(model_or_folder))}"
    elif tokenizer is None:
        raise SpaceExportError("a model object needs its tokenizer: pass tokenizer=...")
    else:
        model = model_or_folder
    title = title or "vanilla-transformer demo"
    changed = changed_switches(model.config)
    if changed:
        raise SpaceExportError(
            f"the model changes Figure 1 ({changed}, a study's switches); the demo shows the paper's"
        )
    check_writable(out, overwrite, SpaceExportError, reading=model_or_folder)
    with staged_folder(out) as staging:
        model.save_pretrained(os.path.join(staging, "model"))
        tokenizer.save_pretrained(os.path.join(staging, "model"))
        copy_package(staging)
        write(staging, "app.py", APP.format(title=title))
        write(staging, "requirements.txt", "\n".join(requirements(tokenizer)) + "\n")
        quoted = json.dumps(title, ensure_ascii=False)  # YAML's double-quoted string: a title of any characters
        write(staging, "README.md", SPACE_README.format(title=title, quoted_title=quoted, version=gradio.__version__))
    return out


def write(folder: str, name: str, text: str) -> None:
    with open(os.path.join(folder, name), "w", encoding="utf-8") as handle:
        handle.write(text)
