"""Statistics of repeats against independent computations: scipy.stats on the same values, and
values worked by hand (t quantiles from printed tables), with unequal sizes and variances."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from mlperf_mig.runner.stats import (
    MIN_REPEATS,
    NOT_SIGNIFICANT,
    ratio_interval,
    relative_change,
    summarize,
)

T_975_DF2 = 4.302652729749464  # Student's t, 97.5% quantile, 2 degrees of freedom
T_975_DF4 = 2.776445105197799  # 4 degrees of freedom
SAMPLES = {
    2: [101.0, 97.0],
    3: [10.0, 12.0, 14.0],
    10: [50.2, 49.1, 53.7, 48.8, 51.5, 50.0, 47.9, 52.3, 49.6, 51.0],
}


@pytest.mark.parametrize("n", sorted(SAMPLES))
def test_summary_equals_scipy(n: int) -> None:
    """Mean, SD (n-1) and the Student-t interval of the mean equal scipy's for n = 2, 3, 10."""
    values = SAMPLES[n]
    summary = summarize(values)
    assert summary is not None and summary.n == n
    assert summary.mean == pytest.approx(np.mean(values), rel=1e-12)
    assert summary.std == pytest.approx(np.std(values, ddof=1), rel=1e-12)
    low, high = stats.t.interval(0.95, n - 1, loc=np.mean(values), scale=stats.sem(values))
    assert (summary.low, summary.high) == (
        pytest.approx(low, rel=1e-12),
        pytest.approx(high, rel=1e-12),
    )


def test_summary_of_three_values_by_hand() -> None:
    """10, 12, 14: mean 12, std 2, interval 12 ± t(2) * 2 / sqrt(3), shown as mean ± half."""
    summary = summarize([10.0, 12.0, 14.0])
    assert summary is not None
    half = T_975_DF2 * 2 / math.sqrt(3)
    assert (summary.n, summary.mean, summary.std, summary.min, summary.max) == (
        3,
        12.0,
        2.0,
        10.0,
        14.0,
    )
    assert summary.low == pytest.approx(12 - half) and summary.high == pytest.approx(12 + half)
    assert summary.text() == f"12.00 ± {half:.2f}"
    assert summary.error_bar() == (pytest.approx(half), pytest.approx(half))


def test_two_repeats_show_their_range_not_an_interval() -> None:
    """101, 97: the t interval (99 ± 25.4) is kept as data but not shown; the text and the
    error bar are the min-max range."""
    summary = summarize([101.0, 97.0])
    # t(1) = 12.7062, s = 2.8284, half = 12.7062 * 2.8284 / sqrt(2) = 25.41
    assert summary is not None and summary.half == pytest.approx(12.706204736 * 2, rel=1e-6)
    assert not summary.shows_interval and MIN_REPEATS == 3
    assert summary.text() == "99.00 (range 97.00-101.00)"
    assert summary.error_bar() == (2.0, 2.0)


def test_single_value_has_no_interval() -> None:
    """One repeat gives the value, no interval and no error bar."""
    summary = summarize([5.0])
    assert summary is not None and summary.low is None and summary.text() == "5.00"
    assert summary.error_bar() is None


def _linearized(values: list[float]) -> list[float]:
    """log(mean) + (v - mean) / mean: values whose mean is the log of the mean and whose SD is
    the relative SD, so that Welch's interval of their means is the delta method's log ratio."""
    mean = float(np.mean(values))
    return [math.log(mean) + (v - mean) / mean for v in values]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ([110.0, 112.0, 114.0], [96.0, 98.0, 100.0, 102.0, 104.0]),  # 3 vs 5, unequal variances
        (SAMPLES[10], SAMPLES[3]),  # 10 vs 3, very unequal relative variances
        (SAMPLES[3], SAMPLES[10]),
        (SAMPLES[2], SAMPLES[3]),  # 2 vs 3
        ([5.0, 95.0], [100.0, 101.0]),  # 2 vs 2, wide: the old -619% interval
    ],
)
def test_ratio_interval_equals_scipy_welch_on_the_log_scale(a: list[float], b: list[float]) -> None:
    """The ratio's interval is exp of scipy's Welch interval (Welch-Satterthwaite df) of the
    log means' difference, computed on the linearized values."""
    welch = stats.ttest_ind(_linearized(a), _linearized(b), equal_var=False).confidence_interval(
        0.95
    )
    low, high = ratio_interval(a, b)
    assert low == pytest.approx(math.exp(welch.low), rel=1e-9)
    assert high == pytest.approx(math.exp(welch.high), rel=1e-9)


