"""The data suite's analysis and section of BENCHMARKS.md: the slope of the cold runs' time against the corpus
size, each doubling's time ratio, each target's verdict, and the section's tables."""

from ..common import report

TARGET_PAIRS = 4_350_000
# 2.5 GB = 2,384 MiB, 1.5 GB = 1,431 MiB
TARGETS = {
    "cold_s": 360.0,
    "warm_s": 30.0,
    "peak_mib": 2.5e9 / 2**20,
    "streaming_peak_mib": 1.5e9 / 2**20,
    "doubling": 2.2,
}


# --------------------------------------------------------------------------------------------------------------------
# Slope and targets
# --------------------------------------------------------------------------------------------------------------------


def slope(cold: list[dict]) -> dict | None:
    """Least squares of seconds = a + b * millions of pairs over the cold runs; None with fewer than 2 sizes."""
    xs = [r["pairs"] / 1e6 for r in cold]
    ys = [r["first_update_s"] for r in cold]
    if len(set(xs)) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return {"seconds_per_million": b, "intercept_s": my - b * mx}


def doublings(cold: list[dict]) -> list[dict]:
    """Each step between consecutive cold sizes: the time ratio against at most 1.1x the pairs ratio (2.2x for
    twice the pairs)."""
    steps = []
    for small, large in zip(cold, cold[1:]):
        pairs_ratio = large["pairs"] / small["pairs"]
        time_ratio = large["first_update_s"] / small["first_update_s"]
        limit = TARGETS["doubling"] / 2 * pairs_ratio
        steps.append(
            {
                "from": small["pairs"],
                "to": large["pairs"],
                "pairs_ratio": pairs_ratio,
                "time_ratio": time_ratio,
                "limit": limit,
                "met": time_ratio <= limit,
            }
        )
    return steps


def judged(value: float | None, limit: float, missing: str) -> dict:
    """A target's value (None where not measured), its limit (an upper bound) and the verdict."""
    return {"value": value, "limit": limit, "verdict": report.verdict(value, limit, False, missing)}


def analyse(runs: list[dict]) -> dict:
    """The slope and doublings of the map-style cold runs, and each target's verdict; memory is judged by the
    process tree's PSS sum (see `tree_memory_mib`)."""
    mapped = [r for r in runs if r.get("mode", "map") == "map"]
    cold = sorted((r for r in mapped if r["cache"] == "cold"), key=lambda r: r["pairs"])
    at_target = {r["cache"]: r for r in mapped if r["pairs"] == TARGET_PAIRS}
    missing = f"no run at {TARGET_PAIRS:,} pairs"
    peaks = [r["peak_tree_pss_mib"] for r in at_target.values()]
    streamed = [r["peak_tree_pss_mib"] for r in runs if r.get("mode") == "streaming" and r["pairs"] == TARGET_PAIRS]
    steps = doublings(cold)
    worst = max((s["time_ratio"] / s["pairs_ratio"] * 2 for s in steps), default=None)  # as if each were 2x
    return {
        "slope": slope(cold),
        "doublings": steps,
        "targets": {
            "cold_s": judged(at_target.get("cold", {}).get("first_update_s"), TARGETS["cold_s"], missing),
            "warm_s": judged(at_target.get("warm", {}).get("first_update_s"), TARGETS["warm_s"], "no warm run there"),
            "peak_mib": judged(max(peaks) if peaks else None, TARGETS["peak_mib"], missing),
            "streaming_peak_mib": judged(
                max(streamed) if streamed else None,
                TARGETS["streaming_peak_mib"],
                f"no streamed run at {TARGET_PAIRS:,}",
            ),
            "doubling": judged(worst, TARGETS["doubling"], "fewer than 2 sizes"),
        },
    }


# --------------------------------------------------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------------------------------------------------


def section(results: dict, train_flags: list[str]) -> str:
    """The data section of BENCHMARKS.md; `train_flags`: those of the training command each run starts."""
    lines = header_lines(results, train_flags) + table_lines(results) + slope_lines(results) + target_lines(results)
    return "\n".join(lines)


