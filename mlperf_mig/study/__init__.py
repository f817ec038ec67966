"""Answers across many runs: Server capacity and the layout advisor.

    capacity  the highest VALID Server target QPS of one profile (bracketing search, cached)
    advisor   per-profile measurements -> a prediction of every valid layout, ranked
    api       advise (exported as mlperf_mig.advise; capacity as mlperf_mig.capacity)
    cli       the advise and capacity sub-commands
"""
