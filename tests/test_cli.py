"""The `vanilla-transformer` command line itself: `--version`, `python -m vanilla_transformer`, and the one rule by
which a command's expected failures become `error: ...` and an exit status while anything else keeps its
traceback."""

import os
import subprocess
import sys
import sysconfig
from importlib.metadata import version
from pathlib import Path

import pytest
from vanilla_transformer.training.data.loading import DataError
from vanilla_transformer.training.run.loop import TrainingStopped

import vanilla_transformer
from vanilla_transformer.cli import COMMANDS, main
from vanilla_transformer.commands.failures import reported_as
from vanilla_transformer.errors import CommandError, ModelFolderError

VERSION_LINE = f"vanilla-transformer {version('vanilla-transformer')}"


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, capture_output=True, text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )


def test_version_is_the_installed_distributions():
    assert version("vanilla-transformer") == vanilla_transformer.__version__
    script = Path(sysconfig.get_path("scripts")) / "vanilla-transformer"
    for command in ([str(script)], [sys.executable, "-m", "vanilla_transformer"]):
        done = run(*command, "--version")
        assert (done.returncode, done.stdout, done.stderr) == (0, VERSION_LINE + "\n", ""), command


def test_python_m_runs_the_command_line(tmp_path):
    done = run(sys.executable, "-m", "vanilla_transformer", "--help")
    assert done.returncode == 0
    usage = " ".join(done.stdout.split())  # as wide as the terminal
    assert usage.startswith("usage: vanilla-transformer [-h] [--version] {train,evaluate,translate,serve,score,export,")
    commands = ", ".join(command.__name__.removesuffix("_command_parser") for command in COMMANDS)
    assert f"The `vanilla-transformer` command: {commands}." in usage
    done = run(sys.executable, "-m", "vanilla_transformer", "plot", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {tmp_path}") and "no metrics.jsonl" in done.stderr
    done = run(sys.executable, "-m", "vanilla_transformer")
    assert done.returncode == 2
    assert "the following arguments are required: command" in done.stderr


def test_a_command_into_a_pipe_or_a_log_shows_no_library_progress_bar(tmp_path):
    example = str(Path(__file__).parents[1] / "examples" / "numbers-en-de")
    done = run(sys.executable, "-m", "vanilla_transformer", "translate", "--model", example, "forty-two")
    assert (done.returncode, done.stdout, done.stderr) == (0, "zweiundvierzig\n", "")  # no "Loading weights: ..."
    split = tmp_path / "test.jsonl"
    split.write_text('{"translation": {"en": "forty-two", "de": "zweiundvierzig"}}\n')
    flags = ["--test-file", str(split), "--source-lang", "en", "--target-lang", "de", "--num-beams", "1"]
    done = run(sys.executable, "-m", "vanilla_transformer", "evaluate", "--model", example, *flags)
    assert done.returncode == 0 and "Loading weights" not in done.stderr


def test_reported_as_keeps_a_command_errors_status_and_lets_a_bug_through():
    with pytest.raises(CommandError) as raised, reported_as(2, ValueError):
        raise ValueError("bad flag")
    assert (str(raised.value), raised.value.exit_code) == ("bad flag", 2)
    assert isinstance(raised.value.__cause__, ValueError)
    with pytest.raises(ModelFolderError) as raised, reported_as(2, ValueError):
        raise ModelFolderError("no folder")  # a ValueError too, with its own status
    assert raised.value.exit_code == 1
    with pytest.raises(KeyError), reported_as(2, ValueError):
        raise KeyError("a bug")


def raising(error: Exception):
    def fail(*args, **kwargs):
        raise error

    return fail


TRAIN = ["train", "--max-steps", "1"]
EVALUATE = ["evaluate", "--model", "nowhere"]
# each command's expected failures and their statuses; None: a bug, raised with its traceback
FAILURES = [
    (TRAIN, "vanilla_transformer.training.run.loop.train", TrainingStopped("the loss is nan"), 1),
    (TRAIN, "vanilla_transformer.training.run.loop.train", ValueError("--output-dir run holds a run"), 2),
    (TRAIN, "vanilla_transformer.training.run.loop.train", DataError("row 3: no 'de'"), 2),
    (TRAIN, "vanilla_transformer.training.run.loop.train", ModelFolderError("--resume-from x: not a model"), 1),
    (TRAIN, "vanilla_transformer.training.run.loop.train", KeyError("a bug"), None),
    (EVALUATE, "vanilla_transformer.commands.evaluate.evaluate_pytorch", DataError("row 3: no 'de'"), 2),
    (EVALUATE, "vanilla_transformer.commands.evaluate.evaluate_pytorch", ValueError("a bug"), None),
    (["plot", "run"], "vanilla_transformer.training.report.plots.plot_run", ValueError("run: no metrics.jsonl"), 2),
    (["plot", "run"], "vanilla_transformer.training.report.plots.plot_run", RuntimeError("a bug"), None),
    (["translate", "--model", "m", "x"], "vanilla_transformer.commands.translate.translator_for", ValueError(), None),
]


@pytest.mark.parametrize("argv, target, error, status", FAILURES, ids=lambda value: repr(value)[:40])
def test_each_commands_failures_end_in_their_status(argv, target, error, status, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(target, raising(error))
    monkeypatch.setattr("vanilla_transformer.commands.train.apply_cpu_process_settings", lambda cpu: None)
    monkeypatch.setattr("vanilla_transformer.commands.evaluate.engine_for", lambda args: "torch")
    argv = [*argv, "--output-dir", str(tmp_path / "run")] if argv[0] == "train" else argv
    if status is None:
        with pytest.raises(type(error)):
            main(argv)
        assert capsys.readouterr().err == ""
    else:
        assert main(argv) == status
        assert capsys.readouterr().err == f"error: {error}\n"


def test_ctrl_c_ends_a_command_with_one_line_and_status_130(monkeypatch, capsys):
    monkeypatch.setattr("vanilla_transformer.commands.translate.translator_for", raising(KeyboardInterrupt()))
    assert main(["translate", "--model", "m", "x"]) == 130
    assert capsys.readouterr().err == "\ntranslate: interrupted\n"


def test_an_empty_file_name_for_evaluate_is_one_line(capsys):
    assert main(["evaluate", "--model", "m", "--test-file", ""]) == 2
    assert (
        capsys.readouterr().err
        == "error: --test-file: an empty string; give a value, or leave the flag out for its default\n"
    )


@pytest.mark.parametrize("command", ["train", "translate", "serve", "ablate", "evaluate"])
def test_a_bad_flag_value_is_two_lines_whatever_the_length_of_the_commands_usage(capsys, command):
    with pytest.raises(SystemExit) as exited:
        main([command, "--num-beams", "zz"] if command != "serve" else [command, "--max-batch-tokens", "zz"])
    assert exited.value.code == 2
    usage, error = capsys.readouterr().err.splitlines()
    assert usage.startswith(f"usage: vanilla-transformer {command} ") and error.startswith(
        f"vanilla-transformer {command}: error: argument --"
    )


def test_train_flags_that_cannot_go_together_end_with_trains_usage(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["train", "--streaming"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: vanilla-transformer train ") and "--streaming" in err.splitlines()[-1]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["translate", "--model", "m", "--length-penalty", "nan", "x"], "--length-penalty: expected a finite number"),
        (["translate", "--model", "m", "--max-len-a", "inf", "x"], "--max-len-a: expected a finite number >= 0"),
        (["translate", "--model", "m", "--repetition-penalty", "inf", "x"], "--repetition-penalty: expected a finite"),
        (["evaluate", "--model", "m", "--length-penalty", "inf"], "--length-penalty: expected a finite number"),
        (["translate", "--model", "m", "--num-beams", "1025", "x"], "--num-beams: expected a beam size from 1 to 1024"),
        (["attention", "--model", "m", "--source", "x", "--out", "o", "--num-beams", "0"], "--num-beams: expected a"),
        (["train", "--length-penalty", "nan"], "--length-penalty: expected a finite number"),
        (["train", "--vocab-size", "1000000000"], "--vocab-size: expected a vocabulary size from 1 to 1,048,576"),
        (["train", "--output-dir", ""], "--output-dir: an empty string; give a value, or leave the flag out"),
        (["ablate", "--study-dir", ""], "--study-dir: an empty string; give a value"),  # the default, unasked
        (["train", "--tune-length-penalty", "1.0", "nan"], "--tune-length-penalty: expected a finite number"),
        (["serve", "m", "--port", "99999"], "--port: expected a port from 1 to 65535, got 99999"),
        (["demo", "--model", "m", "--port", "70000"], "--port: expected a port from 1 to 65535, got 70000"),
        (["serve", "m", "--timeout", "-1"], "--timeout: expected a finite number > 0"),
        (["serve", "m", "--max-wait-ms", "-5"], "--max-wait-ms: expected a finite number >= 0"),
        (["serve", "m", "--length-penalty", "nan"], "--length-penalty: expected a finite number"),
        (["serve", "m", "--num-beams", "100000"], "--num-beams: expected a beam size from 1 to 1024"),
        (["serve", "m", "--max-alternatives", "1024"], "--max-alternatives: expected at most 1023 (one beam less"),
        (["serve", "m", "--length-penalty", "-400"], "--length-penalty: expected a number from -10 to 10, got -400"),
        (["translate", "--model", "m", "--read-window", str(10**20)], "--read-window: expected at most 1000000000"),
        (["train", "--norm-position", "side"], "--norm-position: invalid choice: 'side'"),
    ],
    ids=lambda value: " ".join(value[:1] + value[-2:]) if isinstance(value, list) else None,
)
def test_a_number_no_search_or_server_can_use_is_refused_by_its_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2 and message in capsys.readouterr().err.splitlines()[-1]


def test_every_command_but_serve_works_without_the_serve_extra():
    """The parser of `serve` reads its settings without FastAPI: a machine without the serve extra runs the others."""
    probe = (
        "import sys\n"
        "for name in ('fastapi', 'starlette', 'uvicorn', 'prometheus_client'):\n"
        "    sys.modules[name] = None\n"
        "from vanilla_transformer.cli import build_parser\n"
        "parser = build_parser()\n"
        "print(parser.parse_args(['serve', 'm', '--max-batch-tokens', '8']).max_batch_tokens)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "8"


def test_sigterm_interrupts_the_command_and_ends_a_forked_worker_as_sigterm_does():
    """The command's process raises `Terminated` (cleaning up as Ctrl-C does); a process forked from it (a data
    worker, which inherits the handler) ends as SIGTERM ends a process, with no exception of its own to print."""
    import signal
    import time

    from vanilla_transformer.cli import sigterm_interrupts
    from vanilla_transformer.processes import Terminated

    before = signal.getsignal(signal.SIGTERM)
    with sigterm_interrupts():
        child = os.fork()
        if child == 0:  # pragma: no cover (the child)
            time.sleep(30)
            os._exit(0)
        time.sleep(0.2)
        os.kill(child, signal.SIGTERM)
        _, status = os.waitpid(child, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
        with pytest.raises(Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
    assert signal.getsignal(signal.SIGTERM) == before  # the handler before it is back
