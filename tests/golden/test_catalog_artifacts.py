"""Golden files: every committed artifact under catalog/generated/ is what the engine generates today, byte for
byte (principle 5), and generation is deterministic."""
import functools

import pytest

from blr_derive.api import derive_record, generate
from blr_derive.codegen.registry import emit
from blr_derive.core.errors import CodegenError
from blr_derive.ir.build import build_ir
from conftest import CATALOG, GENERATED, TARGET_NAMES

RECIPES = sorted(p.stem for p in CATALOG.glob("*.yaml"))


@functools.lru_cache(maxsize=None)
def _catalog_ir(name):
    _, D = derive_record(CATALOG / f"{name}.yaml")
    return build_ir(D, f"catalog/{name}.yaml")


@pytest.mark.parametrize("target", TARGET_NAMES)
@pytest.mark.parametrize("name", RECIPES)
def test_golden_artifact_is_byte_identical(name, target):
    path = GENERATED / target / f"{name}.py"
    try:
        text = emit(_catalog_ir(name), target)      # derived once for every target, as `blr-derive catalog` does
    except CodegenError:
        assert target != "numpy" and not path.exists()      # the numpy target covers every recipe
        return
    assert path.read_text(encoding="utf-8") == text


def test_no_artifact_without_a_recipe():
    for target in TARGET_NAMES:
        names = {p.stem for p in (GENERATED / target).glob("*.py")} - {"__init__"}
        assert names <= set(RECIPES), names - set(RECIPES)


def test_torch_target_covers_the_deep_learning_recipes():
    names = {p.stem for p in (GENERATED / "torch").glob("*.py")} - {"__init__"}
    assert {"sgd", "rmsprop", "adam", "adamw"} <= names
    assert "newton" not in names          # full-covariance updates are rejected for torch


def test_jax_target_covers_the_torch_recipes_and_the_matrix_subset():
    """The jax target writes the elementwise recipes (the torch target's, and the dropout recipes whose
    Heaviside mask torch cannot print) as optax transformations, and every other recipe (single-family ones
    with matrix updates, data, samples of q, quadrature, family maps or entry points, and the factorized
    (several-block) recipes) as plain jax.numpy functions: every catalog recipe has a jax artifact."""
    texts = {p.stem: p.read_text(encoding="utf-8") for p in (GENERATED / "jax").glob("*.py") if p.stem != "__init__"}
    transformations = {n for n, t in texts.items() if "GradientTransformation" in t}
    functions = {n for n, t in texts.items() if "\ndef step(" in t}
    torch_names = {p.stem for p in (GENERATED / "torch").glob("*.py")} - {"__init__"}
    # bSAM and SAM evaluate the gradient again at a point computed from an earlier gradient (sharpness_aware): an
    # optax transformation receives one gradient per step, so the jax target writes them as functions
    # continual IVON reads per-parameter data (its prior site), which torch keeps in the optimizer's state and an
    # optax transformation has no place for: jax writes it as functions taking ``data``
    # SNES ranks the loss values over all samples of a step (fitness_shaping), which the torch optimizer does at
    # step(): an optax transformation sees one gradient per step, so jax writes it as functions too
    # SOAP and EVON keep per-parameter matrices (Kronecker factors, eigenbases), which the torch target updates one
    # parameter at a time (codegen/backends/torch/matrix.py) and the jax target writes as functions
    assert transformations == (torch_names - {"bsam", "sam", "ivon_continual", "snes", "soap", "evon"}) \
        | {"dropout_adam", "dropout_rmsprop"}
    assert {"soap", "evon"} <= functions
    assert {"adam", "ivon", "nadam_optax"} <= transformations
    assert functions == set(texts) - transformations
    assert {"newton", "laplace", "ridge", "bayesian_linear_regression"} <= functions
    assert {"ncvi", "ncvmp", "fed_admm_full", "snes", "quadrature_gamma", "beta_bernoulli", "dropout_sgd"} <= functions
    assert set(texts) == set(RECIPES)
    factorized = {n for n, t in texts.items() if "\nBLOCKS = (" in t}
    assert factorized == {"em_gmm", "em_gmm_unrolled", "svi", "svi_unrolled", "vmp"} and factorized <= functions


def test_generation_is_deterministic():
    a = generate(CATALOG / "newton.yaml", "numpy")
    b = generate(CATALOG / "newton.yaml", "numpy")
    assert a == b
    assert "blr-derive 0.1.0" in a and "recipe 'newton'" in a
    assert "S <- rho*H + (1 - rho)*S" in a
    assert "numpy.linalg.inv" not in a and "_spd_solve" in a


# ----------------------------------------------------------------- test functions (P >= 5)


# ----------------------------------------------------------------- the built-in families' index
def test_family_index_is_what_the_families_derive_today():
    """catalog/generated/families.txt (what `blr-derive families` prints without deriving) equals a fresh
    derivation of every families/*.yaml, with each file's current SHA-256."""
    from blr_derive.api import family
    from blr_derive.core.resources import families_dir
    from blr_derive.report.family_index import INDEX_NAME, digest, index_text, read_index
    paths = sorted(families_dir().glob("*.yaml"))
    committed = (GENERATED / INDEX_NAME).read_text(encoding="utf-8")
    assert committed == index_text(paths, family)
    entries = read_index(GENERATED / INDEX_NAME)
    assert set(entries) == {p.stem for p in paths}
    for p in paths:
        sha, block = entries[p.stem]
        assert sha == digest(p)
        assert block.startswith(f"{p.stem}: ") and "  A(λ)   : " in block
