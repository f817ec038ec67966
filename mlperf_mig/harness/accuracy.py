"""Accuracy from mlperf_log_accuracy.json, computed in our code as MLCommons' reference scripts
compute it (the workload scores: ImageNet top-1 as accuracy-imagenet.py, SQuAD F1 / EM as
accuracy-squad.py), with the verdict and what it rests on."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from mlperf_mig.harness.logs import read_accuracy_log
from mlperf_mig.harness.result import AccuracyReport
from mlperf_mig.workloads.samples import SampleSource
from mlperf_mig.workloads.workload import Workload

logger = logging.getLogger(__name__)

SYNTHETIC_WEIGHTS_NOTE = (
    "synthetic weights: the model is not trained, so accuracy is not meaningful"
)


def first_answers(entries: Sequence[tuple[int, bytes]]) -> dict[int, bytes]:
    """Each logged sample's first answer, by sample index: LoadGen may log a sample more than
    once (an audit, a padded last query), and the reference scripts count each sample once,
    by its first record."""
    answers: dict[int, bytes] = {}
    for index, data in entries:
        answers.setdefault(index, data)
    return answers


def not_scored(benchmark: Workload, error: str) -> AccuracyReport:
    """The report of an accuracy run that failed: its log holds samples completed without data,
    so a value computed from it would say nothing about the model."""
    return AccuracyReport(
        metric=benchmark.accuracy_metric, value=None, target=benchmark.accuracy_target,
        meaningful=False, passed=None, sample_count=0, note=f"not scored: the run failed ({error})",
    )  # fmt: skip


def score(
    benchmark: Workload,
    source: SampleSource,
    log_dir: str | os.PathLike[str],
    *,
    weights_synthetic: bool,
) -> AccuracyReport:
    """The benchmark's accuracy metric over the logged samples, with its verdict.

    With synthetic data there is no ground truth (value None); with synthetic weights the value
    is computed but not meaningful. Either way `passed` is None and `note` says why.
    """
    return score_entries(
        benchmark, source, read_accuracy_log(log_dir), weights_synthetic=weights_synthetic
    )


def score_entries(
    benchmark: Workload,
    source: SampleSource,
    logged: Sequence[tuple[int, bytes]],
    *,
    weights_synthetic: bool,
) -> AccuracyReport:
    """`score` of the (sample index, payload) records given: each sample's first answer counts."""
    entries = first_answers(logged)
    metric, target = benchmark.accuracy_metric, benchmark.accuracy_target
    if source.synthetic:
        note = "synthetic data: there is no ground truth, so accuracy is not meaningful"
        return AccuracyReport(
            metric=metric, value=None, target=target, meaningful=False, passed=None,
            sample_count=len(entries), note=note,
        )  # fmt: skip
    scored = benchmark.score(source, entries)
    value, count, extra = scored.value, scored.count, dict(scored.extra)
    meaningful = not weights_synthetic
    return AccuracyReport(
        metric=metric,
        value=value,
        target=target,
        meaningful=meaningful,
        passed=benchmark.accuracy_passes(value, extra) if meaningful else None,
        sample_count=count,
        extra=extra,
        note="" if meaningful else SYNTHETIC_WEIGHTS_NOTE,
    )
