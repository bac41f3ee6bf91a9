"""The update IR: what a generated module needs, independent of any target (rendered by
``codegen/backends/<target>``, installed as ``blr_derive.codegen.backends.<target>``).

:class:`UpdateIR` — a single family or a mixture: state (the family's ordinary parameters plus auxiliary state
added by rules, each with an initial value), hyperparameters with defaults (numbers, booleans, tuples, choices),
data inputs, dimension bindings, the step counter, oracle calls (with the state expression they are evaluated
at), Monte Carlo sampling, and the assignments of the update in dependency order after common-subexpression
elimination (``sympy.cse``).

:class:`FactorizedIR` — a product (mean-field) candidate: the same, with the plate of per-row blocks and
statistics as a first-class axis.

Mappings the code generators index by key (``ir.plate["data"]``) are :class:`~typing.TypedDict` s, positional
tuples they unpack (``for d, var, axis in ir.dims``) are :class:`~typing.NamedTuple` s: both keep the shape the
targets read and say what each entry is.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, TypeAlias, TypedDict

from blr_derive.core.types import Assignment, Expr, HyperDefault, Sym, Text
from blr_derive.rules.base import OracleCall, Sampling

if TYPE_CHECKING:
    from blr_derive.spec.family import Param
    from blr_derive.spec.peer import Peer

@dataclass
class Var:
    name: str
    symbol: Sym
    kind: str            # scalar | vector | matrix | elementwise | "array (K,)" (one value per component)
    description: Text = ""
    init: Expr | None = None         # sympy expression of hyperparameters, or None (must be given)
    family: bool = True  # a parameter of the family (False: auxiliary state)
    init_state: str | None = None   # initialised as a copy of this (family) state instead
    fixed: bool = False  # a fixed parameter of the family (never updated)


@dataclass
class HyperVar:
    name: str
    kind: str            # float | int | bool | tuple | choice
    default: HyperDefault
    description: Text
    symbols: tuple[Sym, ...]         # the scalar symbols it binds (one, one per tuple element, or one flag per choice)
    choices: tuple[str, ...] = ()
    keyword_only: bool = False   # passed by name only (after ``*`` in a constructor)


class Dim(NamedTuple):
    """A symbolic dimension and where a generated module reads it: the length of ``var``'s axis ``axis``."""
    symbol: Sym
    var: str
    axis: int


class Read(NamedTuple):
    """An array an entry point reads: ``symbol`` = the float array ``argument[key]``."""
    symbol: Sym
    argument: str
    key: str


class RowLoop(TypedDict):
    """An entry point's loop over examples."""
    count: Sym                         # bound to the number of examples
    slices: list[tuple[Sym, Sym]]      # (symbol, whole-array symbol): symbol = the array's entry i
    assignments: list[Assignment]      # per example, in order
    outputs: list[tuple[str, Sym]]     # (key, symbol): stacked over the examples


@dataclass
class DomainCheck:
    """A run-time check that a new value stayed in its parameter's domain (``blr_derive/ir/validity.py``): where the
    derivation cannot guarantee it, the generated function raises an error naming the value, the component and the
    step instead of returning an invalid distribution (NaN downstream)."""
    name: str              # the state (or global parameter) name
    symbol: Sym            # the symbol holding the new value
    domain: str            # "positive" (elementwise), "positive_definite" (matrices in the last two axes) or "finite"
    component: int | str | None    # None, a component's number (a mixture's unrolled state) or "axis" (the leading axis)
    hint: str              # what would keep it valid
    #: "hessian": the update reads a Hessian estimate of any sign or a federated dual (the torch and Triton targets
    #: refuse the recipe), or the exact rule's natural gradient where it reads the state (a tilted E_q[ℓ]); "estimate":
    #: a sampled or quadrature natural gradient of either sign, or a conjugate loss's constant one (numpy and jax
    #: check it; torch and Triton, which never synchronize with the host in a step, generate it unchecked, as before)
    #: "finite": a value the derivation keeps in its domain, checked to be a number (numpy and jax; torch and Triton
    #: generate it unchecked)
    source: str = "hessian"
    #: the symbol whose assignment the check follows, where ``symbol`` is an expression of new values rather than one
    #: of them (a bound's excess ``n_new - (P - 1)``, a simplex's remainder ``1 - p1_new - p2_new``); None: ``symbol``
    after: Sym | None = None


