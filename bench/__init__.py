"""The benchmark suites, run from the repository root as `python -m bench SUITE [flags]` (`python -m bench --help`
lists them; see README.md in this folder). Each suite is a folder: `suite.py` holds its flags and its run side by
side, and its other files their one part (the speed suite's `memory.py` and `report.py`, the engines suite's
`process.py`). What the suites share is in `common/`: `models.py` (the models measured),
`measure.py` (timing and FLOP counts), `memory.py` (a process's memory), `step_profile.py` (a training step's time by
group) and `report.py` (BENCHMARKS.md's sections, the recorded command and the machine)."""
