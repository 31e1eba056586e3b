"""The server under pressure: API keys and their limits, a full queue, deadlines, loading and draining."""

import os
import shutil
import signal
import sys
import threading
import time

import httpx
import pytest
from vanilla_transformer.training.tasks.numbers import english

from .conftest import SERVE, answers, burst, error_of, in_process, serving, wait_for

BODY = {"q": english(123), "source": "en", "target": "de"}


def test_keys_are_required_and_each_has_its_requests_per_minute(trained_folder, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("# key  requests per minute\nteam-a 2\nunlimited\n", encoding="utf-8")
    with serving(trained_folder, "--api-keys", str(keys)) as server:
        missing = server.post(**BODY)
        assert missing.status_code == 403 and "needs an API key" in error_of(missing)
        assert server.post(**BODY, api_key="guess").status_code == 403
        assert [server.post(**BODY, api_key="team-a").status_code for _ in range(2)] == [200, 200]
        over = server.post(**BODY, api_key="team-a")
        assert over.status_code == 429 and "requests per minute" in error_of(over)
        assert 1 <= int(over.headers["Retry-After"]) <= 60
        assert all(server.post(**BODY, api_key="unlimited").status_code == 200 for _ in range(3))


def test_a_bad_key_file_is_named_with_its_line(trained_folder, tmp_path):
    from vanilla_transformer.cli import main

    keys = tmp_path / "keys.txt"
    keys.write_text("team-a 2\nteam-b many\n", encoding="utf-8")
    assert main(["serve", str(trained_folder), "--api-keys", str(keys)]) == 2


def test_an_overload_burst_gets_429s_at_once_and_the_metrics_count_every_answer(trained_folder, tmp_path):
    flags = ("--max-queue-requests", "3", "--max-wait-ms", "300")
    with serving(trained_folder, *flags) as server:
        before = server.metric('vanilla_transformer_requests_total{endpoint="/translate",status="200"}')
        answers = burst(server.url, [{**BODY, "q": english(n)} for n in range(600, 640)])
        statuses = [a.status_code for a in answers]
        assert set(statuses) == {200, 429} and statuses.count(200) >= 3
        refused = [a for a in answers if a.status_code == 429]
        assert all(int(a.headers["Retry-After"]) >= 1 and "--max-queue-requests" in error_of(a) for a in refused)
        after = server.metric('vanilla_transformer_requests_total{endpoint="/translate",status="200"}')
        assert after - before == statuses.count(200)
        assert server.metric("vanilla_transformer_queue_requests") == 0
        assert server.post(**BODY).status_code == 200


def test_a_request_past_its_deadline_gets_504_and_leaves_the_queue(trained_folder):
    with serving(trained_folder, "--timeout", "0.2", "--max-wait-ms", "1000") as server:
        late = server.post(**BODY)
        assert late.status_code == 504 and "--timeout" in error_of(late)
        assert server.metric("vanilla_transformer_queue_tokens") == 0
        assert server.metric("vanilla_transformer_queue_requests") == 0
        time.sleep(1.2)  # the worker wakes and finds nothing to translate
        assert server.metric("vanilla_transformer_batch_sentences_count") == 0


def test_sigterm_answers_every_queued_request_and_exits_0(trained_folder):
    with serving(trained_folder, "--max-wait-ms", "1500", "--max-batch-tokens", "100000") as server:
        answers = []
        sender = threading.Thread(
            target=lambda: answers.extend(burst(server.url, [{**BODY, "q": english(n)} for n in range(700, 710)]))
        )
        sender.start()
        deadline = time.time() + 10
        while server.metric("vanilla_transformer_queue_requests") < 10 and time.time() < deadline:
            time.sleep(0.05)
        server.process.send_signal(signal.SIGTERM)
        sender.join(60)
        assert [a.status_code for a in answers] == [200] * 10
        assert server.process.wait(timeout=60) == 0


def test_a_batch_that_outlasts_the_drain_ends_its_request_with_a_json_503_and_the_server_with_0(
    trained_folder, tmp_path
):
    """The batch is still in torch when the drain ends: the interpreter's own shutdown aborted there (status 134)."""
    terms = ["ein", "elf", "null", "acht", "neun", "zehn", "vier", "drei", "zwei", "fünf", "sechs", "sieben"]
    long = {**BODY, "q": ["six"] * 2000, "terms": [terms] * 2000}  # a minute of constrained search on 2 cores
    with serving(trained_folder, "--drain-timeout", "1", "--max-chars", "200000", tmp_path=tmp_path) as server:
        answers = []
        sender = threading.Thread(target=lambda: answers.append(server.post(**long)))
        sender.start()
        wait_for(lambda: server.metric("vanilla_transformer_batch_sentences_count") > 0)  # taken by the worker
        start = time.time()
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=30) == 0, server.output()[-3000:]
        assert time.time() - start < 10  # the drain's 1 s, not the batch's minutes, nor twice the drain
        sender.join(30)
        assert "a batch was still being translated after --drain-timeout 1 s" in server.output()
    assert answers[0].status_code == 503 and answers[0].headers["x-request-id"]
    assert error_of(answers[0]) == "the server stopped before answering it"


