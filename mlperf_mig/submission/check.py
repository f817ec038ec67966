"""Our own checker of a submission tree: the MLCommons checker's rules that we know (rules.py).

`check_submission(DIR)` returns one Problem per violation (required files and fields, folder
names, seeds versus checker version, LoadGen errors, truncated accuracy log and its hash, ...).
The writer runs the same log rules on its inputs before it writes anything.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs

from mlperf_mig._io import read_bounded, read_json, refuse_links_below
from mlperf_mig.errors import SubmissionError, UntrustedPathError
from mlperf_mig.harness.compliance import audit_setting_problems
from mlperf_mig.harness.logs import parse_detail_log
from mlperf_mig.submission import accuracy, rules
from mlperf_mig.submission.logs import DetailLog

log = logging.getLogger(__name__)


@attrs.frozen(kw_only=True)
class Problem:
    """One rule a tree breaks: where (relative to the tree) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def check_submission(
    root: str | os.PathLike[str], *, version: str = rules.DEFAULT_VERSION
) -> tuple[Problem, ...]:
    """Check the submission tree at `root` against the checker `version`'s rules."""
    top = Path(root)
    if not top.is_dir():
        raise SubmissionError(f"submission folder {str(top)!r} does not exist or is not a folder")
    if version not in rules.SEEDS:
        raise SubmissionError(
            f"unknown checker version {version!r}; expected one of {', '.join(rules.known_versions())}"
        )
    try:
        refuse_links_below(top, "the submission tree")  # a link would read (and report) outside it
    except UntrustedPathError as exc:
        raise SubmissionError(str(exc)) from None
    problems = [Problem(path=str(p.relative_to(top)), message=m) for p, m in _tree(top, version)]
    log.info("checked %s: %d problem(s)", top, len(problems))
    return tuple(problems)


Finding = tuple[Path, str]


def _tree(top: Path, version: str) -> Iterator[Finding]:
    divisions = [p for p in _children(top) if p.is_dir() and p.name in rules.VALID_DIVISIONS]
    for entry in _children(top):
        if entry not in divisions and not entry.name.startswith("."):  # .git of a results repo
            yield (
                entry,
                (
                    f"unexpected entry at the top of the tree; expected only "
                    f"{', '.join(rules.VALID_DIVISIONS)} folders"
                ),
            )
    if not divisions:
        yield top, "no division folder (closed/ or open/) in the tree"
    for division in divisions:
        for submitter in _children(division):
            if not submitter.is_dir():
                yield submitter, "unexpected file; a division folder holds submitter folders"
                continue
            yield from _submitter(submitter, division.name, version)


def _submitter(folder: Path, division: str, version: str) -> Iterator[Finding]:
    for name in ("systems", "results"):
        if not (folder / name).is_dir():
            yield folder / name, f"missing; every submitter folder needs {name}/"
    if not (folder / "src").is_dir():
        hint = " (code/ is the name before v6.0)" if (folder / "code").is_dir() else ""
        yield folder / "src", f"missing; v6.x submissions keep their source in src/{hint}"
    descriptions = {}
    if (folder / "systems").is_dir():
        for path in _children(folder / "systems"):
            if path.suffix != ".json":
                continue
            description, findings = _system_description(path, division, folder.name)
            descriptions[path.stem] = description
            yield from findings
    results = folder / "results"
    systems_with_results = set()
    if results.is_dir():
        for system in _children(results):
            if not system.is_dir():
                yield system, "unexpected file; results/ holds one folder per system"
                continue
            systems_with_results.add(system.name)
            description = descriptions.get(system.name)
            if system.name not in descriptions:
                yield system, f"no system description systems/{system.name}.json"
            yield from _system_results(system, division, version, description)
    for name in sorted(set(descriptions) - systems_with_results):
        yield folder / "systems" / f"{name}.json", "system description without results"