@dataclass
class EntryPoint:
    """A function of a generated module besides ``init``/``step``: it reads arrays from mapping arguments,
    assigns a program and returns a mapping.  Rendered by every target's generic entry-point template."""
    name: str
    doc: Text
    params: list[str]                          # positional argument names
    hyper: list[str] | None                    # hyperparameters it reads (None: it takes none)
    reads: list[Read]
    counts: list[tuple[Sym, str]] | None = None     # (symbol, argument): symbol = int(argument)
    dims: list[tuple[Sym, Sym]] | None = None       # (dimension symbol, symbol): the dimension is the symbol's length
    assignments: list[Assignment] | None = None     # in order
    returns: list[tuple[str, Expr]] | None = None   # (key, expr)
    keywords: list[str] | None = None               # keyword-only arguments (default None) after the positional ones
    checks: list[DomainCheck] | None = None         # of the returned values (the federated server's parameters)
    rows: RowLoop | None = None                     # a loop over examples
    numbers: list[tuple[Sym, str]] | None = None    # (symbol, argument): symbol = the sum of float(argument)


#: a documenting constant of an entry-point group: a string, a tuple of strings or a mapping of strings
Constant: TypeAlias = "Text | tuple[Text, ...] | dict[Text, Text]"


@dataclass
class EntryPoints:
    """A group of entry points with the constants and notes that document them."""
    title: Text
    notes: list[Text]                          # comment lines
    constants: list[tuple[str, Constant]]      # (NAME, value)
    functions: list[EntryPoint]


class FamilyMaps(TypedDict):
    """For a family whose μ → λ map has no closed form: what the generated module needs to solve ∇A(λ) = μ by
    Newton's method (``core/newton.py``)."""
    lam: list[Expr]                   # λ blocks (symbols)
    eta: list[Expr]                   # λ in the ordinary parameters
    mu: list[Expr]                    # μ(λ)
    fisher: Expr                      # F(λ) = ∇²A (a sympy Matrix)
    A: Expr                           # the log-partition A(λ)
    ordinary: list[tuple[str, Expr]]  # (parameter name, its value as a function of λ)
    lam0: list[Expr]                  # a starting λ
    conditions: list[tuple[str, Expr, str]]   # the domain conditions Ω: (name, expression, domain)
    params: list[Param]               # the family's parameters
    ordinary_mu: list[tuple[str, Expr]] | None   # (parameter name, its value in μ) where μ → ordinary is closed
    mu_symbols: list[Expr]            # the μ symbols those read


class ComponentArrays(TypedDict):
    """A mixture with the components as an array axis (``ir/mixture_axis.py``)."""
    size: str                         # K
    axes: dict[Sym, str]              # symbol -> its component axes ("j", "k", "jk" or "")
    names: dict[Sym, str]             # symbol -> printed array name
    state: list[str]                  # the arrays with a leading component axis (state, per-component data)


@dataclass
class UpdateIR:
    recipe: str
    title: Text
    family: Text
    class_name: str
    engine_version: str
    source: Text
    elementwise: bool
    state: list[Var]               # family parameters then auxiliary state
    hyperparameters: list[HyperVar]
    data: list[Var]
    dims: list[Dim]
    oracles: list[tuple[str, Text]]          # (oracle name, description), first use first
    oracle_calls: list[OracleCall]
    assignments: list[Assignment]            # temporaries, definitions and new state values, in order
    outputs: list[tuple[str, Sym]]           # (state name, symbol holding the new value)
    equations: list[Text]                    # plain-text update equations
    step_symbol: Sym | None = None     # the 1-based step counter, when the update uses it
    sampling: Sampling | None = None   # Monte Carlo recipes
    mean: str | None = None            # the state that is the parameter itself (torch targets)
    parameter: Expr | None = None      # else: what the parameter holds, an expression of the state (e.g. sign(lam))
    paper: Text = ""
    description: Text = ""
    family_maps: FamilyMaps | None = None      # μ → λ by Newton's method in the generated module (numeric inverses)
    entry_points: EntryPoints | None = None    # more functions of the module (e.g. Bayesian ADMM's steps)
    symmetric: frozenset[str] = frozenset()    # names of the symmetric matrices among state, data and oracle values
    peer: Peer | None = None                   # stored state names and constructor checks of a hand-written peer
    components: ComponentArrays | None = None  # a mixture with the components as an array axis
    #: new state values the derivation cannot guarantee to stay in their domain (blr_derive/ir/validity.py)
    checks: list[DomainCheck] | None = None
    #: the BLR's objective L(q) = E_q[ℓ] − H(q) as an entry point (blr_derive/ir/objective.py), where it is closed
    objective: EntryPoints | None = None
    #: the same objective for the optimizer targets (torch, Triton), also where E_q[ℓ] is estimated from loss values
    objective_parts: ObjectiveParts | None = None
    #: why the module has no ``objective`` (in its docstring), where the reason is structural (ir/objective_notes.py)
    objective_note: Text | None = None


