"""`translate` and `score` through a corpus in windows, in this process: the output of any window and batch size
the same, progress on stderr, bad lines and outputs named."""

import json
import os
import socket
import threading

import pytest
from vanilla_transformer.training.tasks.numbers import english, german

from vanilla_transformer.cli import main
from vanilla_transformer.corpus.output import Share
from vanilla_transformer.corpus.run import share_lines

NUMBERS = [english(n) for n in (42, 7, 999, 0, 13, 580, 64, 311, 8, 120, 71)]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def numbers_file(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("\n".join(NUMBERS[:5] + [""] + NUMBERS[5:]) + "\n")
    return path


def test_windows_and_token_batches_keep_the_order_and_translate_each_line_once(trained_folder, numbers_file, capsys):
    translate = ["translate", "--model", str(trained_folder), "--input", str(numbers_file), "--num-beams", "2"]
    whole = run(capsys, *translate)
    windowed = run(capsys, *translate, "--read-window", "3", "--max-tokens", "12", "--batch-size", "2")
    assert whole[0] == windowed[0] == 0 and whole[1] == windowed[1]
    lines = whole[1].splitlines()
    assert len(lines) == 12 and lines[5] == ""
    alone = run(capsys, "translate", "--model", str(trained_folder), "--num-beams", "2", NUMBERS[0], NUMBERS[7])[1]
    assert [lines[0], lines[8]] == alone.splitlines()


def test_the_ctranslate2_engine_goes_through_the_same_windows_to_the_same_lines(
    trained_folder, exported_folder, numbers_file, tmp_path, capsys
):
    # greedy: beam search may end at other points in the two engines (docs/tools.md)
    flags = ["--input", str(numbers_file), "--num-beams", "1", "--read-window", "3", "--max-tokens", "12"]
    torch_engine = run(capsys, "translate", "--model", str(trained_folder), *flags)
    output = tmp_path / "ct2.txt"
    assert run(capsys, "translate", "--model", str(exported_folder), *flags, "--output", str(output))[0] == 0
    assert torch_engine[0] == 0 and output.read_text() == torch_engine[1]


def test_progress_goes_to_stderr_when_asked_and_not_into_a_log_otherwise(trained_folder, numbers_file, capsys):
    translate = ["translate", "--model", str(trained_folder), "--input", str(numbers_file), "--read-window", "4"]
    status, out, err = run(capsys, *translate, "--progress", "always")
    progress = [line for line in err.splitlines() if line.startswith("translated:")]
    assert status == 0 and len(out.splitlines()) == 12
    assert progress[-1].startswith("translated: 100%") and "12/12" in progress[-1]
    assert any("8/12" in line and "lines/s" in line and "target tokens/s" in line for line in progress)
    assert "translated:" not in run(capsys, *translate)[2]  # stderr is no terminal here


def test_an_output_that_cannot_be_written_is_named_before_the_model_loads(numbers_file, tmp_path, capsys):
    status, out, err = run(capsys, "translate", "--model", str(tmp_path / "no-model"), "--input", str(numbers_file),
                           "--output", str(tmp_path / "nowhere" / "out.txt"))  # fmt: skip
    assert status == 2 and out == "" and "--output" in err and "does not exist" in err and "--model" not in err


def test_a_start_that_fails_before_its_first_window_leaves_no_parts(numbers_file, tmp_path, capsys):
    output = tmp_path / "out.txt"
    (tmp_path / "no-model").mkdir()
    status, _, err = run(capsys, "translate", "--model", str(tmp_path / "no-model"), "--input", str(numbers_file),
                         "--output", str(output))  # fmt: skip
    assert status != 0 and "no-model" in err
    assert not output.exists() and not (tmp_path / "out.txt.partial").exists()


def test_a_named_pipe_is_read_once(trained_folder, tmp_path, capsys):
    """It is not opened to be checked first: its writer would be gone when it is opened again to be read."""
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    writer = threading.Thread(target=lambda: pipe.write_text("six\nseven\n"))
    writer.start()
    status, out, _ = run(capsys, "translate", "--model", str(trained_folder), "--input", str(pipe))
    writer.join()
    assert status == 0 and len(out.splitlines()) == 2


def test_a_socket_as_input_is_refused_before_the_model_loads(tmp_path, capsys):
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmp_path / "sock"))
    try:
        status, _, err = run(
            capsys, "translate", "--model", str(tmp_path / "no-model"), "--input", str(tmp_path / "sock")
        )
    finally:
        listener.close()
    assert status == 2 and f"--input {tmp_path / 'sock'}: a socket; expected a file or a named pipe" in err


def test_an_output_over_its_own_input_is_refused(numbers_file, tmp_path, capsys):
    status, _, err = run(capsys, "translate", "--model", str(tmp_path / "no-model"), "--input", str(numbers_file),
                         "--output", str(numbers_file))  # fmt: skip
    assert status == 2 and f"--output {numbers_file} is --input {numbers_file}" in err
    assert numbers_file.read_text().startswith(NUMBERS[0])


