"""``blr-derive suggest``: the candidate families in which a loss is conjugate (linear in the sufficient
statistics, :mod:`blr_derive.families.suggest`), each confirmed by deriving the recipe its suggested command
declares (``exact`` and ``unit_learning_rate``: one BLR step with ρ = 1 is the posterior, Sec. 5.1), and, where no
family of the library fits, the family built from the loss's own statistics, written to a file."""
from __future__ import annotations

import re
import shlex
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import sympy as sp

from blr_derive.candidates.options import COMMAND_LINE, _name_value, recipe_from_options
from blr_derive.core.errors import BLRError, DerivationError, SpecError
from blr_derive.core.io import output_problem, write_atomic
from blr_derive.core.pretty import pretty
from blr_derive.core.resources import families_dir
from blr_derive.core.text import quote
from blr_derive.core.yamlio import load_yaml_file
from blr_derive.derive.driver import derive as derive_recipe
from blr_derive.families.library import builtin_family_names, load_family
from blr_derive.families.suggest import (build_from_loss, loss_text, parse_loss, scalar_family, scalar_variable, screen,
                                         statistics_of, support_of)
from blr_derive.spec.hyper import parse_data
from blr_derive.spec.vocabulary import SUPPORTS

#: the approximations of a conjugate recipe: E_q[ℓ] exact, and ρ = 1 (one step is Bayes' rule)
CONJUGATE_APPROXIMATIONS = ("exact", "unit_learning_rate")
#: at most this many matches are confirmed by a derivation (the rest are listed by the screen only)
MAX_CONFIRMED = 8


@dataclass
class Suggestion:
    """One family in which the loss is conjugate, with the command that derives its update."""
    family: str
    statistics: list
    coefficients: list
    support: str
    unused: int
    on_domain: bool
    command: list
    built: bool = False
    renamed: dict = field(default_factory=dict)           # data name -> its name in the command (a clash)


@dataclass
class Suggestions:
    loss: object
    variable: str
    domain: str
    suggestions: list = field(default_factory=list)
    not_derived: dict = field(default_factory=dict)       # family -> why its recipe does not derive
    rejected: dict = field(default_factory=dict)          # family -> why the loss is not linear in it
    built_file: str | None = None
    approximate: list = field(default_factory=list)       # [Approximate]: no conjugate family; what derives instead
    approximate_tried: int = 0                            # families of the loss's domain tried for those

    def to_text(self) -> str:
        lines = [f"loss: ℓ({self.variable}) = {pretty(self.loss)}   (its domain: {SUPPORTS.get(self.domain, self.domain)}"
                 f" -> support {self.domain})"]
        if not self.suggestions:
            lines.append(f"no family makes the loss conjugate (it is not linear in the statistics of any built-in "
                         f"family; --write-family FILE builds one from its terms where they make a family). Families of "
                         f"its domain and the expectation rules with which their update derives ({self.approximate_tried}"
                         " tried; E_q[ℓ] exact where 'exact' derives, else approximated; not one step to the "
                         "posterior), best first:")
            for i, a in enumerate(self.approximate, 1):
                lines.append(f"  {i}. {a.family}: {', '.join(a.rules)}" + (f"   (not: {'; '.join(a.refused)})"
                                                                          if a.refused else "")
                             + _renamed_note(a.family, a.renamed, "   "))
                lines.append("     " + " ".join(a.command))
            return "\n".join(lines) + "\n"
        if self.built_file:
            lines.append(f"no built-in family makes the loss linear in its statistics: built one from the loss's "
                         f"terms, written to {self.built_file} (check it: blr-derive check {shlex.quote(self.built_file)})")
        lines.append("conjugate families (ℓ = c0 + Σ c_i T_i: E_q[ℓ] is exact and one step with ρ = 1 is the "
                     "posterior, Sec. 5.1), best first:")
        for i, s in enumerate(self.suggestions, 1):
            stats = ", ".join(pretty(t) for t in s.statistics)
            note = [] if s.on_domain else [f"support {s.support}, not the loss's domain"]
            note += [f"{s.unused} statistic{'s' if s.unused > 1 else ''} unused"] if s.unused else []
            note += ["built from the loss"] if s.built else []
            note += [_renamed_note(s.family, s.renamed, "")] if s.renamed else []
            lines.append(f"  {i}. {s.family}: T = ({stats})" + (f"  [{'; '.join(note)}]" if note else ""))
            lines.append("     " + " ".join(s.command))
        for name, why in self.not_derived.items():
            lines.append(f"  (linear in {name}'s statistics, but its recipe does not derive: {why})")
        return "\n".join(lines) + "\n"


