"""Command-line arguments that several sub-commands share (the harness's and the runner's), and
the command-line form of a declared option (`Flag`), from which argparse options are made.

An option is declared once, where its record lives (runner/options.py, study/capacity.py): its
type, default, check, documentation and its `Flag`. `add_flags` gives a parser those options and
`flag_values` reads them back as the keyword arguments of the Python function, so that no second
list of options has to be kept in line with the first.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from mlperf_mig.errors import NameParseError, SettingsError

# which sub-commands take a flag: every command of a run, those of one layout (`run`, `plan`:
# `sweep` has --scenarios), or those that repeat a layout (`run`, `sweep`)
RUN, LAYOUT, STUDY = "run", "layout", "study"


@attrs.frozen(kw_only=True)
class Flag:
    """An option's command-line form: its flag, help text and how the text becomes the value."""

    name: str
    help: str
    metavar: str | None = None
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    # "store_true"; "store_false" for a --no-X flag that turns a default-on option off; "append"
    action: str | None = None
    # what argparse parsed -> the value of the option (an appended list -> a mapping)
    value: Callable[[Any], Any] | None = None
    group: str = RUN
    hidden: bool = False  # left out of --help (test hooks)

    def add_to(self, parser: argparse.ArgumentParser, dest: str, default: Any) -> None:
        """Add this flag to `parser`, its value stored under `dest`."""
        extra: dict[str, Any] = {"action": self.action} if self.action else {}
        if self.action not in ("store_true", "store_false"):
            # the metavar argparse would derive from the flag (dest is the option's name)
            derived = None if self.choices else self.name.lstrip("-").upper().replace("-", "_")
            extra |= {
                "type": self.type,
                "choices": self.choices,
                "metavar": self.metavar or derived,
            }
        parser.add_argument(
            self.name,
            dest=dest,
            default=[] if self.action == "append" else default,
            help=argparse.SUPPRESS if self.hidden else self.help,
            **extra,
        )


def add_flags(
    parser: argparse.ArgumentParser, options: Iterable[Any], groups: Iterable[str]
) -> None:
    """Give `parser` the flags of `options` (records with name, default and flag) in `groups`,
    in the order the options are declared."""
    wanted = set(groups)
    for option in options:
        if option.flag is not None and option.flag.group in wanted:
            option.flag.add_to(parser, option.name, option.default)


def flag_values(args: argparse.Namespace, options: Iterable[Any]) -> dict[str, Any]:
    """The keyword arguments of the options that `args` holds (those its command took)."""
    parsed = vars(args)
    values = {}
    for option in options:
        if option.flag is None or option.name not in parsed:
            continue
        value = parsed[option.name]
        values[option.name] = option.flag.value(value) if option.flag.value else value
    return values


def whole_number(text: str) -> int:
    """An argparse type: ASCII digits with an optional sign (int() also takes '٣' as 3)."""
    if re.fullmatch(r"\s*[+-]?[0-9]+\s*", text):
        return int(text)
    raise argparse.ArgumentTypeError(f"{text!r} is not a whole number in digits 0-9, e.g. 3")


def decimal_number(text: str) -> float:
    """An argparse type: a finite number in ASCII digits (float() also takes '٣', 'nan' and 'inf')."""
    if re.fullmatch(r"\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\s*", text):
        return float(text)
    raise argparse.ArgumentTypeError(f"{text!r} is not a finite number in digits 0-9, e.g. 2.5")


def count_of(what: str, example: int) -> Callable[[str], int]:
    """An argparse type: a whole number in ASCII digits, its error saying what it counts (the
    option's record checks the range, in one line)."""

    def count(text: str) -> int:
        try:
            return whole_number(text)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a whole number in digits 0-9; pass {what}, e.g. {example}"
            ) from None

    return count


def layout_spec(text: str) -> int | str:
    """A study layout number stays an int; anything else is a layout string or system ID."""
    stripped = text.strip()
    digits = stripped[1:] if stripped[:1] in ("+", "-") else stripped
    return int(stripped) if digits.isascii() and digits.isdigit() else stripped  # not "²", "٣"


def gpu_selection(text: str) -> str | list[int]:
    """--gpus: 'all' or comma-separated GPU indices in ASCII digits."""
    parts = [p.strip() for p in text.split(",")]
    if text.strip() == "all":
        return "all"
    if not all(p.isascii() and p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not 'all' or GPU indices such as 0,3 (digits 0-9, comma-separated)"
        )
    return [int(p) for p in parts]


def gpu_layout(text: str) -> tuple[int, int | str]:
    """--layout GPU=LAYOUT: a GPU index and that GPU's layout (a study number or a layout)."""
    index, sep, layout = text.partition("=")
    if not (sep and index.strip().isascii() and index.strip().isdigit() and layout.strip()):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not GPU=LAYOUT; pass a GPU index and its layout, e.g. 1=3g.40gb+4g.40gb or 0=8"
        )
    return int(index), layout_spec(layout)


def gpu_layouts(pairs: list[tuple[int, int | str]]) -> dict[int, int | str] | None:
    """The --layout options as a mapping; a GPU named twice is refused."""
    layouts: dict[int, int | str] = {}
    for index, layout in pairs:
        if index in layouts:
            raise NameParseError(f"--layout names GPU {index} twice; give each GPU one layout")
        layouts[index] = layout
    return layouts or None


def parse_overrides(pairs: list[str]) -> dict[str, float]:
    """`["min_duration=5000"]` -> `{"min_duration": 5000}`; SettingsError on malformed pairs."""
    overrides: dict[str, float] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = None
        if not sep or not key.strip() or number is None:
            raise SettingsError(
                f"--set {pair!r} is not KEY=NUMBER (user.conf keys and units, e.g. "
                "min_duration=5000)"
            )
        overrides[key.strip()] = int(number) if number.is_integer() else number
    return overrides


# `--set KEY=VALUE`, repeatable: a LoadGen setting in user.conf keys and units
SETTINGS_FLAG = Flag(
    name="--set",
    action="append",
    metavar="KEY=VALUE",
    help="a LoadGen setting in user.conf keys and units, e.g. min_duration=5000 (repeatable)",
    value=parse_overrides,
)


def add_settings_option(parser: argparse.ArgumentParser) -> None:
    """`--set KEY=VALUE` (read back as `args.set`, a list of pairs for `parse_overrides`)."""
    SETTINGS_FLAG.add_to(parser, "set", [])
