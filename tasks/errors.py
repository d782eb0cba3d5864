"""The project's own error types. The CLI turns these (and only these) into one-line messages."""

from __future__ import annotations

from ..schemas.redact import redact


class VlmforgeError(Exception):
    """Base of every error the CLI reports without a traceback. String arguments are passed through
    :func:`~vlmforge.schemas.redact.redact`, so a URL's credentials never reach a message, a log or a
    manifest."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact(a) if isinstance(a, str) else a for a in args))


class ReleaseError(VlmforgeError):
    """The release cannot be read as a whole (missing folder, unknown subset...)."""


class ConfigError(VlmforgeError):
    """An option or option combination is invalid."""


class UsageError(ConfigError):
    """A mistake on the command line, found before start-up: one line, with a hint (exit 2). Here, not in
    the command line's package, because the runtime refuses some (``--ray-address``, a held run lock) too."""

    def __init__(self, problem: str, hint: str | None = None) -> None:
        super().__init__(f"{problem}; {hint}" if hint else problem)


class OutputError(VlmforgeError):
    """The output folder cannot be used as asked."""


class GateFailed(VlmforgeError):
    """One or more subsets failed their quality gate and were held back."""
