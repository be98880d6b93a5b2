"""Append a `make fuzz` run's summary to bench/results.md (or print it, FUZZ_RESULTS=-).

Reads schemathesis's JUnit report (operations, failures) and its console log (test cases
generated and passed, warnings), and the hostile corpus's outcomes (hostile.json, one per case
of bench/hostile.py), from the report directory bench/fuzz.sh wrote.

Usage: python -m bench.fuzz_report REPORT_DIR EXAMPLES SEED EXIT_STATUS
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from bench import harness

RESULTS = harness.REPO / "bench" / "results.md"


def summary(report_dir: Path, examples: str, seed: str, status: int) -> str:
    junit = sorted(report_dir.glob("junit-*.xml"))
    if not junit:
        raise SystemExit(f"no JUnit report in {report_dir}")
    suite = ET.parse(junit[-1]).getroot()
    operations = suite.findall(".//testcase")
    failed = [
        case.get("name", "?")
        for case in operations
        if case.find("failure") is not None or case.find("error") is not None
    ]
    log = (report_dir / "st.log").read_text(errors="replace")
    cases = re.search(r"(\d+) generated, (\d+) passed(?:, (\d+) failed)?", log)
    warnings = re.findall(r"⚠️ (.+)", log)
    service_errors = sum(
        '"level":"error"' in line
        for line in (report_dir / "service.log").read_text(errors="replace").splitlines()
    )
    hostile_path = report_dir / "hostile.json"
    hostile = json.loads(hostile_path.read_text()) if hostile_path.exists() else []
    hostile_failed = [h for h in hostile if not h["passed"]]
    when = dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    generated = cases.group(1) if cases else "?"
    passed = cases.group(2) if cases else "?"
    lines = [
        "",
        f"## Fuzz (`make fuzz`), {when}",
        "",
        f"schemathesis against `python -m service` (one worker) over its own /openapi.json: "
        f"{examples} examples per operation, phases examples, coverage, fuzzing and stateful, "
        f"positive and negative data, all default checks, seed {seed}. Load average after "
        f"{harness.load_average()}.",
        "",
        f"- Operations: {len(operations)} (the stateful run counted as one); failing: "
        f"**{len(failed)}**{' (' + ', '.join(failed) + ')' if failed else ''}.",
        f"- Test cases: {generated} generated, {passed} passed.",
        f"- Errors in the service log: **{service_errors}**.",
        f"- schemathesis warnings (not failures): {'; '.join(warnings) if warnings else 'none'}.",
        f"- Hostile corpus (bench/hostile.py, issue 18): {len(hostile) - len(hostile_failed)} of "
        f"{len(hostile)} cases pass.",
    ]
    lines += [f"  - fails [{h['section']}] {h['case']}: {h['detail']}" for h in hostile_failed]
    clean = status == 0 and not failed and not service_errors and not hostile_failed
    lines += ["", f"Verdict: **{'PASS' if clean else 'FAIL'}**."]
    return "\n".join(lines) + "\n"


def main() -> int:
    report_dir, examples, seed, status = sys.argv[1:5]
    text = summary(Path(report_dir), examples, seed, int(status))
    target = os.environ.get("FUZZ_RESULTS", str(RESULTS))
    if target == "-":
        print(text)
    else:
        harness.append_result(Path(target), text)
        print(f"fuzz: summary appended to {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
