"""The update IR: what a generated module needs, independent of any target (rendered by
``blr_derive/codegen/backends/<target>``).

:class:`UpdateIR` — a single family or a mixture: state (the family's ordinary parameters plus auxiliary state
added by rules, each with an initial value), hyperparameters with defaults (numbers, booleans, tuples, choices),
data inputs, dimension bindings, the step counter, oracle calls (with the state expression they are evaluated
at), Monte Carlo sampling, and the assignments of the update in dependency order after common-subexpression
elimination (``sympy.cse``).

:class:`FactorizedIR` — a product (mean-field) candidate: the same, with the plate of per-row blocks and
statistics as a first-class axis.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Var:
    name: str
    symbol: object
    kind: str            # scalar | vector | matrix | elementwise
    description: str = ""
    init: object = None  # sympy expression of hyperparameters, or None (must be given)
    family: bool = True  # a parameter of the family (False: auxiliary state)
    init_state: str | None = None   # initialised as a copy of this (family) state instead
    fixed: bool = False  # a fixed parameter of the family (never updated)


@dataclass
class HyperVar:
    name: str
    kind: str            # float | int | bool | tuple | choice
    default: object      # None: required
    description: str
    symbols: tuple       # the scalar symbols it binds (one, one per tuple element, or one boolean per choice)
    choices: tuple = ()
    keyword_only: bool = False   # passed by name only (after ``*`` in a constructor)


@dataclass
class DomainCheck:
    """A run-time check that a new value stayed in its parameter's domain (``blr_derive/ir/validity.py``): where the
    derivation cannot guarantee it, the generated function raises an error naming the value, the component and the
    step instead of returning an invalid distribution (NaN downstream)."""
    name: str              # the state (or global parameter) name
    symbol: object         # the symbol holding the new value
    domain: str            # "positive" (elementwise) or "positive_definite" (matrices in the last two axes)
    component: object      # None, a component's number (a mixture's unrolled state) or "axis" (the leading axis)
    hint: str              # what would keep it valid


@dataclass
class EntryPoint:
    """A function of a generated module besides ``init``/``step``: it reads arrays from mapping arguments,
    assigns a program and returns a mapping.  Rendered by every target's generic entry-point template."""
    name: str
    doc: str
    params: list                   # positional argument names
    hyper: list | None             # hyperparameters it reads (None: it takes none)
    reads: list                    # [(symbol, argument, key)]: symbol = the float array argument[key]
    counts: list = None            # [(symbol, argument)]: symbol = int(argument)
    dims: list = None              # [(dimension symbol, symbol)]: the dimension is the symbol's length
    assignments: list = None       # [(symbol, expr)] in order
    returns: list = None           # [(key, expr)]
    keywords: list = None          # keyword-only arguments (default None) after the positional ones
    checks: list = None            # [DomainCheck] of the returned values (the federated server's parameters)
    rows: dict | None = None       # a loop over examples: {count: symbol bound to the number of examples,
    #                                slices: [(symbol, whole-array symbol)]: symbol = the array's entry i,
    #                                assignments: [(symbol, expr)] per example, outputs: [(key, symbol)] stacked}


@dataclass
class EntryPoints:
    """A group of entry points with the constants and notes that document them."""
    title: str
    notes: list                    # comment lines
    constants: list                # [(NAME, value)]: a str, a tuple of str or a dict of str
    functions: list                # [EntryPoint]


@dataclass
class OracleCall:
    symbol: object
    oracle: str
    argument: object
    description: str


@dataclass
class UpdateIR:
    recipe: str
    title: str
    family: str
    class_name: str
    engine_version: str
    source: str
    elementwise: bool
    state: list                    # [Var] family parameters then auxiliary state
    hyperparameters: list          # [HyperVar]
    data: list                     # [Var]
    dims: list                     # [(dim symbol, var name, axis)]
    oracles: list                  # [(name, description)]
    oracle_calls: list             # [OracleCall]
    random_draws: list             # [] for now
    assignments: list              # [(symbol, expr)] temporaries, definitions and new state values
    outputs: list                  # [(state name, symbol holding the new value)]
    equations: list                # plain-text update equations
    step_symbol: object = None     # the 1-based step counter, when the update uses it
    sampling: object = None        # rules.base.Sampling for Monte Carlo recipes
    mean: str | None = None        # the state that is the parameter itself (torch targets)
    parameter: object = None       # else: what the parameter holds, an expression of the state (e.g. sign(lam))
    paper: str = ""
    description: str = ""
    family_maps: dict | None = None      # μ → λ by Newton's method in the generated module (numeric inverses)
    entry_points: object = None          # EntryPoints: more functions of the module (e.g. Bayesian ADMM's steps)
    symmetric: frozenset = frozenset()   # names of the symmetric matrices among state, data and oracle values
    peer: object = None                  # spec.peer.Peer: stored state names and constructor checks, or None
    # a mixture with the components as an array axis (blr_derive/ir/mixture_axis.py): {size, axes: symbol -> its
    # component axes ("j", "k", "jk" or ""), names: symbol -> printed array name, state}; None otherwise
    components: dict | None = None
    # [DomainCheck]: new state values the derivation cannot guarantee to stay in their domain (blr_derive/ir/validity)
    checks: list | None = None


@dataclass
class FactorizedIR:
    """What a generated module of a factorized recipe needs (rendered by codegen/<target>/factorized.*)."""
    recipe: str
    title: str
    class_name: str
    engine_version: str
    source: str
    paper: str
    description: str
    blocks: list                   # [(name, candidate, scope, rho text, approximation)]
    state: list                    # [ir.Var] global blocks' parameters
    hyperparameters: list          # [ir.HyperVar]
    data: list                     # [ir.Var] global data
    plate: dict | None             # {index, data: [(name, symbol, kind)], local_outputs: [(name, symbol)]}
    dims: list                     # [(dim, data name, axis)] (plate data: axis counted after the row axis)
    step_symbol: object
    local_assign: list             # [(symbol, expr)] per row
    pre_loop: list                 # [(symbol, expr)] row-invariant parts of the per-row program, computed once
    prelude: list                  # [(symbol, expr)] parameters of message-form blocks from their messages
    stats: list                    # [(symbol, per-row expr)]
    scale: object                  # (symbol, expr) or None
    assignments: list              # [(symbol, expr)]
    outputs: list                  # [(state name, symbol)]
    equations: list                # plain-text update
    family: str = ""
    factorized: bool = True
    elementwise: bool = False
    symmetric: frozenset = frozenset()   # names of the symmetric matrices among state and data
    # the component axis of a recipe with ``components``: {index, size, carried: names of the quantities with one
    # value per component, rows: those of them that are also per plate row, state and local: the state variables
    # and local outputs among them}; None without one
    components: dict | None = None
