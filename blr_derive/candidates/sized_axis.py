"""A single sized family over a run-time axis (``components: {index: k, size: K}`` next to ``family: dirichlet``):
the BLR step (Eq. 6) derived once for a generic coordinate k, whatever K is; the state is one array of length K.

The family file's ``axis`` section (``blr_derive/families/axis.py``) declares the family for coordinate k:
T_k = t(θ_k), λ_k = η(ω_k) and A(λ) = Σ_k each(λ_k) + of_total(Σ_k total(λ_k)).  The recipe writes the loss term
of coordinate k (the loss is its sum over the coordinates), with data of one value per coordinate.  Here:

* ``exact`` (Sec. 5.1): the loss term is linear in T_k, ℓ_k = c0_k + c_k T_k, so E_q[ℓ] = Σ_k (c0_k + c_k μ_k) and
  ∇_{μ_k} E_q[ℓ] = c_k (a loss that is not linear in T_k is refused: its expectation would need the coupled Fisher
  solve of ``AxisFamily.fisher``, not derived into updates yet);
* ``blr`` (Eq. 6): λ_k ← (1 − ρ)λ_k − ρ c_k, with ``unit_learning_rate`` (Sec. 5.1) ρ = 1;
* the ordinary parameter from λ (Eq. 9): η solved for ω (``natural_to_ordinary``), or, for an expectation
  parameter, ω_k = μ_k(λ) = ∂A/∂λ_k derived on the indexed log-partition — for the categorical the softmax
  exp(λ_k − log Σ_j exp λ_j) over all K (``component_softmax``: every class from λ directly, none implied by the
  others); the Dirichlet's μ_k = ψ(a_k) − ψ(Σ_j a_j) is reported (``component_dirichlet``).

The record keeps the generic symbols (ω_k, and ω_j, data_j for the sums over a generic other coordinate j); its
``component_axis`` tells the IR (``blr_derive/ir/mixture_axis.py``) which array each stands for, and the targets
print the program on arrays with the coordinate axis first (codegen/backends/*/mixture_axis.py).
"""
from __future__ import annotations

from pathlib import Path

import sympy as sp

from blr_derive.candidates.base import Candidate, register
from blr_derive.core.errors import SpecError
from blr_derive.core.resources import families_dir
from blr_derive.core.yamlio import LDict, check_keys, load_yaml_file, where
from blr_derive.families.axis import AxisFamily, axis_family, has_axis
from blr_derive.rules.base import RULES, ComponentAxis, Derivation, recipe_rule_kinds, refuse_arguments
from blr_derive.rules.mixture import LogSumExpOverComponents, SumOverComponents
from blr_derive.spec.components import parse_components
from blr_derive.spec.recipe import RECIPE_KEYS, parse_recipe

#: the approximations a sized family over a run-time axis supports
SUPPORTED = ("exact", "unit_learning_rate")
NODES = (SumOverComponents, LogSumExpOverComponents)


def claims_axis(spec) -> bool:
    fam = spec.get("family") if isinstance(spec, dict) else None
    return (isinstance(spec, dict) and "components" in spec and "blocks" not in spec and fam is not None
            and not (isinstance(fam, dict) and "mixture" in fam))


def _family_spec(spec, base_dir):
    """(the family file's mapping, its path) for the recipe's ``family`` (a built-in name or a path)."""
    ref = spec["family"]
    if not isinstance(ref, str) or not ref:
        raise SpecError("family: over a run-time axis the family is a name or a path (its size is the length of the "
                        "state arrays, not a number in the recipe)", *where(spec, "family"))
    if ref.endswith((".yaml", ".yml")) or "/" in ref:
        path = Path(ref) if Path(ref).is_absolute() or base_dir is None else Path(base_dir) / ref
    else:
        path = families_dir() / f"{ref}.yaml"
    try:
        found = path.is_file()
    except (OSError, ValueError):
        found = False
    if not found:
        raise SpecError(f"family '{ref}' not found", *where(spec, "family"))
    fspec = load_yaml_file(path, "family file")
    if not isinstance(fspec, dict) or "sufficient_statistics" not in fspec:
        raise SpecError("not a family declaration", *where(spec, "family"))
    return fspec, str(path)


