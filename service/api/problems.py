"""RFC 9457 problem documents: the one error shape of the API, and the handlers that render it.

Routes raise domain errors (`service.estimator.errors`) or let FastAPI raise its own; every one of
them leaves the service as `application/problem+json` with `type`, `title`, `status`, `detail`,
and, for validation errors, an `errors` list naming each offending field.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.api.concurrency import Cancelled, DeadlineExceeded, Overloaded
from service.api.cost import BatchOverBudget
from service.estimator.errors import EstimatorError, NotFound

PROBLEM_MEDIA_TYPE = "application/problem+json"
logger = logging.getLogger("service.errors")

# A problem's `type` is a URI reference naming the kind of problem; titles are fixed per type.
_TITLES: dict[int, tuple[str, str]] = {
    400: ("/problems/malformed-request", "Malformed request"),
    401: ("/problems/unauthenticated", "Authentication required"),
    403: ("/problems/forbidden", "Client certificate required"),
    404: ("/problems/not-found", "Not found"),
    405: ("/problems/method-not-allowed", "Method not allowed"),
    408: ("/problems/request-timeout", "Request body not received in time"),
    413: ("/problems/body-too-large", "Request body too large"),
    414: ("/problems/uri-too-long", "Request target too long"),
    415: ("/problems/unsupported-media-type", "Unsupported media type"),
    422: ("/problems/validation-error", "Request cannot be estimated"),
    431: ("/problems/header-too-large", "Request header fields too large"),
    # nginx's convention for a request whose client left before the answer; never seen by one.
    499: ("/problems/client-closed-request", "Client closed the request"),
    500: ("/problems/internal-error", "Internal server error"),
    503: ("/problems/unavailable", "Service unavailable"),
}
# Problems of one status that differ in kind: (type, title) by a short name, for `kind=`.
KINDS: dict[str, tuple[str, str]] = {
    "header-timeout": ("/problems/header-timeout", "Request head not received in time"),
    "overloaded": ("/problems/overloaded", "Too many estimates in progress"),
    "deadline-exceeded": ("/problems/deadline-exceeded", "Estimate did not finish in time"),
    "shutting-down": ("/problems/shutting-down", "Server shutting down"),
    "over-budget": ("/problems/over-budget", "Request costs more than its budget"),
}
# A 422 whose every error lies in the query string or path is a bad query, not a bad estimate.
_INVALID_QUERY = ("/problems/invalid-query", "Invalid query parameters")


class FieldError(BaseModel):
    """One offending field of a request."""

    field: str = Field(description="Dotted path of the field, e.g. `lora.rank` or `items.3.model`.")
    message: str = Field(description="What is wrong and what is allowed.")
    type: str = Field(description="Machine-readable error kind, e.g. `missing`, `int_type`.")


class Problem(BaseModel):
    """An RFC 9457 problem document."""

    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "type": "/problems/validation-error",
                "title": "Request cannot be estimated",
                "status": 422,
                "detail": "1 invalid field: batch_size: Input should be greater than or equal to 1",
                "errors": [
                    {
                        "field": "batch_size",
                        "message": "Input should be greater than or equal to 1",
                        "type": "greater_than_equal",
                    }
                ],
            }
        }
    )

    type: str = Field(description="URI reference that names the kind of problem.")
    title: str = Field(description="Short summary of the kind of problem.")
    status: int = Field(description="The HTTP status code.")
    detail: str = Field(description="What went wrong with this request and how to fix it.")
    instance: str | None = Field(None, description="The request path.")
    request_id: str | None = Field(None, description="The X-Request-ID of the request.")
    errors: list[FieldError] | None = Field(None, description="Each offending field.")


def problem_body(
    status: int,
    detail: str,
    *,
    errors: Sequence[dict[str, str]] | None = None,
    instance: str | None = None,
    request_id: str | None = None,
    kind: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """The JSON body of a problem document (also used for items of a batch); `kind` overrides
    the status's (type, title)."""
    type_, title = kind or _TITLES.get(status, ("about:blank", "Error"))
    body: dict[str, Any] = {"type": type_, "title": title, "status": status, "detail": detail}
    if instance is not None:
        body["instance"] = instance
    if request_id is not None:
        body["request_id"] = request_id
    if errors is not None:
        body["errors"] = list(errors)
    return body


def problem_bytes(status: int, detail: str, **kwargs: Any) -> bytes:
    """A problem document serialized, for code that writes responses itself (middleware, the
    HTTP protocol)."""
    return json.dumps(problem_body(status, detail, **kwargs), separators=(",", ":")).encode()


def problem_response(request: Request, status: int, detail: str, **kwargs: Any) -> JSONResponse:
    body = problem_body(
        status,
        detail,
        instance=request.url.path,
        request_id=getattr(request.state, "request_id", None),
        **kwargs,
    )
    return JSONResponse(body, status_code=status, media_type=PROBLEM_MEDIA_TYPE)


