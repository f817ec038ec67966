"""Compliance audits run for real: `mlperf-mig harness --audit` writes the audit.config where
LoadGen reads it and removes it, and TEST04 catches a backend that caches results while our SUT
with a backend that computes every sample passes it.

Each LoadGen test runs in its own process (LoadGen is process-global). The two backends exist
only here: plugin folders in a temporary directory that the subprocess adds to the backend table.
Both take 2 ms per sample they compute (a sleep, so the timing holds on a busy machine); the
caching one keeps its last answers and returns a stored one for a sample it has seen, without
computing it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from mlperf_mig.cli import main

_BACKENDS = {
    "paced": '''
        import time

        from mlperf_mig.engines.backends.known_answer import KnownAnswerBackend


        class PacedBackend(KnownAnswerBackend):
            """The known-answer backend at 2 ms per sample, every sample computed."""

            name = "paced"
            framework = "paced test backend"
            system_token = "PACED"

            def run(self, feeds):
                time.sleep(0.002 * len(next(iter(feeds.values()))))
                return super().run(feeds)


        BACKEND = PacedBackend
    ''',
    "caching": '''
        import time

        import numpy as np

        from mlperf_mig.engines.backends.known_answer import KnownAnswerBackend

        CACHE_SIZE = 8


        class CachingBackend(KnownAnswerBackend):
            """The paced backend, but a sample among its last answers is answered from the store."""

            name = "caching"
            framework = "caching test backend"
            system_token = "CACHING"

            def __init__(self, benchmark):
                super().__init__(benchmark)
                self._store = {}

            def run(self, feeds):
                names = self.benchmark.input_names()
                keys = [feeds[names[0]][row].tobytes()[:4096] for row in range(len(feeds[names[0]]))]
                firsts = {key: row for row, key in reversed(list(enumerate(keys)))}
                misses = sorted(row for key, row in firsts.items() if key not in self._store)
                answers = {key: self._store[key] for key in keys if key in self._store}
                if misses:
                    time.sleep(0.002 * len(misses))
                    computed = super().run({n: feeds[n][misses] for n in names})
                    for i, row in enumerate(misses):
                        answers[keys[row]] = {name: out[i] for name, out in computed.items()}
                self._store.update(answers)
                while len(self._store) > CACHE_SIZE:
                    self._store.pop(next(iter(self._store)))
                outputs = answers[keys[0]]
                return {name: np.stack([answers[key][name] for key in keys]) for name in outputs}


        BACKEND = CachingBackend
    ''',
}
_MAIN = """
import sys
from mlperf_mig.engines import backends
backends.__path__.append(sys.argv[1])
from mlperf_mig.cli import main
sys.exit(main(sys.argv[2:]))
"""
# About 100 samples of 128 loaded (mostly distinct) in one Offline query of 0.2 s of work.
_SETTINGS = ["--set", "target_qps=200", "--set", "min_duration=500", "--sample-count", "128"]


@pytest.fixture(name="plugins", scope="module")
def fixture_plugins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("backends")
    for name, code in _BACKENDS.items():
        (folder / name).mkdir()
        (folder / name / "__init__.py").write_text(textwrap.dedent(code))
    return folder


def _harness(plugins: Path, outdir: Path, backend: str, *extra: str) -> tuple[int, dict[str, Any]]:
    """One `mlperf-mig harness` LoadGen test in a fresh process; its exit code and JSON result."""
    command = [
        sys.executable, "-c", _MAIN, str(plugins), "harness", "--benchmark", "resnet50",
        "--loadgen-scenario", "Offline", "--backend", backend, "--outdir", str(outdir), "--json",
        *_SETTINGS, *extra,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def _test04(plugins: Path, outdir: Path, backend: str) -> tuple[int, dict[str, Any]]:
    """The performance run, then TEST04 against it, with `backend`."""
    code, _ = _harness(plugins, outdir, backend)
    assert code == 0
    return _harness(plugins, outdir, backend, "--audit", "TEST04")


def test_caching_backend_fails_test04(plugins: Path, tmp_path: Path) -> None:
    """A backend that answers a repeated sample from its store is far faster in TEST04: FAIL."""
    code, result = _test04(plugins, tmp_path, "caching")
    verdict = result["compliance"]
    assert code == 1
    assert verdict["passed"] is False
    assert "faster than the performance run" in verdict["reason"]
    assert verdict["test_score"] > 1.5 * verdict["reference_score"]
    assert "TEST FAIL" in (tmp_path / "TEST04" / "verify_performance.txt").read_text()


def test_computing_backend_passes_test04(plugins: Path, tmp_path: Path) -> None:
    """Our SUT with a backend that computes every sample is not faster on a repeated one: PASS;
    LoadGen logged the audit's settings, and the audit.config is gone afterwards."""
    code, result = _test04(plugins, tmp_path, "paced")
    assert code == 0, result["compliance"]["reason"]
    assert result["compliance"]["passed"] is True
    assert result["effective_settings"]["performance_issue_same"] is True
    assert result["effective_settings"]["performance_issue_same_index"] == 3
    assert not (tmp_path / "TEST04" / "audit.config").exists()
    assert "TEST PASS" in (tmp_path / "TEST04" / "verify_performance.txt").read_text().splitlines()


def test_audit_without_its_reference_runs_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TEST01 before the performance and accuracy runs is refused in one line, exit 2, before
    any LoadGen test starts."""
    code = main([
        "harness", "--benchmark", "resnet50", "--loadgen-scenario", "Offline", "--backend", "null",
        "--outdir", str(tmp_path), "--audit", "TEST01",
    ])  # fmt: skip
    error = capsys.readouterr().err
    assert code == 2
    assert "lacks performance, accuracy/; run `mlperf-mig harness --mode performance`" in error
    assert "Traceback" not in error
