"""``profile_problems``: every line ``abid train``, ``abid run-local`` and a submitted ABID pipeline print
for a bad profile or bad overrides, checked whole (issue 48's checks; issue 49: a guard whose every
branch and word a test pins, so that a mutant of it cannot pass)."""

from __future__ import annotations

import json

import pytest

from vsbench.abid.profiles import PROFILES, TrainProfile, profile_problems

FIELDS = ", ".join(TrainProfile.model_fields)
NOT_AN_OBJECT = "--overrides: must be a JSON object of profile fields, e.g. '{\"epochs\": 2}'"
UNKNOWN = "--profile 'fast': not a training profile; choose demo or full"


def _not_json(text: str) -> str:
    try:
        json.loads(text)
    except ValueError as exc:
        return f"--overrides: not JSON ({exc}); give an object of profile fields, e.g. '{{\"epochs\": 2}}'"
    raise AssertionError(f"{text!r} is JSON")


@pytest.mark.parametrize("name", sorted(PROFILES))
@pytest.mark.parametrize("overrides", ["", "{}", {}, '{"epochs": 2}', {"epochs": 2, "image_size": 32}])
def test_a_known_profile_with_good_overrides_has_no_problem(name: str, overrides) -> None:
    assert profile_problems(name, overrides) == []


def test_the_profiles_are_named_in_sorted_order_joined_by_or() -> None:
    assert sorted(PROFILES) == ["demo", "full"]  # the line below spells them
    assert profile_problems("fast", {}) == [UNKNOWN]
    assert profile_problems("Demo", "") == [UNKNOWN.replace("'fast'", "'Demo'")]


@pytest.mark.parametrize("text", ["nope", "{epochs: 2}", "{", "[1"])
def test_overrides_that_are_not_json_are_one_line_with_the_parsers_words(text: str) -> None:
    assert profile_problems("demo", text) == [_not_json(text)]
    assert profile_problems("fast", text) == [UNKNOWN, _not_json(text)]  # both: the profile's line first


@pytest.mark.parametrize("overrides", ["[1]", "2", '"epochs"', "null", [1], 2, None])
def test_overrides_that_are_no_object_are_one_line(overrides) -> None:
    assert profile_problems("demo", overrides) == [NOT_AN_OBJECT]
    assert profile_problems("fast", overrides) == [UNKNOWN, NOT_AN_OBJECT]


def test_an_unknown_key_names_the_nearest_field_and_every_field() -> None:
    assert profile_problems("demo", '{"epoch": 2}') == [
        f"--overrides: 'epoch' is not a profile field (did you mean 'epochs'?); the fields are {FIELDS}"]
    assert profile_problems("demo", {"zzz": 1}) == [f"--overrides: 'zzz' is not a profile field; the fields are {FIELDS}"]


def test_every_unknown_key_is_its_own_line_and_the_known_ones_are_still_checked() -> None:
    assert profile_problems("demo", {"zzz": 1, "epoch": 2, "batch_size": 0}) == [
        f"--overrides: 'zzz' is not a profile field; the fields are {FIELDS}",
        f"--overrides: 'epoch' is not a profile field (did you mean 'epochs'?); the fields are {FIELDS}",
        "--overrides: batch_size: Input should be greater than or equal to 1 (got 0)"]


def test_an_unknown_profile_still_lists_unknown_keys_but_judges_no_values() -> None:
    """Values are judged against a profile; without one only the keys can be."""
    assert profile_problems("fast", {"zzz": 1, "batch_size": 0}) == [
        UNKNOWN, f"--overrides: 'zzz' is not a profile field; the fields are {FIELDS}"]


def test_each_refused_value_names_its_field_what_it_must_be_and_what_was_given() -> None:
    assert profile_problems("demo", {"batch_size": 0, "lr": "x", "arch": "vgg"}) == [
        "--overrides: batch_size: Input should be greater than or equal to 1 (got 0)",
        "--overrides: lr: Input should be a valid number, unable to parse string as a number (got 'x')",
        "--overrides: arch: Input should be 'resnet34' or 'resnet18' (got 'vgg')"]


def test_a_rule_across_fields_is_named_as_the_profiles_without_an_input() -> None:
    """The demo profile draws 4 pairs a row: a batch of 30 holds no whole rows."""
    assert PROFILES["demo"].pairs_per_row == 4
    assert profile_problems("demo", {"batch_size": 30}) == [
        "--overrides: the profile: Value error, batch_size 30 is not a multiple of pairs_per_row 4: "
        "a siamese batch holds whole rows of pairs"]
    assert profile_problems("demo", {"batch_size": 32}) == []


def test_the_options_are_named_as_the_caller_spells_them() -> None:
    lines = profile_problems("fast", '{"epoch": 2}', profile_option="--train-profile",
                             overrides_option="--train-overrides")
    assert lines == ["--train-profile 'fast': not a training profile; choose demo or full",
                     "--train-overrides: 'epoch' is not a profile field (did you mean 'epochs'?); the fields are "
                     f"{FIELDS}"]
    assert profile_problems("demo", "nope", overrides_option="--arg train_overrides")[0].startswith(
        "--arg train_overrides: not JSON (")
    assert profile_problems("demo", [1], overrides_option="-o") == [NOT_AN_OBJECT.replace("--overrides", "-o")]
    assert profile_problems("demo", {"lr": 0}, overrides_option="-o") == [
        "-o: lr: Input should be greater than 0 (got 0)"]


def test_get_profile_refuses_an_unknown_name_naming_the_ones_there_are() -> None:
    from vsbench.abid.profiles import get_profile

    with pytest.raises(ValueError, match=r"^unknown training profile 'fast'; choose from \['demo', 'full'\]$"):
        get_profile("fast")
    assert get_profile("demo", epochs=2).epochs == 2 and get_profile("demo").epochs == PROFILES["demo"].epochs
