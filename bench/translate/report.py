"""The translate section of BENCHMARKS.md: the run's settings, a table of rows per size, and the targets' verdicts.
The section starts with its own marker, the last of `bench.common.report.MARKERS`."""

from ..common import report
from .build import TOLERANCE

SUITE = "translate"
MARKER = report.TRANSLATE_MARKER
LABELS = {
    "ours": "`translate`, torch engine",
    "marian": "MarianMTModel `generate()` loop",
    "ours-ct2": "`translate`, CTranslate2 engine",
    "translate_file": "CTranslate2 `translate_file`",
    "ours-2proc": "`translate`, torch engine, {processes} processes",
}


def verdicts(size: dict, processes: int) -> list[tuple[str, str, str]]:
    """(target, measured, verdict) for each search's ratios and for memory against the input's size."""
    rows = []
    for search, r in size["rows"].items():
        rate = {engine: row["sentences_per_second"] for engine, row in r.items()}
        ours, ct2, two = rate["ours"] / rate["marian"], rate["ours-ct2"] / rate["translate_file"], rate["ours-2proc"]
        rows += [
            (f"{search}: `translate` >= 1.5x the MarianMTModel loop", f"{ours:.2f}x", report.verdict(ours, 1.5)),
            (f"{search}: CTranslate2 engine >= 0.95x `translate_file`", f"{ct2:.2f}x", report.verdict(ct2, 0.95)),
            (f"{search}: {processes} processes against 1 (context)", f"{two / rate['ours']:.2f}x", "no target"),
        ]
    tenth, whole = size["tenth"], size["rows"][size["tenth"]["search"]]["ours"]
    growth = whole["peak_mib"] / tenth["peak_mib"]
    rows.append((f"peak RSS flat in the input's size: {size['sentences']:,} against {tenth['sentences']:,} sentences "
                 "<= 1.1x", f"{whole['peak_mib']:.0f} / {tenth['peak_mib']:.0f} MiB = {growth:.2f}x",
                 report.verdict(growth, 1.1, higher_is_better=False)))  # fmt: skip
    return rows


def windows_text(windows: dict) -> str:
    """The read windows of one process and of several: "`--read-window 2000` (`1667` on 2 processes)"."""
    (_, one), *more = sorted(windows.items(), key=lambda item: int(item[0]))
    several = "".join(f" (`{window}` on {processes} processes)" for processes, window in more if window != one)
    return f"`--read-window {one}`{several}"