def _system_description(
    path: Path, division: str, submitter: str
) -> tuple[dict[str, Any] | None, list[Finding]]:
    try:
        description = read_json(path, "store")
    except (OSError, ValueError) as exc:
        return None, [(path, f"not a readable JSON file ({exc})")]
    if not isinstance(description, dict):
        return None, [(path, "must hold a JSON object")]
    return description, [
        (path, m)
        for m in system_description_problems(description, division=division, submitter=submitter)
    ]


def system_description_problems(
    description: dict[str, Any], *, division: str, submitter: str
) -> list[str]:
    """What the checker's system checks (checks/system_check.py) would reject in `description`."""
    problems = [f"field {k!r} is missing" for k in rules.SYSTEM_FIELDS if k not in description]
    problems += [
        f"field {k!r} needs a meaningful (non-empty) value"
        for k in rules.MEANINGFUL_SYSTEM_FIELDS
        if k in description and not description[k]
    ]
    status = str(description.get("status", "")).lower()
    if "status" in description and status not in rules.VALID_STATUSES:
        problems.append(
            f"status {description['status']!r} is not one of {', '.join(rules.VALID_STATUSES)}"
        )
    system_type = description.get("system_type")
    if "system_type" in description and system_type not in rules.VALID_SYSTEM_TYPES:
        problems.append(
            f"system_type {system_type!r} is not one of {', '.join(rules.VALID_SYSTEM_TYPES)}"
        )
    for key, expected in (("division", division), ("submitter", submitter)):
        value = str(description.get(key, ""))
        if key in description and value.lower() != expected.lower():
            problems.append(f"{key} is {value!r} but the folder says {expected!r}")
    for key in rules.WHOLE_NUMBER_SYSTEM_FIELDS:
        number = description.get(key)
        if key in description and number and not _whole_number(number):
            problems.append(
                f"{key} is {number!r}; the checker's summary computes int(number_of_nodes) * "
                "int(accelerators_per_node), so it must be a whole number"
            )
    return problems + _network_problems(description, division)


