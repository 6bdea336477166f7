"""The Python package refuses a compiled core built from other C headers than it was written
for (IG_API_VERSION in native/include/infinigram.h), with a message that says how to rebuild."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from infinigram_hf._core.native import C_API_VERSION, check_api_version, lib


def test_the_built_core_matches_this_code():
    assert lib.IG_API_VERSION == lib.ig_api_version() == C_API_VERSION
    check_api_version(lib)


def test_a_core_of_another_version_is_refused():
    other = SimpleNamespace(IG_API_VERSION=C_API_VERSION + 1, ig_api_version=lambda: C_API_VERSION + 1)
    with pytest.raises(ImportError, match=rf"C API version {C_API_VERSION + 1}.*needs version {C_API_VERSION}.*pip install"):
        check_api_version(other)


def test_header_and_library_that_disagree_are_refused():
    mixed = SimpleNamespace(IG_API_VERSION=C_API_VERSION, ig_api_version=lambda: C_API_VERSION + 1)
    with pytest.raises(ImportError, match=rf"library reports {C_API_VERSION + 1}"):
        check_api_version(mixed)


def test_a_core_older_than_versioning_is_refused():
    stale = SimpleNamespace(ig_count=lambda *a: 0)  # built before IG_API_VERSION existed
    with pytest.raises(ImportError, match=r"unknown \(older than versioning\).*reports none"):
        check_api_version(stale)
