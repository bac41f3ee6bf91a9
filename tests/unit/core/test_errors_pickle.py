"""The engine's errors cross process boundaries (``blr-derive catalog --jobs N`` derives in worker processes and
re-raises their errors in the parent): each one pickles back to an error of the same class, message and location.
BudgetExceeded once failed to unpickle (its message was rebuilt from the message), which broke the worker pool."""
import pickle

import pytest

from blr_derive.core.budget import BudgetExceeded
from blr_derive.core.errors import (CodegenError, DerivationError, LocatedCodegenError, LocatedUnsupportedTarget,
                                    SpecError, TimeLimitExceeded, UnsupportedTarget)


@pytest.mark.parametrize("exc", [
    CodegenError("no torch printer for besselk", "loss"),
    UnsupportedTarget("torch needs elementwise updates", "family"),
    LocatedCodegenError("refused", "recipe.yaml", 7, "loss"),
    LocatedUnsupportedTarget("refused", "recipe.yaml", 3, "approximations"),
    SpecError("unknown key 'x'", "family.yaml", 12),
    TimeLimitExceeded("did not finish", "recipe.yaml", 4),
    DerivationError("cannot isolate s"),
    BudgetExceeded(0.25, "families/von_mises.yaml", 1),
])
def test_errors_survive_a_pickle_round_trip(exc):
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc) and str(back) == str(exc) and vars(back) == vars(exc)
    assert str(exc)                         # a real message, not an empty one
