"""The ``admission.k8s.io/v1`` AdmissionReview a validating webhook receives and answers.

Follows the Go types in k8s.io/api ``admission/v1/types.go`` (kubernetes/kubernetes
``staging/src/k8s.io/api/admission/v1/types.go``); JSON keys are their struct tags:

- ``AdmissionReview``: ``apiVersion``, ``kind``, ``request``, ``response``.
- ``AdmissionRequest``: ``uid``, ``kind`` (a ``GroupVersionKind``: ``group``, ``version``,
  ``kind``), ``resource`` (``group``, ``version``, ``resource``), ``subResource``, ``name``,
  ``namespace``, ``operation`` (``CREATE``, ``UPDATE``, ``DELETE``, ``CONNECT``), ``userInfo``,
  ``object``, ``oldObject``, ``dryRun`` (``*bool``, false when absent), ``options``.
- ``AdmissionResponse``: ``uid`` (copied from the request), ``allowed``, ``status`` (a
  ``metav1.Status``: ``status``, ``message``, ``reason``, ``code``; consulted only when
  denied), ``patch``/``patchType`` (mutating webhooks only), ``auditAnnotations``,
  ``warnings`` ("Limit warnings to 120 characters if possible. Warnings over 256 characters
  and large numbers of warnings may be truncated.").

The API server requires the response to carry the same ``apiVersion`` and ``kind`` and the
request's ``uid``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from service.workloads.sources import ReadProblem

__all__ = [
    "ADMISSION_API_VERSION",
    "WARNING_LIMIT",
    "AdmissionRequest",
    "AdmissionResponse",
    "GroupVersionKind",
    "admission_review",
    "read_admission_response",
    "read_admission_review",
]

ADMISSION_API_VERSION = "admission.k8s.io/v1"
WARNING_LIMIT = 256
"""Characters of one warning the API server passes on untruncated."""


@dataclass(frozen=True)
class GroupVersionKind:
    group: str
    version: str
    kind: str


@dataclass(frozen=True)
class AdmissionRequest:
    """The request half of an AdmissionReview, as the API server sends it."""

    uid: str
    kind: GroupVersionKind
    operation: str
    obj: Mapping[str, object] | None
    """``request.object``: the object being admitted; None for DELETE and CONNECT."""
    namespace: str | None = None
    name: str | None = None
    dry_run: bool = False
    """Nothing will be persisted: a webhook with side effects must not act on it."""
    old_obj: Mapping[str, object] | None = None
    """``request.oldObject``: the stored object on UPDATE and DELETE."""
    resource: str | None = None
    sub_resource: str | None = None
    username: str | None = None


@dataclass(frozen=True)
class AdmissionResponse:
    """A webhook's answer; ``code`` and ``message`` go into ``status`` (read when denied)."""

    uid: str
    allowed: bool
    code: int | None = None
    message: str | None = None
    reason: str | None = None
    """A ``metav1.StatusReason`` such as ``Forbidden``."""
    warnings: tuple[str, ...] = ()
    audit_annotations: Mapping[str, str] = field(default_factory=dict)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def read_admission_review(body: object) -> AdmissionRequest | ReadProblem:
    """The request of an ``admission.k8s.io/v1`` AdmissionReview; never raises."""
    if not isinstance(body, Mapping):
        return ReadProblem("body", "expected an AdmissionReview JSON object")
    if body.get("apiVersion") != ADMISSION_API_VERSION or body.get("kind") != "AdmissionReview":
        return ReadProblem(
            "apiVersion",
            f"expected apiVersion {ADMISSION_API_VERSION} and kind AdmissionReview, got "
            f"{body.get('apiVersion')!r} and {body.get('kind')!r}",
            'set admissionReviewVersions: ["v1"] in the webhook configuration',
        )
    request = body.get("request")
    if not isinstance(request, Mapping):
        return ReadProblem("request", "the AdmissionReview has no request")
    uid = _text(request.get("uid"))
    if not uid:
        return ReadProblem("request.uid", "the request has no uid")
    gvk = request.get("kind")
    gvk = gvk if isinstance(gvk, Mapping) else {}
    kind = GroupVersionKind(
        _text(gvk.get("group")) or "", _text(gvk.get("version")) or "", _text(gvk.get("kind")) or ""
    )
    operation = _text(request.get("operation")) or ""
    obj = request.get("object")
    old = request.get("oldObject")
    resource = request.get("resource")
    user = request.get("userInfo")
    return AdmissionRequest(
        uid=uid,
        kind=kind,
        operation=operation,
        obj=obj if isinstance(obj, Mapping) else None,
        namespace=_text(request.get("namespace")) or None,
        name=_text(request.get("name")) or None,
        dry_run=request.get("dryRun") is True,
        old_obj=old if isinstance(old, Mapping) else None,
        resource=_text(resource.get("resource")) if isinstance(resource, Mapping) else None,
        sub_resource=_text(request.get("subResource")) or None,
        username=_text(user.get("username")) if isinstance(user, Mapping) else None,
    )


def _warning(text: str) -> str:
    return text if len(text) <= WARNING_LIMIT else text[: WARNING_LIMIT - 1] + "…"


def admission_review(response: AdmissionResponse) -> dict[str, object]:
    """The AdmissionReview JSON that carries ``response`` back to the API server.

    Warnings longer than `WARNING_LIMIT` characters are cut there, as the API server would.
    """
    body: dict[str, object] = {"uid": response.uid, "allowed": response.allowed}
    if response.code is not None or response.message is not None or response.reason:
        status: dict[str, object] = {"status": "Success" if response.allowed else "Failure"}
        if response.message is not None:
            status["message"] = response.message
        if response.reason:
            status["reason"] = response.reason
        if response.code is not None:
            status["code"] = response.code
        body["status"] = status
    if response.warnings:
        body["warnings"] = [_warning(w) for w in response.warnings]
    if response.audit_annotations:
        body["auditAnnotations"] = dict(response.audit_annotations)
    return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": body}


def read_admission_response(body: object) -> AdmissionResponse | ReadProblem:
    """The response of an AdmissionReview (what a client of the webhook reads); never raises."""
    if not isinstance(body, Mapping) or body.get("apiVersion") != ADMISSION_API_VERSION:
        return ReadProblem("apiVersion", f"expected an {ADMISSION_API_VERSION} AdmissionReview")
    response = body.get("response")
    if not isinstance(response, Mapping):
        return ReadProblem("response", "the AdmissionReview has no response")
    uid = _text(response.get("uid"))
    allowed = response.get("allowed")
    if not uid or not isinstance(allowed, bool):
        return ReadProblem("response", "a response needs uid and allowed")
    status = response.get("status")
    status = status if isinstance(status, Mapping) else {}
    code = status.get("code")
    raw_warnings = response.get("warnings")
    warnings: Sequence[object] = raw_warnings if isinstance(raw_warnings, list) else []
    annotations = response.get("auditAnnotations")
    return AdmissionResponse(
        uid=uid,
        allowed=allowed,
        code=code if isinstance(code, int) and not isinstance(code, bool) else None,
        message=_text(status.get("message")),
        reason=_text(status.get("reason")),
        warnings=tuple(w for w in warnings if isinstance(w, str)),
        audit_annotations={k: v for k, v in (annotations or {}).items() if isinstance(v, str)}
        if isinstance(annotations, Mapping)
        else {},
    )
