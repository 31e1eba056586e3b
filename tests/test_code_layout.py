"""How the code is laid out, checked on its import graph and its functions.

Dependencies run one way: configuration <- modeling <- the inference layer (`vanilla_transformer/`: loading a folder,
translators, pipeline, exports, attention maps, the demo) <- training (`training/`) <- the command line
(`vanilla_transformer/cli.py`, `__main__.py` and every module of `vanilla_transformer/commands/`). A module imports
only modules of its own layer or of those below it, also inside functions, and no module imports itself again through
others (no import circle).
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
        ("vanilla_transformer.__main__", "command line"),
        ("vanilla_transformer.commands", "command line"),
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
    offending = tmp_path / "app.py"
    offending.write_text("def launch():\n    from ..training.run.loop import train\n")
    imports = list(imported_modules(offending, "vanilla_transformer.demo.app", False))
    assert imports == [("vanilla_transformer.training.run.loop.train", 2)]
    assert layer(imports[0][0]) > layer("vanilla_transformer.demo.app")


def test_the_rule_sees_the_training_stack_import_a_command(tmp_path):
    """The check itself: the training stack importing a command's module (here a lazy import of the evaluate
    command's backend flags) is found, as the command line is the layer above it."""
    offending = tmp_path / "evaluation.py"
    offending.write_text("def score():\n    from ...commands.backend import translator_for\n")
    imports = list(imported_modules(offending, "vanilla_transformer.training.report.evaluation", False))
    assert imports == [("vanilla_transformer.commands.backend.translator_for", 2)]
    assert LAYERS[layer(imports[0][0])] == "command line"
    assert layer(imports[0][0]) > layer("vanilla_transformer.training.report.evaluation")


def module_of(imported: str, modules: set[str]) -> str | None:
    """The module of the package an import loads: the name itself when it is a module, else the module it takes the
    name from (`from .modeling import VanillaTransformerModel`: the package `vanilla_transformer.modeling`, whose
    `__init__` defines or re-exports it); None outside the package."""
    while imported and imported not in modules:
        imported = imported.rpartition(".")[0]
    return imported or None


def ancestors(module: str) -> set[str]:
    """The packages that hold `module`, which Python imports before it runs a line of it."""
    parts = module.split(".")
    return {".".join(parts[:end]) for end in range(1, len(parts))}


def plain_imports(path: Path) -> set[tuple[str, int]]:
    """The `import x.y` statements of a file (not `from x import y`), as (name, line)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    statements = [node for node in ast.walk(tree) if isinstance(node, ast.Import)]
    return {(alias.name, node.lineno) for node in statements for alias in node.names}


def module_graph() -> dict[str, set[str]]:
    """Each module of the package -> the other modules of the package it imports, at its top or inside a function.
    Not an edge: `import pkg` of a package that holds the module, which Python has imported before the module (as
    model_folder.py imports `vanilla_transformer` to have the model type registered); that statement loads nothing,
    whereas `from pkg import name` needs the package's `__init__` to have defined the name, and is an edge."""
    files = list(source_files())
    modules = {module for _, module, _ in files}
    graph = {}
    for path, module, is_package in files:
        loaded_first = {(name, line) for name, line in plain_imports(path) if name in ancestors(module)}
        imported = (
            module_of(name, modules)
            for name, line in imported_modules(path, module, is_package)
            if (name, line) not in loaded_first
        )
        graph[module] = {target for target in imported if target not in (None, module)}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles of a module graph: its strongly connected components of more than one module (Tarjan), each
    sorted, in sorted order."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(cycles)


def test_the_package_has_no_import_circle():
    cycles = import_cycles(module_graph())
    assert not cycles, "\n".join(" <-> ".join(cycle) for cycle in cycles)


