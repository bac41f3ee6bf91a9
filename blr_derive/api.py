"""High-level API: recipe file -> derivation -> IR -> source code, and the notebook API (family, recipe,
derive; see the README section "Notebook API")."""
from __future__ import annotations

import hashlib
import shlex
import time
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import sympy as sp
import yaml

from blr_derive.candidates.load import load_recipe, recipe_from_spec
from blr_derive.candidates.options import (COMMAND_LINE, is_family_spec, options_label, options_located,
                                          recipe_from_options, resolve_input)
import blr_derive.codegen as _codegen
from blr_derive.codegen.inert import audit
from blr_derive.codegen.printing import numeric_lowering
from blr_derive.codegen.registry import TARGETS, emit, get_target
from blr_derive.core import budget
from blr_derive.core.errors import (CodegenError, DerivationError, LocatedCodegenError, LocatedUnsupportedTarget,
                                    SpecError, TimeLimitExceeded, UnsupportedTarget)
from blr_derive.core.io import shell_word, source_label
from blr_derive.core.resources import catalog_dir, families_dir
from blr_derive.core.yamlio import load_yaml_text, recording_reads, unchanged
from blr_derive.derive.driver import derive as derive_recipe
from blr_derive.families import diskcache
from blr_derive.families.library import adopt, builtin_family_names, cached_entries, family_from_spec, load_family
from blr_derive.families.model import Family
from blr_derive.ir.build import build_ir
from blr_derive.report.compare import compare_recipes
from blr_derive.report.family_index import INDEX_NAME, index_text
from blr_derive.report.suggestion import Suggestions, suggest
from blr_derive.report.views import DerivationView, register_notebook_views
from blr_derive.spec.vocabulary import FAMILY_KEYS

__all__ = ["source_label", "derive_file", "generate", "family", "families", "catalog", "recipe", "derive", "compare",
           "time_limited", "located_codegen_error", "DerivationView",
           "COMMAND_LINE", "is_family_spec", "options_label", "options_located", "recipe_from_options",
           "resolve_input", "suggest_options", "suggest", "Suggestions"]


