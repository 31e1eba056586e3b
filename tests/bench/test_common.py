"""What the benchmark scripts share: the command line a report records names the measurement, not this machine's
files and folders."""

from bench import common


def test_the_measuring_command_drops_output_files_and_writes_folders_as_dir():
    given = ["--multi30k", "/data/m30k", "--sizes", "2000", "4000", "--out", "B.md", "--json=raw.json", "--keep"]
    given += ["--work=/tmp/w", "--train-args", "--d-model 32"]
    command = common.measuring_command("data.py", given, ("--out", "--json", "--work"), ["--multi30k"], ["--keep"])
    assert command == "python bench/data.py --multi30k DIR --sizes 2000 4000 --train-args '--d-model 32'"
    assert common.measuring_command("data.py", ["--multi30k=/data/m30k"], folders=["--multi30k"]) == (
        "python bench/data.py --multi30k=DIR"
    )


def test_the_measuring_command_keeps_every_other_flag_and_value_in_order():
    given = ["--quick", "--plot", "p.png", "--sizes", "numbers", "--out=B.md", "--attn", "sdpa"]
    command = common.measuring_command("bench.py", given, files=("--json", "--out", "--plot"))
    assert command == "python bench/bench.py --quick --sizes numbers --attn sdpa"
