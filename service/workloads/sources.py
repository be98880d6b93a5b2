"""Values that remember where they were read, and the one error shape of the readers.

Every value a reader hands back says where it came from: an argv position (``argv[5]``), a
container field (``spec.template.spec.containers[0].args[2]``), an environment variable that
was expanded into a word, or the engine's own default. A scheduler that is told "does not
fit" can then point its user at the exact field to change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["ReadProblem", "Sourced", "Token", "WorkloadError"]

T = TypeVar("T")


@dataclass(frozen=True)
class Sourced(Generic[T]):
    """A value and where it was read: a JSON path, an argv position, ``default``."""

    value: T
    source: str


@dataclass(frozen=True)
class Token:
    """One word of a command line and where it came from (``argv[3]``, ``args[0] word 4``)."""

    text: str
    source: str


@dataclass(frozen=True)
class ReadProblem:
    """Why an input could not be read: the field at fault, what was wrong, how to fix it.

    ``pod_detail`` and ``pod_fix`` say it to a Pod's author, where ``detail`` and ``fix`` name
    fields of the service's own requests (``hf_config``, ``gpu_memory_bytes``) that a Pod
    cannot set: admission warnings and extender errors use `pod_message`."""

    field: str
    detail: str
    fix: str | None = None
    pod_detail: str | None = None
    pod_fix: str | None = None

    def message(self) -> str:
        """One line for a log, a warning or a problem document's ``detail``."""
        text = f"{self.field}: {self.detail}"
        return f"{text} ({self.fix})" if self.fix else text

    def pod_message(self) -> str:
        """`message` as a Pod's author can act on it (admission, the scheduler extender)."""
        text = f"{self.field}: {self.pod_detail or self.detail}"
        fix = self.pod_fix or self.fix
        return f"{text} ({fix})" if fix else text


class WorkloadError(ValueError):
    """A command line or object that cannot be read as asked; carries one `ReadProblem`."""

    def __init__(self, field: str, detail: str, fix: str | None = None) -> None:
        self.problem = ReadProblem(field=field, detail=detail, fix=fix)
        super().__init__(self.problem.message())
