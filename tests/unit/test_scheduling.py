"""The suite's scheduling under ``pytest -n`` (tests/conftest.py): the tests that share a slow module fixture run on
one worker, which sets the fixture up once.

pytest-xdist's own grouping was lost under pytest 9.2 (xdist 3.8 appends the group to ``item._nodeid``, which the
node's id no longer reads), and the workers parse ``-n 2`` with dist "no", so xdist's loadgroup flag was off there
too: test_check's shipped families (two 90 s ``blr-derive check`` processes) were set up on both workers.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT  # noqa: E402

MODULE = """
    import os
    import pytest

    @pytest.fixture(scope="module")
    def shared():
        with open(os.environ["SETUP_LOG"], "a") as f:
            f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")

    @pytest.mark.slow
    def test_slow(shared):
        pass

    @pytest.mark.parametrize("i", range(8))
    def test_shares_the_fixture(shared, i):
        pass

    @pytest.mark.parametrize("i", range(8))
    def test_independent(i):
        pass
"""


@pytest.mark.slow
def test_a_slow_module_fixture_is_set_up_on_one_worker(tmp_path):
    """A module whose slow test shares a module fixture with 8 others, plus 8 independent tests, under ``-n 2``
    with the suite's conftest: the fixture is set up once, its nine tests all run on that worker."""
    (tmp_path / "test_grouped.py").write_text(textwrap.dedent(MODULE), encoding="utf-8")
    log = tmp_path / "setups.log"
    env = dict(os.environ, SETUP_LOG=str(log), PYTHONPATH=str(ROOT / "tests") + os.pathsep + str(ROOT))
    env.pop("PYTEST_XDIST_WORKER", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-n", "2",
                        "-v", "test_grouped.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "LoadGroupScheduling" in r.stdout
    assert len(log.read_text().split()) == 1, (log.read_text(), r.stdout)
    grouped = [line for line in r.stdout.splitlines() if line.startswith("[gw") and "PASSED" in line
               and ("test_slow" in line or "test_shares_the_fixture" in line)]
    assert len(grouped) == 9 and len({line.split("]")[0] for line in grouped}) == 1, r.stdout
