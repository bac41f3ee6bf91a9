"""Recipes of the Kronecker (matrix-normal) candidate for the rule tests (compiled once each)."""
import functools

import yaml

from blr_derive import api


def recipe_text(approximations, extra_hyper=None, family="gaussian_full", kronecker=None):
    hp = {"rho": {"default": 1.0}, "ess": {"default": 1.0}, "delta": {"default": 0.0}, "pi": {"default": 1.0}}
    hp.update(extra_hyper or {})
    return yaml.safe_dump({"name": "kron_test", "family": family,
                           "kronecker": kronecker or {"rows": "d_out", "cols": "d_in"}, "loss": "abstract",
                           "hyperparameters": hp, "approximations": approximations}, sort_keys=False)


FULL = ["delta", {"kronecker_gauss_newton": {"size": "ess"}}, {"factored_tikhonov": {"prior": "delta", "split": "pi"}},
        "kronecker_ema"]


@functools.lru_cache(maxsize=None)
def compiled(kind="full"):
    if kind == "full":
        return api.derive(recipe_text(FULL)).compile("numpy")
    if kind == "no_prior":
        return api.derive(recipe_text(FULL[:2] + FULL[3:])).compile("numpy")
    if kind == "rate":
        approx = FULL[:3] + [{"kronecker_ema": {"rate": "beta"}}]
        return api.derive(recipe_text(approx, {"beta": {"default": 0.5}})).compile("numpy")
    raise KeyError(kind)
