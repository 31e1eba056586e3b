"""Small models trained by real fairseq, and what fairseq itself computes with them, for the tests that check the
fairseq import against fairseq (tests/test_fairseq_reference.py).

fairseq needs numpy < 2, so it lives in a virtual environment of its own (`.venv-fairseq`, which `make_env.sh` builds);
it runs only as subprocesses of that environment's Python: its command-line tools and `fairseq_side.py`. `corpus.py`
writes the parallel corpus, `recipe.py` prepares the data, trains the models and collects fairseq's outputs.
"""