def header_lines(results: dict, train_flags: list[str]) -> list[str]:
    train_args = f" {results['train_args']}" if results["train_args"] else ""
    prose = (
        "Each corpus repeats Multi30k's "
        f"{results['source_pairs']:,} training pairs (English and German) in a seeded random order. A run is the "
        "training command below as a subprocess, stopped once it has written the record of its first update; "
        "first update is the seconds from its start to that record (polled every 0.2 s). Mode: map, the corpus "
        "converted to Arrow files and tokenised whole; streaming, the same command with `--streaming`. Cold: a "
        "fresh, empty datasets cache (map: JSON to Arrow, BPE training, tokenisation; streaming: the BPE's sample "
        "read from the whole file, BPE training, the first pool); warm: the same command again on that cache. "
        "Peak memory, all processes: the largest sum over the run and all its children, sampled every 0.2 s, of "
        "the proportional set (PSS: a page that forked workers share with the main process is divided among them, "
        "so the sum is the memory the run takes; the targets are judged by it) and of the resident set (RSS: such a "
        "page counted once per process). Main process: its own VmHWM, which counts the pages of the memory-mapped "
        "Arrow files it has read (page cache, which the kernel can reclaim), and of it, the largest memory that no "
        "file backs (RssAnon, sampled every 0.2 s). Phases: the seconds at which each phase's first output appeared "
        "(-: none, e.g. tokenisation read from the cache or streamed; batching is announced from 1 million pairs)."
    )
    facts = [
        f"training command: `vanilla-transformer train --train-file train-N.jsonl --validation-file "
        f"validation.jsonl {' '.join(train_flags)} --output-dir OUT{train_args}`",
        f"machine: {results['machine']}",
        results["versions"],
    ]
    heading = "## Data pipeline: time to the first update and peak memory"
    return report.header_lines(heading, "data", [prose], results["command"], facts, report.DATA_MARKER)


def table_lines(results: dict) -> list[str]:
    lines = [
        "| pairs | mode | cache | first update (s) | peak memory, all processes, PSS (MiB) | all processes, RSS "
        "(MiB) | main process (MiB) | main process, not file-backed (MiB) | phases: load, sample, tokenise, batch, "
        "train (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["runs"]:
        phases = ", ".join("-" if s is None else f"{s:.1f}" for s in r["phases"].values())
        main = "-" if r["peak_main_mib"] is None else f"{r['peak_main_mib']:,.0f}"
        anon = f"{r['peak_main_anon_mib']:,.0f}" if r.get("peak_main_anon_mib") else "-"
        pss = f"{r['peak_tree_pss_mib']:,.0f}" if r.get("peak_tree_pss_mib") else "-"
        lines.append(
            f"| {r['pairs']:,} | {r.get('mode', 'map')} | {r['cache']} | {r['first_update_s']:.1f} | {pss} | "
            f"{r['peak_tree_mib']:,.0f} | {main} | {anon} | {phases} |"
        )
    lines.append("")
    if any(r["cache"] == "warm" for r in results["runs"]):
        lines += [f"The warm runs {'reused' if results['bpe_reused'] else 'did not all reuse'} the cached BPE.", ""]
    return lines


def slope_lines(results: dict) -> list[str]:
    fit = results["slope"]
    if fit is None:
        return []
    lines = [
        f"Slope, map-style, cold: first update = {fit['intercept_s']:.1f} s + {fit['seconds_per_million']:.1f} s "
        "per million pairs (least squares over the cold runs).",
        "",
        "| pairs | to | pairs ratio | time ratio | at most (1.1 x pairs ratio) | |",
        "|---|---|---|---|---|---|",
    ]
    for s in results["doublings"]:
        met = "met" if s["met"] else "missed"
        lines.append(
            f"| {s['from']:,} | {s['to']:,} | {s['pairs_ratio']:.3f} | {s['time_ratio']:.2f} | {s['limit']:.2f} | "
            f"{met} |"
        )
    return [*lines, ""]


def target_lines(results: dict) -> list[str]:
    t = results["targets"]
    shown = {k: "-" if v["value"] is None else f"{v['value']:,.1f}" for k, v in t.items()}
    shown["doubling"] = "-" if t["doubling"]["value"] is None else f"{t['doubling']['value']:.2f}"
    return [
        f"Targets ({TARGET_PAIRS:,} pairs on 2 cores; reported, not asserted):",
        "",
        f"- first update within 6 minutes on a cold cache: {shown['cold_s']} s, {t['cold_s']['verdict']};",
        f"- first update within 30 s on a warm cache: {shown['warm_s']} s, {t['warm_s']['verdict']};",
        f"- peak memory, map-style (all processes, PSS, cold or warm) at most 2.5 GB ({TARGETS['peak_mib']:,.0f} "
        f"MiB): {shown['peak_mib']} MiB, {t['peak_mib']['verdict']};",
        f"- peak memory, streaming (all processes, PSS, cold or warm) at most 1.5 GB "
        f"({TARGETS['streaming_peak_mib']:,.0f} MiB): {shown['streaming_peak_mib']} MiB, "
        f"{t['streaming_peak_mib']['verdict']};",
        "- cost linear, twice the pairs at most 2.2x the time (the worst step above, scaled to twice the pairs): "
        f"{shown['doubling']}x, {t['doubling']['verdict']}.",
        "",
    ]
