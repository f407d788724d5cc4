"""Test-suite configuration."""

import inspect
import os
import re
import sys
import tempfile

import pytest

# The tests mirror the package (tests/native, tests/runtime, ...). pytest puts each test module's own folder
# on sys.path; a few modules import another folder's test module for its cases and checks (the SpGEMM rule's
# cases, the one-engine bit-for-bit comparisons), and the corpus modules sit beside their tests: every test
# folder is importable by its module's base name, as when the suite was one flat folder (names are unique).
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(_HERE, d) for d in sorted(os.listdir(_HERE))
                if os.path.isdir(os.path.join(_HERE, d)) and not d.startswith((".", "_"))]

# One disk cache for the whole session: a kernel compiled by one test (0.5-4 s of MLIR and LLVM each) is
# loaded by every later test that asks for the same kernel (the bench's tiny runs and the notebook that
# repeats them, tests sharing operands and options), and by the subprocesses tests start (they inherit it).
SHARED_CACHE_DIR = ""

# A test gets an empty cache folder of its own instead when what it checks could depend on what was compiled
# before it: its module counts compiles or looks at the disk cache, or the test patches code or settings,
# redirects the cache, or watches warnings or log records (a kernel loaded from disk never runs the compiler,
# so it emits neither).
_COUNTS_COMPILES = re.compile(r"cache_info|\.compiles\b|disk_hits|disk_cache|clear_cache|cache_clear")
_WATCHES_THE_COMPILER = re.compile(r"SPLYCE_CACHE_DIR|SPLYCE_DISABLE_DISK_CACHE|pytest\.warns|catch_warnings")
_WATCHING_FIXTURES = {"monkeypatch", "caplog", "recwarn"}


def pytest_configure(config):
    """Keep the suite out of the user's real disk cache: one temporary folder for the session (set before
    any test imports splyce, and inherited by the subprocesses tests start)."""
    global SHARED_CACHE_DIR
    # pytest-xdist's workers inherit the controller's environment: they share its folder, so a kernel is
    # compiled once for the run, not once per worker (entries are written atomically under a lock per key)
    inherited = os.environ.get("SPLYCE_TEST_SHARED_CACHE")
    if inherited and os.environ.get("PYTEST_XDIST_WORKER") and os.path.isdir(inherited):
        SHARED_CACHE_DIR = inherited
    else:
        SHARED_CACHE_DIR = tempfile.mkdtemp(prefix="splyce-test-cache-")
        os.environ["SPLYCE_TEST_SHARED_CACHE"] = SHARED_CACHE_DIR
    os.environ["SPLYCE_CACHE_DIR"] = SHARED_CACHE_DIR


def _source(obj) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""


def _needs_own_cache(item) -> bool:
    if _COUNTS_COMPILES.search(_source(item.module)) or _WATCHES_THE_COMPILER.search(_source(item.function)):
        return True
    return bool(_WATCHING_FIXTURES & set(item.fixturenames))


@pytest.fixture(autouse=True)
def _disk_cache_dir(request, tmp_path_factory):
    """The session's shared cache, or an empty folder of this test's own (see ``_needs_own_cache``; not
    inside the test's ``tmp_path``, which tests list). Set without ``monkeypatch`` so that a test's own use
    of it still shows in its fixture names."""
    own = _needs_own_cache(request.node)
    saved = os.environ.get("SPLYCE_CACHE_DIR")
    os.environ["SPLYCE_CACHE_DIR"] = str(tmp_path_factory.mktemp("splyce-cache")) if own else SHARED_CACHE_DIR
    yield
    if saved is None:
        os.environ.pop("SPLYCE_CACHE_DIR", None)
    else:
        os.environ["SPLYCE_CACHE_DIR"] = saved


def pytest_collection_modifyitems(config, items):
    """The slow modules first (stable order otherwise): under ``pytest -n auto`` (CI) the minutes-long tests
    (scipy's own suite patched, every op / format / dtype in a child, the property sweeps) then start at once
    on separate workers instead of one of them starting last and running alone."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
