"""The flags `vanilla-transformer ablate` adds to train's: which studies, how many seeds, where, how many runs at
once; train's own flags set the base run every variant changes."""

from dataclasses import dataclass

from ..options.argument_types import Checked, NonNegativeFloat, PositiveInt, option
from .variants import BASE, STUDIES

MOST_SEEDS = 100  # runs of each variant: a study plans and trains every one
VARIANT_KEYS = tuple(
    dict.fromkeys(variant.key for variants in STUDIES.values() for variant in variants if variant.key != "base")
)


@dataclass(frozen=True)
class StudyArguments(Checked):
    _argument_group_name = "study (the other flags are train's, and set the base run)"

    study: list[str] = option(
        list(STUDIES), help="the studies to run: Table 3's rows, the lessons, or both", choices=tuple(STUDIES)
    )
    variants: list[str] | None = option(
        help=f"only these variants of the studies ({', '.join(VARIANT_KEYS)}); the base runs too, as each row compares "
        "with it (default: all of them)",
        choices=VARIANT_KEYS,
        metavar="KEY",
    )
    seeds: PositiveInt = option(
        3, help=f"runs of each variant, with --seed and the seeds after it (at most {MOST_SEEDS})"
    )
    study_dir: str | None = option(
        help="where the runs, their logs, the tables and the figure are written; run again, the study resumes there "
        "(default: studies/<task>)"
    )
    jobs: PositiveInt = option(
        1,
        help="runs trained at once, as processes sharing the CPU cores; with as many GPUs as jobs and no --launcher, "
        "each on a GPU of its own (with one GPU, keep 1)",
    )
    launcher: str | None = option(
        help="the command that starts each run, before `train` and its flags (default: python -m "
        "vanilla_transformer); e.g. 'accelerate launch --config_file examples/accelerate/ddp.yaml -m "
        "vanilla_transformer' trains each run on several GPUs, one run at a time"
    )
    threshold: NonNegativeFloat | None = option(
        help="the validation score whose first update the table reports (how fast a variant learns) (default: 90%% "
        "of the base runs' best greedy validation score)"
    )

    def __post_init__(self):
        super().__post_init__()
        if self.seeds > MOST_SEEDS:
            raise ValueError(f"--seeds {self.seeds}: at most {MOST_SEEDS} runs of each variant")
        if self.variants is None:
            return
        if not self.studies():
            raise ValueError(
                f"--variants {' '.join(self.variants)}: none of them is a variant of --study {' '.join(self.study)}"
            )
        studied = {variant.key for name in self.study for variant in STUDIES[name]}
        outside = [key for key in self.variants if key not in studied]
        if outside:  # a study's variants asked for under another --study: not a run would be trained for them
            raise ValueError(f"--variants {' '.join(outside)}: not a variant of --study {' '.join(self.study)}; add "
                             "their study to --study or leave them out")  # fmt: skip

    def studies(self) -> dict[str, tuple]:
        """The --study lists, {name: variants}: each cut to its base and its --variants, a study with none of them
        left out (without --variants, each whole)."""
        if self.variants is None:
            return {name: STUDIES[name] for name in self.study}
        chosen = {name: tuple(v for v in STUDIES[name] if v.key in self.variants) for name in self.study}
        return {name: (BASE, *variants) for name, variants in chosen.items() if variants}


__all__ = ["StudyArguments", "VARIANT_KEYS"]