def parse_axis(spec, file, base_dir):
    check_keys(spec, RECIPE_KEYS | {"components"}, ("name", "family", "loss"), "recipe")
    if "sizes" in spec:
        raise SpecError("a recipe over a run-time axis declares no sizes (K is the length of the state arrays)",
                        *where(spec, "sizes"))
    taken = set()
    components = parse_components(spec, taken)
    fspec, fpath = _family_spec(spec, base_dir)
    if not has_axis(fspec):
        raise SpecError(f"family '{spec['family']}' declares no 'axis' section: it cannot be written for a generic "
                        "coordinate of a run-time size (drop 'components' and give the family a fixed size)",
                        *where(spec, "family"))
    fam = axis_family(fspec, components["size"], fpath)
    rest = LDict({k: v for k, v in spec.items() if k != "components"})
    rest.file = file
    if isinstance(spec, LDict):             # a mapping the YAML reader located (not a plain dict of the API)
        rest.file, rest.line, rest.lines = spec.file or file, spec.line, dict(spec.lines)
    for name in taken:
        if name in {fam.param.name, str(fam.theta)}:
            raise SpecError(f"components: '{name}' clashes with the family's names", *where(spec, "components"))
    recipe = parse_recipe(rest, fam, recipe_rule_kinds(), file)
    refuse_arguments(recipe)
    for d in recipe.data:
        if d.shape:
            raise SpecError(f"data '{d.name}': over a run-time axis the data are one number per coordinate "
                            "(an array of length K)", file, None)
    clash = {d.name for d in recipe.data} | {h.name for h in recipe.hyper}
    for name in taken & clash:
        raise SpecError(f"components: '{name}' clashes with a data or hyperparameter name", *where(spec, "components"))
    recipe.components = components
    return recipe


def _check(R):
    named = [a.name for a in R.approximations]
    for a in R.approximations:
        if a.name not in SUPPORTED:
            raise SpecError(f"approximation '{a.name}' does not apply to a family over a run-time axis (supported: "
                            f"{', '.join(SUPPORTED)})", R.file, a.line)
    if R.loss_kind != "explicit" or "exact" not in named:
        raise SpecError("a family over a run-time axis needs an explicit loss and the 'exact' approximation",
                        *where(R.spec, "approximations" if R.loss_kind == "explicit" else "loss"))