def _whole_number(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    digits = value.strip().lstrip("+-") if isinstance(value, str) else ""
    return (
        digits.isascii() and digits.isdigit()
    )  # isdigit alone takes '²' and other scripts' digits


def _network_problems(description: dict[str, Any], division: str) -> list[str]:
    """The checker's network-mode rules (system_check.network_check, required_fields_check)."""
    if rules.NETWORK_FIELD not in description:
        return []
    flag = description[rules.NETWORK_FIELD]
    if not isinstance(flag, str) or flag.lower() not in ("true", "false"):
        return [
            f"{rules.NETWORK_FIELD} is {flag!r}; the checker reads it as a string, "
            '"true" or "false" (or leave it out: not a network system)'
        ]
    problems = []
    if flag.lower() == "true" and division == "closed":
        problems.append(
            f'{rules.NETWORK_FIELD} is "true"; a network-mode system belongs in network/'
        )
    if flag.lower() == "true":
        problems += [
            f"field {k!r} is missing (network-mode systems need it)"
            for k in rules.NETWORK_MODE_FIELDS
            if k not in description
        ]
    return problems


def _system_results(
    system: Path, division: str, version: str, description: dict[str, Any] | None
) -> Iterator[Finding]:
    for benchmark in _children(system):
        model = rules.mlperf_model(benchmark.name)
        if not benchmark.is_dir() or model is None:
            yield (
                benchmark,
                (
                    f"unknown benchmark folder {benchmark.name!r}; expected one of "
                    f"{', '.join(rules.benchmark_folders())}"
                ),
            )
            continue
        scenarios = []
        for scenario in _children(benchmark):
            if not scenario.is_dir() or scenario.name not in rules.SCENARIOS:
                yield (
                    scenario,
                    (
                        f"unknown scenario folder {scenario.name!r}; expected one of "
                        f"{', '.join(rules.SCENARIOS)} (MLPerf scenario names, case as written)"
                    ),
                )
                continue
            scenarios.append(scenario.name)
            yield from _result(scenario, model, division, version)
        if division == "closed" and description is not None:
            yield from _required_scenarios(benchmark, model, scenarios, description)


def _required_scenarios(
    benchmark: Path, model: str, present: list[str], description: dict[str, Any]
) -> Iterator[Finding]:
    system_type = str(description.get("system_type", ""))
    key = "datacenter,edge" if "," in system_type else system_type
    required = rules.checker_model(model).scenarios_required(key)
    if required is None:
        yield (
            benchmark,
            f"{model} is not a closed-division benchmark for system_type {system_type!r}",
        )
        return
    optional = rules.checker_model(model).scenarios_optional(key)
    missing = [s for s in required if s not in present]
    if set(rules.ONE_OF_SCENARIOS) <= set(optional) and not set(rules.ONE_OF_SCENARIOS) & set(
        present
    ):
        missing.append(f"(one of) {' or '.join(rules.ONE_OF_SCENARIOS)}")
    if missing:
        yield benchmark, f"closed division needs the scenarios {', '.join(missing)} as well"
    allowed = (*required, *optional)
    for scenario in present:
        if scenario not in allowed:
            yield (
                benchmark / scenario,
                (
                    f"{scenario} is not a closed-division scenario of {model} for system_type "
                    f"{system_type!r} (the checker allows {', '.join(allowed)})"
                ),
            )


def _result(folder: Path, model: str, division: str, version: str) -> Iterator[Finding]:
    for name in rules.REQUIRED_SCENARIO_FILES:
        path = folder / name
        if not path.is_file():
            yield path, "missing"
        elif path.stat().st_size == 0:
            yield path, "is empty"
    if (folder / "measurements.json").is_file():
        yield from ((folder / "measurements.json", m) for m in _measurements(folder))
    yield from _performance(folder, model, division, version)
    yield from _accuracy(folder / "accuracy", model, division)
    yield from _compliance(folder, model, division, version)


def _compliance(folder: Path, model: str, division: str, version: str) -> Iterator[Finding]:
    """The audits of a result: required in the closed division; checked wherever present (the
    MLCommons checker skips them in the open division, so an open tree must meet the same rules
    for its audits to count if it were closed)."""
    for audit in rules.workload_of_model(model).required_audits:
        test = folder / audit
        if test.is_dir():
            yield from _audit(test, audit, model, division, version)
        elif division == "closed":
            yield (
                test,
                (
                    f"missing; the closed division needs the {audit} compliance audit of every "
                    f"{model} result (mlperf-mig run ... --compliance)"
                ),
            )


# The most bytes a verification or accuracy text file of an audit may hold (they are a few
# lines); a larger one is a finding, not read.
TEXT_FILE_LIMIT = 1 << 20


def _text_lines(path: Path) -> list[str]:
    """The lines of the tree's small text file `path` (bytes that are not UTF-8 replaced);
    SubmissionError(why not), a phrase that reads after "is"."""
    data = read_bounded(path, TEXT_FILE_LIMIT, SubmissionError, kind="verification file")
    return data.decode("utf-8", errors="replace").splitlines()


def _audit(test: Path, audit: str, model: str, division: str, version: str) -> Iterator[Finding]:
    for name in rules.VERIFY_FILES[audit]:
        path = test / name
        if not path.is_file():
            yield path, "missing"
            continue
        try:
            lines = [line.strip() for line in _text_lines(path)]
        except SubmissionError as exc:
            yield path, f"is {exc}"
            continue
        if audit == "TEST06":
            failed = [words[0] for words in rules.TEST06_LINES if not set(words) & set(lines)]
            if failed:
                yield path, f"TEST06 checks not passed: no {'; no '.join(failed)!r} line"
            continue
        if name == "verify_performance.txt" and not any(rules.PASS_LINE in line for line in lines):
            yield path, f"no {rules.PASS_LINE} line: the audit's performance check failed"
        elif name == "verify_accuracy.txt" and rules.PASS_LINE not in lines:
            yield from _test01_accuracy_fallback(test / "accuracy", model)

    def audit_log_problems(detail_log: DetailLog, detail: Path) -> Iterator[Finding]:
        for message in audit_setting_problems(audit, parse_detail_log(detail)):
            yield detail, f"not a {audit} audit log: {message}"
        if division == "closed":
            for message in performance_problems(
                detail_log,
                model=model,
                scenario=test.parent.name,
                division=division,
                version=version,
            ):
                yield detail, message

    yield from _run_1(test, "the audit's LoadGen logs", audit_log_problems)


def _test01_accuracy_fallback(folder: Path, model: str) -> Iterator[Finding]:
    """TEST01 whose payloads differ: accuracy/ must show the metric of both runs agreeing."""
    if not folder.is_dir():
        yield (
            folder,
            (
                "missing; TEST01's verify_accuracy.txt has no TEST PASS line, so the checker compares "
                "baseline_accuracy.txt and compliance_accuracy.txt here"
            ),
        )
        return
    yield from _file_set(folder, rules.TEST01_ACC_FILES, ())
    values = {}
    for name in ("baseline_accuracy.txt", "compliance_accuracy.txt"):
        path = folder / name
        if not path.is_file():
            return
        try:
            lines = _text_lines(path)
        except SubmissionError as exc:
            yield path, f"is {exc}"
            return
        found = [float(m.group(1)) for m in map(rules.accuracy_pattern(model).match, lines) if m]
        if not found or not found[0]:
            yield path, "no non-zero accuracy line in the reference script's format"
            return
        values[name] = found[0]
    delta = abs(1 - values["baseline_accuracy.txt"] / values["compliance_accuracy.txt"]) * 100
    allowed = rules.checker_model(model).accuracy_delta_percent
    if delta > allowed:
        yield (
            folder,
            f"the audit's accuracy differs from the accuracy run's by {delta:.3f}% (at most {allowed}%)",
        )


def _measurements(folder: Path) -> list[str]:
    try:
        data = read_json(folder / "measurements.json", "store")
    except (OSError, ValueError) as exc:
        return [f"not a readable JSON file ({exc})"]
    if not isinstance(data, dict):
        return ["must hold a JSON object"]
    missing = [f"key {k!r} is missing" for k in rules.MEASUREMENTS_KEYS if k not in data]
    empty = [
        f"key {k!r} needs a meaningful value"
        for k in rules.MEASUREMENTS_KEYS
        if k in data and not data[k]
    ]
    return missing + empty


def _performance(folder: Path, model: str, division: str, version: str) -> Iterator[Finding]:
    def log_problems(detail_log: DetailLog, detail: Path) -> Iterator[Finding]:
        for message in performance_problems(
            detail_log, model=model, scenario=folder.name, division=division, version=version
        ):
            yield detail, message

    yield from _run_1(folder, "the performance logs", log_problems)


def _run_1(
    folder: Path, what: str, log_problems: Callable[[DetailLog, Path], Iterator[Finding]]
) -> Iterator[Finding]:
    """`folder`/performance/run_1: its files, then `log_problems` of its readable detail log."""
    run = folder / "performance" / "run_1"
    if not run.is_dir():
        yield run, f"missing; {what} go in performance/run_1"
        return
    yield from _file_set(run, rules.REQUIRED_PERF_FILES, rules.OPTIONAL_PERF_FILES)
    detail = run / "mlperf_log_detail.txt"
    if not detail.is_file():
        return
    try:
        detail_log = DetailLog.read(detail)
    except SubmissionError as exc:
        yield detail, str(exc).split(": ", 1)[-1]
        return
    yield from log_problems(detail_log, detail)


def performance_problems(
    detail: DetailLog, *, model: str, scenario: str, division: str, version: str
) -> list[str]:
    """What checks/performance_check.py would reject in a performance detail log."""
    problems = []
    if detail.scenario != rules.log_scenario(scenario):
        problems.append(
            f"the log is a {detail.scenario} run but the folder says {scenario}"
            + (
                f" (its logs are a {rules.log_scenario(scenario)} run)"
                if scenario in rules.LOG_SCENARIO
                else ""
            )
        )
    if detail.test_mode == "AccuracyOnly":
        problems.append("the log is an accuracy run; performance/run_1 needs a performance run")
    problems += error_problems(detail)
    problems += seed_problems(detail, version)
    result_key = rules.RESULT_KEYS.get(str(detail.scenario))
    if result_key is not None and not isinstance(detail.get(result_key), int | float):
        problems.append(
            f"no numeric {result_key} record: the checker reads the {detail.scenario} result from it"
        )
    required_count = rules.checker_model(model).performance_sample_count
    count = detail.get("effective_performance_sample_count") or 0
    if count < required_count:
        problems.append(
            f"performance_sample_count is {count}; the checker needs >= {required_count}"
        )
    duration = detail.get("effective_min_duration_ms") or 0
    if duration < rules.MIN_DURATION_MS:
        problems.append(
            f"min_duration is {duration} ms; the checker needs >= {rules.MIN_DURATION_MS} ms "
            "in every division"
        )
    problems += _scenario_rule_problems(detail, model, division)
    return problems


def _scenario_rule_problems(detail: DetailLog, model: str, division: str) -> list[str]:
    scenario = detail.scenario
    problems = []
    if scenario in rules.EARLY_STOPPING_SCENARIOS:
        if not detail.get("early_stopping_met"):
            problems.append("early stopping condition not met (too few queries for an estimate)")
        bound = rules.checker_model(model).server_latency_bound_ns if scenario == "Server" else None
        target = detail.get("effective_target_latency_ns") or 0
        if bound is not None and target > bound:
            problems.append(f"target latency {target} ns exceeds the bound {bound} ns")
    else:
        required = rules.checker_model(model).min_queries(str(scenario))
        found = detail.get("effective_min_query_count") or 0
        if required and found < required:
            problems.append(f"min_query_count is {found}; the checker needs >= {required}")
    validity = detail.get("result_validity")
    if division == "closed" and validity != "VALID":
        reason = str(detail.get("result_invalid_reason") or "").strip()
        problems.append(
            f"closed division needs a VALID LoadGen result, the log says {validity} {reason}".strip()
        )
    per_query = detail.get("effective_samples_per_query") or 0
    minimum = rules.checker_model(model).offline_min_samples
    if scenario == "Offline" and division == "closed" and per_query < minimum:
        problems.append(
            f"closed Offline needs >= {minimum} samples per query, the log has {per_query}"
        )
    return problems


def seed_problems(detail: DetailLog, version: str) -> list[str]:
    """Seeds in the log that differ from those of checker `version`."""
    problems = []
    for name, expected in rules.SEEDS[version].items():
        found = detail.get(f"effective_{name}")
        if found != expected:
            problems.append(
                f"{name} is {found}, checker {version} expects {expected} "
                "(logs from a LoadGen of another version, or seeds overridden)"
            )
    return problems


def error_problems(detail: DetailLog) -> list[str]:
    """Lines the checker cannot parse, and the errors LoadGen logged."""
    problems = []
    if detail.invalid_lines:
        lines = ", ".join(map(str, detail.invalid_lines[:5]))
        problems.append(
            f"{len(detail.invalid_lines)} line(s) start with ':::MLLOG' but are "
            f"not a JSON record (line {lines}); the checker stops at such a line"
        )
    if detail.errors:
        problems.append(f"LoadGen logged {len(detail.errors)} error(s), first: {detail.errors[0]}")
    return problems


def _accuracy(folder: Path, model: str, division: str) -> Iterator[Finding]:
    if not folder.is_dir():
        yield folder, "missing; every result needs accuracy/ (open division too)"
        return
    yield from _file_set(folder, rules.REQUIRED_ACC_FILES, ())
    detail = folder / "mlperf_log_detail.txt"
    if detail.is_file():
        try:
            detail_log = DetailLog.read(detail)
        except SubmissionError as exc:
            yield detail, str(exc).split(": ", 1)[-1]
        else:
            if detail_log.test_mode != "AccuracyOnly":
                yield detail, f"the log is a {detail_log.test_mode} run, not an accuracy run"
            yield from ((detail, m) for m in error_problems(detail_log))
            yield from ((detail, m) for m in coverage_problems(detail_log, model))
    acc_log = folder / "mlperf_log_accuracy.json"
    acc_txt = folder / "accuracy.txt"
    if acc_log.is_file() and acc_log.stat().st_size > rules.MAX_ACCURACY_LOG_SIZE:
        yield (
            acc_log,
            (
                f"not truncated ({acc_log.stat().st_size} bytes; at most "
                f"{rules.MAX_ACCURACY_LOG_SIZE}); keep the full log elsewhere"
            ),
        )
    if acc_txt.is_file():
        lines = acc_txt.read_text(encoding="utf-8", errors="replace").splitlines()
        data = acc_log.read_bytes() if acc_log.is_file() else None
        yield from ((acc_txt, m) for m in accuracy_txt_problems(lines, data, model, division))


def coverage_problems(detail: DetailLog, model: str) -> list[str]:
    """The accuracy run covers the whole dataset where the checker's dataset_check wants it
    (llama3.1-8b: 13,368 samples; -edge: 5,000)."""
    expected = rules.checker_model(model).accuracy_sample_count
    if expected is None:
        return []
    count = detail.get("effective_accuracy_sample_count", detail.get("qsl_reported_total_count"))
    if count == expected:
        return []
    return [
        f"the accuracy run covers {count} samples; the checker needs the whole dataset's "
        f"{expected} (run with --set accuracy_sample_count_override={expected} or the dataset)"
    ]


def accuracy_txt_problems(
    lines: list[str], log_data: bytes | None, model: str, division: str
) -> list[str]:
    """Problems of accuracy.txt: hash line, hash versus an untruncated log, accuracy line."""
    problems = []
    hashes = [m.group(1) for m in map(rules.HASH_LINE.match, lines) if m]
    if not hashes:
        problems.append("no hash=<sha256 of the full accuracy log> line")
    elif not rules.SHA256_HEX.match(hashes[-1]):
        problems.append(f"hash {hashes[-1]!r} is not a SHA-256 hex digest")
    elif (
        log_data is not None
        and not accuracy.is_truncated(log_data)
        and accuracy.sha256_of(log_data) != hashes[-1]
    ):
        problems.append("hash does not match mlperf_log_accuracy.json (which is not truncated)")
    values = [float(m.group(1)) for m in map(rules.accuracy_pattern(model).match, lines) if m]
    if division == "closed":
        target = rules.checker_model(model).accuracy_target
        if not values:
            problems.append("no accuracy line in the reference script's format")
        elif values[0] < target:
            problems.append(f"accuracy {values[0]} is below the target {target:.3f}")
    return problems


def _file_set(
    folder: Path, required: tuple[str, ...], optional: tuple[str, ...]
) -> Iterator[Finding]:
    present = {p.name for p in _children(folder)}
    for name in required:
        if name not in present:
            yield folder / name, "missing"
    for name in sorted(present - set(required) - set(optional) - set(rules.ALWAYS_OPTIONAL_FILES)):
        yield folder / name, "unexpected entry; the checker compares this folder's file list"


def _children(folder: Path) -> list[Path]:
    return sorted(folder.iterdir())
