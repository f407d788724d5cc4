"""Test-suite configuration."""

import os
import tempfile

import pytest


def pytest_configure(config):
    """Keep the suite out of the user's real disk cache: one temporary folder for the session (set before
    any test imports splyce, and inherited by the subprocesses tests start)."""
    os.environ["SPLYCE_CACHE_DIR"] = tempfile.mkdtemp(prefix="splyce-test-cache-")


@pytest.fixture(autouse=True)
def _fresh_disk_cache(tmp_path_factory, monkeypatch):
    """Each test starts with an empty disk cache, so compile counts do not depend on test order (a folder of
    its own, not inside the test's ``tmp_path``, which tests list)."""
    monkeypatch.setenv("SPLYCE_CACHE_DIR", str(tmp_path_factory.mktemp("splyce-cache")))
