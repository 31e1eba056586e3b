"""The candidate changes to our training step (`step.CHANGES`), each timed against our plain step in the same run,
alternately, at one size and mode: tokens/s, the speed-up, the peak memory, and where the changed step's time goes."""

import functools

from ..common.measure import compare, log_row, training_batch
from ..common.step_profile import GROUPS, PROFILE_COLUMNS, profile_cells, profile_step
from .step import CHANGES, Step, built_with_peak, release, step_flops


def changes_mode(args) -> tuple[str, str | None]:
    """The mode the changes are measured in, and its compile backend: compiled, unless only eager is asked."""
    return ("compiled", args.compile_backend) if "compiled" in args.modes else ("eager", None)


def change_rows(args, size_name: str, size: dict, peak: float):
    """Each of --changes against the plain step, in `changes_mode`: a row as each is measured."""
    mode, backend = changes_mode(args)
    shape = (max(1, args.max_tokens // args.length), args.length, args.length)
    batch = training_batch(size, shape, args.device)
    plain, plain_peak = built_with_peak(
        functools.partial(Step, "vanilla", size, args.device, batch, backend), args.device
    )
    rows = []
    for key in args.changes:
        change = CHANGES[key]
        changed_shape = (shape[0] * change.batch_scale, *shape[1:])
        changed_batch = training_batch(size, changed_shape, args.device) if change.batch_scale > 1 else batch
        make = functools.partial(Step, "vanilla", size, args.device, changed_batch, backend, change)
        changed, changed_peak = built_with_peak(make, args.device)
        timed = compare(lambda step=changed: step, lambda: plain, args.repeats, args.steps, args.device)
        tokens = shape[0] * shape[2]
        row = {"size": size_name, "mode": mode, "change": change.name, "batch": changed_shape}
        row.update(
            plain_tok_s=tokens / timed["theirs"],
            changed_tok_s=tokens * change.batch_scale / timed["ours"],
            speed_up=timed["ratio"] * change.batch_scale,  # tokens/s with the change over tokens/s without
            plain_peak_gib=plain_peak,
            changed_peak_gib=changed_peak,
        )
        if args.profile_steps:
            flops = step_flops("vanilla", size, args.device, changed_batch)
            row["profile"] = profile_step(changed, args.device, args.profile_steps, flops, peak).as_dict()
        del changed
        release(args.device)
        log_row(rows, row)
        yield row


def change_lines(rows: list[dict]) -> list[str]:
    """The changes' table, and their steps' kernel time by group where profiled."""
    if not rows:
        return []
    lines = ["", "Candidate changes to our step (`bench/gpu/changes.py`), each against our plain step, alternately, in "
             "the same run; speed-up: target tokens/s with the change over without:", "",
             "| size | mode | change | batch | tok/s plain | with the change | speed-up | peak GiB plain | with |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        memory = [f"{r[key]:.1f}" if r[key] is not None else "-" for key in ("plain_peak_gib", "changed_peak_gib")]
        lines.append(f"| {r['size']} | {r['mode']} | {r['change']} | {' x '.join(map(str, r['batch']))} | "
                     f"{r['plain_tok_s']:.0f} | {r['changed_tok_s']:.0f} | {r['speed_up']:.2f}x | {memory[0]} | "
                     f"{memory[1]} |")  # fmt: skip
    profiled = [r for r in rows if r.get("profile")]
    if profiled:
        lines += ["", f"| change | {PROFILE_COLUMNS} |", "|---|---|" + "---|" * (len(GROUPS) + 2)]
        lines += [f"| {r['change']} | {profile_cells(r['profile'])} |" for r in profiled]
    return lines