def derive_axis(R) -> Derivation:
    """The BLR step of a sized family for a generic coordinate k (see the module docstring)."""
    fam, comp = R.family, R.components
    _check(R)
    D = Derivation(R)
    K, idx = comp["size"], comp["index"]
    w = fam.param.symbol
    s = sp.Dummy("T")
    lin = sp.expand(R.loss.xreplace({fam.statistic: s}))
    coeff = sp.diff(lin, s)
    if lin.has(fam.theta) or coeff.has(s) or coeff.has(fam.theta):
        raise SpecError(f"the loss term is not linear in the statistic {fam.statistic} of coordinate {idx}: 'exact' "
                        "over a run-time axis needs a conjugate loss (Sec. 5.1)", *where(R.spec["loss"], "expression"))
    # the generic other coordinate j: a copy of every per-coordinate symbol (the same array, read along j)
    per = [w] + [d.symbol for d in R.data]
    at_j = {x: sp.Symbol(f"{x}_j", **x.assumptions0) for x in per}
    lam_k = sp.Symbol(f"lambda_{idx}", real=True)
    lam_j = sp.Symbol("lambda_j", real=True)
    mu_k = fam.mean(lam_k, lam_j, NODES)
    D.symbol_names.update({lam_k: r"\lambda_{%s}" % idx, lam_j: r"\lambda_j"})
    D.add("family", "Sec. 1.2, Eq. 3", f"The family '{fam.name}' for a generic coordinate {idx} of {K}",
          f"T_{idx} = {fam.statistic}, λ_{idx} = {fam.eta}; A(λ) = Σ_j each(λ_j) + of_total(Σ_j total(λ_j)) is "
          f"differentiated on its indexed form for a generic {idx}, so nothing grows with {K}: μ_{idx} = ∂A/∂λ_{idx}.",
          [(sp.Symbol("A"), fam.log_partition()), (sp.Symbol(r"\mu_{%s}" % idx), mu_k)])
    D.add("exact", RULES["exact"].equation, "Conjugate loss: the natural gradient is the coefficient of T",
          f"The loss term of coordinate {idx} is linear in T_{idx} (Sec. 5.1), so E_q[ℓ] = Σ_{idx} (c0 + c μ_{idx}) and "
          f"∇_μ E_q[ℓ] has the coefficient c in coordinate {idx}, whatever the coupling of the coordinates in A.",
          [(sp.Symbol(r"\nabla_{\mu_{%s}} \mathbb{E}_q[\ell]" % idx), coeff)])
    rho = R.hyper_symbol(R.learning_rate)
    lam_old = fam.eta
    lam_new = (1 - rho) * lam_old - rho * coeff if rho is not None else -coeff
    D.add("blr", RULES["blr"].equation, "Bayesian learning rule, coordinate by coordinate",
          f"λ_{idx} ← (1 − ρ) λ_{idx} − ρ ∇_(μ_{idx}) E_q[ℓ] (Eq. 6; the base measure is constant).",
          [(lam_k, lam_new, r"\leftarrow")])
    if any(a.name == "unit_learning_rate" for a in R.approximations) and rho is not None:
        lam_new = sp.expand(lam_new.xreplace({rho: 1}))
        D.add("unit_learning_rate", RULES["unit_learning_rate"].equation, "Learning rate ρ = 1",
              "With ρ_t = 1 the old natural parameters drop out: one step lands on the fixed point of Eq. 5.",
              [(lam_k, lam_new, r"\leftarrow")])
    new = sp.Symbol(f"{fam.param.name}_new", **w.assumptions0)
    names = {at_j[x]: str(x) for x in per}
    leaves = {x: idx for x in per} | {at_j[x]: "j" for x in per}
    if fam.param.mean:
        # ω_k = μ_k(λ) = exp(λ_k − log Σ_j exp λ_j): the new λ once, its log-sum-exp over the coordinates once
        lam_s, logz = sp.Symbol(f"{fam.param.name}_lambda", real=True), sp.Symbol(f"{fam.param.name}_log_partition",
                                                                                   real=True)
        value = fam.ordinary(lam_s, lam_new.xreplace(at_j), NODES)
        lse = next(iter(value.atoms(LogSumExpOverComponents)), None)
        if lse is not None:
            D.defs.extend([(lam_s, lam_new), (logz, lse)])
            value = value.xreplace({lse: logz})
        else:
            D.defs.append((lam_s, lam_new))
        D.symbol_names.update({lam_s: r"\lambda_{%s}" % idx, logz: "A"})
        D.add("component_softmax", RULES["component_softmax"].equation, f"The new {fam.param.name} from λ",
              f"{fam.param.name}_{idx} is the expectation parameter μ_{idx} = ∂A/∂λ_{idx}, derived above: every "
              f"coordinate from λ directly, the log-sum-exp over the coordinates without overflow (none is implied "
              "as one minus the others, which would cancel when it is small).",
              [(s_, e_, "=") for s_, e_ in D.defs] + [(new, value, r"\leftarrow")])
    else:
        value = sp.expand(fam.ordinary(lam_new, None, NODES))
        D.add("natural_to_ordinary", RULES["natural_to_ordinary"].equation, f"The new {fam.param.name} from λ",
              f"λ_{idx} = {fam.eta} solved for {fam.param.name}_{idx}, coordinate by coordinate.",
              [(new, value, r"\leftarrow")])
        mu_a = mu_k.xreplace({lam_k: fam.eta, lam_j: fam.eta.xreplace(at_j)})
        D.add("component_dirichlet", RULES["component_dirichlet"].equation, "Expectation parameters",
              f"What other blocks would average: μ_{idx} = E[T_{idx}] in the ordinary parameters (not needed by this "
              "step).", [(sp.Symbol(r"\mu_{%s}" % idx), sp.simplify(mu_a))])
    D.updates.append((fam.param.name, new, value))
    D.component_axis = ComponentAxis(K, leaves, names, data=[d.name for d in R.data])
    return D


class SizedAxis(Candidate):
    name = "sized_axis"
    noun = "a sized family over a run-time axis"
    declared_as = "components: {index: k, size: K} with family: NAME"
    priority = 25

    def claims(self, spec) -> bool:
        return claims_axis(spec)

    def parse(self, spec, file, base_dir):
        return parse_axis(spec, file, base_dir)

    def owns(self, recipe) -> bool:
        return isinstance(recipe.family, AxisFamily)

    def derive(self, recipe):
        return derive_axis(recipe)


register(SizedAxis())