def test_ready_says_503_until_the_model_is_loaded_and_translations_wait_for_it(trained_folder):
    from vanilla_transformer.serving.app import create_app
    from vanilla_transformer.serving.engine import EngineSettings, load_engine

    release = threading.Event()
    app = create_app(lambda: release.wait(60) and load_engine(EngineSettings(str(trained_folder), threads=1)))
    try:
        with in_process(app, log_level="warning") as url:
            assert httpx.get(url + "/health").json() == {"status": "ok"}
            loading = httpx.get(url + "/ready")
            assert loading.status_code == 503 and loading.json() == {"status": "loading"}
            early = httpx.post(url + "/translate", json=BODY)
            assert early.status_code == 503 and error_of(early) == "the model is loading"
            release.set()
            wait_for(lambda: answers(url + "/ready"), timeout=30)
            assert httpx.post(url + "/translate", json=BODY).status_code == 200
    finally:
        release.set()


def test_a_model_that_does_not_load_stops_the_server_with_an_error_naming_the_flags(exported_folder, tmp_path,
                                                                                     capsys):  # fmt: skip
    from vanilla_transformer.cli import main

    from ..apps import free_port

    serve = ["serve", str(exported_folder), "--port", str(free_port()), "--log-level", "error"]
    # an export has no model card: its languages must be given, and are checked before the server listens
    assert main(serve) == 2
    assert "give them with --source-lang and --target-lang" in capsys.readouterr().err
    for flags, named in ((["--source-lang", "auto"], "--source-lang 'auto'"), (["--target-lang="], "--target-lang ''")):
        assert main(serve + ["--source-lang", "en", "--target-lang", "de", *flags]) == 2
        assert capsys.readouterr().err.startswith(f"error: {named}: expected a language code such as en or pt-BR")
    cut = tmp_path / "cut"
    shutil.copytree(exported_folder, cut)
    (cut / "model.bin").write_bytes((cut / "model.bin").read_bytes()[:1000])
    serve[1] = str(cut)
    assert main(serve + ["--source-lang", "en", "--target-lang", "de"]) == 1
    assert capsys.readouterr().err.startswith(f"error: MODEL {cut}: could not load it: ")


def test_a_cards_language_is_checked_only_where_no_flag_replaces_it(tmp_path):
    from vanilla_transformer.serving.engine import EngineSettings, languages

    (tmp_path / "README.md").write_text("---\nlanguage: [auto, de]\n---\n")
    assert languages(EngineSettings(str(tmp_path), source_lang="en")) == ("en", "de")
    with pytest.raises(ValueError, match=f"^{tmp_path}: its card's language 'auto': expected a language code"):
        languages(EngineSettings(str(tmp_path)))
    (tmp_path / "README.md").write_bytes(b"---\nlanguage: [en, de]\n---\n\xff")  # unreadable: no languages named
    assert languages(EngineSettings(str(tmp_path), source_lang="en", target_lang="de")) == ("en", "de")


def held_back(module: str, function: str, seconds: float) -> list[str]:
    """`vanilla-transformer serve` with `module.function` held back `seconds` before it runs: a slow start-up or a
    slow load, as a large model on a slow disk has."""
    script = (
        f"import sys, time\nimport {module} as held\noriginal = held.{function}\n"
        f"def slow(*args, **kwargs):\n    print('held back', flush=True)\n    time.sleep({seconds})\n"
        f"    return original(*args, **kwargs)\nheld.{function} = slow\n"
        "from vanilla_transformer.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    )
    return [sys.executable, "-c", script, *SERVE[3:]]


def test_sigterm_while_the_model_loads_exits_0_at_once(trained_folder, tmp_path):
    command = held_back("vanilla_transformer.serving.engine", "load_engine", 120)
    with serving(trained_folder, tmp_path=tmp_path, command=command, ready=False) as server:
        wait_for(lambda: answers(server.url + "/ready", 503))  # 503: loading
        assert httpx.get(server.url + "/ready").json() == {"status": "loading"}
        start = time.time()
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=30) == 0, server.output()[-3000:]
        assert time.time() - start < 10  # not after the 120 s load