def test_ratio_interval_by_hand_with_unequal_sizes_and_variances() -> None:
    """110,112,114 (mean 112, s^2 4) over 96..104 (mean 100, s^2 10): relative variances
    4/(3*112^2) = 1.0629e-4 and 10/(5*100^2) = 2e-4, df = (3.0629e-4)^2 / (1.0629e-4^2/2 +
    2e-4^2/4) = 5.995, t = 2.4474, interval exp(log 1.12 ± 2.4474 * 0.017501) = [1.0730, 1.1690]."""
    change = relative_change([110.0, 112.0, 114.0], [96.0, 98.0, 100.0, 102.0, 104.0])
    assert change is not None and change.sizes == (3, 5)
    assert change.ratio == pytest.approx(1.12)
    assert 1 + change.low == pytest.approx(1.07304, abs=2e-5)
    assert 1 + change.high == pytest.approx(1.16901, abs=2e-5)
    assert change.text() == "x1.120 [x1.073, x1.169]" and change.significant is True


def test_equal_sizes_and_variances_give_welch_with_2n_minus_2_df() -> None:
    """110,112,114 over 100,102,104: near-equal relative variances give df close to 4; the
    interval holds 112/102 and is near exp(log(112/102) ± t(4) * se)."""
    change = relative_change([110.0, 112.0, 114.0], [100.0, 102.0, 104.0])
    assert change is not None
    se = math.sqrt(4 / (3 * 112**2) + 4 / (3 * 102**2))
    ratio = 112 / 102
    assert change.ratio == pytest.approx(ratio)
    assert 1 + change.low == pytest.approx(ratio * math.exp(-T_975_DF4 * se), rel=1e-3)
    assert 1 + change.high == pytest.approx(ratio * math.exp(T_975_DF4 * se), rel=1e-3)
    assert NOT_SIGNIFICANT not in change.text()


def test_change_whose_interval_contains_one_is_not_significant() -> None:
    """Overlapping noisy repeats: the ratio's interval spans x1 and the text says so."""
    change = relative_change([100.0, 110.0, 95.0], [101.0, 99.0, 104.0])
    assert change is not None and change.low < 0 < change.high
    assert change.significant is False and change.text().endswith(NOT_SIGNIFICANT)


def test_a_wide_interval_stays_above_minus_100_percent() -> None:
    """5, 95 vs 100, 101 (Welch on the difference reached -619%): the log-scale interval stays
    above zero; with 2 repeats it is not shown, the range x0.050-x0.950 is, with no verdict."""
    change = relative_change([5.0, 95.0], [100.0, 101.0])
    assert change is not None and change.low > -1.0 and change.high > change.low
    assert not change.shows_interval and change.significant is None
    assert change.range_low == pytest.approx(5 / 101 - 1) and change.range_high == pytest.approx(
        95 / 100 - 1
    )
    assert change.text() == "x0.498 (range x0.050-x0.950)"


def test_three_repeats_of_a_large_drop_never_pass_minus_100_percent() -> None:
    """A drop to a tenth with a wide spread: the interval's lower end is above x0."""
    change = relative_change([2.0, 10.0, 18.0], [100.0, 101.0, 99.0])
    assert change is not None and change.shows_interval
    assert 0 < 1 + change.low < change.ratio < 1 + change.high


def test_single_reference_uses_the_repeated_side() -> None:
    """A single baseline value is taken as exact: the log-scale interval of the repeated side
    alone, exp(log 1.2 ± t(2) * (2/sqrt 3)/12)."""
    change = relative_change([10.0, 12.0, 14.0], [10.0])
    assert change is not None and change.shows_interval
    se = 2 / math.sqrt(3) / 12
    assert 1 + change.low == pytest.approx(1.2 * math.exp(-T_975_DF2 * se))
    assert 1 + change.high == pytest.approx(1.2 * math.exp(T_975_DF2 * se))


def test_two_repeats_against_a_single_value_show_the_range() -> None:
    """2 repeats against one value: no interval shown, the range of the ratio instead."""
    change = relative_change([10.0, 12.0], [10.0])
    assert change is not None and not change.shows_interval
    assert change.text() == "x1.100 (range x1.000-x1.200)"


def test_identical_repeats_give_a_zero_width_interval() -> None:
    """No spread on either side: the interval is the ratio itself."""
    change = relative_change([2.0, 2.0, 2.0], [1.0, 1.0, 1.0])
    assert change is not None and change.low == change.high == pytest.approx(1.0)
    assert change.significant is True


def test_one_value_on_each_side_has_no_interval() -> None:
    """Two single runs: a ratio, but no interval, no range and no verdict on significance."""
    change = relative_change([2.0], [1.0])
    assert change is not None and change.low is None and change.significant is None
    assert change.text() == "x2.000"


def test_a_zero_total_has_a_ratio_but_no_interval() -> None:
    """A layout that produced nothing is x0.000: no log-scale interval exists."""
    change = relative_change([0.0, 0.0, 0.0], [10.0, 11.0, 12.0])
    assert change is not None and change.ratio == 0.0 and change.low is None


def test_change_to_dict_says_whether_the_interval_is_shown() -> None:
    """results carry the ratio, its sizes and whether the interval is shown."""
    data = relative_change([5.0, 95.0], [100.0, 101.0]).to_dict()
    assert data["interval_shown"] is False and data["significant"] is None
    assert data["sizes"] == [2, 2] and data["ratio"] == pytest.approx(50 / 100.5)
