"""The README and the manual are tested documents.

The README's first command trains the embedded-task model exactly as a new user would, once for the test session (the
`first_run` fixture of conftest.py), in a fresh process and a fresh folder. Then every example of the README and of
docs/ that shows an output (a bash or python block followed directly by a ```text block) runs and must print exactly
that output: those that read the first run's folder (runs/) in it, the others (the committed example model's, in
examples/) in a folder of their own, while the first run trains. The README stays a front door (a page of about 250
lines, that points to every page of the manual), and the manual builds as a site with every link checked.
"""

import json
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import (
    FIRST_RUN_KERNELS,
    KERNEL_SETTINGS,
    LONGEST_FIRST,
    SLOW,
    first_run_kernels,
    first_run_key,
)
from tests.documents import (
    CLI,
    DOCUMENTS,
    EXAMPLE_MODEL,
    PAGES,
    README,
    RECORDED_RUN,
    ROOT,
    argv,
    examples_with_output,
    first_command,
    run,
    same_output,
)

EXAMPLES = [(name, *example) for name, text in DOCUMENTS.items() for example in examples_with_output(text)]
ON_THE_FIRST_RUN = [example for example in EXAMPLES if "runs/" in example[2]]
ON_THE_EXAMPLE_MODEL = [example for example in EXAMPLES if "runs/" not in example[2]]


def example_ids(examples: list[tuple[str, str, str, str]]) -> list[str]:
    return [f"{name}: {code.strip().splitlines()[-1][:50]}" for name, _, code, _ in examples]


def example_command(language: str, code: str) -> list[str]:
    return argv(code.strip()) if language == "bash" else [sys.executable, "-c", code]


def test_the_first_command_trains_the_embedded_task_with_defaults():
    assert README.index(first_command()) < README.index("## Run the tests")
    assert first_command() == "vanilla-transformer train"


def test_the_first_runs_kernel_settings_name_its_kept_run_whatever_the_tests_own(monkeypatch):
    """`.ci/run` trains the first run once under another instruction set's kernels and reads it under both sets."""
    avx2 = "ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2"
    monkeypatch.setenv(FIRST_RUN_KERNELS, avx2)
    named = first_run_key()
    for setting in KERNEL_SETTINGS:
        monkeypatch.setenv(setting, "AVX2")
    assert first_run_key() == named
    monkeypatch.setenv(FIRST_RUN_KERNELS, "ATEN_CPU_CAPABILITY=default")
    assert first_run_key() != named
    monkeypatch.delenv(FIRST_RUN_KERNELS)
    assert first_run_key() != named
    monkeypatch.setenv(FIRST_RUN_KERNELS, "ATEN=avx2")
    with pytest.raises(pytest.UsageError, match=f"{FIRST_RUN_KERNELS}: 'ATEN=avx2' is not NAME=VALUE"):
        first_run_kernels()


def test_the_documents_show_outputs_for_the_examples_a_user_pastes_first():
    readme = "\n".join(code for name, _, code, _ in EXAMPLES if name == "README.md")
    for needle in (
        "vanilla-transformer translate --model runs/numbers-en-de",
        'pipeline("translation"',
        'AutoModelForSeq2SeqLM.from_pretrained("runs/numbers-en-de")',
        "trust_remote_code=True",
    ):
        assert needle in readme, f"no README example with a shown output uses {needle}"
    manual = "\n".join(code for name, _, code, _ in EXAMPLES if name != "README.md")
    for needle in (
        "vanilla-transformer attention",
        "vanilla-transformer export --model runs/numbers-en-de --to ctranslate2",
        "vanilla-transformer translate --model runs/numbers-en-de-ct2",
        "ctranslate2.Translator(",
        "get_peft_model(",
    ):
        assert needle in manual, f"no example of the manual with a shown output uses {needle}"


@pytest.fixture(scope="module")
def first_run_outputs(first_run) -> dict[str, subprocess.CompletedProcess]:
    """What each example on the first run printed, by its code: each document's examples in their order (a later one
    may read what an earlier one wrote), two documents at a time."""
    by_document = {}
    for document, language, code, _ in ON_THE_FIRST_RUN:
        by_document.setdefault(document, []).append((language, code))

    def one(examples: list[tuple[str, str]]) -> dict[str, subprocess.CompletedProcess]:
        return {code: run(example_command(language, code), first_run) for language, code in examples}

    with ThreadPoolExecutor(2) as pool:
        return {code: done for printed in pool.map(one, by_document.values()) for code, done in printed.items()}


