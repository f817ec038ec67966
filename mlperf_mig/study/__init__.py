"""Answers across many runs: repeats, sweeps, reports, Server capacity and the layout advisor.

    repeats   RepeatedRun: repeats of a layout and its isolation runs, resumable per repeat
    sweep     several layouts, the table and the stacked bar chart
    overall   the overall progress bar of a study (tqdm)
    chart     the stacked bar chart with error bars
    report_html  one self-contained HTML report
    capacity_cache  cached Server capacities, used as later Server targets
    capacity  the highest VALID Server target QPS of one profile (bracketing search, cached)
    advisor   per-profile measurements -> a prediction of every valid layout, ranked
    api       advise (public as mlperf_mig.advise; capacity as mlperf_mig.capacity)
    measure   the public run, plan and sweep, as the face hands them to a study that measures

study/ builds on runner/ (which runs one layout) and imports nothing above it; `capacity` and
`advise` measure through the public `run`/`plan`/`sweep`, which mlperf_mig/api.py hands them
(study/measure.py); their sub-commands are mlperf_mig/study_cli.py.
"""
