import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tests.documents import argv, first_command  # noqa: E402
from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration  # noqa: E402

torch.set_num_threads(min(2, torch.get_num_threads()))


# The slow tier (marked `slow`): whatever starts several processes, trains whole studies or runs the recipes and the
# benchmarks' suites, needs fairseq, a browser or a notebook kernel, and the few single tests that compile kernels or
# start a command-line process per case. The README's test command leaves it out (`-m "not slow"`); `.ci/run` runs
# it after. A module (or folder) by its path, a test by its path and name, each with why it is slow.
SLOW = {
    "tests/training/test_engines.py": "several processes under DDP, FSDP and DeepSpeed",
    "tests/training/test_distributed.py": "two training processes",
    "tests/training/test_studies.py": "whole studies of train processes",
    "tests/training/test_recipes.py": "the recipes' scripts",
    "tests/bench/": "the benchmarks' suites",
    "tests/reliability/test_interrupted_runs.py": "training processes killed and resumed",
    "tests/corpus/test_processes.py": "translation processes killed, resumed and run two at once",
    "tests/test_tutorial.py": "the tutorial run in a notebook kernel",
    "tests/serving/test_server_limits.py": "a server process per limit: keys, overload, deadlines, draining",
    "tests/demo/test_demo_browser.py": "the demo in a browser",
    "tests/test_fairseq_reference.py": "fairseq itself, in an environment of its own",
    "tests/modeling/test_attention_backends.py::test_flex_attention_gives_the_outputs_of_eager_attention": (
        "flex attention compiles its kernels"
    ),
    "tests/test_importing.py::test_translating_with_an_imported_folder_warns_of_no_length_clash": (
        "a command-line process per source"
    ),
    "tests/training/test_compile_and_gpu.py::test_compile_runs_the_training_step_compiled_and_keeps_the_checkpoints"
    "_names": "torch.compile of a training step",
    "tests/demo/test_demo.py::test_export_to_space_writes_a_folder_that_runs_on_its_own": "a Space's app",
    "tests/demo/test_demo.py::test_the_exported_space_serves_translations_over_gradios_api": "a Space's app",
    "tests/serving/test_hostile_requests.py::test_requests_beyond_the_concurrency_limit_get_503_and_the_probes_still_"
    "answer": "connections held until their read timeout",
    "tests/modeling/test_generation.py::test_compiled_generation_with_a_static_cache_equals_eager_generation": (
        "torch.compile of generation"
    ),
    "tests/test_launch_check.py::test_accelerate_launch_of_two_cpu_processes_stops_with_one_line": "two processes",
    "tests/training/test_update.py::test_two_processes_give_the_update_one_process_accumulates": "two processes",
}
# translate and score as processes given hostile streams: a command-line process per case
SLOW.update(
    (f"tests/corpus/test_hostile.py::test_{name}", "a command-line process per case")
    for name in (
        "a_reader_that_goes_away_ends_the_command_quietly_with_status_141",
        "a_full_device_as_stdout_is_named_in_one_line",
        "an_output_file_the_system_stops_growing_is_named_with_status_1_and_resumes",
        "a_closed_stdout_or_stdin_is_named_in_one_line",
        "an_endless_line_is_named_in_bounded_memory",
        "sigterm_before_the_first_window_leaves_nothing_behind",
    )
)


# The slow tier's longest modules, longest first (each takes half a minute or more of a worker). `.ci/run` spreads the
# tier over pytest-xdist's workers a module at a time, and a worker takes the next module in the collection's order:
# the longest start first, so that the short ones fill in at the end and no worker is left running a long module
# alone while the other waits. (xdist's own order, the modules with the most tests first, is turned off.)
LONGEST_FIRST = (
    "tests/training/test_engines.py",
    "tests/test_fairseq_reference.py",
    "tests/training/test_studies.py",
    "tests/bench/test_speed.py",
    "tests/serving/test_server_limits.py",
    "tests/bench/test_translate_bench.py",
    "tests/training/test_recipes.py",
    "tests/bench/test_translate_fairseq_bench.py",
    "tests/modeling/test_attention_backends.py",
    "tests/training/test_distributed.py",
    "tests/bench/test_gpu_bench.py",
    "tests/corpus/test_hostile.py",
    "tests/corpus/test_processes.py",
    "tests/bench/test_serving.py",
    "tests/test_tutorial.py",
    "tests/bench/test_serve_bench.py",
    "tests/bench/test_data_bench.py",
    "tests/reliability/test_interrupted_runs.py",
)


