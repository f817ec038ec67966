"""Answers across many runs: repeats, sweeps, reports, Server capacity and the layout advisor.

    repeats   RepeatedRun: repeats of a layout and its isolation runs, resumable per repeat
    sweep     several layouts, the table and the stacked bar chart
    overall   the overall progress bar of a study (tqdm)
    chart     the stacked bar chart with error bars
    report_html  one self-contained HTML report
    capacity_cache  cached Server capacities, used as later Server targets
    capacity  the highest VALID Server target QPS of one profile (bracketing search, cached)
    advisor   per-profile measurements -> a prediction of every valid layout, ranked
    api       advise (exported as mlperf_mig.advise; capacity as mlperf_mig.capacity)
    cli       the advise and capacity sub-commands

study/ builds on runner/ (which runs one layout) and never imports cluster/; `capacity` and
`advise` measure through the public `run`/`sweep` of mlperf_mig/api.py, imported when called.
"""
