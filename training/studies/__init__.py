"""The studies of `vanilla-transformer ablate`: variants of a base run (variants.py), trained with several seeds
(runs.py), reported as tables (results.py) and a figure (figures.py); study.py runs a study from end to end."""
