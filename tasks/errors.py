"""The project's own error types. The CLI turns these (and only these) into one-line messages."""

from __future__ import annotations


class VlmforgeError(Exception):
    """Base of every error the CLI reports without a traceback."""


class ReleaseError(VlmforgeError):
    """The release cannot be read as a whole (missing folder, unknown subset...)."""


class ConfigError(VlmforgeError):
    """An option or option combination is invalid."""


class OutputError(VlmforgeError):
    """The output folder cannot be used as asked."""


class GateFailed(VlmforgeError):
    """One or more subsets failed their quality gate and were held back."""
