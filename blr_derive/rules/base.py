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

from dataclasses import dataclass, field

import sympy as sp

from blr_derive.core.pretty import pretty
from blr_derive.core.text import Prose, plain

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
    structures: tuple = ()
    #: expectation rules: the kinds of loss ("abstract", "explicit") whose expectations the rule provides
    losses: tuple = ()

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


RULES: dict[str, Rule] = {}


def register(rule: Rule) -> Rule:
    if rule.name in RULES:
        raise ValueError(f"rule '{rule.name}' registered twice")
    RULES[rule.name] = rule
    return rule


def rule(name, kind, equation, summary) -> Rule:
    """Register a rule with no behaviour of its own (an identity applied by a candidate)."""
    return register(Rule(name, kind, equation, summary))


def approximation_names():
    return sorted(k for k, r in RULES.items() if r.named_by_recipes)


def recipe_rule_kinds() -> dict:
    """name -> kind of every rule a recipe may name (what the spec layer validates against)."""
    return {k: r.kind for k, r in RULES.items() if r.named_by_recipes}


# ---------------------------------------------------------------------------------------------- the record

@dataclass(frozen=True)
class TexForm:
    """LaTeX around expressions, for a step equation that is not an expression (``\\frac{1}{S}\\sum_k e``): the
    report typesets each of ``args`` with its printer and fills them into ``template`` (``%s`` slots)."""
    template: str
    args: tuple

    def render(self, tex) -> str:
        """The LaTeX, ``tex`` typesetting each argument."""
        return self.template % tuple(tex(a) for a in self.args)


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
    equations: list = field(default_factory=list)   # [(lhs, rhs[, op])] sympy pairs (or TexForm), LaTeX strings

    def __post_init__(self):
        for key in ("equation", "title", "text"):
            if not isinstance(getattr(self, key), (str, Prose)):
                raise TypeError(f"Step.{key} must be the engine's text (str) or recipe text (Prose), "
                                f"not {type(getattr(self, key)).__name__}")


@dataclass
class Sampling:
    """Monte Carlo over the candidate: θ_k = theta_expr(ε_k), oracles at θ_k, averaged statistics."""
    samples: object                 # number of samples (expression of hyperparameters)
    eps: object                     # ε_k ~ N(0, 1), shaped like the mean
    theta: object                   # θ_k
    theta_expr: object              # θ_k in terms of the state and ε_k
    calls: list                     # [(symbol, oracle name)] evaluated at θ_k
    stats: list                     # [(average symbol, per-sample expression)]
    draw: str = "normal"            # the draw behind eps: "normal" (N(0, 1)) or "uniform" (U(0, 1)); "point": no
    #                                 draw, every θ_k is theta_expr (a point mass; the samples are sub-batches)
    more_draws: list = field(default_factory=list)   # [(symbol, "uniform" | "normal")]: further draws per sample
    accept: object = None           # a rejection sampler's condition on the draws (drawn again until it holds)
    views: dict = field(default_factory=dict)   # oracle name -> the averaged statistic that stands for it
    grad_stat: object = None        # the average that stands for the loss gradient in the update (for passes)
    shaping: object = None          # Shaping: an oracle's values replaced by a function of their ranks
    # per-sample sums over every coordinate of the parameters (all tensors): [(symbol, per-coordinate expr)],
    # evaluated after ``calls`` (e.g. the squared global norm of the gradient at the sample, sharpness_aware)
    reductions: list = field(default_factory=list)
    # oracles at points computed from the values above, evaluated after ``calls`` in order:
    # [(symbol, oracle name, point symbol, point expr)]; a point may read the state, the draw, θ_k, the calls,
    # the reductions and earlier chained values (sharpness_aware: ∇ℓ at m + ρ·scale·ĝ_k)
    chained: list = field(default_factory=list)


@dataclass
class Shaping:
    """Rank-based shaping of one oracle's values over the S samples of a step (a convention, ``fitness_shaping``):
    the sample whose value has rank r (1 = lowest loss; ties by draw order; NaN ranks last) gets
    ``value(w_r, W, S)`` in its place, with w_r = ``weight(r, S)`` and W = Σ_{j=1..S} w_j."""
    call: object                    # the oracle's per-sample symbol (loss_k)
    rank: object                    # r
    count: object                   # S
    weight: object                  # w(r, S)
    total: object                   # W (the symbol standing for Σ_j w_j)
    weight_of_rank: object          # w_r (the symbol standing for the rank's weight in ``value``)
    value: object                   # the replacement value
    name: str = ""                  # the utilities' name (for comments and reports)


@dataclass
class AuxState:
    """State a rule adds to the candidate's parameters (momentum buffers, running maxima ...)."""
    name: str
    symbol: object
    new_symbol: object
    init: object          # sympy expression of hyperparameters (broadcast to the parameter's shape)
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
    symbol: object
    domain: str
    replaces: str = ""            # the family parameter it stands for (a rule's), if any

    def __post_init__(self):
        if self.domain not in STATE_DOMAINS:
            raise ValueError(f"state variable {self.name}: unknown domain {self.domain!r}")


@dataclass
class NaturalGradient:
    """∇_μ E_q[ℓ] per λ block, written with the placeholders ``Eg`` = E_q[∇ℓ] and ``EH`` = E_q[∇²ℓ] (None when the
    rule gave the gradient directly) — what posterior correction and ``check`` re-evaluate."""
    grads: list
    Eg: object = None
    EH: object = None


@dataclass
class Relaxation:
    """A Concrete relaxation of a binary sampler (``concrete_relaxation``), for ``check``."""
    temperature: object
    sample: object
    scale: object
    u: object
    theta: object
    eps: object
    scale_evaluated: object


