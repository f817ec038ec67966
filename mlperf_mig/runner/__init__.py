"""The multi-instance runner: one worker per MIG instance, aggregation, sweeps.

    options     RunOptions: every run option, its type and range checked once
    placement   where instances run: live MIG devices, a shared GPU, or emulated CPU partitions
    plan        RunPlan: everything a run needs, resolved before anything runs
    worker      the child side of the worker protocol (the workers' entry point)
    supervisor  the parent side: barrier, bounded waits, crash/raise/hang/interrupt outcomes
    execute     the rounds of a run (engines, performance, accuracy) and results.json
    unified     one LoadGen for the layout, samples in shared memory, capacity-weighted dispatch
    results     InstanceRun and RunResult records, tables, aggregation labels
    sweep       several layouts, the table and the stacked bar chart
    stats       means, 95% intervals (Student's t) and changes with Welch intervals
    repeats     RepeatedRun: repeats of a layout and its isolation runs, resumable per repeat
    overall     the overall progress bar of a study (tqdm)
    chart       the stacked bar chart with error bars
    report_html one self-contained HTML report
    capacity_cache  cached Server capacities, used as later Server targets
    combine     run folders of several hosts combined into one result
    api         run, plan, sweep, aggregate (exported as mlperf_mig.*)
    cli         run, plan, sweep, report, aggregate sub-commands
"""
