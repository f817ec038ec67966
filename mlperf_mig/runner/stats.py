"""Statistics of repeated measurements: mean, spread and 95% confidence intervals.

A layout run N times gives N totals; `summarize` turns them into a `Summary` (mean, sample
standard deviation, min, max and the 95% interval of the mean from Student's t with N-1 degrees
of freedom). A change between two layouts (`relative_change`) is the difference of their means
over the reference mean, with the interval of the difference from Welch's t-test (unequal
variances, Welch-Satterthwaite degrees of freedom) divided by the reference mean, which is taken
as fixed. A change whose interval contains zero is not significant. The t quantiles and Welch's
interval come from scipy.stats, not from our own code.

Throughputs and latencies are never below zero, so no change is below -100%. With few repeats
and a wide spread, Welch's interval can still reach below -100% (two repeats: t = 12.7); its
lower end is then cut at -100% and the change marked `clamped`. Cutting an interval to the
values the quantity can take keeps its coverage (the true change always lies above -100%), so
the upper end and the verdict on significance stay Welch's; an interval on the ratio (Fieller's)
would not help, since it too reaches below zero, or is unbounded, exactly when n is that small.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs

CONFIDENCE = 0.95
NOT_SIGNIFICANT = "not significant"
CLAMPED = "(clamped)"
CLAMPED_NOTE = (
    "an interval whose lower end reads '-100.00% (clamped)' reached below -100%: wider than the "
    "change can be (too few repeats for their spread); it is cut at -100%, where the quantity "
    "would be zero, which keeps its 95% coverage: run more repeats for a narrower one"
)
FLOOR = -1.0  # no throughput or latency falls below zero


def _finite(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


@attrs.frozen(kw_only=True)
class Summary:
    """N repeated values of one quantity: mean, std (N-1), min, max and the 95% interval of the
    mean (None with a single value, where no interval exists)."""

    n: int
    mean: float
    std: float | None
    min: float
    max: float
    low: float | None
    high: float | None

    @property
    def half(self) -> float | None:
        """Half the width of the interval: the `±` of `mean ± half`."""
        return None if self.low is None or self.high is None else (self.high - self.low) / 2

    def text(self, digits: int = 2) -> str:
        """`1,234.56 ± 12.34` (or the mean alone with one value)."""
        half = self.half
        mean = f"{self.mean:,.{digits}f}"
        return mean if half is None else f"{mean} ± {half:,.{digits}f}"

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Summary:
        return cls(**data)


def summarize(values: Sequence[float]) -> Summary | None:
    """The Summary of `values` (None when there are none)."""
    from scipy import stats

    numbers = [float(v) for v in values if v is not None]
    if not numbers:
        return None
    n = len(numbers)
    mean = sum(numbers) / n
    if n == 1:
        return Summary(n=1, mean=mean, std=None, min=mean, max=mean, low=None, high=None)
    std = math.sqrt(sum((v - mean) ** 2 for v in numbers) / (n - 1))
    half = float(stats.t.ppf((1 + CONFIDENCE) / 2, n - 1)) * std / math.sqrt(n)
    return Summary(
        n=n, mean=mean, std=std, min=min(numbers), max=max(numbers), low=mean - half, high=mean + half
    )


@attrs.frozen(kw_only=True)
class Change:
    """The relative change of a quantity against a reference (0.05 = +5%), with its 95% interval
    when both sides were repeated (or one side was repeated and the other is a single value)."""

    value: float
    low: float | None
    high: float | None
    clamped: bool = False  # Welch's lower end was below -100% and was cut there

    @property
    def significant(self) -> bool | None:
        """False when the interval contains zero; None without an interval."""
        if self.low is None or self.high is None:
            return None
        return not self.low <= 0.0 <= self.high

    def text(self) -> str:
        """`+5.77% [+1.20%, +10.34%]`, with "not significant" when the interval contains zero."""
        if self.low is None or self.high is None:
            return f"{self.value:+.2%}"
        marked = f" {NOT_SIGNIFICANT}" if self.significant is False else ""
        low = f"{self.low:+.2%} {CLAMPED}" if self.clamped else f"{self.low:+.2%}"
        return f"{self.value:+.2%} [{low}, {self.high:+.2%}]{marked}"

    def to_dict(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "significant": self.significant}


def relative_change(values: Sequence[float], reference: Sequence[float]) -> Change | None:
    """(mean(values) - mean(reference)) / mean(reference), with the interval of the difference
    of the means (Welch) over the reference mean. With a single value on one side the other
    side's t interval is used (the single value taken as exact); with one on both, no interval;
    with no spread on either side, a zero-width one."""
    from scipy import stats

    a = [float(v) for v in values if v is not None]
    b = [float(v) for v in reference if v is not None]
    if not a or not b:
        return None
    mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
    if mean_b == 0:
        return None
    value = mean_a / mean_b - 1.0
    low = high = None
    if len(a) >= 2 and len(b) >= 2 and len(set(a)) == len(set(b)) == 1:
        low = high = mean_a - mean_b  # no spread on either side: a zero-width interval
    elif len(a) >= 2 and len(b) >= 2:
        interval = stats.ttest_ind(a, b, equal_var=False).confidence_interval(CONFIDENCE)
        low, high = float(interval.low), float(interval.high)
    elif len(a) >= 2 or len(b) >= 2:
        spread = summarize(a if len(a) >= 2 else b)
        assert spread is not None and spread.half is not None
        low, high = mean_a - mean_b - spread.half, mean_a - mean_b + spread.half
    if low is None or high is None or not (_finite(low) and _finite(high)):
        return Change(value=value, low=None, high=None)
    low, high = low / mean_b, high / mean_b
    if low < FLOOR:
        return Change(value=value, low=FLOOR, high=max(high, FLOOR), clamped=True)
    return Change(value=value, low=low, high=high)
