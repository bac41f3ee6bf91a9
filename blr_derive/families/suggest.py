"""Which candidate family makes a loss conjugate (issue 42, item 3): the loss ℓ(θ) is tried against every family
of the library, and a family in which ℓ is linear in the sufficient statistics, ℓ = c0 + Σ c_i T_i(θ), is one in
which E_q[ℓ] = c0 + Σ c_i μ_i is exact and the BLR with ρ = 1 lands on the posterior in one step (Sec. 5.1, Eq. 26
with the natural gradient c).  The decision is :func:`~blr_derive.families.statistics.statistics_decomposition`'s,
the one the ``exact`` rule makes; nothing here knows a named conjugate pair.

Where no family of the library fits, a family is built from the loss itself: its statistics are the distinct
θ-dependent factors of the expanded loss's terms, its support the loss's own domain (``log θ`` ⇒ positive, ``log θ``
and ``log(1 − θ)`` ⇒ the unit interval), and its declaration is derived like any family file (A by integration).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

import sympy as sp

from blr_derive.core.errors import DerivationError, SpecError
from blr_derive.core.exprfuncs import CONSTANTS, FUNCTIONS
from blr_derive.core.exprparse import MAX_LENGTH, parse_expression
from blr_derive.core.names import name_problem
from blr_derive.core.text import quote
from blr_derive.core.yamlio import load_yaml_text
from blr_derive.families.build import build_family
from blr_derive.families.statistics import NotLinearInStatistics, statistics_decomposition
from blr_derive.spec.family import parse_family

CMDLINE = "<command line>"


@dataclass
class Match:
    """A family in which the loss is linear in the statistics: ℓ = c0 + Σ c_i T_i (``coefficients``); ``unused``
    counts the statistics the loss does not touch (zero coefficients)."""
    family: str                 # a built-in name, or the path of a built family's file
    statistics: list
    coefficients: list
    support: str
    unused: int
    on_domain: bool             # the family's support is the loss's own domain
    built: bool = False
    family_yaml: str | None = None


@dataclass
class Screen:
    """What :func:`screen` found: the matches (ranked) and, for each family that does not fit, why."""
    loss: sp.Expr
    variable: sp.Symbol
    data: list
    domain: str
    matches: list = field(default_factory=list)
    rejected: dict = field(default_factory=dict)


def loss_names(text: str, variable: str) -> list[str]:
    """The names ``text`` uses besides ``variable``, the grammar's functions and constants (the loss's data and
    hyperparameters), in order of appearance; a syntax error is a located SpecError."""
    if not isinstance(text, str) or not text.strip():
        raise SpecError("--loss: empty expression", CMDLINE)
    if len(text) > MAX_LENGTH:
        raise SpecError(f"--loss: expression longer than {MAX_LENGTH} characters", CMDLINE)
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise SpecError(f"--loss: syntax error in '{quote(text)}' ({exc.msg})", CMDLINE) from None
    except (RecursionError, MemoryError):
        raise SpecError("--loss: expression nested too deeply", CMDLINE) from None
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    names = []
    for n in sorted((n for n in ast.walk(tree) if isinstance(n, ast.Name)), key=lambda n: (n.lineno, n.col_offset)):
        if isinstance(n, ast.Name) and id(n) not in called and n.id != variable and n.id not in CONSTANTS \
                and n.id not in names:
            names.append(n.id)
    return names


def parse_loss(text: str, variable: str = "theta"):
    """(ℓ, θ, data symbols): the loss in the recipe grammar, θ a real symbol named ``variable`` and every other
    name a real scalar (data or hyperparameter)."""
    if not isinstance(variable, str) or not variable.isidentifier() or variable in FUNCTIONS \
            or variable in CONSTANTS:
        raise SpecError(f"--variable: '{quote(str(variable))}' is not a name the grammar allows", CMDLINE)
    names = loss_names(text, variable)
    for n in names:
        # each name becomes a data input of every command tried: one the recipe grammar refuses (os, state,
        # lambda1, print) would fail every family alike, reported as "no family makes the loss conjugate"
        problem = name_problem(n)
        if problem is not None:
            raise SpecError(f"--loss: data '{quote(n)}': {problem}; choose another name", CMDLINE)
    theta = sp.Symbol(variable, real=True)
    symbols = {variable: theta, **{n: sp.Symbol(n, real=True) for n in names if n.isidentifier()}}
    try:
        expr = parse_expression(text, symbols, what="--loss")
    except SpecError as exc:
        raise exc.located(CMDLINE, None) from None
    if not expr.has(theta):
        raise SpecError(f"--loss: the loss does not depend on {variable} (name it with --variable)", CMDLINE)
    return expr, theta, [symbols[n] for n in names]


def loss_domain(expr, theta) -> str:
    """The support the loss's own domain suggests: the unit interval where it takes log θ and log(1 − θ) (or
    log(1 − θ) alone), the positive half-line where it takes a logarithm, a fractional or negative power or a
    digamma of θ, else the real line."""
    # an argument positive at every real θ (log(1 + e^−θ), (1 + θ²)^−½) does not restrict it
    real = sp.Dummy("theta", real=True)
    expr = expr.xreplace({theta: real})
    theta = real
    logs = [a for a in expr.atoms(sp.log) if a.has(theta) and a.args[0].is_positive is not True]
    one_minus = any(sp.simplify(a.args[0] - (1 - theta)) == 0 for a in logs)
    if one_minus:
        return "unit_interval"
    positive = bool(logs) or any(
        p.base.has(theta) and not (p.exp.is_Integer and p.exp > 0) and p.base.is_positive is not True
        for p in expr.atoms(sp.Pow)) \
        or any(f.has(theta) for f in expr.atoms(sp.Function) if f.func.__name__ in ("digamma", "loggamma", "gamma"))
    return "positive" if positive else "real"


def statistics_of(expr, theta) -> list:
    """The distinct θ-dependent factors of the expanded loss's terms (logs of products split): the statistics of
    the smallest family in which ℓ is linear, in order of appearance."""
    out = []
    for term in sp.Add.make_args(sp.expand(sp.expand_log(sp.expand(expr), force=True))):
        dep = sp.Mul(*[f for f in sp.Mul.make_args(term) if f.has(theta)])
        if dep != 1 and dep not in out:
            out.append(dep)
    return out


def scalar_family(fam) -> bool:
    """A family of one scalar variable, or whose variable is a vector of scalar components of one support (the
    loss is then read for each component: mean-field, as a recipe over it reads it)."""
    if isinstance(fam.theta, sp.Symbol):
        return True
    return bool(fam.components) and all(isinstance(c, sp.Symbol) for c in fam.components)


def scalar_variable(fam):
    """The scalar symbol the loss is read in: the family's variable, or its first component (mean-field)."""
    return fam.theta if isinstance(fam.theta, sp.Symbol) else fam.components[0]


