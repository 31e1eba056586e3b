"""The translate-fairseq suite's smallest setting, run once where fairseq is installed, so that it cannot rot (its
figures are not asserted: they are for context): fairseq's tools make and train the model, both engines translate
the same lines, and the section follows the translate section."""

import json
import os
import subprocess
import sys

import pytest

from tests.fairseq_reference.recipe import fairseq_python

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
MARKER = "<!-- translate-fairseq: written by python -m bench translate-fairseq -->"
TRANSLATE = "<!-- translate: written by python -m bench translate -->"
PYTHON = fairseq_python()
REQUIRED = os.environ.get("VANILLA_TRANSFORMER_FAIRSEQ") == "required"

pytestmark = pytest.mark.skipif(
    PYTHON is None and not REQUIRED,
    reason="needs fairseq in an environment of its own: .venv-fairseq (tests/fairseq_reference/make_env.sh builds it)",
)


def test_the_smallest_run_writes_both_rows_and_the_context_ratio_after_the_translate_section(tmp_path):
    out, raw = tmp_path / "BENCHMARKS.md", tmp_path / "fairseq.json"
    out.write_text(f"# Benchmarks\n\n{TRANSLATE}\n\nthe translate section\n")
    flags = "--quick --sentences 40 --updates 20 --beams 1"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "translate-fairseq", *flags.split(), "--fairseq-python", str(PYTHON), "--out",
         str(out), "--json", str(raw)], cwd=ROOT, capture_output=True, text=True, timeout=900,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = out.read_text()
    assert report.index(TRANSLATE) < report.index(MARKER) and "the translate section" in report
    assert f"- command: `python -m bench translate-fairseq {flags}`" in report
    assert "| `fairseq-interactive` | greedy |" in report
    assert "| `translate`, torch engine, the imported model | greedy |" in report
    assert "| greedy: `translate` against fairseq-interactive |" in report
    rows = json.loads(raw.read_text())["sizes"]["tiny"]["rows"]["greedy"]
    assert rows["fairseq"]["target_tokens"] > 40  # every line translated, </s> counted
    assert rows["ours"]["same_as_fairseq"] >= 36  # the import translates as fairseq does, greedy
