"""The ``federated`` section of a recipe (federated Bayesian ADMM; derived in ``blr_derive/rules/federated.py``):
the penalties, the prior's site, and the data a client step receives (the broadcast global parameters and the
client's dual natural parameters)."""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from blr_derive.core.errors import SpecError
from blr_derive.core.exprparse import parse_expression
from blr_derive.core.matexpr import is_mat
from blr_derive.core.text import Prose
from blr_derive.core.yamlio import check_keys, text_field, where
from blr_derive.spec.hyper import DataVar


FED_KEYS = {"penalty", "server_penalty", "prior", "damping", "temperature", "description"}


@dataclass
class Federated:
    penalty: object                   # ρ (a hyperparameter symbol)
    server_penalty: object            # ρ_s (a hyperparameter symbol, or 0)
    prior: object                     # ℓ_0(θ): the prior's negative log density up to a constant (sympy), or 0
    prior_text: object                # the prior as written (Prose: it may carry a comment)
    globals: list                     # [(family parameter, DataVar of its global value)]
    duals: list                       # [DataVar] one per natural-parameter block
    count: object = field(default_factory=lambda: sp.Symbol("K", integer=True, positive=True))
    damping: object = sp.Integer(1)   # d: the dual step η_k ← η_k + dρ(λ_k − λ_g) (a hyperparameter symbol, or 1)
    temperature: object = sp.Integer(1)   # τ: the clients' losses enter as ℓ_k/τ (a hyperparameter symbol, or 1)
    description: Prose = field(default_factory=lambda: Prose(""))   # the algorithm and its source, shown by explain


def _err(msg, container, key=None):
    f, l = where(container, key)
    return SpecError(msg, f, l)


def parse_federated(spec, fam, hyper, data, taken) -> Federated:
    """Read the ``federated`` section; the global parameters and duals become data inputs of the client step."""
    fs = spec["federated"]
    if not isinstance(fs, dict):
        raise _err("federated must be a mapping (penalty, server_penalty, prior, damping, temperature)", spec,
                   "federated")
    check_keys(fs, FED_KEYS, ("penalty",), "federated")
    if not fam.is_gaussian:
        raise _err(f"federated: family '{fam.name}' has no Gaussian moments (the prior's site needs them)",
                   spec, "federated")
    floats = {h.name: h.symbol for h in hyper if h.kind == "float"}

    def hyper_of(key):
        v = fs[key]
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v == 0 and key == "server_penalty":
            return sp.Integer(0)
        if not isinstance(v, str) or v not in floats:
            raise _err(f"federated.{key} must name a float hyperparameter", fs, key)
        return floats[v]
    rho = hyper_of("penalty")
    rho_s = hyper_of("server_penalty") if "server_penalty" in fs else rho
    damping = hyper_of("damping") if "damping" in fs else sp.Integer(1)
    temperature = hyper_of("temperature") if "temperature" in fs else sp.Integer(1)
    prior, text = sp.Integer(0), ""
    if "prior" in fs:
        text = str(fs["prior"])
        symbols = dict(fam.variable_symbols)
        if fam.dim is not None:
            symbols[str(fam.dim)] = fam.dim
        symbols.update(floats)
        try:
            prior = parse_expression(text, symbols, what="federated prior")
        except SpecError as exc:
            f, l = where(fs, "prior")
            raise exc.located(f, l) from None
        if (is_mat(prior) and prior.shape != (1, 1)) or not fam.depends_on_variable(prior):
            raise _err(f"federated.prior must be a scalar expression in {fam.theta}", fs, "prior")
    names = {d.name for d in data} | set(taken)

    def new(name, like, what):
        if name in names:
            raise _err(f"federated: the name '{name}' ({what}) is taken", spec, "federated")
        names.add(name)
        if is_mat(like):
            sym = sp.MatrixSymbol(name, *like.shape)
            shape = tuple(like.shape) if like.shape[1] != 1 else (like.shape[0],)
        else:
            sym, shape = sp.Symbol(name, real=True), ()
        dv = DataVar(name, sym, shape, what, is_mat(like) and like in fam.symmetric)
        data.append(dv)
        return dv
    globals_ = [(p, new(f"{p.name}_g", p.symbol, f"global {p.name} (broadcast by the server)"))
                for p in fam.params.values() if not p.fixed]
    duals = [new(f"dual{i + 1}", l, f"dual natural parameter, block {i + 1}") for i, l in enumerate(fam.lam)]
    for (p, dv) in globals_:
        if dv.symmetric or p.symbol in fam.symmetric:
            dv.symmetric = True
    for dv, l in zip(duals, fam.lam):
        if is_mat(l) and l.shape[0] == l.shape[1] and l.shape[1] != 1:
            dv.symmetric = True
    return Federated(rho, rho_s, prior, Prose(text), globals_, duals, damping=damping, temperature=temperature,
                     description=text_field(fs, "description", ""))
