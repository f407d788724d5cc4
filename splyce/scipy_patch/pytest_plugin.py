"""pytest plugin: a whole test session with ``splyce.patch_scipy()`` on.

    python -m pytest -p splyce.scipy_patch.pytest_plugin --pyargs scipy.sparse.tests.test_base

``--splyce-route-small`` serves eligible calls of any size (scipy's test matrices are small: with the
measured break-even sizes few of them would be served). The switch goes on before collection (so module-level code of the tests runs patched too) and off at the end.
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


def pytest_configure(config):
    scipy_patch.patch_scipy(route_small=config.getoption("--splyce-route-small"))


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
    path = os.environ.get(STATS_ENV)
    if path:
        with open(path, "w") as f:
            json.dump(scipy_patch.scipy_patch_stats(), f, indent=1)
    scipy_patch.unpatch_scipy()