#: the expectation rules tried where no family is conjugate, in the order they are listed (deterministic first);
#: as one --approx item each (rules/exact.py, quadrature.py, gauss_hermite.py, delta.py)
EXPECTATION_RULES = ("exact", "quadrature", "gauss_hermite: {nodes: 5}", "delta")
#: at most this many families of the loss's domain are tried for them
MAX_APPROXIMATE = 6


@dataclass
class Approximate:
    """A family of the loss's domain in which the loss is not conjugate, with the expectation rules that derive."""
    family: str
    rules: list
    refused: list
    command: list
    renamed: dict = field(default_factory=dict)           # data name -> its name in the command (a clash)


def _command(family_ref: str, loss: str, data: list, settings=(), approximations=CONJUGATE_APPROXIMATIONS) -> list:
    return (["blr-derive", shlex.quote(family_ref), shlex.quote(f"--loss={loss}")]
            + [w for d in data for w in ("--data", shlex.quote(d))]
            + [w for x in settings for w in ("--set", shlex.quote(x))]
            + [w for a in approximations for w in ("--approx", shlex.quote(a))])


def _check_declared_data(declared) -> None:
    """Each ``--data`` declaration on its own (its name, YAML, keys and shape), before any family is tried: a bad
    one (``--data torch``, ``--data 'y={bogus: 1}'``) made every family's recipe fail, and the command answered
    ``--loss ...: no built-in family makes the loss conjugate`` without naming the option at fault."""
    seen = set()
    for item in declared:
        name, value = _name_value(item if "=" in item else item + "={shape: []}", "--data")
        if name in seen:
            raise SpecError(f"--data {name} is given twice", COMMAND_LINE)
        seen.add(name)
        try:
            parse_data({name: value}, {}, set(), {})
        except SpecError as exc:
            raise SpecError(f"--data {quote(item)}: {exc.message}", COMMAND_LINE) from None


def _data_items(names, declared) -> list:
    """``--data`` items: the user's declarations, then every other name of the loss as a number."""
    given = {d.partition("=")[0].strip(): d for d in declared}
    return [given.get(n, n) for n in names] + [d for n, d in given.items() if n not in names]


def _axis_settings(name: str) -> list:
    """``--set components=...`` for a built-in family over a run-time axis (its file declares ``axis``): the loss
    is then read for one generic component and summed over them (candidates/sized_axis.py)."""
    spec = load_yaml_file(families_dir() / f"{name}.yaml", "family file")
    if not isinstance(spec, dict) or "axis" not in spec or not isinstance(spec.get("sizes"), dict):
        return []
    size = next(iter(spec["sizes"]))
    return [f"components={{index: k, size: {size}}}"]


def _derives(family_ref: str, loss: str, data: list, settings=(), approximations=CONJUGATE_APPROXIMATIONS):
    """None if the recipe the command declares derives, else why not (one line)."""
    try:
        r = recipe_from_options(family_ref, loss=loss, approximations=approximations, data=data,
                                settings=settings)
        derive_recipe(r)
    except (BLRError, DerivationError) as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


def _renamed_note(family: str, renamed: dict, lead: str) -> str:
    """The data the command renames, where the loss's names are names of the family (its parameters)."""
    if not renamed:
        return ""
    text = (f"data {', '.join(renamed)} renamed {', '.join(renamed.values())}: "
            f"{family} uses {'that name' if len(renamed) == 1 else 'those names'}")
    return f"{lead}[{text}]" if lead else text


