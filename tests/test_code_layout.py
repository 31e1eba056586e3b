"""How the code is laid out, checked on its import graph and its functions.

Dependencies run one way: configuration <- modeling <- the inference layer (`vanilla_transformer/`: loading a folder,
translators, pipeline, exports, attention maps, the demo) <- training (`training/`) <- the command line
(`vanilla_transformer/cli.py`). A module imports only modules of its own layer or of those below it, also inside
functions.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# folder in the repository -> the import package it is installed as (pyproject.toml's package-dir)
FOLDERS = {
    "configuration": "vanilla_transformer.configuration",
    "modeling": "vanilla_transformer.modeling",
    "vanilla_transformer": "vanilla_transformer",
    "training": "vanilla_transformer.training",
}
LAYERS = ("configuration", "modeling", "inference", "training", "command line")
LONGEST_FUNCTION = 60  # lines


def layer(module: str) -> int | None:
    """The layer of a module of the package; None for anything else."""
    if module != "vanilla_transformer" and not module.startswith("vanilla_transformer."):
        return None
    for prefix, name in (
        ("vanilla_transformer.configuration", "configuration"),
        ("vanilla_transformer.modeling", "modeling"),
        ("vanilla_transformer.training", "training"),
        ("vanilla_transformer.cli", "command line"),
    ):
        if module == prefix or module.startswith(prefix + "."):
            return LAYERS.index(name)
    return LAYERS.index("inference")


def source_files():
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                yield path, ".".join((package, *parts[:-1])), True
            else:
                yield path, ".".join((package, *parts)), False


def imported_modules(path: Path, module: str, is_package: bool):
    """Every module of the package that `path` imports, at its top or inside a function, with the line."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            origin = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
            for alias in node.names:
                yield f"{origin}.{alias.name}", node.lineno


def test_dependencies_run_one_way():
    wrong = []
    for path, module, is_package in source_files():
        own = layer(module)
        for imported, line in imported_modules(path, module, is_package):
            target = layer(imported)
            if target is not None and target > own:
                where = f"{path.relative_to(ROOT)}:{line}"
                wrong.append(f"{where} ({LAYERS[own]}) imports {imported} ({LAYERS[target]})")
    assert not wrong, "\n".join(wrong)


def test_the_rule_sees_an_import_against_it(tmp_path):
    """The check itself: a lazy import of the training stack from the inference layer is found."""
    offending = tmp_path / "demo.py"
    offending.write_text("def launch():\n    from .training.loop import train\n")
    imports = list(imported_modules(offending, "vanilla_transformer.demo", False))
    assert imports == [("vanilla_transformer.training.loop.train", 2)]
    assert layer(imports[0][0]) > layer("vanilla_transformer.demo")


def test_using_a_model_loads_no_training_code():
    probe = (
        "import sys, vanilla_transformer, vanilla_transformer.demo, vanilla_transformer.commands, "
        "vanilla_transformer.space_export, vanilla_transformer.stages\n"
        "print(sorted(m for m in sys.modules if m.startswith('vanilla_transformer.training')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("folder", ["configuration", "modeling", "vanilla_transformer", "training", "bench"])
def test_functions_are_short_enough_to_see_whole(folder):
    long = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > LONGEST_FUNCTION:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {lines} lines")
    assert not long, "\n".join(long)
