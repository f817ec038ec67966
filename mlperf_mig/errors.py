"""The library's exceptions: one base class, each subclass also a builtin it specialises.

Messages say what was wrong, what was expected, and how to fix it, in one line: the CLI prints
them as they are and exits with code 2.
"""

from __future__ import annotations


class MlperfMigError(Exception):
    """Base class of every error this library raises on purpose."""


# --- registry -------------------------------------------------------------------------------
class UnknownGpuError(MlperfMigError, LookupError):
    """A GPU name that the catalog does not know."""


class UnknownProfileError(MlperfMigError, LookupError):
    """A MIG profile name that does not exist on the GPU it was resolved against."""


class LayoutError(MlperfMigError, ValueError):
    """A layout that cannot be placed on its GPU, or a malformed layout string."""


class NameParseError(MlperfMigError, ValueError):
    """A malformed vGPU type name, system ID or scenario number."""


class DataFileError(MlperfMigError, ValueError):
    """A data file (GPU catalog, recipe, settings) that is malformed; names the file and field."""


class DiscoveryError(MlperfMigError, RuntimeError):
    """NVML answered something the library cannot use (not raised for 'no driver' or 'no GPU')."""


class LiveLayoutMismatchError(MlperfMigError, RuntimeError):
    """The live MIG devices do not carry the layout that was asked for."""


# --- engines --------------------------------------------------------------------------------
class UnknownBenchmarkError(MlperfMigError, LookupError):
    """A benchmark name other than the supported ones."""


class WorkloadError(MlperfMigError, ValueError):
    """A workload asks for something this part of the harness cannot give (a kind of response)."""


class ModelFileError(MlperfMigError, ValueError):
    """A missing, unreadable or corrupt model file, or one whose interface does not match."""


class BackendUnavailableError(MlperfMigError, RuntimeError):
    """The backend, provider or device that was asked for is not there."""


class PrecisionError(MlperfMigError, ValueError):
    """A precision that the chosen backend cannot run."""


class EngineBuildError(MlperfMigError, RuntimeError):
    """Building or loading an engine failed; carries the backend's own log."""


class EngineMismatchError(MlperfMigError, RuntimeError):
    """An engine built for another GPU, MIG profile or backend version."""


# --- harness --------------------------------------------------------------------------------
class SettingsError(MlperfMigError, ValueError):
    """LoadGen settings or a user.conf that LoadGen rejects or would silently ignore."""


class DatasetError(MlperfMigError, ValueError):
    """A missing or malformed dataset folder, map file or vocabulary."""


class OutputDirError(MlperfMigError, OSError):
    """An output folder that cannot be created or written."""


# --- runner ---------------------------------------------------------------------------------
class WorkerError(MlperfMigError, RuntimeError):
    """A worker process crashed, raised or hung."""


class PlacementError(MlperfMigError, RuntimeError):
    """No way to run the requested layout on this machine (for example a GPU without MIG)."""


# --- submission -----------------------------------------------------------------------------
class SubmissionError(MlperfMigError, ValueError):
    """A submission tree that cannot be written, or inputs it cannot be written from."""


class ClusterError(MlperfMigError, RuntimeError):
    """A Ray cluster that cannot be reached or used, or a layout it cannot hold."""


# --- what the project reads back ------------------------------------------------------------
class UntrustedPathError(MlperfMigError, ValueError):
    """A path or name read from a results folder, index, cache or tree that would leave its
    folder: `..`, an absolute path, a symlink out, or a name outside its allowed pattern."""