def __getattr__(name):
    """``check_file`` and ``format_report`` (the CLI's ``check``) import the numeric checks, and with them scipy,
    only when asked for: deriving and generating code does not need them (0.4 s of every process)."""
    if name in ("check_file", "format_report"):
        import blr_derive.verify.check as check
        import blr_derive.verify.results as results
        return {"check_file": check.check_file, "format_report": results.format_report}[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _derived(recipe, file=None):
    """The derivation record of a parsed recipe; an engine failure is a SpecError located at the recipe."""
    try:
        return derive_recipe(recipe)
    except DerivationError as exc:
        line = recipe.spec.line if recipe.spec is not None else None
        raise SpecError(f"derivation failed: {exc}", file if file is not None else recipe.file, line) from None


def _is_recipe(ref) -> bool:
    """A parsed recipe (any candidate structure's), not a reference to one."""
    return hasattr(ref, "approximations") and hasattr(ref, "family")


def derive_record(path, sizes: dict | None = None):
    """(recipe, derivation record) of a recipe file (what the CLI and code generation use), or of a parsed
    :class:`~blr_derive.spec.recipe.Recipe` (e.g. one built by :func:`recipe_from_options`)."""
    if _is_recipe(path):
        if sizes:
            raise SpecError("--size applies to a recipe file that declares 'sizes'", path.file)
        with options_located(getattr(path, "option_lines", None)):
            return path, _derived(path)
    recipe = load_recipe(path, sizes)
    return recipe, _derived(recipe, str(path))


def derive_file(path, sizes: dict | None = None):
    """(recipe, :class:`~blr_derive.report.views.DerivationView`) of a recipe file."""
    recipe, D = derive_record(path, sizes)
    return recipe, DerivationView(D)


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
    :class:`~blr_derive.core.errors.TimeLimitExceeded`, located at what the engine was working on.  Signals reach the
    main thread only: elsewhere no limit applies.  None or ``math.inf``: no limit; NaN, a negative number or
    anything but a number is a ValueError, raised before any work."""
    seconds = budget.seconds_or_none(seconds)
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
    """Code for a recipe file; ``sizes`` (e.g. {"K": 5}) instantiates a sized recipe (blr_derive/core/sizes.py);
    ``time_limit`` (seconds) bounds the derivation (see :func:`time_limited`)."""
    get_target(target)                                 # an unknown target fails before any work
    with time_limited(time_limit):
        recipe, D = derive_record(path, sizes)
    label = (label or source_label(recipe.file if _is_recipe(path) else path)) + "".join(f" --size {k}={v}" for k, v in sorted((sizes or {}).items()))
    with options_located(getattr(recipe, "option_lines", None)):
        try:
            return emit(build_ir(D, label, numeric_lowering), target)
        except CodegenError as exc:
            raise located_codegen_error(exc, recipe) from None
        except DerivationError as exc:
            # a step of writing the derived program that cannot be carried out: located like a generator's refusal
            # (it was one unlocated line, e.g. "blr-derive: error: DataSum(f, v) needs ... a column vector")
            raise located_codegen_error(CodegenError(str(exc)), recipe) from None


_SOURCE = []


def _engine_source() -> str:
    """SHA-256 of the source of the engine and its code generators (templates included) and of the sympy that
    prints them: what every artifact is a function of besides the files a derivation reads."""
    if not _SOURCE:
        roots = [Path(__file__).resolve().parent, Path(_codegen.__file__).resolve().parent]
        _SOURCE.append(hashlib.sha256(f"{diskcache.source_hash(roots)} sympy {sp.__version__}".encode()).hexdigest())
    return _SOURCE[0]


def _artifact_key(r: Path, targets) -> tuple:
    """Where one recipe's artifacts are kept in the disk cache: the recipe file (by absolute path), the targets
    and :func:`_engine_source`.  What else they are a function of, the content of every file the derivation read
    (the recipe, every family file in any folder, of any extension, the built-in ones) and the family paths it
    found absent, is recorded in the entry (:func:`~blr_derive.core.yamlio.recording_reads`) and compared when
    it is read back."""
    return ("catalog-artifacts", os.path.abspath(r), tuple(targets), _engine_source())


def _artifact_rel(r: Path, target: str) -> str:
    return f"generated/{target}/{r.stem}{get_target(target).suffix}"


def _cached_artifacts(entry, r: Path, root: Path, targets):
    """[(path, text)] of a cache entry, or None when it may not be used: the files its derivation read have
    changed (or one it found absent exists now), or the entry is not what :func:`_recipe_artifacts` stores, holds
    a path other than this recipe's artifact for a target asked for (in the targets' order), or a text that does
    not pass the audit of fresh output (:func:`~blr_derive.codegen.inert.audit`).  An entry is data from disk: it
    is checked as a derivation's output would be."""
    if not isinstance(entry, dict) or set(entry) != {"reads", "artifacts"}:
        return None
    reads, artifacts = entry["reads"], entry["artifacts"]
    if not (isinstance(reads, list) and isinstance(artifacts, list)
            and all(isinstance(x, list) and len(x) == 2 and isinstance(x[0], str)
                    and (x[1] is None or isinstance(x[1], str)) for x in reads)):
        return None
    reads = dict(reads)
    if reads.get(os.path.abspath(r)) is None or not unchanged(reads):
        return None
    expected = {_artifact_rel(r, t): t for t in targets}
    out, seen = [], []
    for item in artifacts:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], str)):
            return None
        t = expected.get(item[0]) if isinstance(item[0], str) else None
        if t is None or t in seen:
            return None
        try:
            audit(item[1], t, get_target(t).config.modules)
        except CodegenError:
            return None
        seen.append(t)
        out.append((root / item[0], item[1]))
    if seen != [t for t in targets if t in seen]:
        return None
    return out