def _field_path(loc: Sequence[Any]) -> str:
    """('body', 'lora', 'rank') -> 'lora.rank'; the leading 'body' is what every field is in."""
    parts = [str(p) for p in loc]
    if parts and parts[0] in {"body", "query", "path"}:
        parts = parts[1:]
    return ".".join(parts) or "body"


def validation_errors(raw: Sequence[Any]) -> list[dict[str, str]]:
    """pydantic's error list, reduced to field/message/type (the offending input is not echoed:
    it may be a megabyte of config)."""
    out = []
    for err in raw:
        message = str(err.get("msg", "invalid value"))
        ctx = err.get("ctx") or {}
        if err.get("type") == "extra_forbidden":
            message = "Unknown field; remove it (see the schema at /openapi.json for the fields)"
        elif err.get("type") == "literal_error" and "expected" in ctx:
            message = f"Input should be one of {ctx['expected']}"
        out.append(
            {
                "field": _field_path(err.get("loc", ())),
                "message": message,
                "type": str(err.get("type", "value_error")),
            }
        )
    return out


def summarize(errors: Sequence[dict[str, str]]) -> str:
    shown = "; ".join(f"{e['field']}: {e['message']}" for e in errors[:5])
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    noun = "field" if len(errors) == 1 else "fields"
    return f"{len(errors)} invalid {noun}: {shown}{more}"


async def _on_validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    raw = exc.errors()
    if any(e.get("type") == "json_invalid" for e in raw):
        ctx = raw[0].get("ctx") or {}
        return problem_response(
            request,
            400,
            f"The body is not valid JSON: {ctx.get('error', 'decode error')}; "
            "send one JSON object.",
        )
    errors = validation_errors(raw)
    in_query = bool(raw) and all(
        tuple(e.get("loc", ()))[:1] in (("query",), ("path",)) for e in raw
    )
    kind = _INVALID_QUERY if in_query else None
    return problem_response(request, 422, summarize(errors), errors=errors, kind=kind)


async def _on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    status = exc.status_code
    if status == 404:
        detail = f"No route {request.url.path}; see /openapi.json for the API."
    elif status == 405:
        detail = f"{request.method} is not allowed on {request.url.path}."
    elif status == 413:
        limit = getattr(request.app.state, "max_body_bytes", None)
        detail = f"The request body exceeds the limit of {limit} bytes; send a smaller body."
    elif status == 400:
        detail = "The body could not be parsed: send UTF-8 JSON (one object)."
    else:
        detail = str(exc.detail)
    response = problem_response(request, status, detail)
    if exc.headers:
        response.headers.update(exc.headers)
    return response


def domain_error_parts(
    exc: EstimatorError, field_prefix: str = ""
) -> tuple[int, list[dict[str, str]] | None]:
    """The status (404 for an unknown id, else 422) and field errors of a domain error;
    `field_prefix` places the field inside a larger body (a batch item)."""
    status = 404 if isinstance(exc, NotFound) else 422
    errors = None
    if exc.field is not None:
        field = field_prefix + exc.field
        errors = [{"field": field, "message": exc.detail, "type": type(exc).__name__}]
    return status, errors


async def _on_domain_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, EstimatorError)
    status, errors = domain_error_parts(exc)
    return problem_response(request, status, exc.detail, errors=errors)


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    # The trace goes to the log, never to the caller; the metrics middleware counts the 500.
    logger.exception("unhandled error on %s %s", request.method, request.url.path)
    return problem_response(
        request, 500, "An unexpected error occurred; it has been logged. Quote the request id."
    )


async def _on_overloaded(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Overloaded | DeadlineExceeded)
    kind = KINDS["overloaded" if isinstance(exc, Overloaded) else "deadline-exceeded"]
    response = problem_response(request, 503, str(exc), kind=kind)
    response.headers["Retry-After"] = str(exc.retry_after_s)
    return response


async def _on_over_budget(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, BatchOverBudget)
    errors = [{"field": "items", "message": str(exc), "type": "over_budget"}]
    return problem_response(request, 413, str(exc), errors=errors, kind=KINDS["over-budget"])


async def _on_cancelled(request: Request, exc: Exception) -> JSONResponse:
    return problem_response(request, 499, "The client disconnected; the work was stopped.")


def install_problem_handlers(app: FastAPI) -> None:
    app.add_exception_handler(Overloaded, _on_overloaded)
    app.add_exception_handler(DeadlineExceeded, _on_overloaded)
    app.add_exception_handler(Cancelled, _on_cancelled)
    app.add_exception_handler(BatchOverBudget, _on_over_budget)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(EstimatorError, _on_domain_error)
    app.add_exception_handler(Exception, _on_unexpected)


# Declared on every route so the OpenAPI document lists each error status a caller can get.
def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {
        status: {
            "model": Problem,
            "description": _TITLES[status][1],
            "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }
