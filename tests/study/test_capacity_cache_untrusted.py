"""The capacity cache read back as untrusted input: hostile files, concurrent writers, partial
searches and failed writes, each checked on disk afterwards."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
from pathlib import Path

import pytest

import mlperf_mig
from mlperf_mig import cli
from mlperf_mig.errors import OutputDirError
from mlperf_mig.runner.capacity_store import (
    CACHE_FORMAT,
    CACHE_VERSION,
    read_capacities,
    store_capacity,
)
from mlperf_mig.study import capacity as capacity_module
from mlperf_mig.study.capacity_cache import plan_key

from .test_capacity import KnownService, _search

SERVER = {"loadgen_scenario": "Server", "backend": "null"}


def _key(cache: Path) -> str:
    """The cache key of 1g.10gb in a Server run of 2x1g.10gb on the null backend."""
    return plan_key(mlperf_mig.plan("2x1g.10gb", cache_dir=cache, **SERVER), "1g.10gb")


def _write(cache: Path, text: str) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / "capacity.json"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text", ["[]", "42", '"capacity"', "null"])
def test_json_that_is_not_an_object_is_ignored_and_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str
) -> None:
    """A cache holding `[]` or `42` is a warning naming the file, not a traceback; the file stays."""
    path = _write(tmp_path / "cache", text)
    with caplog.at_level(logging.WARNING):
        the_plan = mlperf_mig.plan("2x1g.10gb", cache_dir=tmp_path / "cache", **SERVER)
    assert the_plan.target_from is None and "target_qps" not in dict(the_plan.overrides)
    assert any(
        str(path) in r.getMessage() and "not a capacity cache" in r.getMessage()
        for r in caplog.records
    )
    assert path.read_text() == text


def test_a_cache_that_is_not_an_object_is_not_overwritten(tmp_path: Path) -> None:
    """Storing into a cache file that holds `[]` is refused with one line; the file is unchanged."""
    path = _write(tmp_path / "cache", "[]")
    with pytest.raises(OutputDirError, match="is not replaced") as caught:
        store_capacity("k", {"qps": 10.0}, tmp_path / "cache")
    assert "\n" not in str(caught.value) and path.read_text() == "[]"


def test_unusable_entries_are_ignored_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """NaN, Infinity, negative, zero, text and boolean capacities are dropped with one warning."""
    bad = {
        "nan": float("nan"),
        "inf": float("inf"),
        "neg": -5.0,
        "zero": 0,
        "text": "12",
        "bool": True,
    }
    entries = {key: {"qps": value} for key, value in bad.items()} | {"good": {"qps": 40.0}}
    path = _write(
        tmp_path / "cache",
        json.dumps({"format": CACHE_FORMAT, "version": CACHE_VERSION, "entries": entries}),
    )
    before = path.read_bytes()
    with caplog.at_level(logging.WARNING):
        found = read_capacities(tmp_path / "cache")
        read_capacities(tmp_path / "cache")
    assert found == {"good": {"qps": 40.0}}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(path) in warnings[0] and "6 entries" in warnings[0]
    assert path.read_bytes() == before


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "-3", "0"])
def test_unusable_cached_target_never_reaches_a_run(tmp_path: Path, value: str) -> None:
    """A cached NaN/Infinity/negative/zero target is ignored: the run keeps its own target."""
    cache = tmp_path / "cache"
    _write(cache, f'{{"{_key(cache)}": {{"qps": {value}}}}}')
    the_plan = mlperf_mig.plan("2x1g.10gb", cache_dir=cache, **SERVER)
    assert the_plan.target_from is None and "target_qps" not in dict(the_plan.overrides)


def test_cached_target_out_of_range_names_the_cache(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A cached 1e-9 QPS is refused before any worker, naming the cache file and how to fix it."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("MLPERF_MIG_CACHE", str(cache))
    path = _write(cache, json.dumps({_key(cache): {"qps": 1e-9}}))
    outdir = tmp_path / "run"
    code = cli.main(
        [
            "run",
            "--scenario",
            "2x1g.10gb",
            "--loadgen-scenario",
            "Server",
            "--backend",
            "null",
            "--outdir",
            str(outdir),
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert f"the capacity cache {str(path)!r}" in err and "mlperf-mig capacity" in err
    assert "--set / settings=" not in err
    assert not outdir.exists()


def _store_keys(cache: str, worker: int, count: int) -> None:
    for k in range(count):
        store_capacity(f"worker-{worker}|key-{k}", {"qps": float(worker * 100 + k + 1)}, cache)


def test_concurrent_writers_keep_every_key(tmp_path: Path) -> None:
    """Ten processes storing 20 different keys each at once: all 200 entries are kept."""
    cache = tmp_path / "cache"
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_store_keys, args=(str(cache), w, 20)) for w in range(10)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(60)
    assert [p.exitcode for p in workers] == [0] * 10 and not any(p.is_alive() for p in workers)
    data = json.loads((cache / "capacity.json").read_text())
    assert data["version"] == CACHE_VERSION and len(data["entries"]) == 200
    assert data["entries"]["worker-7|key-19"] == {"qps": 720.0}
    assert sorted(p.name for p in cache.iterdir()) == ["capacity.json", "capacity.json.lock"]


def test_stored_file_is_versioned(tmp_path: Path) -> None:
    """A store writes the format name, the version and the entries."""
    store_capacity("k", {"qps": 12.5}, tmp_path)
    data = json.loads((tmp_path / "capacity.json").read_text())
    assert data == {
        "format": CACHE_FORMAT,
        "version": CACHE_VERSION,
        "entries": {"k": {"qps": 12.5}},
    }


def test_earlier_unversioned_file_is_read_and_upgraded(tmp_path: Path) -> None:
    """The plain mapping of earlier releases is read, and a store keeps its entries in version 1."""
    _write(tmp_path, json.dumps({"old": {"qps": 3.0}}))
    assert read_capacities(tmp_path) == {"old": {"qps": 3.0}}
    store_capacity("new", {"qps": 4.0}, tmp_path)
    data = json.loads((tmp_path / "capacity.json").read_text())
    assert data["version"] == CACHE_VERSION and data["entries"] == {
        "old": {"qps": 3.0},
        "new": {"qps": 4.0},
    }


def test_a_newer_version_is_ignored_and_kept(tmp_path: Path) -> None:
    """A file of a later version is not read and not overwritten."""
    text = json.dumps(
        {"format": CACHE_FORMAT, "version": CACHE_VERSION + 1, "entries": {"k": {"qps": 5.0}}}
    )
    path = _write(tmp_path, text)
    assert read_capacities(tmp_path) == {}
    with pytest.raises(OutputDirError, match="version"):
        store_capacity("other", {"qps": 6.0}, tmp_path)
    assert path.read_text() == text


def test_partial_search_never_replaces_a_good_entry(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A complete answer is cached; a later search that runs out of steps leaves the file as it was."""
    good = _search(monkeypatch, tmp_path, KnownService(100.0), low_qps=10.0)
    assert not good.partial and good.cache_note.startswith("cached as")
    path = tmp_path / "cache" / "capacity.json"
    before = path.read_bytes()
    partial = _search(monkeypatch, tmp_path, KnownService(1e6), low_qps=10.0, max_steps=3)
    assert partial.partial and partial.key == good.key
    assert partial.cache_note.startswith("not cached: a partial search")
    assert path.read_bytes() == before


def test_failed_cache_write_keeps_the_answer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A cache folder that cannot be created: the search still returns its answer, with a warning."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setattr(mlperf_mig.api, "run", KnownService(100.0))
    result = mlperf_mig.api.capacity(
        "resnet50",
        "1g.10gb",
        backend="null",
        preset="submission",
        low_qps=10.0,
        outdir=tmp_path / "search",
        cache_dir=blocker / "cache",
    )
    assert 100 / 1.1 <= result.qps <= 100.0 and not result.partial
    assert result.cache_note.startswith("warning: not cached") and "a-file" in result.cache_note
    assert blocker.read_text() == "x"


def test_cli_prints_the_answer_before_the_cache_write(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`mlperf-mig capacity`: the answer is on stdout before the cache is written; a failed write
    is one warning line after it, and the search still exits 0."""
    monkeypatch.setenv("MLPERF_MIG_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(mlperf_mig.api, "run", KnownService(100.0))
    printed_first: list[str] = []

    def failing_store(*_: object) -> None:
        printed_first.append(capsys.readouterr().out)
        raise OutputDirError("cannot write 'capacity.json': No space left on device")

    monkeypatch.setattr(capacity_module, "store_capacity", failing_store)
    code = cli.main(
        [
            "capacity",
            "--backend",
            "null",
            "--preset",
            "submission",
            "--low-qps",
            "10",
            "--outdir",
            str(tmp_path / "search"),
        ]
    )
    after = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    assert "Server capacity of 1g.10gb" in printed_first[0]
    assert (
        len(after) == 1
        and after[0].startswith("warning: not cached")
        and "No space left" in after[0]
    )
    assert not (tmp_path / "cache" / "capacity.json").exists()


@pytest.mark.slow
def test_cached_target_is_recorded_as_capacity_cache(tmp_path: Path) -> None:
    """A Server run that takes its target from the cache records target_source 'capacity cache'
    and its table says so; no worker is left."""
    cache = tmp_path / "cache"
    store_capacity(_key(cache), {"qps": 200.0}, cache)
    outdir = tmp_path / "run"
    result = mlperf_mig.run(
        "2x1g.10gb",
        cache_dir=cache,
        outdir=outdir,
        accuracy=False,
        progress=False,
        settings={"min_duration": 300},
        **SERVER,
    )
    assert result.ok
    data = json.loads((outdir / "results.json").read_text())
    sources = {i["performance"]["target_source"] for i in data["instances"]}
    targets = {i["performance"]["effective_settings"]["target_qps"] for i in data["instances"]}
    assert sources == {"capacity cache"} and targets == {200.0}
    assert "Server target from the capacity cache" in result.table()
    assert multiprocessing.active_children() == []
    assert sorted(os.listdir(tmp_path)) == ["cache", "run"]


def test_plan_shows_the_cached_target(tmp_path: Path) -> None:
    """`plan` applies the cached target as `run` would and names the cache it came from."""
    cache = tmp_path / "cache"
    store_capacity(_key(cache), {"qps": 123.0}, cache)
    the_plan = mlperf_mig.plan("2x1g.10gb", cache_dir=cache, **SERVER)
    assert dict(the_plan.overrides)["target_qps"] == 123.0
    assert the_plan.to_dict()["target_from"] == the_plan.target_from
    assert str(cache / "capacity.json") in the_plan.target_from
    assert "Server target 123 QPS per instance from the capacity cache" in the_plan.table()


def test_user_target_beats_the_cache(tmp_path: Path) -> None:
    """--set target_qps keeps the user's target and its 'override' source."""
    cache = tmp_path / "cache"
    store_capacity(_key(cache), {"qps": 123.0}, cache)
    the_plan = mlperf_mig.plan("2x1g.10gb", cache_dir=cache, settings={"target_qps": 50}, **SERVER)
    assert dict(the_plan.overrides)["target_qps"] == 50 and the_plan.target_from is None


def test_search_replaces_an_out_of_range_entry(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A cached 1e-9 QPS (refused as a run's target) does not stop a new search replacing it."""
    monkeypatch.setattr(mlperf_mig.api, "run", KnownService(100.0))
    cache = tmp_path / "cache"
    key = plan_key(
        mlperf_mig.plan(
            "1g.10gb",
            loadgen_scenario="Server",
            backend="null",
            preset="submission",
            settings={"target_qps": 1},
            cache_dir=cache,
        ),
        "1g.10gb",
    )
    _write(cache, json.dumps({key: {"qps": 1e-9}, "other": {"qps": 7.0}}))
    result = mlperf_mig.api.capacity(
        "resnet50",
        "1g.10gb",
        backend="null",
        preset="submission",
        low_qps=10.0,
        outdir=tmp_path / "search",
        cache_dir=cache,
    )
    assert result.key == key and not result.partial
    entries = json.loads((cache / "capacity.json").read_text())["entries"]
    assert entries["other"] == {"qps": 7.0} and entries[key]["qps"] == result.qps