#: a recipe's refusal of a data name that the family (or the recipe) already uses
CLASH = re.compile(r"data '([A-Za-z_][A-Za-z0-9_]*)' clashes with another name")


def _fitted(family_ref, own, expr, theta, loss, variable, names, data, settings=(),
            approximations=CONJUGATE_APPROXIMATIONS):
    """(why, loss text, data items, renamed) of the recipe for ``family_ref`` (``_derives``), with the loss's
    variable renamed to the family's ``own`` and every data name that clashes with a name of the family (a loss
    -a*log(θ) - b*log(1 - θ) over the beta, whose parameters are a and b) renamed to a fresh one, so that a
    conjugate family is not missed for the names of the user's data."""
    renamed: dict = {}
    taken = {str(n) for n in names} | {variable, str(own)}
    while True:
        sub = {n: sp.Symbol(renamed[str(n)], **n.assumptions0) for n in names if str(n) in renamed}
        text = loss if str(own) == variable and not sub else loss_text(expr.xreplace(sub), theta, own)
        items = [_renamed_item(d, renamed) for d in data]
        why = _derives(family_ref, text, items, settings, approximations)
        clash = CLASH.search(why or "")
        name = clash.group(1) if clash else None
        if name is None or name not in {str(n) for n in names} or name in renamed:
            return why, text, items, renamed
        new = next(f"{name}_data{i or ''}" for i in range(len(taken) + 1) if f"{name}_data{i or ''}" not in taken)
        taken.add(new)
        renamed[name] = new


def _renamed_item(item: str, renamed: dict) -> str:
    """A ``--data`` item (``NAME`` or ``NAME=declaration``) under the renaming."""
    name, eq, rest = item.partition("=")
    return renamed.get(name.strip(), name.strip()) + eq + rest if name.strip() in renamed else item


def _reasons(found, out) -> str:
    """Why nothing fits, in a few words: how many families were tried, and for up to three of the loss's own
    domain (else any), why not."""
    why = {**found.rejected, **out.not_derived}
    own = [n for n in why if n in out.not_derived or "not a multiple" in why[n] or "inside" in why[n]]
    shown = "; ".join(f"{n}: {why[n]}" for n in (own or list(why))[:3])
    return f"{len(why)} built-in families tried; e.g. {shown}"


