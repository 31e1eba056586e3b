"""The study switches of `vanilla-transformer train`: the flags that take the architecture apart, one paper claim at
a time, for the studies of `vanilla-transformer ablate` (Table 3's smaller d_k, and the lessons). Every one is the
paper's unless given. The flags are made from the configuration's one declaration of the switches (`SWITCHES`): a
field, its paper value, the value that takes the part out, what it is and what that value leaves. A switch with a field
of its own gets a flag here (`--no-residual`, `--d-k N`); the others are a value of a model option's flag
(`--norm-position none`)."""

import dataclasses

from ...configuration.configuration_vanilla_transformer import SWITCHES, StudySwitch
from .argument_types import ArgumentsError, Checked, PositiveInt, flag_name, option, option_flag


def switch_flag(name: str, switch: StudySwitch) -> str:
    """The `train` flag that takes a switch's part out: `--d-k N`, `--no-residual`, `--norm-position none`."""
    if switch.off is None:
        return f"{flag_name(name)} N"
    return option_flag(name, switch.off)


def switch_field(name: str, switch: StudySwitch) -> tuple:
    """The `train` option of a switch with a field of its own: `--d-k N` for the key size, `--no-NAME` for the
    others."""
    if switch.paper is None:
        return name, PositiveInt | None, option(help=f"{switch.what}; a size: {switch.otherwise}")
    return name, bool, option(switch.paper, help=f"{switch.what}; {switch_flag(name, switch)}: {switch.otherwise}")


class SwitchGroup(Checked):
    _argument_group_name = "study switches (for `ablate`'s studies; each the paper's unless given)"

    def changed(self) -> dict:
        """The switches given, by their configuration field's name, with their values: what a new model differs in."""
        return {
            item.name: getattr(self, item.name)
            for item in dataclasses.fields(self)
            if getattr(self, item.name) != SWITCHES[item.name].paper
        }


SwitchArguments = dataclasses.make_dataclass(
    "SwitchArguments",
    [switch_field(name, switch) for name, switch in SWITCHES.items() if switch.own_field],
    bases=(SwitchGroup,),
    frozen=True,
    namespace={"__module__": __name__},
)
SwitchArguments.__doc__ = "The study switches with fields of their own as `train` flags (`SWITCHES`)."


def switch_table() -> str:
    """The manual's table of the study switches (docs/studies.md): each field, its flag, what it is and what the
    flag leaves."""
    rows = ["| switch | flag | the paper's | what it leaves |", "|---|---|---|---|"]
    for name, switch in SWITCHES.items():
        field = f"`{name}`" if switch.off is None else f"`{name}={switch.off!r}`".replace("'", '"')
        rows.append(f"| {field} | `{switch_flag(name, switch)}` | {switch.what} | {switch.otherwise} |")
    return "\n".join(rows) + "\n"


def check_switches(switches, init_from: str | None) -> None:
    """A study switch builds a new model: it cannot change the one --init-from loads."""
    changed = switches.changed()
    if changed and init_from:
        flags = ", ".join(option_flag(name, value) for name, value in changed.items())
        raise ArgumentsError(f"{flags}: the study switches build a new model; --init-from loads one as it was saved")


__all__ = ["SwitchArguments", "check_switches", "switch_flag", "switch_table"]
