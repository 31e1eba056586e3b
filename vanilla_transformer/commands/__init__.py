"""The commands of `vanilla-transformer`, one module each: its parser (`<name>_command_parser`, which registers the
command's subparser and sets `func` to its handler) beside its handler (`<name>_command`). `vanilla_transformer.cli`
registers them and runs the chosen one.

A handler turns its parsed flags into calls of the library, and every failure it expects into a `CommandError`
naming the flag (`failures.reported_as`); `cli.main` reports it. Train, evaluate and plot run the training stack,
which their handlers import when they run. Importing this package imports none of its commands."""
