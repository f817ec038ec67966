"""A Griffe extension (mkdocs.yml, mkdocstrings' `extensions`): the option lists of the public
functions' docstrings as an "Args:" section, so the API reference shows each option in the
parameter table beside its type and default.

`mlperf_mig.run`, `plan` and `sweep` list their options as `name:  what it does` lines, made at
import from the one declaration of each option (runner/options.py's `options_doc`), and
`capacity`/`advise` write theirs the same way by hand. Only lines that name one of the function's
own parameters start an entry, so prose that happens to hold a colon is left as it is.

`mlperf_mig.capacity` and `advise` are study functions with their `measure` filled in (api.py's
`_measuring`); functools.wraps makes them aliases of the study functions to griffe, whose
signature has `measure`, so a study function's `measure` parameter is left out here: the public
form has none.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ENTRY = re.compile(r"^(\w+):\s+(\S.*)$")


def as_args_section(text: str, parameters: list[str]) -> str:
    """`text` with its `name: description` entries for `parameters` moved into an Args section
    at its end, in the order of `parameters` (their indented continuation lines joined); the
    rest kept in order."""
    kept: list[str] = []
    entries: list[list[str]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        match = _ENTRY.match(line)
        if match and match.group(1) in parameters:
            current = [f"{match.group(1)}: {match.group(2).strip()}"]
            entries.append(current)
        elif current is not None and line.startswith(" ") and line.strip():
            current.append(line.strip())
        else:
            current = None
            kept.append(line)
    if not entries:
        return text
    body = "\n".join(kept).rstrip()
    entries.sort(key=lambda entry: parameters.index(entry[0].partition(":")[0]))
    args = "\n".join("    " + " ".join(entry) for entry in entries)
    return f"{body}\n\nArgs:\n{args}\n"


class OptionLists(griffe.Extension):
    """Turns the option lists of mlperf_mig's public functions into Args sections."""

    def on_function_instance(self, *, func: griffe.Function, **_: Any) -> None:
        if not func.path.startswith("mlperf_mig."):
            return
        if func.path.startswith("mlperf_mig.study.") and "measure" in func.parameters:
            del func.parameters["measure"]
        if func.docstring is None:
            return
        names = [parameter.name for parameter in func.parameters]
        func.docstring.value = as_args_section(func.docstring.value, names)