def support_of(fam) -> str:
    return fam.joint_support or (fam.component_supports[0] if fam.component_supports else "?")


def screen(expr, theta, data, families, support: str | None = None) -> Screen:
    """Try ``expr`` (a loss in the scalar ``theta``) against ``families`` ((name, Family) pairs): the families in
    which it is linear in the statistics, ranked: the loss's own domain first, then the fewest unused statistics,
    the fewest statistics, the name.  ``support`` keeps only the families of that support."""
    out = Screen(expr, theta, list(data), support or loss_domain(expr, theta))
    for name, fam in families:
        if not scalar_family(fam):
            out.rejected[name] = "its variable is a vector or matrix (the loss is read for a scalar variable)"
            continue
        sup = support_of(fam)
        if support is not None and sup != support:
            out.rejected[name] = f"its support is {sup}, not {support}"
            continue
        own = scalar_variable(fam)
        loss = expr.xreplace({theta: own})
        try:
            _, cs = statistics_decomposition(fam, loss)
        except NotLinearInStatistics as exc:
            out.rejected[name] = exc.describe({own: theta})
            continue
        except DerivationError as exc:
            out.rejected[name] = str(exc)
            continue
        # a family of components is read for one of them: its statistics are those of that component
        mine = [(t, c) for t, c in zip(fam.T, cs) if t.has(own)]
        stats = [t.xreplace({own: theta}) for t, _ in mine]
        coeffs = [c for _, c in mine]
        out.matches.append(Match(name, stats, coeffs, sup, sum(1 for c in coeffs if c == 0), sup == out.domain))
    out.matches.sort(key=lambda m: (not m.on_domain, m.unused, len(m.statistics), m.family))
    return out