def test_sigterm_during_start_up_exits_0_without_listening(trained_folder, tmp_path):
    command = held_back("vanilla_transformer.serving.app", "create_app", 3)
    with serving(trained_folder, tmp_path=tmp_path, command=command, ready=False) as server:
        wait_for(lambda: "held back" in server.output())
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=30) == 0, server.output()[-3000:]
        assert "Uvicorn running" not in server.output()


def test_sigterm_while_a_key_file_waits_for_its_writer_exits_0(trained_folder, tmp_path):
    fifo = tmp_path / "keys.fifo"
    os.mkfifo(fifo)  # no writer: opening it waits for one
    with serving(trained_folder, "--api-keys", str(fifo), tmp_path=tmp_path, ready=False) as server:
        writers = []  # a writer's descriptor, once the server opens the FIFO: then it reads, waiting for keys
        wait_for(lambda: writers.append(opened_for_writing(fifo)) or writers[-1] is not None)
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=30) == 0, server.output()[-3000:]
        assert "Uvicorn running" not in server.output()
        os.close(writers[-1])


def opened_for_writing(fifo) -> int | None:
    """A writer's descriptor of `fifo`, once a reader has it open (before: none, ENXIO)."""
    try:
        return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return None


def test_a_killed_ctranslate2_server_restarts_on_its_export_and_leaves_no_other(trained_folder, tmp_path):
    env = {"TMPDIR": str(tmp_path)}
    exports = tmp_path / "vanilla-transformer-ct2"
    with serving(trained_folder, "--engine", "ctranslate2", env=env) as server:
        first = sorted(path.name for path in exports.iterdir())
        exported = exports / first[0] / "model" / "model.bin"
        assert len(first) == 1 and exported.is_file()
        written = exported.stat().st_mtime_ns
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(timeout=30)
    with serving(trained_folder, "--engine", "ctranslate2", env=env, tmp_path=tmp_path) as server:
        assert sorted(path.name for path in exports.iterdir()) == first
        assert exported.stat().st_mtime_ns == written  # reused, not exported again
        assert httpx.post(server.url + "/translate", json=BODY).status_code == 200
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=60) == 0
    assert list(exports.iterdir()) == []  # a normal exit removes it


def test_waits_past_what_a_thread_can_wait_are_waits_without_end(trained_folder, tmp_path):
    """--max-wait-ms and --drain-timeout past threading.TIMEOUT_MAX (about 292 years) killed the worker, or the
    shutdown, with an OverflowError."""
    flags = ("--max-wait-ms", "1e13", "--max-batch-tokens", "100000", "--timeout", "3", "--drain-timeout", "1e308")
    answers = []
    with serving(trained_folder, *flags, tmp_path=tmp_path) as server:
        assert server.post(**BODY).status_code == 504  # the batch waits for more
        assert httpx.get(server.url + "/ready").status_code == 200
        sender = threading.Thread(target=lambda: answers.append(server.post(**BODY)))
        sender.start()
        wait_for(lambda: server.metric("vanilla_transformer_queue_requests") == 1)
        server.process.send_signal(signal.SIGTERM)  # the drain translates it
        assert server.process.wait(timeout=60) == 0
        sender.join(30)
        assert "Traceback" not in server.output() and "OverflowError" not in server.output()
    assert answers[0].status_code == 200


def test_ready_says_503_once_the_translation_worker_has_ended(trained_folder):
    from vanilla_transformer.serving.app import create_app
    from vanilla_transformer.serving.engine import EngineSettings, load_engine

    app = create_app(lambda: load_engine(EngineSettings(str(trained_folder), threads=1)))
    with in_process(app, log_level="warning") as url:
        wait_for(lambda: answers(url + "/ready"), timeout=30)
        app.state.server.batcher.stop(timeout=30)  # as a worker that failed: nothing would answer the queue
        ended = httpx.get(url + "/ready")
        assert ended.status_code == 503 and ended.json() == {"status": "failed"}
