"""The benchmark scripts, run as `python bench/bench.py` and so on (see README.md in this folder); a package so that
the tests can import them as `bench.<script>`. Their shared code is in `common.py`."""
