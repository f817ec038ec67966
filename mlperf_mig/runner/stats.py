"""Statistics of repeated measurements: mean, spread, 95% confidence intervals and ratios.

A layout run N times gives N totals; `summarize` turns them into a `Summary` (mean, sample
standard deviation, min, max and the 95% interval of the mean from Student's t with N-1 degrees
of freedom; the t quantiles come from scipy.stats).

A change between two layouts (`relative_change`) is the ratio of their means (x1.06 = 6% more).
Its 95% interval is computed on the log scale: log(mean_a / mean_b) +- t(df) x se, where
se^2 = s_a^2 / (n_a mean_a^2) + s_b^2 / (n_b mean_b^2) (the delta method: the relative standard
error of each mean) and df is Welch-Satterthwaite's for those two terms; the ends are then taken
back with exp. An interval of a ratio therefore stays above zero: a change can never read below
-100%, however few the repeats. A side with a single value is taken as exact (its term is 0).

Below MIN_REPEATS (3) repeats on a side with spread, no interval is shown: with 2 values
Student's t is 12.71 and the interval is many times wider than the two values' range, which
says more about the quantile than the measurement. Tables then show the range of the values
(min-max; for a ratio min_a/max_b to max_a/min_b) and say why, and no change is called
significant or not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs

CONFIDENCE = 0.95
MIN_REPEATS = 3  # fewer values (on a side with spread) get a min-max range, not an interval
NOT_SIGNIFICANT = "not significant"
FEW_REPEATS_NOTE = (
    f"with fewer than {MIN_REPEATS} repeats no 95% interval is shown (with 2, Student's t is "
    "12.71 and the interval is many times wider than the values' range): 'range' is the min-max "
    "of the repeats instead (for a ratio: lowest over highest to highest over lowest), and no "
    f"change is called significant; run {MIN_REPEATS} or more repeats for intervals"
)
CHANGE_NOTE = (
    "changes are ratios of means (x1.060 = 6% more, x0.500 = half), with the 95% interval "
    "computed on the log scale (Welch-Satterthwaite degrees of freedom), so it stays above zero; "
    "'not significant' when the interval contains x1.000"
)


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

    @property
    def shows_interval(self) -> bool:
        """Whether tables and charts show the interval (MIN_REPEATS values or more)."""
        return self.half is not None and self.n >= MIN_REPEATS

    def error_bar(self) -> tuple[float, float] | None:
        """(below, above) the mean of the bar a chart draws: the interval's half on each side,
        or the min-max range below MIN_REPEATS values; None with a single value."""
        if self.shows_interval:
            assert self.half is not None
            return self.half, self.half
        if self.n >= 2:
            return self.mean - self.min, self.max - self.mean
        return None

    def text(self, digits: int = 2) -> str:
        """`1,234.56 ± 12.34`, `1,234.56 (range 1,200.00-1,269.12)` below MIN_REPEATS values, or
        the mean alone with one value."""
        mean = f"{self.mean:,.{digits}f}"
        if self.shows_interval:
            return f"{mean} ± {self.half:,.{digits}f}"
        if self.n >= 2:
            return f"{mean} (range {self.min:,.{digits}f}-{self.max:,.{digits}f})"
        return mean

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
        n=n,
        mean=mean,
        std=std,
        min=min(numbers),
        max=max(numbers),
        low=mean - half,
        high=mean + half,
    )


@attrs.frozen(kw_only=True)
class Change:
    """The change of a quantity against a reference as a ratio of means, kept as `value` =
    ratio - 1 (0.05 = +5%), with the 95% interval of the ratio from the log scale (`low`,
    `high`, also as ratio - 1) and the ratio's min-max range (`range_low`, `range_high`).

    `sizes` are the numbers of values on each side; the interval is shown (and the change
    called significant or not) only when every side with spread has MIN_REPEATS or more."""

    value: float
    low: float | None
    high: float | None
    range_low: float | None = None
    range_high: float | None = None
    sizes: tuple[int, int] = (0, 0)  # made only by relative_change, always as a pair

    @property
    def ratio(self) -> float:
        return 1.0 + self.value

    @property
    def shows_interval(self) -> bool:
        repeated = [n for n in self.sizes if n >= 2]
        return (
            self.low is not None
            and self.high is not None
            and min(repeated, default=0) >= MIN_REPEATS
        )

    @property
    def significant(self) -> bool | None:
        """False when the shown interval contains x1 (no change); None when none is shown."""
        if not self.shows_interval:
            return None
        assert self.low is not None and self.high is not None
        return not self.low <= 0.0 <= self.high

    def text(self) -> str:
        """`x1.058 [x1.012, x1.103]`, with "not significant" when the interval contains x1;
        `x1.058 (range x0.981-x1.120)` below MIN_REPEATS; `x1.058` between single values."""
        ratio = f"x{self.ratio:.3f}"
        if self.shows_interval:
            assert self.low is not None and self.high is not None
            marked = f" {NOT_SIGNIFICANT}" if self.significant is False else ""
            return f"{ratio} [x{1 + self.low:.3f}, x{1 + self.high:.3f}]{marked}"
        if self.range_low is not None and self.range_high is not None and max(self.sizes) >= 2:
            return f"{ratio} (range x{1 + self.range_low:.3f}-x{1 + self.range_high:.3f})"
        return ratio

    def to_dict(self) -> dict[str, Any]:
        return {
            **attrs.asdict(self),
            "sizes": list(self.sizes),
            "ratio": self.ratio,
            "interval_shown": self.shows_interval,
            "significant": self.significant,
        }


def _relative_variance(values: Sequence[float], mean: float) -> float:
    """The squared relative standard error of the mean of `values` (0 for a single value)."""
    n = len(values)
    if n < 2:
        return 0.0
    variance = sum((v - mean) ** 2 for v in values) / (n - 1)
    return variance / (n * mean * mean)


def ratio_interval(
    values: Sequence[float], reference: Sequence[float]
) -> tuple[float, float] | None:
    """The 95% interval of mean(values) / mean(reference) on the log scale (see the module's
    text); None without spread on either side, or where a mean is not above zero."""
    from scipy import stats

    a, b = list(values), list(reference)
    mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
    if mean_a <= 0 or mean_b <= 0:
        return None
    terms = [
        (_relative_variance(side, mean), len(side)) for side, mean in ((a, mean_a), (b, mean_b))
    ]
    se2 = sum(v for v, _ in terms)
    log_ratio = math.log(mean_a / mean_b)
    if se2 == 0:
        if max(len(a), len(b)) < 2:
            return None
        return mean_a / mean_b, mean_a / mean_b  # no spread on either side: zero width
    df = se2 * se2 / sum(v * v / (n - 1) for v, n in terms if v > 0)
    half = float(stats.t.ppf((1 + CONFIDENCE) / 2, df)) * math.sqrt(se2)
    return math.exp(log_ratio - half), math.exp(log_ratio + half)


def relative_change(values: Sequence[float], reference: Sequence[float]) -> Change | None:
    """mean(values) / mean(reference) - 1, with the ratio's 95% interval from the log scale
    (Welch-Satterthwaite), and its min-max range. With a single value on one side, that side is
    taken as exact; with one on both, no interval; with no spread on either side, a zero-width
    one. None when either side is empty or the reference mean is zero."""
    a = [float(v) for v in values if v is not None]
    b = [float(v) for v in reference if v is not None]
    if not a or not b:
        return None
    mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
    if mean_b == 0:
        return None
    value = mean_a / mean_b - 1.0
    interval = ratio_interval(a, b)
    low = high = None
    if interval is not None and _finite(interval[0]) and _finite(interval[1]):
        low, high = interval[0] - 1.0, interval[1] - 1.0
    range_low = range_high = None
    if min(b) > 0 and min(a) >= 0:
        range_low, range_high = min(a) / max(b) - 1.0, max(a) / min(b) - 1.0
    return Change(
        value=value, low=low, high=high, range_low=range_low, range_high=range_high,
        sizes=(len(a), len(b)),
    )  # fmt: skip
