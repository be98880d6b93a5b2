"""Model names resolved with the alias rules (bench/validate/model_resolution.py, the section
"Model names resolved" of docs/accuracy.md): the rules add names and lose none."""

from __future__ import annotations

import csv

import pytest

from bench.validate import model_resolution as m

RESOLVED = ("catalog", "catalog-gguf", "rules", "store")


@pytest.fixture(scope="module")
def outcomes() -> list[m.Outcome]:
    return m.results()


def test_no_name_the_exact_routes_resolved_is_lost(outcomes: list[m.Outcome]) -> None:
    assert all(o.after in RESOLVED for o in outcomes if o.before)


def test_issue_26_names_all_resolve(outcomes: list[m.Outcome]) -> None:
    with m.GATHERED.open() as f:
        named = {r["name"].lower() for r in csv.DictReader(f) if r["note"].startswith("issue 26")}
    issue = [o for o in outcomes if o.name.lower() in named]
    assert len(issue) == len(named) == 13
    # MiniCPM and Qwen2.5-VL resolve since their families' catalog records exist.
    for o in issue:
        assert o.after in RESOLVED, (o.name, o.detail)
        assert o.resolved_to


def test_the_rules_resolve_more_of_the_public_log_names(outcomes: list[m.Outcome]) -> None:
    logs = [o for o in outcomes if not o.source.startswith(("http", "issue"))]
    before = sum(o.before for o in logs)
    after = sum(o.after in RESOLVED for o in logs)
    # 28 -> 46 of 90 names when written; more catalog families only raise `after`.
    assert after >= before + 15
