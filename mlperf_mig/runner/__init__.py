"""The multi-instance runner: one worker per MIG instance and aggregation.

    options     RunOptions: every run option, its type and range checked once
    plan        RunPlan: everything a run needs, resolved before anything runs
    worker      the child side of the worker protocol (the workers' entry point)
    supervisor  the parent side: barrier, bounded waits, crash/raise/hang/interrupt outcomes
    execute     the rounds of a run (engines, performance, accuracy) and results.json
    unified     one LoadGen for the layout, samples in shared memory, capacity-weighted dispatch
    results     InstanceRun and RunResult records, tables, aggregation labels
    stats       means, 95% intervals (Student's t) and changes with Welch intervals
    speed       engine speeds behind the plan's time estimates and the hang limit
    capacity_store  the capacity cache file (capacity.json: Server capacities, engine speeds)
    combine     run folders of several hosts combined into one result

The runner runs layouts; where their instances go is decided below it (mlperf_mig/placement/),
comparing them (repeats, sweeps, charts, reports, cached capacities) above it (mlperf_mig/study/),
and the public face (mlperf_mig/api.py, mlperf_mig/run_cli.py) sits on top. The runner imports
neither study/ nor cluster/: a cluster run's rounds are handed to it by the open session
(`execute.rounds_handed`, entered by cluster/handover.py).
"""
