"""What the benchmark scripts share: the model sizes and batches, the two models built at identical dimensions, a
fixed-length `generate()` call, the process's memory, the machine's CPU name, the measuring command line and the
report's sections.

A script run as `python bench/SCRIPT.py` has this folder on sys.path and imports this module as `common`; imported as
part of the `bench` package (as the tests do) it is `bench.common`. Only the standard library is imported here at
import time: serving.py's CTranslate2 probe processes import this module and must not load torch or transformers.
"""

import contextlib
import json
import os
import platform
import re
import resource
import shlex

# model shapes: the embedded number task, Transformer-Tiny for Multi30k, and the paper's base model
SIZES = {
    "numbers": dict(d_model=128, heads=4, d_ff=512, layers=2, vocab=400),
    "tiny": dict(d_model=128, heads=4, d_ff=256, layers=4, vocab=8000),
    "base": dict(d_model=512, heads=8, d_ff=2048, layers=6, vocab=37000),
}
# training batch (sentences, source length, target length) per size, and in --quick mode
BATCHES = {"numbers": (256, 12, 12), "tiny": (256, 16, 16), "base": (64, 32, 32)}
QUICK_BATCHES = {"numbers": (128, 12, 12), "tiny": (128, 16, 16), "base": (16, 32, 32)}
PAD, BOS, EOS = 0, 1, 2
SERVING_MARKER = "<!-- serving: written by bench/serving.py -->"  # BENCHMARKS.md from here on is serving.py's
DATA_MARKER = "<!-- data: written by bench/data.py -->"  # data.py's section, after serving.py's


def build(kind: str, size: dict, attn: str, device: str, dropout: float = 0.1):
    """The same Transformer as this package's model or as MarianMTModel (post-norm, sinusoidal, shared embeddings)."""
    # both models' modules are imported whichever is built, so that the two models' memory probes load the same code
    import torch
    from transformers import AutoModelForSeq2SeqLM, MarianConfig

    from vanilla_transformer import VanillaTransformerConfig

    if kind == "vanilla":
        config = VanillaTransformerConfig(**vanilla_settings(size, dropout))
    else:
        config = MarianConfig(**marian_settings(size, dropout))
    torch.manual_seed(0)
    return AutoModelForSeq2SeqLM.from_config(config, attn_implementation=attn).to(device)


def vanilla_settings(size: dict, dropout: float) -> dict:
    return dict(
        vocab_size=size["vocab"],
        d_model=size["d_model"],
        num_heads=size["heads"],
        d_ff=size["d_ff"],
        encoder_layers=size["layers"],
        decoder_layers=size["layers"],
        dropout=dropout,
        max_position_embeddings=512,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
    )


def marian_settings(size: dict, dropout: float) -> dict:
    return dict(
        vocab_size=size["vocab"],
        d_model=size["d_model"],
        encoder_attention_heads=size["heads"],
        decoder_attention_heads=size["heads"],
        encoder_ffn_dim=size["d_ff"],
        decoder_ffn_dim=size["d_ff"],
        encoder_layers=size["layers"],
        decoder_layers=size["layers"],
        dropout=dropout,
        attention_dropout=0.0,
        activation_dropout=0.0,
        activation_function="relu",
        scale_embedding=True,
        max_position_embeddings=512,
        pad_token_id=PAD,
        eos_token_id=EOS,
        forced_eos_token_id=None,
        decoder_start_token_id=PAD,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
    )


class Generate:
    """`generate` for a fixed number of new tokens (min = max), so both models decode exactly as many steps.

    `compiled`: the library's compiled decoding, a static cache with each decoding step run through torch.compile
    (generate() does this by itself on accelerators; on the CPU the compile config has to ask for it)."""

    def __init__(self, model, sources, num_beams: int, new_tokens: int, compiled: bool = False):
        self.model, self.sources = model.eval(), sources
        self.kwargs = dict(
            num_beams=num_beams,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            early_stopping=False if num_beams > 1 else None,
        )
        if compiled:
            from transformers import CompileConfig

            compile_config = CompileConfig()
            compile_config._compile_all_devices = True
            self.kwargs.update(cache_implementation="static", compile_config=compile_config)
        self.kwargs = {k: v for k, v in self.kwargs.items() if v is not None}

    def __call__(self):
        import torch

        with torch.no_grad():
            attention_mask = torch.ones_like(self.sources)
            return self.model.generate(input_ids=self.sources, attention_mask=attention_mask, **self.kwargs)


def status_mib(field: str, pid: int | str = "self") -> float | None:
    """A memory field of /proc/PID/status (Linux) in MiB (VmHWM: the process's resident peak; VmRSS: its resident
    set now; RssAnon: the part of it that no file backs); None where /proc cannot tell."""
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) / 1024  # kB
    return None


def rollup_mib(field: str, pid: int | str = "self") -> float | None:
    """A field of /proc/PID/smaps_rollup (Linux) in MiB (Pss: the process's share of its resident pages, each page
    divided among the processes that map it, so that the Pss of processes sharing pages sums to the memory they use;
    Pss_Anon: the part that no file backs); None where /proc cannot tell."""
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) / 1024  # kB
    return None


def proc_status_mib(field: str) -> float:
    """A memory field of this process's /proc status in MiB; elsewhere getrusage's ru_maxrss, its peak so far.
    VmHWM, the peak, belongs to the process image and starts afresh at exec; ru_maxrss does not (it keeps the
    high-water mark of the forking parent), so it is only a fallback."""
    value = status_mib(field)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 if value is None else value


def current_rss_mib() -> float:
    return proc_status_mib("VmRSS")


def peak_rss_mib() -> float:
    return proc_status_mib("VmHWM")


def kept_from(report: str, *markers: str) -> str:
    """`report` from the first of `markers` it holds on, "" if none: the later scripts' sections a rewrite keeps."""
    starts = [report.find(marker) for marker in markers if marker in report]
    return report[min(starts) :] if starts else ""


def measuring_command(script: str, given: list[str], files=("--out", "--json"), folders=(), switches=()) -> str:
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
    return shlex.join(["python", f"bench/{script}", *kept])


def cpu_name() -> str:
    """The CPU's model name (Linux), else what the platform module knows."""
    with contextlib.suppress(OSError):
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


NEXT_SECTION = re.compile(r"<!-- [\w-]+: written by bench/[\w.]+ -->")  # any script's section marker


def write_json(results: dict, path: str | None) -> None:
    """Write the results as JSON to `path` (the script's `--json`), if one is given."""
    if path:
        with open(path, "w") as handle:
            json.dump(results, handle, indent=2)


def replace_section(section: str, path: str, marker: str) -> None:
    """Put `section` (which starts with `marker`) in place of the one an earlier run wrote, up to the next script's
    marker or the end, or at the end of the file; the rest of the file is left as it is."""
    report = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
    head, found, rest = report.partition(marker)
    if found:
        following = NEXT_SECTION.search(rest)
        report = head + section + ("\n" + rest[following.start() :] if following else "")
    else:
        report = (report.rstrip("\n") + "\n\n" if report.strip() else "") + section
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(report)
