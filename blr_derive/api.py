"""High-level API: recipe file -> derivation -> IR -> source code, and the notebook API (family, recipe,
derive; see the README section "Notebook API")."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from blr_derive.core import budget
from blr_derive.candidates.single import derive as _derive
from blr_derive.core.errors import (CodegenError, DerivationError, LocatedCodegenError, LocatedUnsupportedTarget, SpecError,
                     TimeLimitExceeded, UnsupportedTarget)
from blr_derive.ir.build import build_ir
from blr_derive.spec.recipe import load_recipe


def source_label(path) -> str:
    """A machine-independent label for a recipe path (for reproducible headers)."""
    p = Path(path).resolve()
    if p.parent.name == "catalog":
        return f"catalog/{p.name}"
    return p.name


def derive_file(path, sizes: dict | None = None):
    recipe = load_recipe(path, sizes)
    try:
        D = _derive(recipe)
    except DerivationError as exc:
        line = recipe.spec.line if recipe.spec is not None else None
        raise SpecError(f"derivation failed: {exc}", str(path), line) from None
    return recipe, D


def located_codegen_error(exc: CodegenError, recipe) -> LocatedCodegenError:
    """A code generator's refusal as a located error (still a CodegenError, and an UnsupportedTarget if it was
    one): at the recipe entry it names (``exc.key``), else at the approximations, the loss or the family."""
    if isinstance(exc, SpecError):
        return exc
    spec = recipe.spec
    line = None
    if hasattr(spec, "line_of"):
        for key in ([exc.key] if exc.key else []) + ["approximations", "loss", "family", "blocks"]:
            if key in spec:
                line = spec.line_of(key)
                break
    cls = LocatedUnsupportedTarget if isinstance(exc, UnsupportedTarget) else LocatedCodegenError
    return cls(str(exc), recipe.file, line or getattr(spec, "line", None), exc.key)


@contextmanager
def time_limited(seconds):
    """Run the block under a wall-clock budget of ``seconds`` (None: no budget); running out raises
    :class:`~blr_derive.errors.TimeLimitExceeded`, located at what the engine was working on.  Signals reach the
    main thread only: elsewhere no limit applies."""
    if seconds is None:
        yield
        return
    try:
        with budget.derivation_budget(seconds):
            yield
    except budget.BudgetExceeded as exc:
        raise TimeLimitExceeded(str(exc), exc.file, exc.line) from None


def generate(path, target: str, label: str | None = None, sizes: dict | None = None,
             time_limit: float | None = None) -> str:
    """Code for a recipe file; ``sizes`` (e.g. {"K": 5}) instantiates a sized recipe (blr_derive/sizes.py);
    ``time_limit`` (seconds) bounds the derivation (see :func:`time_limited`)."""
    from blr_derive.codegen import emit
    from blr_derive.codegen import get_target
    get_target(target)                                 # an unknown target fails before any work
    with time_limited(time_limit):
        recipe, D = derive_file(path, sizes)
    label = (label or source_label(path)) + "".join(f" --size {k}={v}" for k, v in sorted((sizes or {}).items()))
    try:
        return emit(build_ir(D, label), target)
    except CodegenError as exc:
        raise located_codegen_error(exc, recipe) from None


# ---------------------------------------------------------------------- notebook API
#
#     from blr_derive import api as blr
#     q = blr.family("gaussian_diag")                       # built-in, a path, a dict or YAML text
#     r = blr.recipe(family=q, approximations=["delta"], hyperparameters={"rho": 0.1})
#     d = blr.derive(r)                                     # or blr.derive("adam") for a catalog recipe
#     d.step("delta").equations, d.update["m"]              # sympy
#     mod = d.compile("numpy"); state = mod.step(mod.init(m=..., s=...), oracles=...)

def _is_yaml_text(ref) -> bool:
    return isinstance(ref, str) and ("\n" in ref or ": " in ref or ref.lstrip().startswith("{"))


def _spec(ref, what: str):
    """A dict or YAML text as the engine's located mapping (LDict), so that errors name a line."""
    import yaml

    from blr_derive.core.yamlio import load_yaml_text
    if isinstance(ref, dict):
        ref = yaml.safe_dump(_plain(ref), sort_keys=False, allow_unicode=True)
    return load_yaml_text(ref, f"<{what}>")


def _plain(v):
    from blr_derive.families.family import Family
    if isinstance(v, Family):
        raise SpecError("a Family object cannot be nested in a mapping: pass it as recipe(family=...)")
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def families() -> list[str]:
    """Names of the built-in families (``families/*.yaml``)."""
    from blr_derive.families.family import builtin_family_names
    return builtin_family_names()