def size_lines(name: str, size: dict, processes: int) -> list[str]:
    """A size's facts, its table of rows and its verdicts."""
    check, count = size["check"], size["sentences"]
    lines = [
        f"### {name}: {count:,} sentences",
        "",
        f"{windows_text(size['read_windows'])}; translate_file's patience {size['patience']:g}. "
        f"Vocabulary {size['vocab']:,}; </s> output bias {size['bias']:.3f}: greedy outputs of "
        f"{size['mean_output_tokens']:.1f} tokens on average against sources of {size['mean_source_tokens']:.1f} "
        f"({size['output_lengths']} distinct lengths over the {size['calibration_sentences']} calibration sentences). "
        f"MarianMTModel and the imported model gave the same text on {check['same']} of {check['of']} sentences.",
        "",
        "| engine | search | seconds (start-up) | sentences/s | target tokens/s | target tokens a sentence | "
        "peak RSS MiB | lines as the Marian loop's |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for search, rows in size["rows"].items():
        for engine, row in rows.items():
            peak = f"{row['peak_mib']:.0f}" + (f" (each of {row['processes']})" if row["processes"] > 1 else "")
            same = f"{100 * row['same_as_marian'] / count:.1f}%"
            if "same_as_file" in row:
                same += f" (as translate_file's: {100 * row['same_as_file'] / count:.1f}%)"
            label = LABELS[engine].format(processes=processes)
            speed = (f"{row['seconds']:.1f} ({row['startup']:.1f}) | {row['sentences_per_second']:.1f} | "
                     f"{row['tokens_per_second']:.0f}")  # fmt: skip
            lines.append(f"| {label} | {search} | {speed} | {row['target_tokens'] / count:.1f} | {peak} | {same} |")
    tenth = size["tenth"]
    lines.append(f"| {LABELS['ours']}, a tenth of the corpus ({tenth['sentences']:,}) | {tenth['search']} | "
                 f"{tenth['seconds']:.1f} | | | | "
                 f"{tenth['peak_mib']:.0f} | |")  # fmt: skip
    targets = [f"| {target} | {measured} | {verdict} |" for target, measured, verdict in verdicts(size, processes)]
    return [*lines, "", "| target | measured | verdict |", "|---|---|---|", *targets, ""]


def rounds(settings: dict) -> str:
    """How the rows were timed when there were several rounds (older runs have one)."""
    count = settings.get("repeats", 1)
    if count == 1:
        return ""
    return (f"The rows were measured in {count} rounds, every engine once a round in turn, and each row gives its "
            "fastest round, so that a slow spell of the shared machine does not fall on one engine only. ")  # fmt: skip


def prose(results: dict) -> list[str]:
    """The section's paragraphs: what each row runs and how it is timed, and what the models are."""
    s = results["settings"]
    return [
        "`vanilla-transformer translate` on a corpus file against the loop a transformers user writes over "
        f"MarianMTModel's `generate()` (batches of {s['marian_batch']} in input order, `tokenizer(batch, "
        "padding=True)`, `batch_decode`, under `torch.inference_mode`), and its CTranslate2 engine against "
        "CTranslate2's own `translate_file` on the same export, measured side by side in one run. Each row is a "
        "fresh process timed from its start to its exit; its start-up (imports and loading: the same command on an "
        "empty input) is given in brackets and left out of the rates, so that the rates and their ratios are the "
        "engines' and not the libraries' import times. " + rounds(s) + "Peak RSS is the process's VmHWM (with "
        f"several processes, the largest). Every engine writes at most {s['max_length']} new tokens a sentence. "
        f"`translate` runs with `--batch-size {s['batch_size']} --max-tokens {s['max_tokens']} --no-split` (each "
        "line whole, as the loop translates it) on both engines, and a `--read-window` (given per size) that cuts "
        "the corpus into windows of at most 2,000 lines, each sorted by length (on one process the whole corpus in "
        "one window where it fits, as `translate_file` sorts it; on several, as many windows as a multiple of the "
        f'processes); `translate_file` with `max_batch_size={s["max_tokens"]}, batch_type="tokens"` and the search '
        "settings that the engine gives ctranslate2 (its patience, `min_decoding_length=0`). `translate_file` "
        "reads the corpus pre-tokenized into the export's tokens and writes tokens: its time leaves out the "
        "tokenization and detokenization that the engine's includes. Target tokens: each output line encoded again "
        f"with the tokenizer, </s> included. {s['processes']} processes: torchrun, `OMP_NUM_THREADS=1` each, against "
        "one process at torch's default threads. fairseq-interactive: the next section, for context.",
        "",
        "The models: a MarianMTModel of random weights (seed 0) at each size's dimensions with a BPE trained on the "
        "corpus (both sides), imported exactly into this package (`import_checkpoint`) and exported to CTranslate2 "
        "(float32). So that outputs end at varied lengths near their sources', one head of the last decoder layer's "
        "cross-attention attends from each target position to the same source position and reads the source's end "
        "of sentence there, and the output bias of </s> was calibrated (bisection, greedy search) until the mean "
        f"output length came within {100 * TOLERANCE:.0f}% of the mean source length; the outputs repeat a token or "
        "two up to that length.",
    ]


def section(results: dict, command: str) -> str:
    """The translate section of BENCHMARKS.md."""
    s = results["settings"]
    searches = ", ".join(f"beam {b}" if b > 1 else "greedy" for b in s["beams"])
    facts = [f"machine: {results['machine']}", results["versions"], f"corpus: {results['corpus']}; {searches}"]
    heading = "## Corpus translation: `vanilla-transformer translate`"
    lines = report.header_lines(heading, SUITE, prose(results), command, facts, MARKER)
    for name, size in results["sizes"].items():
        lines += size_lines(name, size, s["processes"])
    return "\n".join(lines)
