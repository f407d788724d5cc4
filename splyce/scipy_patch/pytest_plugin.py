"""pytest plugin: a whole test session with ``splyce.patch_scipy()`` on.

    python -m pytest -p splyce.scipy_patch.pytest_plugin --pyargs scipy.sparse.tests.test_base

``--splyce-route-small`` serves eligible calls of any size (scipy's test matrices are small: with the
measured break-even sizes few of them would be served); ``--splyce-off`` runs the same session unpatched;
``--splyce-outcomes=FILE`` writes each test's outcome as JSON (ids pytest takes back, to rerun failures).
The switch goes on before collection (module-level code of the tests runs patched too) and off at the end.
The terminal summary prints the per-op counts of ``splyce.scipy_patch_stats()``; with the environment
variable ``SPLYCE_SCIPY_PATCH_STATS=path`` they are also written to ``path`` as JSON (tests read them).
"""

from __future__ import annotations

import json
import os

from splyce import scipy_patch

STATS_ENV = "SPLYCE_SCIPY_PATCH_STATS"


def pytest_addoption(parser):
    parser.addoption("--splyce-route-small", action="store_true",
                     help="splyce.patch_scipy(route_small=True): serve eligible calls below the break-even sizes "
                          "too (test matrices are small)")
    parser.addoption("--splyce-off", action="store_true",
                     help="leave the switch off (the same run unpatched, for comparison)")
    parser.addoption("--splyce-outcomes", default=None,
                     help="write {test id: passed / failed / skipped} as JSON to this path (test ids with absolute "
                          "file paths: they can be passed back to pytest)")


_outcomes: dict = {}
_ids: dict = {}


def pytest_configure(config):
    if not config.getoption("--splyce-off"):
        scipy_patch.patch_scipy(route_small=config.getoption("--splyce-route-small"))


def pytest_collection_modifyitems(session, config, items):
    for item in items:
        _ids[item.nodeid] = "::".join([str(item.path), *item.nodeid.split("::")[1:]])


def pytest_runtest_logreport(report):
    test = _ids.get(report.nodeid, report.nodeid)
    if report.failed:
        _outcomes[test] = "failed"
    elif report.skipped and (report.when != "call" or not hasattr(report, "wasxfail")):
        _outcomes.setdefault(test, "skipped")
    elif report.skipped:
        _outcomes.setdefault(test, "xfailed")
    elif report.when == "call":
        _outcomes.setdefault(test, "passed")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    stats = scipy_patch.scipy_patch_stats()
    served = sum(s["served"] for s in stats.values())
    fell_back = sum(sum(s["fallback"].values()) for s in stats.values())
    terminalreporter.section("splyce.patch_scipy")
    terminalreporter.write_line(f"calls served by splyce: {served}, fell back to scipy: {fell_back}")
    for op, s in stats.items():
        reasons = ", ".join(f"{k} {v}" for k, v in s["fallback"].items()) or "-"
        terminalreporter.write_line(f"  {op}: served {s['served']}; fell back: {reasons}")


def pytest_unconfigure(config):
    outcomes = config.getoption("--splyce-outcomes")
    if outcomes:
        with open(outcomes, "w") as f:
            json.dump(_outcomes, f, indent=0)
    path = os.environ.get(STATS_ENV)
    if path:
        with open(path, "w") as f:
            json.dump(scipy_patch.scipy_patch_stats(), f, indent=1)
    scipy_patch.unpatch_scipy()
