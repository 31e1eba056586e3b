"""BENCHMARKS.md and what its sections record: each suite's command line (and the parser that reads it), the machine,
the library versions, a target's verdict, the start of a section, and a section put in its place in the report.

The speed suite writes the report's head; the suites named in MARKERS write one section each after it, in that
order, each starting with its marker. Only the standard library is imported here at import time: the serving suite's
CTranslate2 probe processes import this module and must not load torch or transformers.
"""

import argparse
import contextlib
import importlib
import importlib.metadata
import json
import os
import platform
import re
import shlex
import subprocess

# the repository, where `python -m bench` runs
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPORT = os.path.join(ROOT, "BENCHMARKS.md")
COMMAND = "python -m bench"

SERVING_MARKER = "<!-- serving: written by python -m bench serving -->"  # BENCHMARKS.md from here on is the sections'
DATA_MARKER = "<!-- data: written by python -m bench data -->"  # the data suite's section, after the serving suite's
GPU_MARKER = "<!-- gpu: written by python -m bench gpu -->"  # the GPU suite's, after the data suite's
ENGINES_MARKER = "<!-- engines: written by python -m bench engines -->"  # the engines suite's, after the GPU suite's
SERVE_MARKER = "<!-- serve: written by python -m bench serve -->"  # the serve suite's, after the engines suite's
TRANSLATE_MARKER = "<!-- translate: written by python -m bench translate -->"  # the translate suite's
TRANSLATE_FAIRSEQ_MARKER = "<!-- translate-fairseq: written by python -m bench translate-fairseq -->"  # the last
# in the order their sections come in the report
MARKERS = (SERVING_MARKER, DATA_MARKER, GPU_MARKER, ENGINES_MARKER, SERVE_MARKER, TRANSLATE_MARKER,
           TRANSLATE_FAIRSEQ_MARKER)  # fmt: skip
NEXT_SECTION = re.compile(r"<!-- [\w-]+: written by python -m bench [\w-]+ -->")  # any suite's section marker


# --------------------------------------------------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------------------------------------------------


def suite_parser(suite: str, doc: str) -> argparse.ArgumentParser:
    """The parser of `python -m bench SUITE`, described by the suite module's docstring."""
    return argparse.ArgumentParser(
        prog=f"{COMMAND} {suite}", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def measuring_command(suite: str, given: list[str], files=("--out", "--json"), folders=(), switches=()) -> str:
    """The command line that produced the figures: without the flags that only name this machine's output files
    (`files`, each with its value, and `switches`), and with each of `folders`' value written as DIR."""
    kept, skip = [], None
    for arg in given:
        name, equals, _ = arg.partition("=")
        if skip:
            kept += ["DIR"] if skip in folders else []
            skip = None
        elif name in folders:
            kept.append(f"{name}=DIR" if equals else name)
            skip = None if equals else name
        elif name in files:
            skip = None if equals else name
        elif arg not in switches:
            kept.append(arg)
    return shlex.join([*COMMAND.split(), suite, *kept])


def free_local_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for a server or torchrun's rendezvous)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def probe_command(executable: str, suite: str, *flags: str) -> list[str]:
    """A suite run in a fresh process of `executable` (from ROOT, as `python -m bench` runs): its measuring probes."""
    return [executable, "-m", "bench", suite, *flags]


# --------------------------------------------------------------------------------------------------------------------
# The machine and the versions
# --------------------------------------------------------------------------------------------------------------------


def cpu_name() -> str:
    """The CPU's model name (Linux), else what the platform module knows."""
    with contextlib.suppress(OSError):
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def machine(device: str = "cpu", torch_threads: bool = False) -> str:
    """The machine a suite measured on. On CUDA: the card, its driver and CUDA version. Else the CPU's name, its
    cores (and how many this process may use, where fewer) and, with `torch_threads`, torch's thread count."""
    if device.startswith("cuda"):
        import torch

        return f"{torch.cuda.get_device_name()}, driver {driver_version()}, CUDA {torch.version.cuda}"
    cores = os.cpu_count()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    text = f"{cpu_name()}, {cores} cores" + (f" ({usable} usable by this process)" if usable != cores else "")
    if torch_threads:
        import torch

        text += f", {torch.get_num_threads()} torch threads"
    return text


def driver_version() -> str:
    """The NVIDIA driver's version, as nvidia-smi reports it ('unknown' without nvidia-smi)."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
        )
        return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else "unknown"
    except OSError:
        return "unknown"


def version(name: str) -> str:
    """An installed distribution's version; else the `__version__` of the module of that name."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return importlib.import_module(name.replace("-", "_")).__version__


def versions(*names: str) -> str:
    """`name version` of each distribution, then Python's."""
    return ", ".join(f"{name} {version(name)}" for name in names) + f", Python {platform.python_version()}"


# --------------------------------------------------------------------------------------------------------------------
# The sections
# --------------------------------------------------------------------------------------------------------------------


def verdict(value: float | None, target: float, higher_is_better: bool = True, missing: str = "") -> str:
    """Whether `value` met `target`: "met", "missed by N%" (a small gap still shows), or "not measured (`missing`)"
    where there is no value."""
    if value is None:
        return f"not measured ({missing})"
    met = value >= target if higher_is_better else value <= target
    if met:
        return "met"
    gap = (target / value - 1) if higher_is_better else (value / target - 1)
    digits = 0 if gap >= 0.01 else 1 if gap >= 0.001 else 2
    return f"missed by {100 * gap:.{digits}f}%"


def header_lines(
    heading: str, suite: str, prose: list[str], command: str, facts: list[str], marker: str | None = None
) -> list[str]:
    """The start of a suite's section: its marker (none for the report's head), its heading, the paragraph `prose`
    after the line naming the suite that generates it, and the run's command and `facts` as a list."""
    first, *rest = prose
    return [
        *([marker, ""] if marker else []),
        heading,
        "",
        f"Generated by `{COMMAND} {suite}`; do not edit by hand. {first}",
        *rest,
        "",
        f"- command: `{command}`",
        *(f"- {fact}" for fact in facts),
        "",
    ]


def replace_section(section: str, path: str, marker: str | None = None) -> None:
    """Put a suite's `section` (which starts with `marker`) in the report at `path`: in place of the one an earlier
    run wrote, up to the next suite's marker or the end; else before the section of the first suite that follows in
    MARKERS, else at the end. Without `marker` the section is the report's head, everything before the first marker.
    The rest of the file is left as it is."""
    report = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
    present = marker is not None and marker in report
    if marker is None:
        start = 0
    elif present:
        start = report.index(marker)
    else:
        later = [report.find(m) for m in MARKERS[MARKERS.index(marker) + 1 :] if m in report]
        start = min(later, default=len(report))
    following = NEXT_SECTION.search(report, start + len(marker) if present else start)
    head, rest = report[:start], report[following.start() :] if following else ""
    text = (head.rstrip("\n") + "\n\n" if head.strip() else "") + section + ("\n" + rest if rest else "")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def write_json(results: dict, path: str | None) -> None:
    """Write the results as JSON to `path` (a suite's `--json`), if one is given."""
    if path:
        with open(path, "w") as handle:
            json.dump(results, handle, indent=2)


def read_json(path: str) -> dict:
    """The raw results a suite saved with `--json` (read back by `--report-from`)."""
    with open(path) as handle:
        return json.load(handle)
