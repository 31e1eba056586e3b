"""What the suites' reports share: the command line a report records names the measurement, not this machine's
files and folders."""

from bench.common import report


def test_the_measuring_command_drops_output_files_and_writes_folders_as_dir():
    given = ["--multi30k", "/data/m30k", "--sizes", "2000", "4000", "--out", "B.md", "--json=raw.json", "--keep"]
    given += ["--work=/tmp/w", "--train-args", "--d-model 32"]
    command = report.measuring_command("data", given, ("--out", "--json", "--work"), ["--multi30k"], ["--keep"])
    assert command == "python -m bench data --multi30k DIR --sizes 2000 4000 --train-args '--d-model 32'"
    assert report.measuring_command("data", ["--multi30k=/data/m30k"], folders=["--multi30k"]) == (
        "python -m bench data --multi30k=DIR"
    )


def test_the_measuring_command_keeps_every_other_flag_and_value_in_order():
    given = ["--quick", "--plot", "p.png", "--sizes", "numbers", "--out=B.md", "--attn", "sdpa"]
    command = report.measuring_command("speed", given, files=("--json", "--out", "--plot"))
    assert command == "python -m bench speed --quick --sizes numbers --attn sdpa"


def test_a_section_goes_in_its_place_among_the_others(tmp_path):
    out = tmp_path / "BENCHMARKS.md"
    gpu = f"{report.GPU_MARKER}\n\ngpu figures\n"
    out.write_text("# head\n\n" + gpu)
    # a missing section goes before those of the suites that follow it, a head before every section
    report.replace_section(f"{report.SERVING_MARKER}\n\nserving figures\n", str(out), report.SERVING_MARKER)
    report.replace_section("# new head\n", str(out))
    serving = f"{report.SERVING_MARKER}\n\nserving figures\n"
    assert out.read_text() == "# new head\n\n" + serving + "\n" + gpu
    # a section written again replaces its earlier self, up to the next marker
    report.replace_section(f"{report.SERVING_MARKER}\n\nnew serving figures\n", str(out), report.SERVING_MARKER)
    assert out.read_text() == f"# new head\n\n{report.SERVING_MARKER}\n\nnew serving figures\n\n" + gpu
