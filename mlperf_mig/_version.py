"""The library's version: a base fact that the submission's files and the package both name."""

__version__ = "0.1.0"
