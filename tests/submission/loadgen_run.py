"""Produce genuine LoadGen logs with a trivial SUT: `python loadgen_run.py OUTDIR MODE [SCENARIO]`.

MODE is performance, accuracy, or a compliance audit (TEST01, TEST04): a performance run with the
audit's audit.config where LoadGen reads it, logged to OUTDIR/<audit>/.

One LoadGen test per process (LoadGen is process-global). The user.conf loads LoadGen's built-in
mlperf.conf (so the seeds are those of this LoadGen) and keeps the run short while meeting the
checker's rules: min_duration 600 s and 1024 performance samples. Offline expects a rate so low
that its one query ends after a few hundred samples; the other scenarios stop issuing at
max_duration, after a second, and log an 'Ending early' error (which conftest drops, standing in
for a full run). Either way LoadGen says INVALID (min duration not met), which the open division
accepts. Server runs at 1000 QPS with a 10 ms target latency, strictly inside
ResNet50's 15 ms bound, at the 90th percentile, so that early stopping is met on a busy machine.
The SUT answers each ResNet50 sample with an int32 class, as the reference harness does.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

TOTAL_SAMPLES = 1024


SCENARIO_CONF = {
    "Offline": ["target_qps = 0.5"],
    "Server": [
        "max_duration = 1000",
        "target_qps = 1000",
        "target_latency = 10",
        "target_latency_percentile = 90",
    ],
    "SingleStream": ["max_duration = 500", "target_latency = 1"],
    "MultiStream": ["max_duration = 500", "target_latency = 1"],
}


def user_conf(scenario: str) -> str:
    lines = ["min_duration = 600000", *SCENARIO_CONF[scenario]]
    return "".join(f"resnet50.{scenario}.{line}\n" for line in lines)


def main(outdir: str, mode: str, scenario: str = "Offline") -> int:
    import mlperf_loadgen as lg

    from mlperf_mig.harness.compliance import audit_config_text
    from mlperf_mig.harness.task import AUDITS

    folder = Path(outdir)
    logs = folder / mode
    logs.mkdir(parents=True, exist_ok=True)
    conf = folder / "user.conf"
    conf.write_text(user_conf(scenario), encoding="utf-8")
    if mode in AUDITS:
        (logs / "audit.config").write_text(audit_config_text(mode), encoding="utf-8")

    def issue(samples: list) -> None:
        payload = [np.array([s.index % 1000], dtype=np.int32) for s in samples]
        lg.QuerySamplesComplete(
            [
                lg.QuerySampleResponse(s.id, p.ctypes.data, p.nbytes)
                for s, p in zip(samples, payload)
            ]
        )

    sut = lg.ConstructSUT(issue, lambda: None)
    qsl = lg.ConstructQSL(TOTAL_SAMPLES, TOTAL_SAMPLES, lambda _: None, lambda _: None)
    settings = lg.TestSettings()
    if settings.FromConfig(str(conf), "resnet50", scenario) != 0:
        return 3
    settings.scenario = getattr(lg.TestScenario, scenario)
    settings.mode = lg.TestMode.AccuracyOnly if mode == "accuracy" else lg.TestMode.PerformanceOnly
    log_settings = lg.LogSettings()
    log_settings.log_output.outdir = str(logs)
    log_settings.enable_trace = False
    lg.StartTestWithLogSettings(sut, qsl, settings, log_settings, str(logs / "audit.config"))
    (logs / "audit.config").unlink(missing_ok=True)
    lg.DestroyQSL(qsl)
    lg.DestroySUT(sut)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