def test_the_circle_check_finds_a_circle_and_reads_imports_as_modules():
    modules = {"vanilla_transformer", "vanilla_transformer.modeling", "vanilla_transformer.modeling.hub"}
    # a name taken from a package is its __init__'s; a submodule named in `from . import x` is that module
    assert module_of("vanilla_transformer.modeling.VanillaTransformerModel", modules) == "vanilla_transformer.modeling"
    assert module_of("vanilla_transformer.modeling.hub", modules) == "vanilla_transformer.modeling.hub"
    assert module_of("vanilla_transformer.modeling.hub.upload_folder", modules) == "vanilla_transformer.modeling.hub"
    assert module_of("torch.nn", modules) is None
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []
    # the package's own graph: the command line imports the commands, and a command the training stack; a package
    # imported whole by a module it holds is not an edge, a name taken from it is
    graph = module_graph()
    assert "vanilla_transformer.commands.train" in graph["vanilla_transformer.cli"]
    assert "vanilla_transformer.training.options.arguments" in graph["vanilla_transformer.commands.train"]
    assert "vanilla_transformer" not in graph["vanilla_transformer.model_folder"]
    assert "vanilla_transformer.modeling" in graph["vanilla_transformer.training.run.model"]
    assert ancestors("vanilla_transformer.commands.train") == {"vanilla_transformer", "vanilla_transformer.commands"}


def test_using_a_model_loads_no_training_code():
    probe = (
        "import sys, vanilla_transformer, vanilla_transformer.demo.app, vanilla_transformer.commands, "
        "vanilla_transformer.exports.space, vanilla_transformer.demo.stages\n"
        "print(sorted(m for m in sys.modules if m.startswith('vanilla_transformer.training')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_command_line_loads_only_the_training_flags_until_a_training_command_runs():
    """Building every command's parser reads the training stack's argument dataclasses (and the names of ablate's
    studies), nothing else of it: the training loop, data and evaluation are imported by the handlers of train,
    evaluate, plot and ablate when they run."""
    probe = (
        "import sys, vanilla_transformer.cli\n"
        "vanilla_transformer.cli.build_parser()\n"
        "print(sorted(m for m in sys.modules if m.startswith('vanilla_transformer.training')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(
        [
            "vanilla_transformer.training",
            "vanilla_transformer.training.options",
            "vanilla_transformer.training.options.argument_checks",
            "vanilla_transformer.training.options.argument_types",
            "vanilla_transformer.training.options.arguments",
            "vanilla_transformer.training.options.presets",
            "vanilla_transformer.training.options.switch_arguments",
            "vanilla_transformer.training.studies",
            "vanilla_transformer.training.studies.arguments",
            "vanilla_transformer.training.studies.variants",
        ]
    )


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


LONGEST_FILE = 450  # lines
# the model is one file read top to bottom as the paper's sections (§3.1-§3.5), as nanoGPT's model.py is
WHOLE_ON_PURPOSE = {"modeling/modeling_vanilla_transformer.py"}


@pytest.mark.parametrize("folder", ["configuration", "modeling", "vanilla_transformer", "training", "bench"])
def test_files_hold_one_concern_each_and_stay_short(folder):
    long = [
        f"{path.relative_to(ROOT)}: {len(path.read_text(encoding='utf-8').splitlines())} lines"
        for path in sorted((ROOT / folder).rglob("*.py"))
        if str(path.relative_to(ROOT)) not in WHOLE_ON_PURPOSE
        and len(path.read_text(encoding="utf-8").splitlines()) > LONGEST_FILE
    ]
    assert not long, "\n".join(long)


def test_only_the_entry_point_and_the_run_builder_take_the_whole_training_arguments():
    """Below `train`, the one function that reads every group is `setup_run`; the others take the group they read
    (or plain values). arguments.py, where the groups are made and checked against each other, is the exception."""
    takers = set()
    for path in sorted((ROOT / "training").rglob("*.py")):
        if path.name == "arguments.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for argument in node.args.args + node.args.kwonlyargs:
                    whole = argument.annotation is not None and "TrainArguments" in ast.unparse(argument.annotation)
                    if whole:
                        takers.add(f"{path.relative_to(ROOT / 'training')}:{node.name}")
                    elif argument.arg == "args":
                        takers.add(f"{path.relative_to(ROOT / 'training')}:{node.name} (a parameter named args)")
    assert takers == {"run/loop.py:train", "run/startup.py:setup_run"}


def test_every_package_folder_is_installed():
    """A subpackage missing from pyproject.toml works in an editable install and is absent from the wheel."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    folders = {package: ROOT / folder for package, folder in setuptools["package-dir"].items()}
    found = {
        ".".join((package, *init.parent.relative_to(folder).parts))
        for package, folder in folders.items()
        for init in folder.rglob("__init__.py")
    }
    assert found == set(setuptools["packages"])
