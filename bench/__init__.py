"""The benchmark suites, run from the repository root as `python -m bench SUITE [flags]` (`python -m bench --help`
lists them; see README.md in this folder). Each suite is a module of this package with its flags and its run side
by side; what they share is in `models.py` (the models measured), `measure.py` (timing and FLOP counts), `memory.py`
(a process's memory) and `report.py` (BENCHMARKS.md's sections, the recorded command and the machine)."""
