"""Statistics of repeats, against values worked out by hand (t quantiles from printed tables)."""

from __future__ import annotations

import math

import pytest

from mlperf_mig.runner.stats import NOT_SIGNIFICANT, relative_change, summarize

T_975_DF2 = 4.302652729749464  # Student's t, 97.5% quantile, 2 degrees of freedom
T_975_DF4 = 2.776445105197799  # 4 degrees of freedom


def test_summary_of_three_values() -> None:
    """10, 12, 14: mean 12, std 2, interval 12 ± t(2) * 2 / sqrt(3)."""
    summary = summarize([10.0, 12.0, 14.0])
    assert summary is not None
    half = T_975_DF2 * 2 / math.sqrt(3)
    assert (summary.n, summary.mean, summary.std, summary.min, summary.max) == (3, 12.0, 2.0, 10.0, 14.0)
    assert summary.low == pytest.approx(12 - half) and summary.high == pytest.approx(12 + half)
    assert summary.text() == f"12.00 ± {half:.2f}"


def test_single_value_has_no_interval() -> None:
    """One repeat gives the value and no interval (none exists)."""
    summary = summarize([5.0])
    assert summary is not None and summary.low is None and summary.text() == "5.00"


def test_welch_change_against_hand_worked_values() -> None:
    """110,112,114 vs 100,102,104: +9.80%, difference 10 ± t(4) * sqrt(8/3), over 102."""
    change = relative_change([110.0, 112.0, 114.0], [100.0, 102.0, 104.0])
    assert change is not None
    half = T_975_DF4 * math.sqrt(8 / 3)  # Welch: equal variances and sizes give 4 degrees of freedom
    assert change.value == pytest.approx(112 / 102 - 1)
    assert change.low == pytest.approx((10 - half) / 102) and change.high == pytest.approx((10 + half) / 102)
    assert change.significant is True and NOT_SIGNIFICANT not in change.text()


def test_change_whose_interval_contains_zero_is_not_significant() -> None:
    """Overlapping noisy repeats: the interval spans zero and the text says so."""
    change = relative_change([100.0, 110.0, 95.0], [101.0, 99.0, 104.0])
    assert change is not None and change.low < 0 < change.high
    assert change.significant is False and change.text().endswith(NOT_SIGNIFICANT)


def test_single_reference_uses_the_repeated_side() -> None:
    """A single baseline value is taken as exact: the interval is the repeats' own t interval."""
    change = relative_change([10.0, 12.0, 14.0], [10.0])
    assert change is not None
    half = T_975_DF2 * 2 / math.sqrt(3)
    assert change.low == pytest.approx((2 - half) / 10) and change.high == pytest.approx((2 + half) / 10)


def test_identical_repeats_give_a_zero_width_interval() -> None:
    """No spread on either side: the interval is the change itself (as the t interval's limit)."""
    change = relative_change([2.0, 2.0], [1.0, 1.0])
    assert change is not None and change.low == change.high == pytest.approx(1.0)
    assert change.significant is True


def test_one_value_on_each_side_has_no_interval() -> None:
    """Two single runs: a change, but no interval and no verdict on significance."""
    change = relative_change([2.0], [1.0])
    assert change is not None and change.low is None and change.significant is None


def test_interval_below_minus_100_percent_is_clamped_and_marked() -> None:
    """5, 95 vs 100, 101: Welch's lower end (-619%) is impossible; it is cut at -100% and marked,
    the upper end and the verdict stay Welch's."""
    from scipy import stats

    change = relative_change([5.0, 95.0], [100.0, 101.0])
    welch = stats.ttest_ind([5.0, 95.0], [100.0, 101.0], equal_var=False).confidence_interval(0.95)
    assert welch.low / 100.5 < -1
    assert change is not None and change.clamped and change.low == -1.0
    assert change.high == pytest.approx(welch.high / 100.5) and change.significant is False
    assert change.text().startswith("-50.25% [-100.00% (clamped), +518.39%]")
    assert change.to_dict()["clamped"] is True


def test_interval_above_minus_100_percent_is_not_clamped() -> None:
    """A narrow interval of a large drop is left as Welch gives it."""
    change = relative_change([10.0, 11.0], [100.0, 101.0])
    assert change is not None and not change.clamped and change.low > -1
    assert "(clamped)" not in change.text()
