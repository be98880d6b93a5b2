"""The estimator's version: a release number plus a digest of the formulas' source.

Every estimate response carries it, and the contract says it changes whenever a formula does.
Deriving part of it from the source of this package makes that automatic: no formula can
change without the version changing, whether or not someone remembers to bump the number.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

RELEASE = "1.0"


def _source_digest() -> str:
    digest = hashlib.sha256()
    root = Path(__file__).parent
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        # Normalized line endings: the same source gives the same digest on every checkout.
        digest.update(path.read_bytes().replace(b"\r\n", b"\n"))
    return digest.hexdigest()[:10]


ESTIMATOR_VERSION = f"{RELEASE}+{_source_digest()}"
