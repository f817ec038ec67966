"""Accuracy from mlperf_log_accuracy.json, computed in our code: ImageNet top-1, SQuAD F1 / EM."""

from __future__ import annotations

import logging
import os

import numpy as np

from mlperf_mig.benchmark import SEQ_LEN, Benchmark
from mlperf_mig.harness.logs import read_accuracy_log
from mlperf_mig.harness.result import AccuracyReport
from mlperf_mig.harness.samples import SampleSource

logger = logging.getLogger(__name__)

SYNTHETIC_WEIGHTS_NOTE = "synthetic weights: the model is not trained, so accuracy is not meaningful"


def not_scored(benchmark: Benchmark, error: str) -> AccuracyReport:
    """The report of an accuracy run that failed: its log holds samples completed without data,
    so a value computed from it would say nothing about the model."""
    return AccuracyReport(
        metric=benchmark.accuracy_metric, value=None, target=benchmark.accuracy_target,
        meaningful=False, passed=None, sample_count=0, note=f"not scored: the run failed ({error})",
    )  # fmt: skip


def score(
    benchmark: Benchmark,
    source: SampleSource,
    log_dir: str | os.PathLike[str],
    *,
    weights_synthetic: bool,
) -> AccuracyReport:
    """The benchmark's accuracy metric over the logged samples, with its verdict.

    With synthetic data there is no ground truth (value None); with synthetic weights the value
    is computed but not meaningful. Either way `passed` is None and `note` says why.
    """
    entries = read_accuracy_log(log_dir)
    metric, target = benchmark.accuracy_metric, benchmark.accuracy_target
    if source.synthetic:
        note = "synthetic data: there is no ground truth, so accuracy is not meaningful"
        return AccuracyReport(
            metric=metric, value=None, target=target, meaningful=False, passed=None,
            sample_count=len(entries), note=note,
        )  # fmt: skip
    if benchmark.name == "bert":
        logits = {
            index: np.frombuffer(data, dtype=np.float32).reshape(SEQ_LEN, 2)
            for index, data in entries
        }
        f1, em, questions = source.score(logits)
        value, extra, count = f1, {"exact_match": em, "features": float(len(entries))}, questions
    else:
        predicted = np.array([np.frombuffer(data, dtype=np.int32)[0] for _, data in entries])
        labels = source.labels[np.array([index for index, _ in entries], dtype=np.int64)]
        value = 100.0 * float(np.mean(predicted == labels)) if len(entries) else 0.0
        extra, count = {}, len(entries)
    meaningful = not weights_synthetic
    return AccuracyReport(
        metric=metric,
        value=value,
        target=target,
        meaningful=meaningful,
        passed=value >= target if meaningful else None,
        sample_count=count,
        extra=extra,
        note="" if meaningful else SYNTHETIC_WEIGHTS_NOTE,
    )