def is_slow(nodeid: str) -> bool:
    test = nodeid.split("[")[0]  # without the parameters
    return any(test == key if "::" in key else nodeid.startswith(key) for key in SLOW)


def slow_rank(item) -> int:
    """Where a test's module comes in the slow tier's order: LONGEST_FIRST's, then every other module's."""
    module = item.nodeid.split("::")[0]
    return LONGEST_FIRST.index(module) if module in LONGEST_FIRST and "slow" in item.keywords else len(LONGEST_FIRST)


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist 3.8 and later: keep the collection's order
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    """The slow tier is marked `slow`. Tests marked `gpu` run on a CUDA device; without one they are skipped, saying
    so."""
    for item in items:
        if is_slow(item.nodeid):
            item.add_marker(pytest.mark.slow)
    # the slow tier's longest modules first; last, the first run's readers: it trains meanwhile (`FirstRun`)
    items.sort(key=lambda item: (slow_rank(item), "first_run" in item.fixturenames))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="gpu: needs a CUDA device, and torch.cuda.is_available() is False here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """With TEST_TIMEOUT=SECONDS (bench/gpu/checks.sh sets it), a test that runs longer fails, named, and the tier goes
    on: a lent device's minutes are few. The alarm interrupts the test in its main thread."""
    seconds = int(float(os.environ.get("TEST_TIMEOUT") or 0))
    if not seconds or not hasattr(signal, "SIGALRM"):
        return (yield)

    def stop(signum, frame):
        pytest.fail(f"{item.nodeid}: still running after TEST_TIMEOUT={seconds} s", pytrace=False)

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        return (yield)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# the tiny model every training test trains: d_model 32, 4 heads, d_ff 64, 1+1 layers, a 120-token vocabulary
TINY_ARCHITECTURE_FLAGS = [
    "--d-model",
    "32",
    "--num-heads",
    "4",
    "--d-ff",
    "64",
    "--encoder-layers",
    "1",
    "--decoder-layers",
    "1",
    "--vocab-size",
    "120",
]


def data_flags(files: dict) -> list[str]:
    """--train-file, --validation-file and --test-file for each split `files` names: {"train": path, ...}."""
    return [
        flag
        for split in ("train", "validation", "test")
        if split in files
        for flag in (f"--{split}-file", str(files[split]))
    ]


def train_cli(files: dict, out, *flags: str) -> int:
    """`vanilla-transformer train` in this process on the data `files` into the folder `out`, with `flags`; its exit
    status. A flag given with its values in one string ("--max-steps 4 --eval-steps 0") is split at the spaces."""
    from vanilla_transformer.cli import main

    words = [word for flag in flags for word in (flag.split() if flag.startswith("--") else [flag])]
    return main(["train", *data_flags(files), "--output-dir", str(out), *words])


