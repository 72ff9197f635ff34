"""The one line a wrong ``--source`` gets names the URI that would work (issue 48)."""

from __future__ import annotations

import pytest

from vsbench.abid.download import no_abid_objects


@pytest.mark.parametrize(("source", "prefix", "keys", "above"), [
    ("s3://bucket/bin-images", "bin-images/", ["bin-images/1.jpg", "bin-images/2.jpg"], "s3://bucket"),
    ("s3://bucket/abid/metadata/", "abid/metadata/", ["abid/metadata/1.json"], "s3://bucket/abid"),
])
def test_a_source_one_level_too_deep_names_the_folder_above(source, prefix, keys, above):
    line = no_abid_objects(source, prefix, keys)
    assert "\n" not in line
    assert f"use the folder above it, {above}, as --source" in line, line


def test_a_source_above_the_abid_folders_names_where_they_sit():
    line = no_abid_objects("s3://bucket", "", ["abid/bin-images/1.jpg"])
    assert line.endswith("ABID keys sit under s3://bucket/abid: use that as --source"), line


def test_an_unrelated_listing_gets_no_guess():
    line = no_abid_objects("s3://bucket/photos", "photos/", ["photos/cat.png"])
    assert "--source" not in line and "none named photos/bin-images/<id>.jpg" in line, line
