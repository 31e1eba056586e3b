"""Corpora of any size through a translator: read in windows (`reading`), each window's records translated or
scored (`jobs`), written in input order to stdout or to a resumable file (`output`), on one process or several
(`Share`), with progress on stderr (`progress`); `run.run_corpus` puts them together."""