def two_processes(port: int, *command: str, **run) -> subprocess.CompletedProcess:
    """`torchrun --nproc_per_node 2 --master_port PORT COMMAND` on CPU processes of one thread each, its output
    captured; `run` goes to subprocess.run (check=True, text=True, ...). COMMAND is a script and its arguments, or
    `-m module ...`."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([*torchrun, *command], env=env, capture_output=True, **run)


def tiny_config(**overrides) -> VanillaTransformerConfig:
    """A model small enough for unit tests: d_model 32, 4 heads, 2+2 layers, 50 tokens, no dropout."""
    values = dict(
        vocab_size=50,
        d_model=32,
        num_heads=4,
        d_ff=64,
        encoder_layers=2,
        decoder_layers=2,
        dropout=0.0,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
    )
    values.update(overrides)
    return VanillaTransformerConfig(**values)


def tiny_marian_config(**overrides):
    """transformers' MarianConfig at a unit-test size (d_model 16, 2 heads, 1+1 layers), the library's reference."""
    from transformers import MarianConfig

    values = dict(
        vocab_size=50,
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_position_embeddings=16,
        pad_token_id=0,
        decoder_start_token_id=0,
    )
    values.update(overrides)
    return MarianConfig(**values)


def tiny_model(seed: int = 0, **overrides) -> VanillaTransformerForConditionalGeneration:
    torch.manual_seed(seed)
    return VanillaTransformerForConditionalGeneration(tiny_config(**overrides)).eval()


def greedy_steps(model, batch: dict, first_token: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """The logits, (batch, 1, vocab), of `steps` greedy decoding steps from `first_token`, one token at a time
    through the cache, after the encoder once."""
    with torch.no_grad():
        encoder_outputs = model.get_encoder()(batch["input_ids"], batch["attention_mask"])
        token, cache, logits = first_token, None, []
        for _ in range(steps):
            out = model(
                attention_mask=batch["attention_mask"],
                encoder_outputs=encoder_outputs,
                decoder_input_ids=token,
                cache=cache,
                use_cache=True,
            )
            cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
            logits.append(out.logits[:, -1:])
            token = out.logits[:, -1:].argmax(-1)
    return logits


@pytest.fixture
def model():
    return tiny_model()


@pytest.fixture(scope="session")
def trained_folder(tmp_path_factory):
    """A model folder written by `vanilla-transformer train`: a tiny model, a few dozen updates on number words."""
    from vanilla_transformer.training.tasks.numbers import english, german

    root = tmp_path_factory.mktemp("trained")
    files = {}
    for split, numbers in {"train": range(100, 400), "validation": range(20, 28), "test": range(40, 48)}.items():
        files[split] = root / f"{split}.jsonl"
        files[split].write_text(
            "".join(
                json.dumps({"translation": {"en": english(n), "de": german(n)}}, ensure_ascii=False) + "\n"
                for n in numbers
            ),
            encoding="utf-8",
        )
    out = root / "model"
    code = train_cli(
        files,
        out,
        "--max-steps 40 --save-steps 0 --eval-steps 0",
        *TINY_ARCHITECTURE_FLAGS,
        "--max-tokens 512 --warmup-steps 10 --lr 3e-3 --num-beams 2",
        "--report-to none --max-source-length 16",
        "--max-target-length 16 --show-samples 0",
    )
    assert code == 0
    return out


@pytest.fixture(scope="session")
def exported_folder(trained_folder, tmp_path_factory):
    """`trained_folder` exported to CTranslate2 (float32)."""
    from vanilla_transformer import export_ctranslate2

    return export_ctranslate2(trained_folder, str(tmp_path_factory.mktemp("ct2") / "model"))


@pytest.fixture(scope="session")
def learned_folder(trained_folder, tmp_path_factory):
    """`trained_folder`'s tokenizer and generation settings with an untrained model of learned positions, as many as
    a learned-positions model trained like it gets (max_position_embeddings=18: its 16-token limits and two to
    spare): a model that cannot read or write a longer sentence."""
    from transformers import AutoTokenizer

    trained = VanillaTransformerForConditionalGeneration.from_pretrained(trained_folder)
    config = trained.config
    config.position_encoding = "learned"
    config.max_position_embeddings = 18
    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(config).eval()
    model.generation_config = trained.generation_config
    folder = tmp_path_factory.mktemp("learned") / "model"
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(trained_folder).save_pretrained(folder)
    return folder


def long_sentence(words: int = 200) -> str:
    """Number words, repeated: far longer than any sentence `trained_folder` was trained on (at most 16 tokens)."""
    from vanilla_transformer.training.tasks.numbers import english

    return " ".join(english(100 + (i * 37) % 300) for i in range(words // 3))


ROOT = Path(__file__).resolve().parents[1]
# what the README's first run depends on: the package's source, the command and the libraries that train it
FIRST_RUN_SOURCES = (
    "vanilla_transformer",
    "configuration",
    "modeling",
    "training",
    "pyproject.toml",
    "tests/documents.py",
)


# The settings that choose the CPU kernels of torch, oneDNN and MKL. VANILLA_TRANSFORMER_FIRST_RUN_KERNELS, as
# `NAME=VALUE` words of them, trains the README's first run under those settings whatever the tests' own are: `.ci/run`
# trains it once, under another instruction set's kernels, for the README's tests and for their run under that set.
KERNEL_SETTINGS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")
FIRST_RUN_KERNELS = "VANILLA_TRANSFORMER_FIRST_RUN_KERNELS"


def first_run_kernels() -> dict[str, str] | None:
    """The kernel settings that VANILLA_TRANSFORMER_FIRST_RUN_KERNELS gives the first run (None where it is unset)."""
    words = os.environ.get(FIRST_RUN_KERNELS)
    if words is None:
        return None
    wrong = [word for word in words.split() if word.partition("=")[0] not in KERNEL_SETTINGS or "=" not in word]
    if wrong:
        raise pytest.UsageError(
            f"{FIRST_RUN_KERNELS}: {wrong[0]!r} is not NAME=VALUE with NAME one of {', '.join(KERNEL_SETTINGS)}"
        )
    return dict(word.partition("=")[::2] for word in words.split())


def first_run_key() -> str:
    """A hash of everything the README's first run depends on: a kept run of another tree is not reused."""
    import hashlib
    import importlib.metadata

    digest = hashlib.sha256(f"{first_command()} {sys.version}".encode())
    # the kernels that train it: another instruction set trains other last bits
    kernels = first_run_kernels()
    if kernels is None:
        digest.update(torch.backends.cpu.get_cpu_capability().encode())
        kernels = {setting: os.environ.get(setting, "") for setting in KERNEL_SETTINGS[1:]}
    for setting in KERNEL_SETTINGS:
        digest.update(f"{setting}={kernels.get(setting, '')}".encode())
    for library in ("torch", "transformers", "tokenizers", "datasets", "accelerate", "sacrebleu", "numpy"):
        digest.update(f"{library}=={importlib.metadata.version(library)}".encode())
    for source in FIRST_RUN_SOURCES:
        paths = [ROOT / source] if (ROOT / source).is_file() else sorted((ROOT / source).rglob("*"))
        for path in paths:
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(ROOT)).encode() + path.read_bytes())
    return digest.hexdigest()[:16]