def _recipe_artifacts(r: Path, root: Path, targets, seconds, cache: bool = True) -> list:
    """[(path, text)] of one catalog recipe: derived once (under its own time budget of ``seconds``) and rendered
    for every target that can express it.  The artifacts are kept in the disk cache under :func:`_artifact_key`
    (JSON text, never code) with the files the derivation read: a catalog whose recipes, families and engine have
    not changed is rendered from there (``blr-derive catalog --check`` in ~1 s; a clean checkout, like CI's,
    derives everything), after the checks of :func:`_cached_artifacts`."""
    targets = tuple(targets or TARGETS)
    key = _artifact_key(r, targets)
    if cache:
        hit = _cached_artifacts(diskcache.load_json("artifacts", key), r, root, targets)
        if hit is not None:
            return hit
    out = []
    with budget.derivation_budget(seconds), recording_reads() as reads:
        recipe, D = derive_record(r)                 # derive once, render for every target
        ir = build_ir(D, shell_word(f"catalog/{r.name}"), numeric_lowering)     # a catalog folder is untrusted: its file names too
        for t in targets:
            try:
                text = emit(ir, t)
            except UnsupportedTarget:
                continue        # this target cannot express the recipe (e.g. torch needs elementwise updates)
            except CodegenError as exc:
                raise located_codegen_error(exc, recipe) from None
            out.append((t, text))
    diskcache.store_json("artifacts", key, {"reads": [[f, d] for f, d in sorted(reads.items())],
                                            "artifacts": [[_artifact_rel(r, t), text] for t, text in out]})
    return [(root / _artifact_rel(r, t), text) for t, text in out]


def _family_entries(path: Path, seconds) -> list:
    """A built-in family derived in a worker process, as entries for the parent's family cache."""
    with budget.derivation_budget(seconds):
        budget.where(str(path), 1)             # a budget that runs out names the family file
        load_family(path.stem)
    return cached_entries(path)