def _param_name(i, taken):
    name = f"lam{i}"
    while name in taken:
        name += "_"
    return name


def family_yaml(expr, theta, name: str, support: str | None = None) -> tuple[str, list, str]:
    """(family YAML text, statistics, support) of the family built from the loss's own statistics: natural
    parameter λ_i = p_i (real) for each statistic, except where integrability fixes a sign: the statistic that
    grows fastest (the largest power of θ, exp θ) and a negative power of θ on the positive half-line get
    λ = −p (p positive), a logarithm λ = p − 1 (p positive; θ^(λ) integrable at 0)."""
    support = support or loss_domain(expr, theta)
    stats = statistics_of(expr, theta)
    if not stats:
        raise SpecError("--loss: no term of the loss depends on the variable", CMDLINE)
    taken = {str(s) for s in expr.free_symbols}

    def power(t):
        if t == theta:
            return sp.Integer(1)
        if isinstance(t, sp.Pow) and t.base == theta and t.exp.is_number:
            return t.exp
        return None
    powers = [power(t) for t in stats]
    top = max((p for p in powers if p is not None and p > 0), default=None)
    params, naturals = [], []
    for i, (t, p) in enumerate(zip(stats, powers), 1):
        pname = _param_name(i, taken)
        if isinstance(t, sp.log) and support in ("positive", "unit_interval"):
            params.append((pname, "positive")), naturals.append(f"{pname} - 1")
        elif (p is not None and p == top and support != "unit_interval") or isinstance(t, sp.exp) \
                or (p is not None and p < 0 and support == "positive"):
            params.append((pname, "positive")), naturals.append(f"-{pname}")
        else:
            params.append((pname, "real")), naturals.append(pname)
    lines = [f"name: {name}",
             "description: built by blr-derive suggest from the loss's own statistics (the distinct "
             "theta-dependent factors of its terms)",
             f"variable: {theta}", f"support: {support}", "parameters:"]
    lines += [f"  {p}: {{domain: {d}}}" for p, d in params]
    lines += ["sufficient_statistics:"] + [f"  - {_text(t)}" for t in stats]
    lines += ["base_measure: 1", "natural_parameters:"] + [f"  - {n}" for n in naturals]
    return "\n".join(lines) + "\n", stats, support


def _text(e) -> str:
    """An expression as the grammar reads it (sympy's printer: ``**`` powers, the grammar's function names)."""
    return sp.sstr(e, order="lex").replace("loggamma", "lgamma")


def build_from_loss(expr, theta, name: str, file: str, support: str | None = None):
    """(YAML text, Family, Match) of the family built from the loss's statistics, derived as the family file
    ``file`` would be; a family that does not derive (not normalizable in closed form, say) is the SpecError
    the family file would give, located at ``file``."""
    text, stats, sup = family_yaml(expr, theta, name, support)
    spec = load_yaml_text(text, file)
    fam = build_family(parse_family(spec, file))
    own = fam.theta
    _, cs = statistics_decomposition(fam, expr.xreplace({theta: own}))
    return text, fam, Match(file, stats, cs, sup, sum(1 for c in cs if c == 0), True, True, text)


def loss_text(expr, theta, family_variable) -> str:
    """The loss with θ renamed to the family's variable, as the grammar reads it."""
    return _text(expr.xreplace({theta: sp.Symbol(str(family_variable), real=True)}))


__all__ = ["Match", "Screen", "screen", "parse_loss", "loss_domain", "statistics_of", "family_yaml",
           "build_from_loss", "loss_text"]