# what a process runs before the command it starts, to take the lowest CPU priority (where the system has one)
LOWEST_PRIORITY = (lambda: os.nice(19)) if hasattr(os, "nice") else None


class FirstRun:
    """The README's first command, training in a folder of its own in a background process from the session's start,
    at the lowest CPU priority, on `threads` threads (None: torch's default): it takes the cores the tests leave idle,
    and the tests that need it (ordered last by `pytest_collection_modifyitems`) wait for it. A run kept in pytest's
    cache under `first_run_key` is copied instead, so that the slow tier, run after the fast one on the same tree, does
    not train it again. Of the processes of one session (pytest-xdist's workers), the one that holds the cache's lock
    trains; the others wait for the lock and copy the run it kept (or train it, if it kept none)."""

    def __init__(self, folder: Path, kept: Path | None, threads: int | None):
        self.folder, self.kept, self.threads, self.process, self.lock = folder, kept, threads, None, None
        if not self.copied() and self.locked(block=False):
            self.start()

    def copied(self) -> bool:
        import shutil

        if self.kept is None or not self.kept.is_dir():
            return False
        shutil.copytree(self.kept, self.folder, dirs_exist_ok=True)
        return True

    def locked(self, block: bool) -> bool:
        """Whether this process holds the lock on the kept runs (where there is a cache and the system has locks)."""
        try:
            import fcntl
        except ImportError:
            return True
        if self.kept is None:
            return True
        self.lock = open(self.kept.parent / ".training", "w")  # held until the run is kept
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
        except BlockingIOError:
            self.lock.close()
            self.lock = None
        return self.lock is not None

    def start(self) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        env.update(first_run_kernels() or {})
        if self.threads:
            env["OMP_NUM_THREADS"] = str(self.threads)
        with open(self.folder / "stdout.txt", "wb") as stdout, open(self.folder / "stderr.txt", "wb") as stderr:
            self.process = subprocess.Popen(
                argv(first_command()), cwd=self.folder, env=env, stdout=stdout, stderr=stderr,
                preexec_fn=LOWEST_PRIORITY,
            )  # fmt: skip

    def wait(self) -> Path:
        """The folder, once the command has finished there (kept in the cache, whole or not at all: copied beside,
        then renamed into place; older trees' runs removed)."""
        if self.process is None and not (self.folder / "train_output.txt").exists():
            self.locked(block=True)  # another process held it: it trained, or it failed
            if self.copied():
                self.release()  # for the next process that waits
            else:
                self.start()
        if self.process is not None:
            self.keep()
        return self.folder

    def keep(self) -> None:
        import shutil

        code, self.process = self.process.wait(timeout=900), None
        stdout, stderr = ((self.folder / name).read_text(encoding="utf-8") for name in ("stdout.txt", "stderr.txt"))
        assert code == 0, stderr[-3000:]
        (self.folder / "train_output.txt").write_text(stdout + stderr, encoding="utf-8")
        for name in ("stdout.txt", "stderr.txt"):
            (self.folder / name).unlink()
        if self.kept is not None:
            for old in self.kept.parent.iterdir():
                if not old.name.startswith("."):
                    shutil.rmtree(old, ignore_errors=True)
            partial = self.kept.with_name(f"{self.kept.name}.tmp-{os.getpid()}")
            shutil.copytree(self.folder, partial)
            os.replace(partial, self.kept)
        self.release()

    def keep_when_done(self, wait: bool) -> None:
        """Keeps the run once its command has finished well (if it has, or once it has with `wait`), so that a process
        waiting on the lock copies it at once; a failed run is left to the tests that read it, which say why."""
        if self.process is None or (not wait and self.process.poll() is None):
            return
        if self.process.wait(timeout=900) == 0:
            self.keep()

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
        self.release()

    def release(self) -> None:
        if self.lock is not None:
            self.lock.close()  # and with it the lock
            self.lock = None