def catalog() -> list[str]:
    """Names of the catalog recipes (``catalog/*.yaml``)."""
    from blr_derive.core.resources import catalog_dir
    return sorted(p.stem for p in catalog_dir().glob("*.yaml"))


def family(ref):
    """A :class:`~blr_derive.family.Family`: a built-in name (``"gaussian_full"``), a path to a family YAML file,
    a dict, or YAML text declaring one (same keys as a family file); a sized family at a size:
    ``{"name": "categorical", "K": 5}``."""
    return _as_family(ref)


def _as_family(ref):
    from blr_derive.families.family import FAMILY_KEYS, Family, family_from_spec, load_family
    if isinstance(ref, Family):
        return ref
    if isinstance(ref, dict) and "name" in ref and not set(ref) & (FAMILY_KEYS - {"name"}):
        return load_family(ref)                          # a reference with sizes (blr_derive/sizes.py)
    if isinstance(ref, dict) or _is_yaml_text(ref):
        return family_from_spec(_spec(ref, "family"), "<family>")
    return load_family(str(ref))


def recipe(ref=None, *, family=None, loss="abstract", approximations=(), hyperparameters=None, name="custom",
           **keys):
    """A :class:`~blr_derive.recipe.Recipe`.

    ``recipe("adam")`` loads a catalog recipe, ``recipe("my.yaml")`` a file, ``recipe(dict_or_yaml_text)`` an
    inline one. Or declare it by keywords: ``family`` (a Family, a built-in name, a path, a dict or YAML text),
    ``loss`` (``"abstract"`` or ``{"expression": ..., "data": ...}``), ``approximations`` (names or
    ``{name: {args}}``), ``hyperparameters`` (``{name: default}`` or full declarations), ``name``, and any other
    recipe key (``title``, ``learning_rate``, ``state_init``, ...)."""
    from blr_derive.spec.recipe import recipe_from_spec
    from blr_derive.core.resources import catalog_dir
    if ref is not None:
        if family is not None or keys or approximations or hyperparameters is not None:
            raise TypeError("recipe(): give either a recipe reference or keywords, not both")
        if hasattr(ref, "approximations"):             # already a Recipe
            return ref
        if isinstance(ref, dict) or _is_yaml_text(ref):
            return recipe_from_spec(_spec(ref, "recipe"), "<recipe>", Path.cwd())
        path = Path(ref)
        if not path.suffix and not path.exists() and (catalog_dir() / f"{ref}.yaml").is_file():
            path = catalog_dir() / f"{ref}.yaml"
        return load_recipe(path)
    if family is None:
        raise TypeError("recipe(): name a family (family=...)")
    mixture = isinstance(family, dict) and "mixture" in family       # {mixture: F, components: K, ...}
    spec = {"name": name, **keys, "family": family if mixture else "__FAMILY__", "loss": loss,
            "approximations": list(approximations), "hyperparameters": dict(hyperparameters or {})}
    located = _spec(spec, "recipe")
    if not mixture:
        located["family"] = _as_family(family)         # load_family passes a Family through
    return recipe_from_spec(located, "<recipe>", Path.cwd())


def derive(ref=None, *, time_limit: float | None = None, **keys):
    """Derive a recipe (anything :func:`recipe` accepts, or a Recipe) and return the
    :class:`~blr_derive.derivation.Derivation`: ``steps``, ``step(rule)``, ``update``, ``definitions``,
    ``code(target)``, ``compile(target)``, ``to_markdown/to_latex/to_html``, ``save(path)``.  ``time_limit``
    (seconds) bounds loading and deriving (:class:`~blr_derive.errors.TimeLimitExceeded`)."""
    with time_limited(time_limit):
        r = recipe(ref, **keys)
        try:
            return _derive(r)
        except DerivationError as exc:
            line = r.spec.line if r.spec is not None else None
            raise SpecError(f"derivation failed: {exc}", r.file, line) from None


def compare(a, b) -> str:
    """What separates two recipes (catalog names or paths), as ``blr-derive compare`` prints it."""
    from blr_derive.report.compare import compare_recipes
    from blr_derive.core.resources import catalog_dir

    def path(ref):
        p = Path(ref)
        return catalog_dir() / f"{ref}.yaml" if not p.suffix and not p.exists() else p
    return compare_recipes(path(a), path(b))
