"""Every install command the CLI prints is one the README or the manual gives, word for word."""

from __future__ import annotations

from pathlib import Path

from mlperf_mig.cluster.connect import INSTALL_HINT
from mlperf_mig.doctor import install
from mlperf_mig.study.chart import PLOT_INSTALL

ROOT = Path(__file__).resolve().parent.parent
README = "\n".join(  # the README and the manual's pages (docs/), where its details moved
    path.read_text(encoding="utf-8")
    for path in [ROOT / "README.md", *sorted(ROOT.glob("docs/**/*.md"))]
)


def test_plot_and_cluster_hints_are_the_readmes() -> None:
    """The matplotlib and Ray hints are the README's commands."""
    assert PLOT_INSTALL in README
    assert INSTALL_HINT in README


def test_gpu_install_commands_are_the_readmes() -> None:
    """Each per-CUDA GPU command that doctor prints is in the README."""
    commands = list(install.INSTALL_COMMANDS.values())
    assert commands
    assert all(command in README for command in commands), [c for c in commands if c not in README]