def test_several_processes_need_an_input_file_and_an_output_file(trained_folder, numbers_file, monkeypatch, capsys):
    monkeypatch.setattr("vanilla_transformer.commands.corpus.this_process", lambda: Share(0, 2))
    status, _, err = run(capsys, "translate", "--model", str(trained_folder), "--input", str(numbers_file))
    assert status == 2 and "2 processes read files and write one: give --input FILE and --output FILE" in err
    monkeypatch.setattr("sys.stdin", open(numbers_file))
    status, _, err = run(capsys, "translate", "--model", str(trained_folder), "--output", str(numbers_file) + ".de")
    assert status == 2 and "give --input FILE and --output FILE" in err


def test_a_dash_is_stdin_or_stdout_as_unix_tools_take_it(trained_folder, numbers_file, tmp_path, monkeypatch, capsys):
    translate = ["translate", "--model", str(trained_folder), "--num-beams", "2"]
    expected = run(capsys, *translate, "--input", str(numbers_file))
    monkeypatch.chdir(tmp_path)
    for flags in (["--input", "-"], ["-"], ["--output", "-"]):
        monkeypatch.setattr("sys.stdin", open(numbers_file))
        assert run(capsys, *translate, *flags)[:2] == expected[:2]  # not the sentence "-", nor a file named "-"
    assert not (tmp_path / "-").exists()
    status, _, err = run(capsys, *translate, "--input", "-", "--prefix-file", "-")
    assert status == 2 and "--input - (stdin) and --prefix-file - (stdin): stdin can be read by one input" in err


def test_skip_invalid_leaves_bad_lines_blank_and_counts_them(trained_folder, tmp_path, capsys):
    path = tmp_path / "in.txt"
    path.write_bytes(b"six\nsieben \xff\nseven\n")
    translate = ["translate", "--model", str(trained_folder), "--input", str(path), "--output", str(tmp_path / "o")]
    status, _, err = run(capsys, *translate)
    assert status == 2 and f"--input {path}, line 2: not UTF-8 text (byte 0xff)" in err and "--skip-invalid" in err
    assert not (tmp_path / "o.partial").exists()  # it stopped before its first window: nothing is left
    status, _, err = run(capsys, *translate, "--skip-invalid")  # a start that wrote nothing: no resume to refuse
    lines = (tmp_path / "o").read_text().splitlines()
    assert status == 0 and lines[1] == "" and len(lines) == 3
    assert "warning: 1 lines could not be used and were left blank (--skip-invalid)" in err


def test_score_streams_pairs_into_its_output_as_on_stdout(trained_folder, tmp_path, capsys):
    pairs = tmp_path / "pairs.jsonl"
    rows = [{"translation": {"en": english(n), "de": german(n)}} for n in (6, 42, 7)]
    pairs.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    score = ["score", "--model", str(trained_folder), "--pairs", str(pairs), "--source-lang", "en",
             "--target-lang", "de", "--read-window", "2"]  # fmt: skip
    status, out, _ = run(capsys, *score)
    assert status == 0 and run(capsys, *score, "--output", str(tmp_path / "scores.jsonl"))[0] == 0
    assert (tmp_path / "scores.jsonl").read_text() == out and len(out.splitlines()) == 3
    assert all(json.loads(line)["log_prob"] < 0 for line in out.splitlines())


def test_score_writes_a_line_per_input_line_and_names_the_side_over_the_limit(trained_folder, tmp_path, capsys):
    pairs = tmp_path / "pairs.jsonl"
    pair = json.dumps({"translation": {"en": english(6), "de": german(6)}})
    pairs.write_text(f"{pair}\n\n{pair}\n")  # a blank line: null, so that line N's score is pair N's
    score = ["score", "--model", str(trained_folder)]
    status, out, _ = run(capsys, *score, "--pairs", str(pairs), "--source-lang", "en", "--target-lang", "de")
    assert status == 0 and [line == "null" for line in out.splitlines()] == [False, True, False]
    sources, targets = tmp_path / "en.txt", tmp_path / "de.txt"
    sources.write_text("six\n")
    targets.write_text(" ".join([german(6)] * 5) + "\n")
    status, _, err = run(capsys, *score, "--source-file", str(sources), "--target-file", str(targets),
                         "--max-sentence-tokens", "4")  # fmt: skip
    assert status == 2 and f"error: --target-file {targets}, line 1: the target of " in err


def test_a_run_resumed_with_other_inputs_is_refused_naming_them(trained_folder, numbers_file, tmp_path, capsys):
    from vanilla_transformer.corpus.jobs import Done
    from vanilla_transformer.corpus.output import Parts

    output = tmp_path / "out.txt"  # a run from --input and --prefix-file, stopped after its first window
    Parts(str(output), Share(), [None, None], {"reads": ["--input", "--prefix-file"]}).write(0, Done("a\n", 1, 0, 0))
    status, _, err = run(capsys, "translate", "--model", str(trained_folder), "--input", str(numbers_file),
                         "--output", str(output))  # fmt: skip
    assert status == 2 and "reads was ['--input', '--prefix-file'] at the first start, now ['--input']" in err
    assert (tmp_path / "out.txt.partial" / "process-0.txt").read_text() == "a\n"


def test_a_process_share_counts_the_lines_of_its_windows():
    assert [share_lines(10, 4, Share(rank, 2)) for rank in (0, 1)] == [6, 4]  # windows 0, 2 (4 + 2) and 1
    assert share_lines(10, 4, Share(0, 2), windows=1) == 4 and share_lines(10, 4, Share()) == 10
