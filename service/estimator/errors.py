"""Domain errors raised by the estimator and the catalogs.

The HTTP layer maps them to RFC 9457 problem documents; nothing here knows about HTTP.
"""

from __future__ import annotations


class EstimatorError(Exception):
    """Base class: a request that cannot be answered as asked."""

    def __init__(self, detail: str, *, field: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.field = field


class InvalidRequest(EstimatorError):
    """The request is well-formed but cannot be estimated (HTTP 422); `field` names the culprit."""


class InvalidConfig(InvalidRequest):
    """A model configuration is malformed or self-contradictory (HTTP 422)."""


class UnsupportedArchitecture(InvalidRequest):
    """The configuration describes a model family this service does not model (HTTP 422)."""


class NotFound(EstimatorError):
    """An id names no catalog entry (HTTP 404)."""
