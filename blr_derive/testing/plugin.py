"""The pytest plugin of :mod:`blr_derive.testing` (entry point ``pytest11: blr_derive``): a fixture that fails a
test with the equivalence report when an optimizer is not the BLR derivation of its recipe.

    def test_my_adam(blr_equivalent):
        blr_equivalent("adam", MyAdam, hyper={"lr": "lr"})

The plugin is loaded by every pytest run in an environment where blr-derive is installed, so it imports the
engine (sympy, torch) only when the fixture is used."""
from __future__ import annotations

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "blr_recipe(name): the recipe a test's optimizer implements (documentation; "
                                       "the blr_equivalent fixture takes the recipe as its first argument)")


@pytest.fixture
def blr_equivalent():
    """``blr_equivalent(recipe, optimizer, **options)``: :func:`blr_derive.testing.equivalent`, failing the test
    with its report (the first step, parameter and derived assignment that differ) unless they are equal."""
    def check(recipe, optimizer, **options):
        from blr_derive.testing import equivalent          # lazy: see the module docstring
        report = equivalent(recipe, optimizer, **options)
        if not report.equal:
            pytest.fail(str(report), pytrace=False)
        return report
    return check
