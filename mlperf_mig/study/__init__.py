"""Answers across many runs: the layout advisor (advisor.py) and its API and CLI.

    advisor  per-profile measurements -> a prediction of every valid layout, ranked
    api      advise (exported as mlperf_mig.advise)
    cli      the advise sub-command
"""
