"""The workload readers stay plain Python: no HTTP framework, no pydantic, no Kubernetes client."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_package_loads_no_framework() -> None:
    code = (
        "import sys, service.workloads; "
        "print(sorted(m for m in ('fastapi', 'pydantic', 'starlette', 'kubernetes') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