@pytest.mark.parametrize("document, language, code, expected", ON_THE_FIRST_RUN, ids=example_ids(ON_THE_FIRST_RUN))
def test_every_example_prints_what_its_document_shows(first_run_outputs, document, language, code, expected):
    done = first_run_outputs[code]
    assert done.returncode == 0, done.stderr[-3000:]
    assert same_output(done.stdout, expected), f"printed:\n{done.stdout}\nshown:\n{expected}"


@pytest.mark.parametrize(
    "document, language, code, expected", ON_THE_EXAMPLE_MODEL, ids=example_ids(ON_THE_EXAMPLE_MODEL)
)
def test_every_example_on_the_committed_model_prints_what_its_document_shows(
    tmp_path, document, language, code, expected
):
    (tmp_path / "examples").symlink_to(EXAMPLE_MODEL.parent, target_is_directory=True)  # as in a clone
    done = run(example_command(language, code), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert same_output(done.stdout, expected), f"printed:\n{done.stdout}\nshown:\n{expected}"


@pytest.mark.parametrize(
    "printed, shown, same",
    [
        ("trainable%: 7.5848", "trainable%: 7.5848", True),
        ("trainable%: 7.5849", "trainable%: 7.5848", True),  # one unit in the last decimal: a rounding's width
        ("trainable%: 7.5847", "trainable%: 7.5848", True),
        ("trainable%: 7.5850", "trainable%: 7.5848", False),
        ("trainable%: 7.585", "trainable%: 7.5848", False),  # another number of decimals
        ("trainable: 7.5848", "trainable%: 7.5848", False),
        ("[(0, 1), (3, 1)]", "[(0, 0), (3, 1)]", False),  # whole numbers exactly
        ("zweiundvierzig\n", "zweiundvierzig", True),
        ("zweiundvierzig neunundvierzig", "zweiundvierzigtausendsechsundvierzig", False),
    ],
)
def test_a_shown_number_holds_within_its_rounding_and_text_exactly(printed, shown, same):
    assert same_output(printed, shown) is same


def test_the_readme_is_a_front_door_to_every_page_of_the_manual():
    assert len(README.splitlines()) <= 300
    for name in set(PAGES) - {"index.md"}:  # the site's home page is the README's map, again
        assert f"](docs/{name})" in README, f"the README's map of the manual leaves out docs/{name}"
        assert f"]({name})" in PAGES["index.md"], f"docs/index.md leaves out {name}"
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert sorted(re.findall(r": (\S+\.md)$", nav, re.MULTILINE)) == sorted(PAGES)


def test_ci_runs_the_readmes_test_command_and_then_the_slow_tier():
    command = re.search(r"## Run the tests\n\n```bash\n(.*?)\n```", README, re.DOTALL).group(1)
    assert command.endswith('python -m pytest -q -m "not slow"')
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    slow = [line for line in ci[ci.index(command) :] if "python -m pytest -q -m slow" in line]
    assert slow and "-n auto" in slow[0] and "--dist loadfile" in slow[0]  # the slow tier, on a worker a core


def test_the_slow_tiers_lists_name_tests_that_exist():
    """conftest.py's SLOW (what makes the slow tier) and LONGEST_FIRST (its order) name modules, folders and tests by
    path: one renamed or moved would drop out of the slow tier or out of its order without a word."""
    for key in [*SLOW, *LONGEST_FIRST]:
        path, _, test = key.partition("::")
        assert (ROOT / path).exists(), f"{key}: no such module or folder"
        assert not test or f"def {test}(" in (ROOT / path).read_text(encoding="utf-8"), f"{key}: no such test"
    for module in LONGEST_FIRST:  # each holds tests of the slow tier
        assert any(key.split("::")[0] == module or module.startswith(key) for key in SLOW), module


def test_the_manual_builds_as_a_site_with_every_link_checked(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "repository" / "BENCHMARKS.md").exists()  # a link out of docs/ resolves in the site
    # a link to a file the repository lacks stops the build, naming the page: a copy of the repository whose
    # errors page gains one
    copy = tmp_path / "copy"
    copy.mkdir()
    for entry in ROOT.iterdir():
        if entry.name != "docs":
            (copy / entry.name).symlink_to(entry)
    shutil.copytree(ROOT / "docs", copy / "docs")
    (copy / "docs" / "errors.md").write_text(PAGES["errors.md"] + "\n[gone](../NO_SUCH_FILE.md)\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "out")],
        cwd=copy,
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and "docs/errors.md links to ../NO_SUCH_FILE.md" in done.stderr


def test_the_first_run_meets_the_exact_match_target_at_every_digit_count(first_run):
    results = json.loads((first_run / "runs" / "numbers-en-de" / "eval_results.json").read_text())
    by_digits = results["test"]["exact_match_by_digits"]
    assert sorted(by_digits) == ["1", "2", "3", "4", "5", "6"]
    assert min(by_digits.values()) >= 98.0, by_digits


def test_the_first_run_prints_exact_match_first_and_per_digit_count(first_run):
    printed = (first_run / "train_output.txt").read_text(encoding="utf-8")
    results = json.loads((first_run / "runs" / "numbers-en-de" / "eval_results.json").read_text())
    for split in ("validation", "test"):
        by_digits = ", ".join(f"{d} digits {v}%" for d, v in results[split]["exact_match_by_digits"].items())
        line = f"{split}: exact match {results[split]['exact_match']}% ({by_digits}); BLEU"
        assert re.search("^" + re.escape(line), printed, re.MULTILINE), line
        assert list(results[split])[:2] == ["exact_match", "exact_match_by_digits"]


def test_the_committed_example_model_is_the_first_commands_model(first_run):
    """examples/numbers-en-de, which the pages of the model's uncertain outputs use, is what the first command trains:
    the same configuration, tokenizer and generation settings as this machine's run, and its scores at the target."""
    fresh = first_run / "runs" / "numbers-en-de"

    def settings(folder, name):  # but for the library version that wrote it and the code the committed folder lacks
        ignored = ("transformers_version", "auto_map")
        return {key: value for key, value in json.loads((folder / name).read_text()).items() if key not in ignored}

    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        assert settings(EXAMPLE_MODEL, name) == settings(fresh, name), name
    by_digits = json.loads((EXAMPLE_MODEL / "eval_results.json").read_text())["test"]["exact_match_by_digits"]
    assert min(by_digits.values()) >= 98.0, by_digits


def test_the_readme_table_is_the_recorded_run():
    recorded = json.loads(RECORDED_RUN.read_text())
    for split in ("validation", "test"):
        row = (
            f"| {split} | {recorded[split]['exact_match']}% | "
            + " | ".join(f"{value}%" for value in recorded[split]["exact_match_by_digits"].values())
            + " |"
        )
        assert row in README, row


def test_the_first_run_translates_a_200_token_input(first_run):
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    import vanilla_transformer  # noqa: F401  (registers the model type with the Auto classes)

    folder = first_run / "runs" / "numbers-en-de"
    sentence = " ".join(["nine hundred ninety-nine thousand"] * 40)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    source = tokenizer(sentence, return_tensors="pt")
    assert source["input_ids"].shape[1] >= 200  # many times the longest sentence it was trained on
    done = run(
        CLI + ["translate", "--model", "runs/numbers-en-de", "--num-beams", "1", "--max-length", "40", sentence],
        first_run,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "truncated" not in done.stderr  # the whole sentence was read
    # The translation printed is the model's for the whole 200+-token sentence: what generate() gives for it, with
    # the same search (greedy, at most 40 new tokens). With the sinusoids of §3.5 nothing cuts the source.
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    assert model.config.position_encoding == "sinusoidal"
    with torch.no_grad():
        generated = model.generate(**source, num_beams=1, max_new_tokens=40)
    expected = tokenizer.decode(generated[0], skip_special_tokens=True).strip()
    assert done.stdout.splitlines() == [expected]
    # German, from the sentence's start: "nine hundred ..." (a model of 600 updates on sentences of at most 16 tokens
    # need not get the forty repetitions right)
    assert expected.startswith("neunhundert"), expected


def code_map() -> dict[str, str]:
    """docs/development.md's map of the code: each file a row names (a path, then its siblings by name) -> the row."""
    section = PAGES["development.md"].split("## How the code is organised")[1]
    named = {}
    for row in (line for line in section.splitlines() if line.startswith("| `")):
        first, *siblings = re.findall(r"`([^`]+)`", row.split(" | ")[0])
        folder = first.rpartition("/")[0]
        for name in (first, *(f"{folder}/{sibling}" for sibling in siblings)):
            named[name] = row
    return named


def test_the_code_map_names_files_that_exist_and_every_module_of_the_training_stack():
    named = code_map()
    missing = [name for name in named if not (ROOT / name).exists()]
    assert not missing, f"docs/development.md names files that do not exist: {missing}"
    modules = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "training").rglob("*.py")
        if path.name != "__init__.py" and "studies" not in path.parts and "recipes" not in path.parts
    }
    assert modules <= set(named), f"docs/development.md leaves out {sorted(modules - set(named))}"