def suggest(loss: str, variable: str = "theta", data=(), support: str | None = None,
            write_family: str | None = None) -> Suggestions:
    """The families of the library in which ``loss`` (recipe grammar, in ``variable``) is conjugate, each confirmed
    by deriving its suggested recipe; with none, the family built from the loss's statistics, written to
    ``write_family`` (required then).  Nothing fits: a SpecError located at the command line."""
    if support is not None and support not in SUPPORTS:
        raise SpecError(f"--support: unknown support '{quote(support)}' (known: {', '.join(sorted(SUPPORTS))})",
                        COMMAND_LINE)
    if write_family is not None:
        if not write_family:
            raise SpecError("--write-family: empty output path", COMMAND_LINE)
        problem = output_problem(Path(write_family), option="--write-family")
        if problem is not None:
            raise SpecError(problem, write_family)
    _check_declared_data(list(data))
    expr, theta, names = parse_loss(loss, variable)
    data = _data_items([str(n) for n in names], list(data))
    families = [(n, load_family(n)) for n in builtin_family_names()]
    found = screen(expr, theta, names, families, support)
    out = Suggestions(expr, variable, found.domain, rejected=found.rejected)
    for m in found.matches[:MAX_CONFIRMED]:
        fam = families[[n for n, _ in families].index(m.family)][1]
        own = fam.theta if hasattr(fam.theta, "name") else "theta"
        settings = _axis_settings(m.family)
        why, text, items, renamed = _fitted(m.family, own, expr, theta, loss, variable, names, data, settings)
        if why is not None:
            out.not_derived[m.family] = why
            continue
        out.suggestions.append(Suggestion(m.family, m.statistics, m.coefficients, m.support, m.unused, m.on_domain,
                                          _command(m.family, text, items, settings), renamed=renamed))
    if out.suggestions:
        return out
    reasons = _reasons(found, out)
    if write_family is None:
        _approximate(out, expr, theta, loss, variable, data, families, found, names)
        if out.approximate:
            return out
        raise SpecError(f"--loss '{quote(loss)}': no built-in family makes the loss conjugate ({reasons}), and no "
                        f"family of its domain ({found.domain}) derives with an expectation rule "
                        f"({', '.join(r.split(':')[0] for r in EXPECTATION_RULES)}); name a file with --write-family "
                        "FILE to build a family from the loss's own statistics", COMMAND_LINE)
    name = Path(write_family).stem if Path(write_family).stem.isidentifier() else "suggested"
    try:
        text, fam, m = build_from_loss(expr, theta, name, write_family, support)
    except (SpecError, DerivationError) as exc:
        raise SpecError(f"--loss '{quote(loss)}': no family fits: no built-in family makes the loss linear in its "
                        f"statistics ({reasons}), and the family built from its terms does not derive: "
                        f"{str(exc).splitlines()[0]}", COMMAND_LINE) from None
    cmd_loss = loss if str(fam.theta) == variable else loss_text(expr, theta, fam.theta)
    with tempfile.TemporaryDirectory() as tmp:        # the file is written only once its recipe derives
        trial = Path(tmp) / Path(write_family).name
        trial.write_text(text, encoding="utf-8")
        why = _derives(str(trial), cmd_loss, data)
    if why is not None:
        raise SpecError(f"--loss '{quote(loss)}': the family built from the loss's statistics (written to "
                        f"{write_family}) derives, but its recipe does not: {why}", COMMAND_LINE)
    write_atomic(Path(write_family), text)
    out.built_file = write_family
    out.suggestions.append(Suggestion(write_family, m.statistics, m.coefficients, m.support, m.unused, True,
                                      _command(write_family, cmd_loss, data), built=True))
    return out


def _approximate(out, expr, theta, loss, variable, data, families, found, names=()):
    """No conjugate family: the scalar families of the loss's domain (at most MAX_APPROXIMATE: those that share
    the most of the loss's statistics, then the fewest statistics, first) with the expectation rules under which
    their recipe derives, each confirmed by deriving it."""
    loss_stats = statistics_of(expr, theta)

    def shared(fam):            # the loss's statistics the family has (E_q of those is its μ: exact)
        own = scalar_variable(fam)
        T = [t.xreplace({own: theta}) for t in fam.T]
        return sum(1 for x in loss_stats if any(sp.simplify(x - t) == 0 for t in T))
    own_domain = [(n, f) for n, f in families if scalar_family(f) and support_of(f) == found.domain]
    own_domain.sort(key=lambda nf: (-shared(nf[1]), len(nf[1].T), nf[0]))
    for name, fam in own_domain[:MAX_APPROXIMATE]:
        out.approximate_tried += 1
        own = scalar_variable(fam)
        settings = _axis_settings(name)
        rules, refused = [], []
        text, items, renamed = loss, data, {}
        for i, rule in enumerate(EXPECTATION_RULES):
            if i == 0:                  # the names are the family's, whatever the rule: renamed once
                why, text, items, renamed = _fitted(name, own, expr, theta, loss, variable, names, data, settings,
                                                    (rule,))
            else:
                why = _derives(name, text, items, settings, (rule,))
            if why is None:
                rules.append(rule)
            else:
                refused.append(rule.split(":")[0])
        if rules:
            out.approximate.append(Approximate(name, rules, refused, _command(name, text, items, settings, (rules[0],)),
                                               renamed=renamed))
    # exact expectations first, then the number of rules that apply
    out.approximate.sort(key=lambda a: (a.rules[0] != "exact", -len(a.rules), a.family))
