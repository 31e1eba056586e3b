"""`python -m bench`: the one entry to the suites lists them, shows each suite's flags, and imports a suite only when
that suite runs (the serving suite's CTranslate2 probe processes must not load torch)."""

import os
import subprocess
import sys

from bench.__main__ import SUITES

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_help_lists_every_suite_with_a_line_each():
    done = bench("--help")
    assert done.returncode == 0, done.stderr
    for name in ("speed", "serving", "data", "gpu", "engines", "generation-split", "search-agreement"):
        assert name in SUITES and f"    {name}" in done.stdout
    assert bench().returncode == 2 and bench("nonsense").returncode == 2


def test_a_suites_help_shows_its_own_flags():
    done = bench("serving", "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m bench serving") and "--threads" in done.stdout
    assert "--multi30k" in bench("data", "--help").stdout


def test_the_serving_suite_loads_neither_torch_nor_transformers():
    probe = "import sys, bench.__main__, bench.serving.suite\n"
    probe += "print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
