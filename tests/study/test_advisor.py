"""The layout advisor on synthetic per-profile rates whose best layouts are known."""

from __future__ import annotations

import attrs
import pytest

from mlperf_mig import registry
from mlperf_mig.api import advise
from mlperf_mig.errors import SettingsError, UnknownProfileError
from mlperf_mig.study.advisor import (
    Constraints,
    Measurements,
    ProfileMeasure,
    advise_from,
    check_constraints,
)

GPU = "A100-SXM4-80GB"
# samples/s alone, by profile: 7g is worse than any split, 1g the best per slice
ALONE = {"7g.80gb": 400.0, "4g.40gb": 260.0, "3g.40gb": 200.0, "2g.20gb": 150.0, "1g.10gb": 100.0}


def _measurements(
    alone: dict[str, float], in_layout: dict[str, float] | None = None
) -> Measurements:
    profiles = {
        name: ProfileMeasure(
            profile=name,
            alone=(rate * 0.99, rate, rate * 1.01),
            in_layout=() if in_layout is None or name not in in_layout else (in_layout[name],) * 3,
            p99_alone=(10.0,),
            p99_in_layout=(),
        )
        for name, rate in alone.items()
    }
    return Measurements(
        gpu=GPU,
        benchmark="resnet50",
        loadgen_scenario="Offline",
        unit="samples/s",
        emulated=False,
        profiles=profiles,
    )


@pytest.fixture(name="gpu")
def fixture_gpu() -> registry.Gpu:
    return registry.default_catalog().get(GPU)


def test_every_valid_layout_is_considered(gpu: registry.Gpu) -> None:
    """The advisor's count of layouts is the registry's count of valid layouts of the GPU."""
    advice = advise_from(_measurements(ALONE))
    assert advice.considered == len(registry.valid_layouts(gpu))
    assert advice.predicted + len(advice.skipped) == advice.considered


def test_known_best_layout_ranks_first() -> None:
    """With 1g the best per slice, seven of them (700) beat every other layout."""
    advice = advise_from(_measurements(ALONE))
    assert advice.winner.layout == "7x1g.10gb" and advice.winner.total == pytest.approx(700.0)
    assert "1g.10gb" in advice.mig_parted and advice.placements[0].startswith("1g.10gb@")


def test_rates_inside_full_layouts_win_over_alone() -> None:
    """A 1g that slows to 5/s among neighbours makes 3g+2x2g (500) the best layout."""
    advice = advise_from(_measurements(ALONE, in_layout={"1g.10gb": 5.0}))
    assert advice.winner.layout == "3g.40gb+2x2g.20gb" and advice.winner.total == pytest.approx(
        500.0
    )
    assert any("1g.10gb: in layout" in s for p in advice.ranking for s in p.sources)


def test_profiles_allowed_constrains_the_ranking(gpu: registry.Gpu) -> None:
    """Only 3g allowed: two of them (400) is the answer."""
    constraints = check_constraints(gpu, profiles_allowed="3g.40gb")
    advice = advise_from(_measurements(ALONE), constraints=constraints)
    assert advice.winner.layout == "2x3g.40gb" and advice.winner.total == pytest.approx(400.0)


def test_unmeasured_profile_is_inferred_by_compute_slices() -> None:
    """1g.20gb was never measured: it is predicted as 1g.10gb, and says so."""
    advice = advise_from(_measurements(ALONE))
    inferred = [p for p in advice.ranking if "1g.20gb" in p.layout]
    assert inferred and all(any("1g.20gb: as 1g.10gb" in s for s in p.sources) for p in inferred)


def test_constraints_nothing_meets_are_one_line() -> None:
    """At least eight instances on a GPU that holds seven: one line naming the constraint."""
    with pytest.raises(SettingsError, match=r"no valid layout .*min_instances=8") as caught:
        advise_from(_measurements(ALONE), constraints=Constraints(min_instances=8))
    assert "\n" not in str(caught.value)


def test_constraint_on_unknown_profile_is_refused(gpu: registry.Gpu) -> None:
    """A profile the GPU does not have is refused, naming the known ones."""
    with pytest.raises(UnknownProfileError, match=r"5g\.50gb"):
        check_constraints(gpu, profiles_allowed=["5g.50gb"])


def test_measurements_without_single_profile_layouts_are_refused() -> None:
    """Rates inside layouts only: the advisor has nothing alone to predict from."""
    measurements = Measurements(
        gpu=GPU,
        benchmark="resnet50",
        loadgen_scenario="Offline",
        unit="samples/s",
        emulated=True,
        profiles={"1g.10gb": ProfileMeasure(profile="1g.10gb", in_layout=(50.0,))},
    )
    with pytest.raises(SettingsError, match="no single-profile layout"):
        advise_from(measurements)


def _validated() -> Measurements:
    """Layout 7 measured at 180/s in total where its lone runs predict 550/s (+206%): 2g gives 50/s
    and 1g 30/s inside it; 3g and 4g were only ever measured alone."""
    measurements = _measurements(ALONE, in_layout={"2g.20gb": 50.0, "1g.10gb": 30.0})
    return attrs.evolve(
        measurements,
        measured={"3x2g.20gb+1g.10gb": (180.0, 180.0, 180.0)},
        scenarios={"3x2g.20gb+1g.10gb": 7},
    )


def test_lone_runs_carry_the_validations_error() -> None:
    """A layout predicted from lone 3g and 4g rates gets the validation's +206% of those rates in its ± range."""
    advice = advise_from(_validated())
    assert advice.lone_error == pytest.approx(550.0 / 180.0 - 1, rel=1e-3)
    (mixed,) = [p for p in advice.ranking if p.layout == "4g.40gb+3g.40gb"]
    assert set(mixed.lone_inputs) == {"4g.40gb", "3g.40gb"}
    assert mixed.lone_half == pytest.approx(460.0 * advice.lone_error, rel=1e-3)


def test_a_layout_resting_on_lone_runs_does_not_outrank_measured_ones() -> None:
    """4g+3g (460/s from lone runs known to be 206% off) ranks below 7g (400/s, a measured full layout)."""
    advice = advise_from(_validated())
    order = [p.layout for p in advice.ranking]
    assert order.index("7g.80gb") < order.index("4g.40gb+3g.40gb")
    assert advice.winner.layout == "7g.80gb"


def test_the_notes_name_missing_inputs_and_the_run_that_settles_them() -> None:
    """When the winner rests on lone runs, the notes name those profiles and a full layout to run."""
    advice = advise_from(_measurements(ALONE, in_layout={"2g.20gb": 50.0}), objective="instances")
    notes = "\n".join(advice.notes())
    assert "rests on lone runs for 1g.10gb" in notes
    assert "mlperf-mig run --scenario 7x1g.10gb" in notes


@pytest.mark.parametrize(("objective", "top"), [("speed", 5), (["p99"], 5), ("p99", 0)])
def test_ranking_arguments_are_checked_before_measuring(
    monkeypatch: pytest.MonkeyPatch, objective: object, top: object
) -> None:
    """advise() without a folder refuses a wrong objective or top before its measuring sweep."""
    import mlperf_mig.api

    def no_sweep(*args: object, **kwargs: object) -> None:
        raise AssertionError("the sweep ran")

    monkeypatch.setattr(mlperf_mig.api, "sweep", no_sweep)
    with pytest.raises(SettingsError, match=r"objective|top"):
        advise(objective=objective, top=top)  # type: ignore[arg-type]
