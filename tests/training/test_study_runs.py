"""A study's runs as processes (training/studies/runs.py): a stop (SIGTERM, Ctrl-C) that comes while a run's process
starts still stops that process with the others."""

import signal
import subprocess
import sys

import pytest
from vanilla_transformer.training.options.arguments import TrainArguments
from vanilla_transformer.training.studies import runs
from vanilla_transformer.training.studies.runs import Launch, PlannedRun, train_runs

from vanilla_transformer.folders import signals_held


@pytest.fixture
def stop_exits():
    """SIGTERM handled as `ablate` handles it: the study exits with status 128 + 15."""
    before = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    yield
    signal.signal(signal.SIGTERM, before)


@pytest.fixture
def own_handlers():
    """Known handlers for both stop signals while the test runs (a process started in the background ignores SIGINT):
    SIGTERM's records the signal, SIGINT's is Python's own, which raises KeyboardInterrupt."""
    handled = []

    def record(signum, frame):
        handled.append(signum)

    before = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    signal.signal(signal.SIGTERM, record)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield record, handled
    for number, handler in before.items():
        signal.signal(number, handler)


def test_a_stop_inside_the_block_is_handled_as_it_ends_by_the_handler_before_it(own_handlers):
    record, handled = own_handlers
    with signals_held():
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)
        assert handled == []
    assert handled == [signal.SIGTERM]  # the first stop; a second is the same request
    assert signal.getsignal(signal.SIGTERM) is record  # both handlers as they were
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_ctrl_c_inside_the_block_interrupts_as_it_ends(own_handlers):
    finished_block = False
    with pytest.raises(KeyboardInterrupt):
        with signals_held():
            signal.raise_signal(signal.SIGINT)
            finished_block = True
    assert finished_block


def test_a_stop_that_comes_as_a_run_starts_stops_that_run(tmp_path, monkeypatch, stop_exits):
    """The stop comes just after the run's process was created, before the study knew of it: the study's exit still
    stops it, as it stops every run under way."""
    started, popen = [], subprocess.Popen

    def popen_then_stop(*args, **kwargs):
        started.append(popen(*args, **kwargs))
        signal.raise_signal(signal.SIGTERM)
        return started[-1]

    monkeypatch.setattr(runs.subprocess, "Popen", popen_then_stop)
    run = PlannedRun("x", 42, {**TrainArguments().options(), "seed": 42}, str(tmp_path / "runs" / "x"))
    launch = Launch(launcher=(sys.executable, "-c", "import time; time.sleep(120)"))  # `train ...` left unread
    try:
        with pytest.raises(SystemExit) as stopped:
            train_runs([run], launch, str(tmp_path / "logs"), report=lambda *args: None)
        assert stopped.value.code == 128 + signal.SIGTERM
        assert len(started) == 1 and started[0].poll() == -signal.SIGTERM  # stopped, and waited for
    finally:
        for process in started:
            process.kill()
            process.wait()