@dataclass
class ObjectiveParts:
    """The BLR's objective L(q) = E_q[ℓ] − H(q) (Eq. 2) as the optimizer targets compute it from their state
    (blr_derive/ir/objective.py): the entropy in the state's symbols and how E_q[ℓ] is had (``kind``):
    ``exact`` (``expected_loss``, closed), ``monte_carlo`` (the mean of loss values at samples of q, with its
    standard error), ``quadrature`` (the weighted sum of the loss at the nodes of the deterministic rule the step
    integrates with: ``node_loss`` where the loss is explicit, else the ``loss`` oracle there) or ``delta`` (the
    loss at ``point``, the delta method's E_q[ℓ] ≈ ℓ(point))."""
    kind: str
    entropy: Expr
    expected_loss: Expr | None = None
    point: Text = ""
    #: the loss ℓ from the oracles' loss ℓ_o (monte_carlo, delta): E_q[ℓ] = scale·(ℓ_o's mean or value) + extra,
    #: ``extra`` the terms rules added to the loss (priors), in the state, exact (monte_carlo) or at the point (delta)
    scale: Expr = 1
    extra: Expr = 0
    loss: Text = ""                    # ℓ(θ) in words and sympy text: "ess*ℓ_o(θ) + ..."
    #: the recipe drops the entropy (rule no_entropy, Sec. 4.5): the update minimizes E_q[ℓ] alone, entropy 0
    no_entropy: bool = False
    #: the delta method's point in the state's symbols (``point`` is its text), for the array targets
    point_value: Expr | None = None
    #: quadrature: ℓ_o at the rule's node θ_k (the sampling's ``theta``) where the loss is explicit (None: the
    #: ``loss`` oracle is evaluated there); delta over an explicit loss: the loss at the point, in the state
    node_loss: Expr | None = None
    #: a sentence for the docstring where the steps descend a relaxation of L(q) (``LossModel.relaxed``)
    note: Text = ""


class Block(NamedTuple):
    """One block of a factorized recipe, as the generated module's ``BLOCKS`` lists it."""
    name: str
    candidate: Text                # the block's candidate (a family name, "delta" ...)
    scope: str                     # "local" (per plate row) or "global"
    rho: Text                      # the learning rate's text
    approximation: Text            # exact | delta


class PlateVar(NamedTuple):
    """A per-row data item of the plate."""
    name: str
    symbol: Sym
    kind: str                      # scalar | vector | matrix
    description: Text


class Plate(TypedDict):
    """The plate of a factorized recipe: rows indexed by ``index``."""
    index: str
    data: list[PlateVar]
    local_outputs: list[tuple[str, Sym]]       # per-row values returned as arrays
    vectorized: bool               # scalar rows: the per-row program is elementwise (numpy runs all rows at once)


class ComponentAxisIR(TypedDict):
    """The component axis of a factorized recipe with ``components`` (``ir/product.py``)."""
    index: str
    size: str
    carried: frozenset[str]        # the quantities with one value per component
    rows: frozenset[str]           # those of them that are also per plate row
    state: list[str]               # the state variables among them
    local: list[str]               # the local outputs among them


@dataclass
class FactorizedIR:
    """What a generated module of a factorized recipe needs (rendered by codegen/<target>/factorized.*)."""
    recipe: str
    title: Text
    class_name: str
    engine_version: str
    source: Text
    paper: Text
    description: Text
    blocks: list[Block]
    state: list[Var]                   # global blocks' parameters
    hyperparameters: list[HyperVar]
    data: list[Var]                    # global data
    plate: Plate | None
    dims: list[Dim]                    # plate data: the axis counted after the row axis
    step_symbol: Sym | None
    local_assign: list[Assignment]     # per row
    pre_loop: list[Assignment]         # row-invariant parts of the per-row program, computed once
    prelude: list[Assignment]          # parameters of message-form blocks from their messages
    stats: list[Assignment]            # (symbol, per-row expr)
    scale: Assignment | None           # the minibatch scale N/B, or None
    assignments: list[Assignment]
    outputs: list[tuple[str, Sym]]     # (state name, symbol)
    equations: list[Text]              # plain-text update
    family: Text = ""
    elementwise: bool = False
    symmetric: frozenset[str] = frozenset()    # names of the symmetric matrices among state and data
    components: ComponentAxisIR | None = None  # the component axis of a recipe with ``components``
    #: the EM bound step returns (rule em_bound, blr_derive/rules/product.py): (key, what it is), or None
    bound: tuple[str, Text] | None = None
    #: the docstring of ``objective``, −bound at the state (ir/product.py), where the step returns the EM bound
    objective_doc: Text | None = None
    #: why the module has no ``objective`` (in its docstring), where the reason is structural (ir/objective_notes.py)
    objective_note: Text | None = None
    #: run-time domain checks of the global blocks' new parameters (ir/validity.py product_checks)
    checks: list[DomainCheck] = field(default_factory=list)


#: either IR
IR: TypeAlias = "UpdateIR | FactorizedIR"
