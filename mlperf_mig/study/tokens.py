"""What the studies read of a generative workload's runs: tokens/s, TTFT and TPOT.

A run of a workload that generates tokens (llama3.1-8b) carries `InstanceResult.tokens`
(harness/result.py): tokens/s (Offline: generated; the other scenarios: completed) and the p99
time to first token (TTFT) and time per output token (TPOT). The advisor ranks such layouts by
tokens/s, and the repeats, sweep and HTML tables show these figures next to the samples/s ones.
Each value comes from the runs' own results.json through runner/results.py (`token_cells`, and
`RunResult.tokens_per_second` for a layout's total), so a table cannot disagree with the runs it
summarises.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlperf_mig.runner.results import TOKEN_COLUMNS, token_cells

if TYPE_CHECKING:
    from mlperf_mig.runner.results import InstanceRun, RunResult

TOKENS_PER_S = "tokens/s"
TOKENS_PER_J = "tokens/J"
# the p99 latencies of a token stream, as the tables name them
TOKEN_LATENCIES = ("TTFT p99 ms", "TPOT p99 ms")


def generates_tokens(run: RunResult) -> bool:
    """Whether `run` measured tokens (a generative workload): its results carry token figures."""
    results = [i.performance for i in run.instances] + [run.layout_result]
    return any(r is not None and r.tokens is not None for r in results)


def instance_tokens_per_s(run: RunResult, instance: InstanceRun) -> float | None:
    """An instance's tokens/s: its own LoadGen's (independent), or its share of the unified
    LoadGen's tokens/s by the samples it served."""
    own = instance.performance
    if own is not None and own.tokens is not None:
        return own.tokens.tokens_per_second
    layout = run.layout_result
    if (
        layout is None
        or layout.tokens is None
        or layout.tokens.tokens_per_second is None
        or not layout.throughput
        or instance.throughput is None
    ):
        return None
    return instance.throughput * layout.tokens.tokens_per_second / layout.throughput


def gpu_tokens_per_s(run: RunResult, position: int) -> float | None:
    """The tokens/s of the run's `position`-th GPU (`RunGpu.tokens_per_second`: the sum of its
    instances' own, or its share of the unified LoadGen's by the samples its instances served);
    None without tokens, or where one of its instances measured none."""
    rows = run.gpu_rows()
    return rows[position].tokens_per_second if position < len(rows) else None


def instance_token_cells(run: RunResult, index: int) -> dict[str, float | None]:
    """Instance `index`'s tokens/s, p90 (SingleStream), TTFT and TPOT p99 (ms); {} for a run
    without tokens or without that instance."""
    if index >= len(run.instances):
        return {}
    return token_cells(run.instances[index].performance)


def worst_token_p99s(run: RunResult) -> dict[str, float | None]:
    """The highest TTFT and TPOT p99 (ms) of the layout: the unified LoadGen's, or the worst
    instance's (what a layout is held to); {} for a run without tokens."""
    if not generates_tokens(run):
        return {}
    cells = (
        [token_cells(run.layout_result)]
        if run.layout_result is not None and run.layout_result.tokens is not None
        else [token_cells(i.performance) for i in run.instances]
    )
    worst: dict[str, float | None] = {}
    for column in TOKEN_LATENCIES:
        values = [c.get(column) for c in cells]
        known = [v for v in values if v is not None]
        worst[column] = max(known) if known else None
    return worst


def run_token_values(run: RunResult) -> dict[str, Any]:
    """A run's row in tables of several layouts: tokens/s, the worst TTFT and TPOT p99 and
    tokens/J; {} for a run without tokens."""
    if not generates_tokens(run):
        return {}
    return {
        TOKENS_PER_S: run.tokens_per_second,
        **worst_token_p99s(run),
        TOKENS_PER_J: run.tokens_per_joule,
    }


def token_columns(rows: list[dict[str, Any]]) -> list[str]:
    """The token columns (runner/results.py's order) that a cell of `rows` fills."""
    return [c for c in TOKEN_COLUMNS if any(r.get(c) is not None for r in rows)]
