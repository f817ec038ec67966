"""Emulated MIG slices on the CPU: the CPU time each emulated instance may use, and how it is kept.

cpu_budget  CPU time in proportion to compute slices (whole CPUs, a cgroup quota or a duty
            cycle), carried to the worker in its environment and entered there

It sits just above the registry and below every pillar that runs a slice (the engines' ONNX
Runtime backend reads the budget's thread count, the harness enters the budget, placement sizes
the budgets, the runner and the cluster's actors carry them), and imports nothing of the library.
"""
