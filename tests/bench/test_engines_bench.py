"""`python -m bench engines`: the training command launched under an engine's config file, each process's peak
memory read back, and the section written into the report after the GPU suite's."""

import json
import subprocess
import sys
from pathlib import Path

from bench.common import report


def test_the_suite_measures_every_process_and_writes_its_section(tmp_path):
    out, results = tmp_path / "BENCHMARKS.md", tmp_path / "engines.json"
    out.write_text(f"# head\n\n{report.GPU_MARKER}\n\ngpu figures\n")
    tiny = "--d-model 32 --num-heads 4 --d-ff 64 --encoder-layers 1 --decoder-layers 1 --vocab-size 200"
    command = [
        sys.executable, "-m", "bench", "engines", "--engines", "ddp", "--steps", "1", f"--train-args={tiny}",
        "--out", str(out), "--json", str(results),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=report.ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(results.read_text())["engines"]["ddp"]
    assert len(measured["peak_rss_mib"]) == len(measured["updates_peak_rss_mib"]) == 2  # one figure per process
    assert all(0 < during <= whole for during, whole in zip(measured["updates_peak_rss_mib"], measured["peak_rss_mib"]))
    assert all(0 < held for held in measured["tensor_mib"])
    text = out.read_text()
    assert text.index(report.GPU_MARKER) < text.index(report.ENGINES_MARKER)
    assert "| ddp | examples/accelerate/ddp.yaml |" in text and f"--train-args={tiny}" in text


def test_no_shared_module_hides_a_standard_library_module():
    """The shared modules are named apart from the standard library's: a process with `bench/common/` on `sys.path`
    would import one in place of the other (a `profile.py` there hides the module cProfile imports, and through it
    transformers' GenerationMixin fails to import)."""
    shared = {path.stem for path in (Path(report.ROOT) / "bench" / "common").glob("*.py")}
    assert not shared & set(sys.stdlib_module_names)
