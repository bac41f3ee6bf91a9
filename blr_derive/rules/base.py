"""Rules and the record they write.

Every transformation the engine applies is a named :class:`Rule` citing the equation of Khan & Rue (2023) (or
the paper) it implements.  Kinds:

* ``identity`` — exact steps (theorems, chain rules), applied wherever a candidate needs them;
* ``expectation`` — how E_q[∇ℓ], E_q[∇²ℓ] (or the natural gradient of E_q[ℓ]) are obtained: the delta method,
  exact expectations, Monte Carlo, quadrature, samplers and their relaxations; a recipe names at most one;
* ``step`` — changes of the BLR step itself (no entropy, a prior in the family, ρ = 1, momentum, posterior
  correction);
* ``pass`` — approximations applied to the derived update program (weight decay as a prior, squared-gradient
  Hessians, separate learning rates, momentum ...);
* ``convention`` — a peer optimizer's convention that is *not* a consequence of the BLR (Adam's bias correction,
  AMSGrad's running maximum, AdamW's decoupled decay, IVON's clipping ...): a pass, reported as a convention by
  ``explain`` and ``compare``;
* ``mixture`` — approximations specific to mixture candidates.

All but identities are named by recipes in ``approximations``.  A rule is one module of ``blr_derive/rules``
(found by :func:`blr_derive.rules.load_all`); behaviour is in methods of its class, called by the candidates and
the driver at their stage (``check``, ``on_blr``, ``natural_gradient``, ``adjust_gradient``, ``adjust_lambda``,
``rewrite``, ``finish``),
never by testing rule names in a driver.

:class:`Derivation` is the typed record a derivation writes: its steps (each naming the rule and equation), the
update program (oracle calls, definitions, updates), auxiliary state, Monte Carlo sampling, and what later
rules and reports read (the natural gradient in terms of E_q[∇ℓ], E_q[∇²ℓ], the expected loss, a relaxation).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeAlias, TypedDict, TypeVar

import sympy as sp

from blr_derive.core.pretty import pretty
from blr_derive.core.errors import SpecError
from blr_derive.core.text import Prose, plain, quote
from blr_derive.core.types import Assignment, Expr, Sym, Text

KINDS = ("identity", "expectation", "step", "pass", "convention", "mixture")
#: kinds whose rules rewrite the derived update program
PROGRAM_KINDS = ("pass", "convention")


class Rule:
    """A named rule.  Subclasses override the stages they take part in."""

    name: str = ""
    kind: str = "identity"
    equation: str = ""
    summary: str = ""
    #: the candidate structures (``blr_derive/candidates``) the rule applies to; empty: single families, and
    #: every structure for pass and convention rules (they rewrite the derived program, whatever derived it)
    structures: tuple[str, ...] = ()
    #: False for a rule that reads no arguments from its recipe entry (``delta``): ``delta: {samples: 4}`` is then a
    #: located error (``refuse_arguments``), as an unknown argument of any other rule is (``Ctx.done``)
    takes_arguments: bool = True
    #: expectation rules: the kinds of loss ("abstract", "explicit") whose expectations the rule provides
    losses: tuple[str, ...] = ()
    #: pass and convention rules: True when the rule also rewrites programs that mix coordinates (matrix
    #: products); False: the update must act elementwise
    matrix_programs: bool = False

    def __init__(self, name=None, kind=None, equation=None, summary=None):
        self.name = name or self.name
        self.kind = kind or self.kind
        self.equation = equation if equation is not None else self.equation
        self.summary = summary if summary is not None else self.summary
        if self.kind not in KINDS:
            raise ValueError(f"rule {self.name}: unknown kind {self.kind}")

    @property
    def named_by_recipes(self) -> bool:
        return self.kind != "identity"

    def applies_to(self, structure: str) -> bool:
        if self.structures:
            return structure in self.structures
        return structure == "single" or self.kind in PROGRAM_KINDS

    def __repr__(self):
        return f"Rule({self.name!r}, {self.kind})"

    # ---- stages (overridden by rules that take part in them)
    def check(self, ctx):
        """Raise a located error if the rule does not apply to the recipe (called before deriving)."""

    def natural_gradient(self, ctx):
        """Expectation rules: the natural gradient ∇_μ E_q[ℓ] of the single-family candidate (one per λ block)."""
        raise NotImplementedError(f"rule '{self.name}' gives no natural gradient")

    def on_blr(self, ctx):
        """Step rules: change the BLR of Eq. 6 itself (e.g. drop the entropy), right after it is stated."""

    def adjust_gradient(self, ctx, grads):
        """Step rules: change the natural gradient of the loss before Eq. 6 is assembled."""
        return grads

    def adjust_lambda(self, ctx, lam_new):
        """Step rules: change the updated natural parameters λ_{t+1}."""
        return lam_new

    def rewrite(self, ctx):
        """Pass and convention rules: rewrite the update program (``ctx`` reads the rule's arguments)."""
        raise NotImplementedError(f"rule '{self.name}' rewrites no program")

    def finish(self, ctx):
        """Steps that follow the candidate's update (e.g. the server step of federated ADMM)."""

    def rewrites_in_program(self, D) -> bool:
        """Whether a rule of another kind also rewrites the update program at its place in the recipe's list (then
        ``rewrite`` is called there, among the passes): ``posterior_correction`` on sampled estimates."""
        return False


RULES: dict[str, Rule] = {}


def register(rule: Rule) -> Rule:
    if rule.name in RULES:
        raise ValueError(f"rule '{rule.name}' registered twice")
    RULES[rule.name] = rule
    return rule


def rule(name, kind, equation, summary) -> Rule:
    """Register a rule with no behaviour of its own (an identity applied by a candidate)."""
    return register(Rule(name, kind, equation, summary))


def refuse_arguments(recipe) -> None:
    """A located error for arguments given to a rule that reads none (docs/recipes.md: "an unknown argument is an
    error"); rules that read arguments refuse unknown ones themselves (``Ctx.done``)."""
    for a in recipe.approximations:
        r = RULES.get(a.name)
        if r is not None and not r.takes_arguments and a.args:
            raise SpecError(f"approximation '{a.name}' takes no arguments, got "
                            f"{', '.join(quote(k) for k in sorted(map(str, a.args)))}; write it as '- {a.name}'",
                            recipe.file, a.line)


def recipe_rule_kinds() -> dict[str, str]:
    """name -> kind of every rule a recipe may name (what the spec layer validates against)."""
    return {k: r.kind for k, r in RULES.items() if r.named_by_recipes}


# ---------------------------------------------------------------------------------------------- the record

@dataclass(frozen=True)
class TexForm:
    """LaTeX around expressions, for a step equation that is not an expression (``\\frac{1}{S}\\sum_k e``): the
    report typesets each of ``args`` with its printer and fills them into ``template`` (``%s`` slots)."""
    template: str
    args: tuple[Expr, ...]

    def render(self, tex: Callable[[Expr], str]) -> str:
        """The LaTeX, ``tex`` typesetting each argument."""
        return self.template % tuple(tex(a) for a in self.args)


#: one side of a step's equation: a sympy expression, a LaTeX string, or a :class:`TexForm`
EquationSide: TypeAlias = "Expr | str | TexForm"
#: an equation of a step: ``(lhs, rhs)`` (printed lhs ← rhs), ``(lhs, rhs, op)`` (op a LaTeX relation such as
#: ``"="`` or ``r"\approx"``), or a line of LaTeX
StepEquation: TypeAlias = "tuple[EquationSide, EquationSide] | tuple[EquationSide, EquationSide, str] | str"


@dataclass
class Step:
    """One step of a derivation.  ``equation``, ``title`` and ``text`` are the engine's own words (``str``, in
    which a rule may write validated names and printed expressions) or :class:`~blr_derive.core.text.Prose` where
    they carry recipe or family text (a family file's ``reference``): a report renders each through its format's
    escaping function, which treats ``Prose`` as text to show, never as markup; nothing else is accepted."""
    rule: str
    equation: str | Prose         # paper reference, e.g. "Eq. 6" or "App. D"; a family file's own reference
    title: str | Prose
    text: str | Prose
    equations: list[StepEquation] = field(default_factory=list)

    def __post_init__(self):
        for key in ("equation", "title", "text"):
            if not isinstance(getattr(self, key), (str, Prose)):
                raise TypeError(f"Step.{key} must be the engine's text (str) or recipe text (Prose), "
                                f"not {type(getattr(self, key)).__name__}")


class OracleCall(NamedTuple):
    """An oracle of the loss evaluated once per step: ``symbol = oracle(argument)`` (e.g. ``g = grad(m)``)."""
    symbol: Sym
    oracle: str                   # grad, hess, loss or a name the recipe's loss declares
    argument: Expr                # the point, an expression of the state
    description: Text


class ChainedCall(NamedTuple):
    """An oracle at a point computed from a sample's earlier values: ``point = point_expr``, ``symbol =
    oracle(point)`` (sharpness_aware: ∇ℓ at m + ρ·scale·ĝ_k)."""
    symbol: Sym
    oracle: str
    point: Sym
    point_expr: Expr


@dataclass
class Shaping:
    """Rank-based shaping of one oracle's values over the S samples of a step (a convention, ``fitness_shaping``):
    the sample whose value has rank r (1 = lowest loss; ties by draw order; NaN ranks last) gets
    ``value(w_r, W, S)`` in its place, with w_r = ``weight(r, S)`` and W = Σ_{j=1..S} w_j."""
    call: Sym                       # the oracle's per-sample symbol (loss_k)
    rank: Sym                       # r
    count: Expr                     # S
    weight: Expr                    # w(r, S)
    total: Sym                      # W (the symbol standing for Σ_j w_j)
    weight_of_rank: Sym             # w_r (the symbol standing for the rank's weight in ``value``)
    value: Expr                     # the replacement value
    name: str = ""                  # the utilities' name (for comments and reports)


@dataclass
class Sampling:
    """Monte Carlo over the candidate: θ_k = theta_expr(ε_k), oracles at θ_k, averaged statistics."""
    samples: Expr                   # number of samples (expression of hyperparameters)
    eps: Sym                        # ε_k ~ N(0, 1), shaped like the mean
    theta: Sym                      # θ_k
    theta_expr: Expr                # θ_k in terms of the state and ε_k
    calls: list[tuple[Sym, str]]    # [(symbol, oracle name)] evaluated at θ_k
    stats: list[Assignment]         # [(average symbol, per-sample expression)]
    #: the draw behind eps: "normal" (N(0, 1)) or "uniform" (U(0, 1)); "tanh_sinh": quadrature nodes; "point": no
    #: draw, every θ_k is theta_expr (a point mass; the samples are sub-batches)
    draw: str = "normal"
    more_draws: list[tuple[Sym, str]] = field(default_factory=list)   # [(symbol, "uniform" | "normal")] per sample
    accept: Expr | None = None      # a rejection sampler's condition on the draws (drawn again until it holds)
    #: oracle name -> the averaged statistic that stands for it in the update (when the statistic is not simply
    #: the average of the oracle's per-sample value, e.g. dropout masks)
    views: dict[str, Sym] = field(default_factory=dict)
    grad_stat: Sym | None = None    # the average that stands for the loss gradient in the update (for passes)
    shaping: Shaping | None = None  # an oracle's values replaced by a function of their ranks
    #: gaussian_score: the factor A of the covariance the samples go through (θ_k = m + A z_k) while no coordinate
    #: rule has made it the state
    covariance_factor: Sym | None = None
    # per-sample sums over every coordinate of the parameters (all tensors): [(symbol, per-coordinate expr)],
    # evaluated after ``calls`` (e.g. the squared global norm of the gradient at the sample, sharpness_aware)
    reductions: list[Assignment] = field(default_factory=list)
    # oracles at points computed from the values above, evaluated after ``calls`` in order; a point may read the
    # state, the draw, θ_k, the calls, the reductions and earlier chained values
    chained: list[ChainedCall] = field(default_factory=list)


@dataclass
class AuxState:
    """State a rule adds to the candidate's parameters (momentum buffers, running maxima ...)."""
    name: str
    symbol: Sym
    new_symbol: Sym
    init: Expr            # sympy expression of hyperparameters (broadcast to the parameter's shape)
    description: str


#: domains of a state variable a rule or candidate introduces: the family parameters' domains
#: (``spec/vocabulary.py`` DOMAINS) and ``invertible`` (a square matrix with an inverse, e.g. a factor A of C = A Aᵀ)
STATE_DOMAINS = ("real", "positive", "unit_interval", "positive_definite", "symmetric", "invertible")


@dataclass(frozen=True)
class StateVar:
    """A state variable a rule or a candidate put in place of a family parameter (what the checks that draw random
    valid states read, ``verify/update.py``): its name, its symbol (whose shape is the variable's) and its domain
    (:data:`STATE_DOMAINS`)."""
    name: str
    symbol: Sym
    domain: str
    replaces: str = ""            # the family parameter it stands for (a rule's), if any

    def __post_init__(self):
        if self.domain not in STATE_DOMAINS:
            raise ValueError(f"state variable {self.name}: unknown domain {self.domain!r}")


class Renamed(NamedTuple):
    """A family parameter a rule replaced by another state (``change_variable``, ``exponential_coordinates``)."""
    state: str                    # the new state's name
    symbol: Sym                   # its symbol
    value: Expr                   # the family parameter as an expression of the new state


@dataclass
class LossModel:
    """How the loss ℓ the BLR minimizes (Eq. 1) is made of the loss the oracles evaluate, as the rules that change
    it record it (for the objective L(q) = E_q[ℓ] − H(q), ``ir/objective.py``): ℓ(θ) = scale·ℓ_oracle(θ) +
    prior(θ) − log p₀(θ), with p₀ a prior in the candidate family of natural parameter ``family_prior`` (λ₀).
    ``followed`` is False where a rule changed the loss in a way not recorded here (then no objective), and ``why``
    says how (a clause the module's docstring prints, blr_derive/ir/objective_notes.py)."""
    scale: Expr = sp.Integer(1)              # minibatch: N
    prior: Expr = sp.Integer(0)              # a function of the family's variable (weight_decay: δθ²/2)
    family_prior: list[Expr] | None = None   # λ₀ (family_prior)
    followed: bool = True
    why: str | None = None                   # how a rule changed the loss where it is not followed
    #: where the step descends a relaxation of L(q) while ℓ stays the loss of Eq. 1: what the objective's docstring
    #: says of it (the objective is Eq. 2's L at q, not the relaxed objective)
    relaxed: str | None = None

    def unfollow(self, why: str) -> None:
        """The loss is changed in a way not recorded here: no objective, for the reason ``why`` (the first one)."""
        self.followed = False
        self.why = self.why or why

    def trivial(self) -> bool:
        return self.followed and self.scale == 1 and self.prior == 0 and self.family_prior is None


@dataclass
class Views:
    """What currently stands for each quantity that pass and convention rules rewrite (``rules/program.py``).

    Rules never pattern-match the algebra sympy produced: a rule defines a new symbol, substitutes it for a view
    in the consuming updates and moves the view, so rules compose in recipe order."""
    grad: Expr | None = None      # the loss gradient as the update reads it (None: the update reads none)
    hess: Expr | None = None      # the Hessian (None: none, or a rule removed it)
    #: the Hessian as ``hessian_damping`` left it: an estimate that replaces the Hessian later would drop γ
    damped_hess: Expr | None = None
    #: gaussian_score's factor A of the covariance (θ_k = m + A z_k), until a coordinate rule makes it the state
    covariance_factor: Expr | None = None
    state: dict[str, Expr | None] = field(default_factory=dict)    # parameter or state -> how it enters the updates
    oracles: dict[str, Expr | None] = field(default_factory=dict)  # any other oracle (loss ...) -> its value

    def set_oracle(self, oracle: str, value: Expr) -> None:
        """The value that stands for an oracle: ``grad`` and ``hess`` are their own views."""
        if oracle == "grad":
            self.grad = value
        elif oracle == "hess":
            self.hess = value
        else:
            self.oracles[oracle] = value

    def of(self, name: str) -> Expr | None:
        """The view a recipe names: ``grad``, ``hess``, a parameter or state, or another oracle (None: no such)."""
        if name in ("grad", "hess"):
            return self.grad if name == "grad" else self.hess
        return self.state[name] if name in self.state else self.oracles.get(name)

    def set(self, name: str, value: Expr | None) -> None:
        """Move the view ``name`` (as :meth:`of` reads it) to ``value``; a new name is a state's."""
        if name in ("grad", "hess"):
            setattr(self, name, value)
        elif name in self.state or name not in self.oracles:
            self.state[name] = value
        else:
            self.oracles[name] = value

    def names(self) -> list[str]:
        """The parameters, states and other oracles a recipe may name (those with a view), sorted."""
        return sorted({k for k, v in self.state.items() if v is not None}
                      | {k for k, v in self.oracles.items() if v is not None})

    def rebind(self, old: Expr, new: Expr) -> None:
        """Every view that pointed at ``old`` now points at ``new``."""
        for f in ("grad", "hess", "damped_hess", "covariance_factor"):
            if getattr(self, f) == old:
                setattr(self, f, new)
        for views in (self.state, self.oracles):
            for k, v in list(views.items()):
                if v == old:
                    views[k] = new


@dataclass
class NaturalGradient:
    """∇_μ E_q[ℓ] per λ block, written with the placeholders ``Eg`` = E_q[∇ℓ] and ``EH`` = E_q[∇²ℓ] (None when the
    rule gave the gradient directly) — what posterior correction and ``check`` re-evaluate."""
    grads: list[Expr]
    Eg: Sym | None = None
    EH: Sym | None = None


@dataclass
class Relaxation:
    """A Concrete relaxation of a binary sampler (``concrete_relaxation``), for ``check``: the derived scale
    s = ∇_μ θ̂ against finite differences of the relaxed sample."""
    temperature: Expr             # τ
    sample: Expr                  # the relaxed sample θ̂(u; state, τ)
    u: Sym                        # the uniform draw
    eps: Expr                     # the floor ε of the Jacobian's factors (0: none)
    scale_evaluated: Expr         # s at the sample


class MixtureGradientValues(TypedDict):
    """The exact natural gradient of a mixture's generic component k, for ``check``."""
    grads: list[Expr]             # ∇_{μ_k} of the objective per λ block, in the placeholders below
    mu: list[Expr]                # the component's expectation parameters μ_k
    pi: Sym                       # its weight π_k
    E_grad: tuple[Sym, Sym]       # placeholders E_{q_k}[∇ℓ̄], E_{q_k}[∇ log q]
    E_hess: tuple[Sym, Sym]       # placeholders E_{q_k}[∇²ℓ̄], E_{q_k}[∇² log q]


@dataclass
class MixtureGradient:
    """The mixture natural gradient of a generic component, for ``check`` (quadrature and finite differences)."""
    values: MixtureGradientValues


@dataclass
class FederatedSteps:
    """The dual step, client message and server solve of Bayesian ADMM (rules ``federated_dual``/``_server``)."""
    dual: list[tuple[str, Expr]]       # [(dual name, expr)]
    message: list[tuple[str, Expr]]    # [(message name, expr)]
    server: list[tuple[str, Expr]]     # [(parameter name, expr)] in assignment order
    count: Sym                         # K, the number of clients
    globals: list[tuple[str, str]]     # [(parameter name, global data name)]
    duals: list[str]                   # dual data names
    messages: list[str]                # message names
    eta: list[tuple[str, Expr]]        # [(dual name, λ block as a function of the parameters)]
    equations: list[str]               # plain-text lines
    #: the global objective's closed-form terms at q_g (rule federated_server): E_{q_g}[ℓ_0] and H(q_g) in the
    #: family's ordinary parameters, and the temperature τ of the clients' losses; None where one does not close
    prior_expectation: Expr | None = None
    entropy: Expr | None = None
    temperature: Expr = 1


@dataclass
class ComponentAxis:
    """A mixture whose components are an array axis (``candidates/mixture_axis.py``) or a sized family over a
    run-time axis (``candidates/sized_axis.py``): the program is written for a generic component k (and another j);
    what the IR needs to print it over arrays (``ir/mixture_axis.py``) and ``check`` to evaluate it."""
    size: Sym                          # K, the size name (the arrays' leading axis)
    leaves: dict[Sym, str]             # generic symbol -> its component axes ("j", "k", "jk" or "")
    names: dict[Sym, str]              # generic symbol -> the printed name of the array it stands for
    #: a sized family: the names of the data with one value per component (its scalars per coordinate are arrays
    #: of length K); None for a mixture
    data: list[str] | None = None


@dataclass
class LeaveOneOut:
    """What ``sensitivities`` computes for every example i (rule ``memory_perturbation``)."""
    count: Sym                                # the symbol of the number of examples
    rows: list[tuple[Sym, str, str]]          # (symbol, argument, key): symbol = argument[key][i], example i's value
    program: list[Assignment]                 # for one example, in order
    outputs: list[tuple[str, Sym]]            # (key, symbol): stacked over the examples
    inputs: list[tuple[str, str, str]]        # (argument, key, description) of the per-example inputs
    equations: list[str] = field(default_factory=list)   # plain-text lines


RecipeT = TypeVar("RecipeT")


@dataclass
class PendingCorrection:
    """What rule ``posterior_correction`` needs in the update program (set at the step stage, read at its place among
    the passes, ``rules/posterior_correction.py``): the natural gradient in μ with the placeholders E_q[∇ℓ],
    E_q[∇²ℓ], and the sum of q_old's sites."""
    grads: list[Expr]
    Eg: Expr
    EH: Expr
    full: list[Expr]      # the sites of q_old as a natural gradient, per block (in μ and q_old's parameters)
    old: dict[Sym, Sym]   # family parameter symbol -> q_old's data symbol


@dataclass
class Derivation(Generic[RecipeT]):
    """The record a derivation writes (a spec.recipe.Recipe's; ``rules/product.py`` FactorizedDerivation is a
    product recipe's)."""
    recipe: RecipeT
    steps: list[Step] = field(default_factory=list)
    updates: list[tuple[str, Sym, Expr]] = field(default_factory=list)   # [(state name, new symbol, expr)], in order
    oracle_calls: list[OracleCall] = field(default_factory=list)
    symbol_names: dict[Expr, str] = field(default_factory=dict)          # symbol -> its LaTeX name
    defs: list[Assignment] = field(default_factory=list)      # intermediate definitions (passes), in order
    #: definitions later rewrites of a view leave alone: an estimate computed from the gradient as it stood
    #: (h_gsq = g²) keeps that gradient when a later rule rescales or extends it (minibatch, weight_decay)
    frozen: set[Sym] = field(default_factory=set)
    #: definitions printed as written, outside the common-subexpression search (ir/build.py): a deeply nested loss
    #: at one support point shares nothing with the rest, and sympy rebuilds every nested argument to find that
    verbatim: set[Sym] = field(default_factory=set)
    aux_state: list[AuxState] = field(default_factory=list)   # state added by rules
    views: Views = field(default_factory=Views)     # what currently stands for grad/hess/each parameter (passes)
    step_symbol: Sym | None = None                  # the step counter t (1-based) when a rule needs it
    elementwise: bool = False                       # every update acts coordinate-wise
    #: vector data the update reads coordinate-wise once it is written with scalars (rules/program.py
    #: scalarize_elementwise): inputs of the same shape as the state, one value per coordinate
    scalar_data: set[str] = field(default_factory=set)
    sampling: Sampling | None = None                # Monte Carlo recipes
    renamed: dict[str, Renamed] = field(default_factory=dict)      # family parameter -> the state replacing it
    state_vars: dict[str, StateVar] = field(default_factory=dict)  # state name -> a renamed parameter's domain
    natural_gradient: NaturalGradient | None = None
    expected_loss: Expr | None = None               # E_q[ℓ] when a rule derived it
    #: E_q[ℓ + log h] in μ where a rule derived it and not E_q[ℓ] (a loss that is −log h plus a linear combination of
    #: the statistics, rules/exact.py): the objective then needs E_q[log h] only where the family closes it
    expected_loss_plus_log_h: Expr | None = None
    loss_model: LossModel = field(default_factory=LossModel)   # ℓ from the oracles' loss (rules that change it)
    relaxation: Relaxation | None = None
    mixture_gradient: MixtureGradient | None = None
    federated: FederatedSteps | None = None
    sensitivities: LeaveOneOut | None = None        # rule memory_perturbation's leave-one-out program
    component_axis: ComponentAxis | None = None     # a mixture with the components as an array axis
    #: parameters whose updates keep their domain by construction (riemannian_correction): name -> the condition
    #: under which the federated server step is corrected too (None: the client's step only)
    corrected: dict[str, Expr | None] = field(default_factory=dict)
    #: quantities that may be indefinite estimates of a Hessian (Price's estimator, a mixture's ∇² log q): an update of
    #: a positive (definite) parameter that reads one is checked at run time unless it is corrected
    indefinite: set[Expr] = field(default_factory=set)
    #: estimates of ∇_λ E_q[ℓ] of either sign (the score-function, reparameterization and quadrature rules over any
    #: family): a positive (definite) parameter updated from one may leave its domain when ρ is large for the
    #: estimate (e.g. λ_{t+1} = (1 − ρ)λ_t − ρ∇̂ outside Ω), so it is checked at run time unless its new value is
    #: positive whatever the estimate's sign (σ·exp(·)) or it is corrected
    unsigned: set[Expr] = field(default_factory=set)
    #: the exact rule's natural gradient over a family without Gaussian moments (a conjugate loss's coefficients, a
    #: tilted closed form): of either sign too, so every positive (definite) parameter it updates is checked the same
    #: way (λ_{t+1} = (1 − ρ)λ_t − ρc leaves Ω where −c is outside it: an improper posterior, or ρ too large)
    unsigned_gradient: bool = False
    #: the exact rule's natural gradient reads the state (a tilted E_q[ℓ], not a conjugate loss's constant c): a
    #: step's target then moves with q, and the torch and Triton targets, which check nothing at run time, refuse it
    #: (ir/validity.py)
    gradient_reads_state: bool = False
    correction: PendingCorrection | None = None     # a posterior correction acting among the passes

    def expand_defs(self, e: Expr) -> Expr:
        """``e`` with the named quantities of :attr:`defs` written out (a finite sum's probabilities and
        covariances, an estimate of the Hessian), so that it evaluates from the state, data and hyperparameters."""
        defs = dict(self.defs)
        for _ in range(len(defs) + 1):
            if not isinstance(e, sp.Basic) or not (e.free_symbols & defs.keys()):
                break
            e = e.xreplace(defs)
        return e

    def add(self, rule: str, equation: str, title: str, text: str, equations: Iterable[StepEquation] = ()) -> None:
        self.steps.append(Step(rule, equation, title, text, list(equations)))

    # ------------------------------------------------------------------ reading the record
    def latex(self, e: EquationSide) -> str:
        """LaTeX of an expression with the derivation's symbol names (strings pass through)."""
        if isinstance(e, str):
            return e
        if isinstance(e, TexForm):
            return e.render(self.latex)
        return sp.latex(e, symbol_names=self.symbol_names, mat_symbol_style="bold")

    def eq_latex(self, lhs: EquationSide, rhs: EquationSide, op: str = r"\leftarrow") -> str:
        return f"{self.latex(lhs)} {op} {self.latex(rhs)}"

    def step(self, key: int | str) -> Step:
        """One step: ``key`` is its 1-based number, its rule name (``'delta'``, ``'bonnet'``) or a word of its
        title.  A rule used by several steps (``'blr'`` states Eq. 6 and later applies it) must be picked by
        number; :meth:`steps_for` lists them."""
        if isinstance(key, int):
            if not 1 <= key <= len(self.steps):
                raise KeyError(f"step {key}: the derivation has steps 1..{len(self.steps)}")
            return self.steps[key - 1]
        hits = [i for i, s in enumerate(self.steps, 1) if s.rule == key]
        if not hits:
            hits = [i for i, s in enumerate(self.steps, 1) if str(key).lower() in plain(s.title).lower()]
        if len(hits) == 1:
            return self.steps[hits[0] - 1]
        listing = "; ".join(f"{i}: {s.rule} ({plain(s.title)})" for i, s in enumerate(self.steps, 1))
        if not hits:
            raise KeyError(f"no step with rule or title {key!r}; steps: {listing}")
        raise KeyError(f"{key!r} matches steps {', '.join(map(str, hits))}: pick one by number (d.step(n)) "
                       f"or use d.steps_for({key!r})")

    def steps_for(self, rule: str) -> list[Step]:
        """Every step that applied ``rule``, in order."""
        return [s for s in self.steps if s.rule == rule]

    @property
    def update(self) -> dict[str, Expr]:
        """The derived update as sympy expressions: state name -> new value (in update order), e.g.
        ``d.update['m']``.  Symbols of updated parameters on the right (``S_new``) are the values computed
        before."""
        return {name: expr for name, _, expr in self.updates}

    @property
    def definitions(self) -> dict[str, Expr]:
        """Intermediate quantities of the update (oracle results and pass definitions): name -> sympy
        expression; an oracle call ``g = grad(m)`` appears as ``Function('grad')(m)``."""
        out = {str(c.symbol): sp.Function(c.oracle)(c.argument) for c in self.oracle_calls}
        out.update({str(sym): expr for sym, expr in self.defs})
        return out

    def update_lines(self, text: Callable[[Expr], str] = pretty) -> list[str]:
        """Plain-text update equations (generated-code headers and ``EQUATIONS``, ``compare``); ``text`` prints an
        expression (the one plain-text printer, :func:`blr_derive.core.pretty.pretty`, by default)."""
        out = []
        if self.sampling is not None:
            sm = self.sampling
            dist = "N(0, 1)" if sm.draw == "normal" else "U(0, 1)"
            drawn = "" if sm.draw == "point" else f"{sm.eps} ~ {dist}, "
            out.append(f"for k in 1..{sm.samples}: {drawn}{sm.theta} = {text(sm.theta_expr)}, "
                       + ", ".join(f"{s} = {o}({sm.theta})" for s, o in sm.calls))
            if sm.reductions or sm.chained:
                out.append("  then: " + ", ".join([f"{r} = sum_coordinates({text(e)})" for r, e in sm.reductions]
                                                  + [f"{c.point} = {text(c.point_expr)}, {c.symbol} = {c.oracle}({c.point})"
                                                     for c in sm.chained]))
            if sm.shaping is not None:
                sh = sm.shaping
                out.append(f"{sh.call} <- {text(sh.value)} at the sample of rank r, w_r = {text(sh.weight)}"
                           + (f", W = sum_r w_r (S = {sm.samples})" if sh.value.has(sh.total) else f" (S = {sm.samples})"))
            for avg, e in sm.stats:
                out.append(f"{avg} = mean_k({text(e)})")
        for call in self.oracle_calls:
            out.append(f"{call.symbol} = {call.oracle}({call.argument})")
        for name, sym, expr in self.update_order():
            out.append(f"{sym} = {text(expr)}" if name is None else f"{name} <- {text(expr)}")
        return out

    def final_equations(self) -> list[tuple[EquationSide, EquationSide, str]]:
        """The update as (lhs, rhs, op) triples, after the oracle calls (rendered by the reports), each after
        the equations that define the symbols it reads (:meth:`update_order`)."""
        return [(sym, expr, "=" if name is None else r"\leftarrow") for name, sym, expr in self.update_order()]

    def update_order(self) -> list[tuple[str | None, Expr, Expr]]:
        """The definitions (``(None, symbol, expr)``) and state updates (``(name, new symbol, expr)``) in an order
        a reader can follow: each after the ones that define what it reads (a debiased ``u_hat = u_new/(1 - β^t)``
        after ``u <- ...``), else in the order the passes recorded them (definitions first).  A new value is
        read as its own symbol (``u_new``), an old one as the parameter's, so the order changes no meaning.  The
        generated code orders its statements by its own schedule; this is what the reports and the modules'
        headers print."""
        eqs: list[tuple[str | None, Expr, Expr]] = [(None, sym, expr) for sym, expr in self.defs]
        eqs += [(n, sym, expr) for n, sym, expr in self.updates]
        owner = {sym: i for i, (_, sym, _) in enumerate(eqs) if isinstance(sym, sp.Basic)}
        need = [{owner[s] for s in (e.free_symbols if isinstance(e, sp.Basic) else ()) if s in owner} - {i}
                for i, (_, _, e) in enumerate(eqs)]
        done: set[int] = set()
        order: list[int] = []
        while len(order) < len(eqs):
            ready = next((i for i in range(len(eqs)) if i not in done and need[i] <= done), None)
            if ready is None:
                return eqs                              # a cycle among the definitions: as recorded
            done.add(ready)
            order.append(ready)
        return [eqs[i] for i in order]
