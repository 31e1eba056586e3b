"""`translate` and `score` as real processes given what a careless pipeline or a probe gives them: stdout's reader
gone (`| head`), a full device or a closed stream in place of stdout or stdin, an endless line, a JSON line nested
too deeply, a SIGTERM before the first window. Each ends quietly or with one `error:` line and its status, never a
traceback, in bounded memory, leaving nothing behind."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from vanilla_transformer.cli import main

MODEL = str(Path(__file__).resolve().parents[2] / "examples" / "numbers-en-de")
COMMAND = [sys.executable, "-m", "vanilla_transformer.cli"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
MOST_MEMORY = 2 << 30  # bytes: a few times what translating takes; an endless line read whole would pass it


def translate(*flags: str) -> list[str]:
    return [*COMMAND, "translate", "--model", MODEL, *flags]


def score(*flags: str) -> list[str]:
    return [*COMMAND, "score", "--model", MODEL, *flags]


def no_traceback(stderr: str) -> bool:
    return "Traceback" not in stderr and "Exception ignored" not in stderr


def test_a_reader_that_goes_away_ends_the_command_quietly_with_status_141(tmp_path):
    """More output than a pipe holds: the command meets the closed pipe whatever the timing."""
    path = str(tmp_path / "in.txt")
    (tmp_path / "in.txt").write_text("one hundred and two\n" * 5000)
    window = ["--read-window", "50"]
    for command in (translate("--input", path, "--num-beams", "1", *window),
                    score("--source-file", path, "--target-file", path, *window)):  # fmt: skip
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        first = process.stdout.readline()  # as `| head -1` reads
        process.stdout.close()
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 141 and first.strip(), stderr
        assert no_traceback(stderr) and "error:" not in stderr, stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_a_full_device_as_stdout_is_named_in_one_line():
    with open("/dev/full", "w") as full:
        done = subprocess.run(translate("one"), stdout=full, stderr=subprocess.PIPE, text=True, env=ENV, timeout=300)
    assert done.returncode == 1 and no_traceback(done.stderr), done.stderr  # a write failed: not bad input
    assert done.stderr.splitlines()[-1] == "error: standard output: No space left on device"


def test_an_output_file_the_system_stops_growing_is_named_with_status_1_and_resumes(tmp_path):
    """A file over the process's size limit (`ulimit -f`), as a full disk stops one: a write failed on the way."""
    import resource

    path, output = tmp_path / "in.txt", tmp_path / "scores.jsonl"
    path.write_text("one hundred and two\n" * 200)
    command = score("--source-file", str(path), "--target-file", str(path), "--read-window", "20",
                    "--output", str(output))  # fmt: skip
    limited = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))  # noqa: E731
    done = subprocess.run(command, stderr=subprocess.PIPE, text=True, env=ENV, timeout=300, preexec_fn=limited)
    assert done.returncode == 1 and no_traceback(done.stderr), done.stderr
    assert done.stderr.splitlines()[-1] == f"error: --output {output}: File too large"
    done = subprocess.run(command, stderr=subprocess.PIPE, text=True, env=ENV, timeout=300)  # room again: it goes on
    assert done.returncode == 0 and len(output.read_text().splitlines()) == 200, done.stderr


@pytest.mark.parametrize(
    "stream, command, message",
    [
        (1, translate("one"), "error: standard output: closed; redirect it to a file, or give --output FILE"),
        (0, translate(), "error: stdin: closed; expected text to read: redirect it, or give a file"),
    ],
    ids=["stdout (>&-)", "stdin (<&-)"],
)
def test_a_closed_stdout_or_stdin_is_named_in_one_line(stream, command, message):
    done = subprocess.run(command, stderr=subprocess.PIPE, text=True, env=ENV, timeout=300,
                          preexec_fn=lambda: os.close(stream))  # fmt: skip
    assert done.returncode == 2 and no_traceback(done.stderr), done.stderr
    assert done.stderr.splitlines()[-1] == message


def within_memory(command: list[str], stdin: str | None) -> subprocess.CompletedProcess:
    """`command` run to its end, killed (and the test failed) if it holds more than MOST_MEMORY."""
    with open(stdin or os.devnull, "rb") as source:
        process = subprocess.Popen(command, stdin=source, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
        deadline = time.monotonic() + 300
        while process.poll() is None and time.monotonic() < deadline:
            try:
                held = psutil.Process(process.pid).memory_info().rss
            except psutil.NoSuchProcess:
                break
            if held > MOST_MEMORY:
                process.kill()
                process.communicate()
                pytest.fail(f"{command} held {held} bytes")
            time.sleep(0.05)
        stdout, stderr = process.communicate(timeout=60)
    return subprocess.CompletedProcess(command, process.returncode, stdout.decode(), stderr.decode())


@pytest.mark.parametrize(
    "command, stdin, name",
    [
        (translate(), "/dev/zero", "stdin"),
        (translate("--input", "/dev/zero"), None, "--input /dev/zero"),
        (score("--source-file", "/dev/zero", "--target-file"), None, "--source-file /dev/zero"),
    ],
    ids=["stdin", "--input", "score's --source-file"],
)
def test_an_endless_line_is_named_in_bounded_memory(command, stdin, name, tmp_path):
    (tmp_path / "target.txt").write_text("eins\n")
    target = [str(tmp_path / "target.txt")] if command[-1] == "--target-file" else []
    done = within_memory([*command, *target], stdin)
    assert done.returncode == 2 and no_traceback(done.stderr), done.stderr[-3000:]
    assert done.stderr.splitlines()[-1] == (
        f"error: {name}, line 1: over 1,000,000 characters; expected a sentence or a paragraph a line; or pass "
        "--skip-invalid to leave it blank"
    )


def test_a_json_line_nested_too_deeply_is_named_or_skipped(tmp_path, capsys):
    pairs = tmp_path / "deep.jsonl"
    pairs.write_text(json.dumps({"translation": {"en": "one", "de": "eins"}}) + "\n" + "[" * 100_000 + "\n")
    command = ["score", "--model", MODEL, "--pairs", str(pairs), "--source-lang", "en", "--target-lang", "de"]
    assert main(command) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: --pairs {pairs}, line 2: not valid JSON: nested too deeply; or pass --skip-invalid to leave it blank"
    )
    assert main([*command, "--skip-invalid"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[1] == "null" and json.loads(out.splitlines()[0])["tokens"][-1] == "</s>"
    assert err.splitlines()[-1] == "warning: 1 lines could not be used and were left blank (--skip-invalid)"


def test_sigterm_before_the_first_window_leaves_nothing_behind(tmp_path):
    """The input a named pipe nobody writes to: the run waits for its first line, as SIGTERM comes."""
    fifo, output = tmp_path / "fifo", tmp_path / "out.txt"
    os.mkfifo(fifo)
    command = translate("--input", str(fifo), "--output", str(output))
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    deadline = time.monotonic() + 300
    while not (tmp_path / "out.txt.partial").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(3)  # the model loads, then the run opens the pipe and waits
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM and no_traceback(stderr), stderr
    assert stderr.splitlines()[-1] == "translate: terminated"
    assert sorted(os.listdir(tmp_path)) == ["fifo"]
