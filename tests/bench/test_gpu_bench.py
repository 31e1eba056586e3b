"""bench/gpu.py's smoke setting, run once on whatever device the machine has, so that the script a GPU session runs
in one command cannot rot (its figures are not asserted, and off a GPU they mean nothing). It writes its section at
the end of BENCHMARKS.md, after the other scripts' sections, and replaces it when run again."""

import json
import os
import subprocess
import sys

from bench.common import replace_section
from bench.gpu import GPU_MARKER

GPU = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu.py")


def test_smoke_setting_writes_its_section_after_the_other_scripts_sections(tmp_path):
    out, raw = tmp_path / "BENCHMARKS.md", tmp_path / "results.json"
    earlier = "# Benchmarks\n\nbench.py's report\n\n<!-- data: written by bench/data.py -->\n\n## Data\n\nits figures\n"
    out.write_text(earlier)
    command = [sys.executable, GPU, "--smoke", "--compile-backend", "aot_eager", "--out", str(out), "--json", str(raw)]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=900, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = out.read_text()
    assert report.startswith(earlier) and report.count(GPU_MARKER) == 1
    assert "- command: `python bench/gpu.py --smoke --compile-backend aot_eager`" in report
    results = json.loads(raw.read_text())
    assert [(r["size"], r["mode"]) for r in results["train"]] == [("smoke", "eager"), ("smoke", "compiled")]
    assert [r["beams"] for r in results["generate"]] == [1, 5]
    for row in results["train"]:
        assert row["ours_tok_s"] > 0 and row["theirs_tok_s"] > 0 and 0 < row["ours_mfu"] and 0 < row["theirs_mfu"]
    # written again, the section replaces the earlier one and keeps what follows it
    out.write_text(report + "\n<!-- later: written by bench/later.py -->\n\nlater\n")
    replace_section(f"{GPU_MARKER}\n\nnew figures\n", str(out), GPU_MARKER)
    assert (
        out.read_text()
        == earlier + f"\n{GPU_MARKER}\n\nnew figures\n\n<!-- later: written by bench/later.py -->\n\nlater\n"
    )
