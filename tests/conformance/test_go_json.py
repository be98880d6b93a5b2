"""The strict decoder and the encoder of the conformance suite fail where Go's rules say so:
checked on hand-made wrong messages, so that a passing conformance test means something."""

from __future__ import annotations

import pytest

from tests.conformance.go_json import GoTypes, check_model

EXTENDER = GoTypes.load("extender_v1_types.go")
ADMISSION = GoTypes.load(
    "admission_v1_types.go", "meta_v1_group_version.go", "meta_v1_type_meta.go"
)
GOOD_FILTER = {
    "Nodes": None,
    "NodeNames": ["a"],
    "FailedNodes": {},
    "FailedAndUnresolvableNodes": None,
    "Error": "",
}


def test_a_well_formed_filter_result_passes() -> None:
    assert EXTENDER.check(GOOD_FILTER, "ExtenderFilterResult") == []


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"Extra": 1}, "unknown field"),
        ({"Error": None}, "expected string"),
        ({"NodeNames": "a"}, "expected an array"),
        ({"FailedNodes": {"a": 3}}, "expected string"),
        (
            {"Nodes": {"items": [{"metadata": {"name": "n"}, "bogus": 1}]}},
            "unknown field of V1Node",
        ),
    ],
)
def test_wrong_filter_results_are_refused(change: dict[str, object], complaint: str) -> None:
    errors = EXTENDER.check({**GOOD_FILTER, **change}, "ExtenderFilterResult")
    assert any(complaint in e for e in errors), errors


def test_a_field_without_omitempty_must_be_present() -> None:
    missing = {k: v for k, v in GOOD_FILTER.items() if k != "Error"}
    assert any("missing" in e for e in EXTENDER.check(missing, "ExtenderFilterResult"))


@pytest.mark.parametrize("score", [True, 1.5, "3", 2**63])
def test_a_score_must_be_an_int64(score: object) -> None:
    assert EXTENDER.check([{"Host": "a", "Score": score}], "HostPriorityList")


def test_the_encoder_writes_nil_as_null_without_tags_and_drops_empty_omitempty_fields() -> None:
    assert EXTENDER.encode("ExtenderArgs", {"Pod": {}}) == {
        "Pod": {},
        "Nodes": None,
        "NodeNames": None,
    }
    response = ADMISSION.encode("AdmissionResponse", {"UID": "u", "Allowed": False})
    assert response == {"uid": "u", "allowed": False}


def test_client_models_refuse_unknown_keys_and_missing_required_fields() -> None:
    assert check_model({"metadata": {}, "items": []}, "V1NodeList") == []
    assert check_model({"metadata": {}}, "V1NodeList")  # items is required
    assert check_model({"spec": {"containers": [{"image": "x"}]}}, "V1Pod")  # name required
    assert check_model({"spec": {"containerz": []}}, "V1Pod")


def test_omitempty_keeps_a_pointer_to_false_and_a_struct() -> None:
    request = ADMISSION.encode(
        "AdmissionRequest",
        {
            "UID": "u",
            "Kind": {},
            "Resource": {},
            "Operation": "CREATE",
            "UserInfo": {},
            "DryRun": False,
        },
    )
    assert request["dryRun"] is False
    assert request["object"] is None and request["oldObject"] is None  # RawExtension: a struct
    assert "subResource" not in request and "name" not in request
