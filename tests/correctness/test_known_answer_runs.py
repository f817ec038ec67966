"""Every answer reaches its own sample, through real LoadGen, in all four LoadGen scenarios, in
independent and unified mode.

Each run is the runner's own (`mlperf_mig.run`, two emulated instances) with the known-answer
backend, whose answer to a sample is a code of the sample's bytes. Every entry of every
mlperf_log_accuracy.json is checked against the synthetic sample it names. Batches of 7 make
partial batches everywhere; BERT Offline's 701 samples in one query pass through the 512-sample
completion buffer; the stream and Server scenarios load their samples in sets of 64 (the quick
preset's performance sample count), so rows are reused across sets. One more run puts the two
instances on two local Ray nodes (where ray is installed).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mlperf_mig
from mlperf_mig.engines.backends.known_answer import expected_payload
from mlperf_mig.harness.logs import ACCURACY_LOG
from mlperf_mig.harness.samples import input_layouts
from mlperf_mig.workloads import Workload, get_workload
from mlperf_mig.workloads.samples import SyntheticSource

pytestmark = pytest.mark.slow  # starts the runner's workers

LAYOUT = "2g.20gb+1g.10gb"
HANG_BOUND_S = 60  # each of these LoadGen tests takes a few seconds
BATCH = 7
# scenario -> (benchmark, samples, target): BERT where many samples are cheap, ResNet50 (588 KiB
# samples, gathered row by row) where fewer do
CASES = {
    "Offline": ("bert", 701, {"target_qps": 2000}),
    "Server": ("resnet50", 100, {"target_qps": 2000}),
    "SingleStream": ("bert", 150, {"target_latency": 1}),
    "MultiStream": ("resnet50", 100, {"target_latency": 5}),
}


def _run(outdir: Path, scenario: str, mode: str, **options: Any) -> Any:
    benchmark, samples, target = CASES[scenario]
    return mlperf_mig.run(
        LAYOUT,
        benchmark=benchmark,
        loadgen_scenario=scenario,
        backend="known_answer",
        mode=mode,
        outdir=outdir,
        progress=False,
        variant="tiny",
        batch_size=BATCH,
        sample_count=samples,
        # a short performance run; the accuracy run issues every sample, not the quick 64
        settings={"min_duration": 100, "accuracy_sample_count_override": 0, **target},
        # a SUT that drops or never completes a sample hangs LoadGen: its worker counts as
        # hung after this long and the run fails at once, instead of at an outer timeout
        timeout_s=HANG_BOUND_S,
        **options,
    )


def _expected(benchmark: Workload, total: int, indices: set[int]) -> dict[int, bytes]:
    """The payload every logged sample must have, from the samples the run generated."""
    source = SyntheticSource(benchmark=benchmark, total_count=total, performance_count=total)
    expected = {}
    for index in indices:
        sample = {
            layout.name: np.empty((1, *layout.shape), layout.dtype)
            for layout in input_layouts(benchmark)
        }
        source.fill([index], sample)
        expected[index] = expected_payload(benchmark, {k: v[0] for k, v in sample.items()})
    return expected


def _check_accuracy_log(log_dir: Path, benchmark: Workload, total: int) -> None:
    entries = json.loads((log_dir / ACCURACY_LOG).read_text())
    indices = [int(e["qsl_idx"]) for e in entries]
    assert set(indices) == set(range(total)), "every sample is answered in an accuracy run"
    # LoadGen loads shuffled sample sets (and MultiStream's wrap: a set padded with samples from
    # its start), so rows never line up with indices by chance and a reordering bug shows here
    assert indices != sorted(indices), "the samples came in index order: reordering is untested"
    expected = _expected(benchmark, total, set(indices))
    wrong = [e["qsl_idx"] for e in entries if bytes.fromhex(e["data"]) != expected[e["qsl_idx"]]]
    assert not wrong, f"{len(wrong)} of {len(entries)} logged answers belong to another sample"


@pytest.mark.parametrize("mode", ["independent", "unified"])
@pytest.mark.parametrize("scenario", list(CASES))
def test_every_logged_answer_is_its_samples(tmp_path: Path, scenario: str, mode: str) -> None:
    """Each entry of each accuracy log is the known answer of the sample it names."""
    result = _run(tmp_path / "run", scenario, mode)
    assert result.ok, result.table()
    benchmark_name, total, _ = CASES[scenario]
    benchmark = get_workload(benchmark_name)
    if mode == "unified":
        log_dirs = [Path(result.layout_accuracy.log_dir)]
        assert result.layout_accuracy.failed_samples == 0
    else:
        log_dirs = [Path(i.accuracy.log_dir) for i in result.instances]
        assert all(i.accuracy.failed_samples == 0 for i in result.instances)
    assert len(log_dirs) == (1 if mode == "unified" else 2)
    for log_dir in log_dirs:
        _check_accuracy_log(log_dir, benchmark, total)
    if scenario == "MultiStream":  # its last set wraps: some samples are issued twice
        entries = json.loads((log_dirs[0] / ACCURACY_LOG).read_text())
        assert len(entries) > total


def test_every_logged_answer_is_its_samples_across_nodes(tmp_path: Path) -> None:
    """Offline, independent, the two instances on two local Ray nodes: each answer is its own.

    The run happens in a private network namespace with only loopback (as root), so the local
    Ray cluster cannot reach any other address whatever it tries."""
    pytest.importorskip("ray", reason="cluster runs need the ray extra")
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        pytest.skip("needs root and unshare to keep Ray in a private network namespace")
    out = tmp_path / "run"
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
        "from pathlib import Path; import test_known_answer_runs as t; "
        f"t._run(Path({str(out)!r}), 'Offline', 'independent', cluster='local:2')"
    )
    done = subprocess.run(
        [
            "unshare",
            "-n",
            "sh",
            "-c",
            'ip link set lo up && exec "$0" -c "$1"',
            sys.executable,
            code,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = mlperf_mig.RunResult.load(out)
    assert result.ok, result.table()
    assert len({i.node for i in result.instances}) == 2
    benchmark_name, total, _ = CASES["Offline"]
    for instance in result.instances:
        assert instance.accuracy.failed_samples == 0
        _check_accuracy_log(Path(instance.accuracy.log_dir), get_workload(benchmark_name), total)