@dataclass
class MixtureGradient:
    """The mixture natural gradient of a generic component, for ``check`` (quadrature and finite differences)."""
    values: dict


@dataclass
class FederatedSteps:
    """The dual step, client message and server solve of Bayesian ADMM (rules ``federated_dual``/``_server``)."""
    dual: list                   # [(dual name, expr)]
    message: list                # [(message name, expr)]
    server: list                 # [(parameter name, expr)] in assignment order
    count: object                # K, the number of clients (a symbol)
    penalty: object
    server_penalty: object
    globals: list                # [(parameter name, global data name)]
    duals: list                  # [dual data names]
    messages: list               # [message names]
    prior: str
    eta: list                    # [(dual name, λ block as a function of the parameters)]
    equations: list              # plain-text lines


@dataclass
class Derivation:
    recipe: object
    steps: list = field(default_factory=list)
    updates: list = field(default_factory=list)      # [(param_name, new_symbol, expr)] in update order
    oracle_calls: list = field(default_factory=list)  # [(symbol, oracle_name, argument_expr, description)]
    symbol_names: dict = field(default_factory=dict)  # LaTeX names
    defs: list = field(default_factory=list)          # [(symbol, expr)] intermediate definitions (passes)
    #: definitions later rewrites of a view leave alone: an estimate computed from the gradient as it stood
    #: (h_gsq = g²) keeps that gradient when a later rule rescales or extends it (minibatch, weight_decay)
    frozen: set = field(default_factory=set)
    aux_state: list = field(default_factory=list)     # [AuxState] state added by rules
    views: dict = field(default_factory=dict)         # what currently stands for grad/hess/each parameter
    step_symbol: object = None                        # the step counter t (1-based) when a rule needs it
    elementwise: bool = False                         # every update acts coordinate-wise
    sampling: Sampling | None = None                  # Monte Carlo recipes
    renamed: dict = field(default_factory=dict)       # family parameter -> (new state name, symbol, value)
    state_vars: dict = field(default_factory=dict)    # state name -> StateVar: a renamed parameter's domain (verify)
    natural_gradient: NaturalGradient | None = None
    expected_loss: object = None                      # E_q[ℓ] when a rule derived it
    relaxation: Relaxation | None = None
    mixture_gradient: MixtureGradient | None = None
    federated: FederatedSteps | None = None
    sensitivities: object = None                      # rules.memory_perturbation.LeaveOneOut, or None

    def expand_defs(self, e):
        """``e`` with the named quantities of :attr:`defs` written out (a finite sum's probabilities and
        covariances, an estimate of the Hessian), so that it evaluates from the state, data and hyperparameters."""
        defs = dict(self.defs)
        for _ in range(len(defs) + 1):
            if not isinstance(e, sp.Basic) or not (e.free_symbols & defs.keys()):
                break
            e = e.xreplace(defs)
        return e

    def add(self, rule, equation, title, text, equations=()):
        self.steps.append(Step(rule, equation, title, text, list(equations)))

    # ------------------------------------------------------------------ reading the record
    def latex(self, e) -> str:
        """LaTeX of an expression with the derivation's symbol names (strings pass through)."""
        if isinstance(e, str):
            return e
        if isinstance(e, TexForm):
            return e.render(self.latex)
        return sp.latex(e, symbol_names=self.symbol_names, mat_symbol_style="bold")

    def eq_latex(self, lhs, rhs, op=r"\leftarrow") -> str:
        return f"{self.latex(lhs)} {op} {self.latex(rhs)}"

    def step(self, key) -> Step:
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

    def steps_for(self, rule: str) -> list:
        """Every step that applied ``rule``, in order."""
        return [s for s in self.steps if s.rule == rule]

    @property
    def update(self) -> dict:
        """The derived update as sympy expressions: state name -> new value (in update order), e.g.
        ``d.update['m']``.  Symbols of updated parameters on the right (``S_new``) are the values computed
        before."""
        return {name: expr for name, _, expr in self.updates}

    @property
    def definitions(self) -> dict:
        """Intermediate quantities of the update (oracle results and pass definitions): name -> sympy
        expression; an oracle call ``g = grad(m)`` appears as ``Function('grad')(m)``."""
        out = {str(c[0]): sp.Function(c[1])(c[2]) for c in self.oracle_calls}
        out.update({str(sym): expr for sym, expr in self.defs})
        return out

    def update_lines(self, text=pretty) -> list[str]:
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
                                                  + [f"{p} = {text(e)}, {s} = {o}({p})" for s, o, p, e in sm.chained]))
            if sm.shaping is not None:
                sh = sm.shaping
                out.append(f"{sh.call} <- {text(sh.value)} at the sample of rank r, w_r = {text(sh.weight)}"
                           + (f", W = sum_r w_r (S = {sm.samples})" if sh.value.has(sh.total) else f" (S = {sm.samples})"))
            for avg, e in sm.stats:
                out.append(f"{avg} = mean_k({text(e)})")
        for call in self.oracle_calls:
            out.append(f"{call[0]} = {call[1]}({call[2]})")
        for sym, expr in self.defs:
            out.append(f"{sym} = {text(expr)}")
        for name, sym, expr in self.updates:
            out.append(f"{name} <- {text(expr)}")
        return out

    def final_equations(self) -> list:
        """The update as (lhs, rhs, op) triples, after the oracle calls (rendered by the reports)."""
        return ([(sym, expr, "=") for sym, expr in self.defs]
                + [(sym, expr, r"\leftarrow") for _, sym, expr in self.updates])