def default_jobs() -> int:
    """Worker processes for ``blr-derive catalog``: one per core this process may use, at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


def catalog_artifacts(root=None, targets=None, seconds=None, jobs: int | None = 1, cache: bool = True) -> list:
    """[(path, text)] of every generated artifact of a catalog folder (default: the bundled catalog):
    ``generated/<target>/<recipe><suffix>``.  Each recipe is derived once (under its own time budget of
    ``seconds``) and rendered for every target that can express it.

    ``jobs`` > 1 (None: :func:`default_jobs`) derives in that many forked worker processes: first the built-in
    families (each once; the parent adopts them, so the family index and the recipes' workers, forked after,
    find them derived), then the recipes, in the same order as one process would.  The artifacts are the same
    bytes either way (derivations are deterministic and each is independent of the others).  ``cache=False``
    derives every recipe even where the disk cache holds its artifacts."""
    root = Path(root) if root else catalog_dir()
    recipes = sorted(root.glob("*.yaml"))
    if not recipes:
        raise SpecError("no recipes found", str(root), None)
    bundled = root.resolve() == catalog_dir().resolve()     # the bundled catalog also indexes the built-in families
    paths = sorted(families_dir().glob("*.yaml")) if bundled else []
    jobs = default_jobs() if jobs is None else jobs
    _engine_source()                     # once, before the workers fork
    if jobs > 1 and "fork" in multiprocessing.get_all_start_methods():
        # one pool: the built-in families first, those whose log-partition is derived (by integration or
        # summation, the costly ones) at the head, then the recipes; a recipe's worker finds its family in the
        # disk cache once a family job has stored it (or derives it itself), and the parent adopts the families
        # for the index
        first = sorted(paths, key=lambda p: ("\nlog_partition:" in p.read_text(encoding="utf-8"), p.stem))
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork")) as pool:
            fams = [pool.submit(_family_entries, p, seconds) for p in first]
            jobs_ = [pool.submit(_recipe_artifacts, r, root, targets, seconds, cache) for r in recipes]
            for f in fams:
                adopt(f.result())
            parts = [j.result() for j in jobs_]
    else:
        parts = [_recipe_artifacts(r, root, targets, seconds, cache) for r in recipes]
    outputs = [item for part in parts for item in part]
    if bundled:
        outputs.append((root / "generated" / INDEX_NAME, index_text(paths, family)))
    return outputs


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
    if isinstance(ref, dict):
        ref = yaml.safe_dump(_plain(ref), sort_keys=False, allow_unicode=True)
    return load_yaml_text(ref, f"<{what}>")


def _plain(v):
    """A declaration given as Python values, as the plain data YAML writes: a sympy expression as its text (read
    back by the restricted grammar, never evaluated); anything else that is not text, a number, a flag, None, a
    list or a mapping is a TypeError that names it."""
    if isinstance(v, Family):
        raise SpecError("a Family object cannot be nested in a mapping: pass it as recipe(family=...)")
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, sp.Basic):
        return str(v)
    if v is None or isinstance(v, (str, bool, int, float)):
        return v
    raise TypeError(f"a {type(v).__name__} cannot be written in a declaration: use text, numbers, flags, lists "
                    "and mappings (a sympy expression is taken as its text)")


def _reference(ref, what: str, forms: str = "a catalog name, a path, a mapping or YAML text"):
    """A recipe reference (a name or a path) as text; a TypeError says what else it could be."""
    if isinstance(ref, (str, Path)):
        return ref
    raise TypeError(f"{what}: expected {forms}, got a {type(ref).__name__}"
                    + (" (pass a family as recipe(family=...))" if isinstance(ref, Family) else ""))


def families() -> list[str]:
    """Names of the built-in families (``families/*.yaml``)."""
    return builtin_family_names()


def catalog() -> list[str]:
    """Names of the catalog recipes (``catalog/*.yaml``)."""
    return sorted(p.stem for p in catalog_dir().glob("*.yaml"))


def family(ref):
    """A :class:`~blr_derive.families.model.Family`: a built-in name (``"gaussian_full"``), a path to a family YAML
    file, a dict, or YAML text declaring one (same keys as a family file); a sized family at a size:
    ``{"name": "categorical", "K": 5}``."""
    return _as_family(ref)


def _as_family(ref):
    if isinstance(ref, Family):
        return ref
    if isinstance(ref, dict) and "name" in ref and not set(ref) & (FAMILY_KEYS - {"name"}):
        return load_family(ref)                          # a reference with sizes (blr_derive/core/sizes.py)
    if isinstance(ref, dict) or _is_yaml_text(ref):
        return family_from_spec(_spec(ref, "family"), "<family>")
    return load_family(str(ref))


def recipe(ref=None, *, family=None, loss="abstract", approximations=(), hyperparameters=None, name="custom",
           **keys):
    """A :class:`~blr_derive.spec.recipe.Recipe`.

    ``recipe("adam")`` loads a catalog recipe, ``recipe("my.yaml")`` a file, ``recipe(dict_or_yaml_text)`` an
    inline one. Or declare it by keywords: ``family`` (a Family, a built-in name, a path, a dict or YAML text),
    ``loss`` (``"abstract"`` or ``{"expression": ..., "data": ...}``), ``approximations`` (names or
    ``{name: {args}}``), ``hyperparameters`` (``{name: default}`` or full declarations), ``name``, and any other
    recipe key (``title``, ``learning_rate``, ``state_init``, ...)."""
    if ref is not None:
        if family is not None or keys or approximations or hyperparameters is not None:
            raise TypeError("recipe(): give either a recipe reference or keywords, not both")
        if hasattr(ref, "approximations"):             # already a Recipe
            return ref
        if isinstance(ref, dict) or _is_yaml_text(ref):
            return recipe_from_spec(_spec(ref, "recipe"), "<recipe>", Path.cwd())
        path = Path(_reference(ref, "recipe()"))
        if not path.suffix and not os.path.lexists(path) and os.path.isfile(catalog_dir() / f"{ref}.yaml"):
            path = catalog_dir() / f"{ref}.yaml"
        return load_recipe(path)
    if family is None:
        raise TypeError("recipe(): name a family (family=...)")
    mixture = isinstance(family, dict) and "mixture" in family       # {mixture: F, components: K, ...}
    if isinstance(approximations, (str, dict)):                     # one approximation
        approximations = [approximations]
    if hyperparameters is not None and not isinstance(hyperparameters, dict):
        raise TypeError("recipe(): hyperparameters must be a mapping {name: default or declaration}, got a "
                        f"{type(hyperparameters).__name__}")
    spec = {"name": name, **keys, "family": family if mixture else "__FAMILY__", "loss": loss,
            "approximations": list(approximations), "hyperparameters": dict(hyperparameters or {})}
    located = _spec(spec, "recipe")
    if not mixture:
        located["family"] = _as_family(family)         # load_family passes a Family through
    return recipe_from_spec(located, "<recipe>", Path.cwd())


def derive(ref=None, *, time_limit: float | None = None, **keys):
    """Derive a recipe (anything :func:`recipe` accepts, or a Recipe) and return a
    :class:`~blr_derive.report.views.DerivationView`: ``steps``, ``step(rule)``, ``update``, ``definitions``,
    ``code(target)``, ``compile(target)``, ``to_markdown/to_latex/to_html``, ``save(path)``; ``.record`` is the
    engine's :class:`~blr_derive.rules.base.Derivation`.  ``time_limit`` (seconds) bounds loading and deriving
    (:class:`~blr_derive.core.errors.TimeLimitExceeded`)."""
    with time_limited(time_limit):
        r = recipe(ref, **keys)
        return DerivationView(_derived(r))


def compare(a, b) -> str:
    """What separates two recipes (catalog names or paths), as ``blr-derive compare`` prints it."""

    def path(ref):
        p = Path(_reference(ref, "compare()", "a catalog name or a path"))
        return catalog_dir() / f"{ref}.yaml" if not p.suffix and not os.path.lexists(p) else p
    return compare_recipes(path(a), path(b))



#: the approximations :func:`suggest_options` tries, in order (the delta method for Gaussians, the squared
#: gradient for the optimizer targets, which have no Hessian oracle, and samples of q for other families)
SUGGESTED_APPROXIMATIONS = (("delta",), ("delta", "squared_gradient_hessian"), ("score_function",),
                            ("reparameterization",))


def suggest_options(family_ref, target: str, seconds: float = 15.0):
    """The shortest command-line options (``--loss abstract --approx ...``, and ``--set state_init=...`` where
    the target needs an initial value) with which a recipe over this family derives and renders for ``target``,
    tried in :data:`SUGGESTED_APPROXIMATIONS` order within ``seconds``; None if none does."""
    deadline = time.monotonic() + seconds
    for approx in SUGGESTED_APPROXIMATIONS:
        settings = []
        for _ in range(2):
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                with time_limited(left):
                    r = recipe_from_options(family_ref, loss="abstract", approximations=approx, settings=settings)
                    D = _derived(r)
                    ir = build_ir(D, "", numeric_lowering)
                    emit(ir, target)
            except TimeLimitExceeded:
                return None
            except UnsupportedTarget as exc:
                missing = [v.name for v in ir.state if v.init is None and v.name != ir.mean]
                if exc.key == "state_init" and missing and not settings:
                    settings = ["state_init={" + ", ".join(f"{n}: 1.0" for n in missing) + "}"]
                    continue
                break
            except (SpecError, CodegenError):
                break
            words = ["--loss", "abstract"] + [w for a in approx for w in ("--approx", a)]
            return words + [w for x in settings for w in ("--set", shlex.quote(x))]
    return None

register_notebook_views()          # in an IPython session, families and recipes display with their math
