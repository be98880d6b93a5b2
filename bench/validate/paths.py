"""Where the validation harness finds its measured data and the reference tracer.

Both live in the repository, so a fresh clone validates and tests with nothing beside it:
``data/measured/`` holds the published measurements (each file's source in its README), and
``reference_tracer/`` the scripts that run real transformers model code under fake tensors.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
MEASURED = HERE / "data" / "measured"
TRACER_DIR = HERE / "reference_tracer"

__all__ = ["MEASURED", "TRACER_DIR"]