FIRST_RUN = pytest.StashKey[FirstRun]()
# Beside this many other tests or more (the README's test command runs about 750), the first run trains on one thread:
# they keep about one core busy, and of several threads at the lowest priority, the one they starve would hold the
# others at every parallel region. Beside fewer, it takes torch's default threads, since it mostly trains alone.
MANY_OTHER_TESTS = 100


def reads_first_run(item) -> bool:
    """Whether a test reads the README's first run and its skip markers let it run (not so the browser test where no
    browser is installed)."""
    from _pytest.skipping import evaluate_skip_marks  # pytest's own reading of skip and skipif

    return "first_run" in item.fixturenames and evaluate_skip_marks(item) is None


@pytest.fixture(scope="session", autouse=True)
def first_run_training(request, tmp_path_factory):
    """Starts the README's first command at the session's start when a test the session will run reads its run."""
    if not any(reads_first_run(item) for item in request.session.items):
        yield None
        return
    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    kept = cache.mkdir("first-run") / first_run_key() if cache is not None else None
    others = sum("first_run" not in item.fixturenames for item in request.session.items)
    training = FirstRun(tmp_path_factory.mktemp("readme"), kept, 1 if others >= MANY_OTHER_TESTS else None)
    request.config.stash[FIRST_RUN] = training
    yield training
    training.stop()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    """The first run is kept as soon as it is done, whichever test this process runs then: of pytest-xdist's workers,
    the one that trains it need not be one that reads it. So a worker that still trains it after its last test (before
    that test's teardown, which ends the session's fixtures) waits for it and keeps it, unless the session was cut
    short."""
    training = item.config.stash.get(FIRST_RUN, None)
    if training is None:
        return
    cut_short = item.session.shouldfail or item.session.shouldstop
    training.keep_when_done(wait=nextitem is None and bool(os.environ.get("PYTEST_XDIST_WORKER")) and not cut_short)


@pytest.fixture(scope="session")
def first_run(first_run_training) -> Path:
    """A fresh folder in which the README's first command has run (`FirstRun`): it holds runs/numbers-en-de, its
    output in train_output.txt and, as a clone of the repository does, examples/ (a link to the repository's)."""
    folder = first_run_training.wait()
    (folder / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    return folder
