"""What a numeric check reports: one :class:`Check` per quantity (value, tolerance, pass/fail) in one of three
groups — the family, the derivation's correctness, the generated code's fidelity — and the printed table."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from blr_derive.core.errors import printable

TOLERANCES = {
    "normalization": 1e-7,
    "mu_vs_quadrature": 1e-7,
    "mu_vs_monte_carlo": 5.0,           # z-score
    "sampler_vs_density": 5.0,          # z-score
    "gaussian_vs_density": 1e-7,        # the declared mean and covariance against quadrature
    "sampler_ks": 3.0,                  # √n·D, Kolmogorov's statistic (P(K > 3) ≈ 3e-8 for a right sampler)
    "mu_vs_finite_differences": 1e-6,
    "mu_ordinary": 1e-9,
    "fisher_positive_definite": 1e-10,  # smallest/largest eigenvalue must exceed this
    "fisher_vs_covariance": 1e-6,
    "entropy_vs_quadrature": 1e-7,
    "round_trip_natural": 1e-9,
    "round_trip_expectation": 1e-8,
}

#: the checks at the hard points (blr_derive/verify/hunt.py): the worst error over them, each failure naming its point
HUNT_TOLERANCES = {
    "hard_log_partition": 1e-7,
    "hard_mu": 1e-7,
    "hard_fisher": 1e-6,
    "hard_entropy": 1e-7,
    "hard_maps": 1e-8,
    "generated_numpy": 1e-6,
    "generated_jax": 1e-6,
}


DESCRIPTIONS = {
    "normalization": "∫ h exp(<λ,T> - A) = 1",
    "mu_vs_quadrature": "∇A(λ) = E_q[T] (quadrature/summation)",
    "mu_vs_monte_carlo": "∇A(λ) = mean of T over samples (z-score)",
    "sampler_vs_density": "the declared sampler's E[T], E[T Tᵀ] = the density's (z-score)",
    "gaussian_vs_density": "the gaussian declaration's mean, covariance = the density's (quadrature)",
    "sampler_ks": "the declared sampler's law = the density's CDF (Kolmogorov-Smirnov √n·D)",
    "mu_vs_finite_differences": "∇A(λ) = central differences of A",
    "mu_ordinary": "μ(ordinary) = ∇A(λ(ordinary))",
    "fisher_positive_definite": "min/max eigenvalue of ∇²A(λ)",
    "fisher_vs_covariance": "∇²A(λ) = Cov_q[T]",
    "entropy_vs_quadrature": "A - <λ,μ> - E[log h] = -∫ q log q",
    "round_trip_natural": "ordinary → λ → ordinary",
    "round_trip_expectation": "ordinary → μ → ordinary",
    "hard_log_partition": "A(λ) = log ∫ h exp(<λ,T>) at the hard points",
    "hard_mu": "μ(λ) = E_q[T] at the hard points",
    "hard_fisher": "F(λ) = Cov_q[T] at the hard points",
    "hard_entropy": "the entropy = -∫ q log q at the hard points",
    "hard_maps": "λ(ordinary) finite, ordinary(λ) and μ(ordinary) consistent at the hard points",
    "generated_numpy": "the numpy module's maps (λ, A, μ, F, ordinary) at the hard points",
    "generated_jax": "the jax module's maps (λ, A, μ, F, ordinary) at the hard points",
    "objective vs summation and quadrature": "objective() = E_q[ℓ] − H(q) from the recipe's factors and blocks",
    "objective never increases over rounds": "objective() after each step() ≤ before (steps that lower L)",
}


HINTS = {
    "normalization": "the log-partition does not normalize h·exp(<λ,T>) (check log_partition and base_measure)",
    "mu_vs_quadrature": "∇A(λ) is not the mean of T under q (check log_partition)",
    "mu_vs_monte_carlo": "∇A(λ) is not the mean of T over samples of q (check log_partition)",
    "sampler_vs_density": "the declared sampler's moments of T are not the density's (check sampler)",
    "gaussian_vs_density": "the declared gaussian mean or covariance is not the density's (check gaussian)",
    "sampler_ks": "the declared sampler draws from another law than the density (check sampler)",
    "mu_vs_finite_differences": "the derived gradient of A disagrees with finite differences",
    "mu_ordinary": "the expectation parameters in ordinary parameters disagree with ∇A(λ(ordinary))",
    "fisher_positive_definite": "the Fisher information is not positive definite (A is not strictly convex)",
    "fisher_vs_covariance": "∇²A(λ) is not the covariance of T under q (check log_partition)",
    "entropy_vs_quadrature": "the entropy disagrees with -∫ q log q (check log_partition and base_measure)",
    "round_trip_natural": "the inverse of the natural-parameter map does not reproduce the parameters",
    "round_trip_expectation": "the inverse of the expectation-parameter map does not reproduce the parameters",
    "hard_log_partition": "the derived log-partition is wrong or not finite at a hard point (named above)",
    "hard_mu": "the derived μ = ∇A is wrong or not finite at a hard point (named above)",
    "hard_fisher": "the derived Fisher information is wrong or not finite at a hard point (named above)",
    "hard_entropy": "the derived entropy is wrong or not finite at a hard point (named above)",
    "hard_maps": "a derived map between ordinary, natural and expectation parameters fails at a hard point",
    "generated_numpy": "the generated numpy module fails or is wrong at a hard point (named above)",
    "generated_jax": "the generated jax module fails or is wrong at a hard point (named above)",
    "objective vs summation and quadrature": "the generated objective is not E_q[ℓ] − H(q) of the recipe's blocks",
    "objective never increases over rounds": "a round of step() raised the objective (see the note)",
}


@dataclass
class Check:
    name: str
    value: float
    tol: float
    kind: str = "max"          # "max": passes when value <= tol; "min": passes when value >= tol; "na": the
    #                            quantity is not derived for this family (the note says why), nothing to compare
    note: str = ""
    group: str = "family"      # family | derivation | codegen (see GROUPS)

    @property
    def passed(self) -> bool:
        if self.kind == "na":
            return True
        if not np.isfinite(self.value):
            return False
        return self.value <= self.tol if self.kind == "max" else self.value >= self.tol


@dataclass
class Report:
    title: str
    family: object             # the Family checked, or None
    checks: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def failed(self):
        return [c for c in self.checks if not c.passed]


#: what each group of checks establishes, in report order
GROUPS = {"family": "family (the declaration and what the engine derives from it)",
          "derivation": "derivation correctness (the symbolic update against independent numerics)",
          "codegen": "codegen fidelity (the generated module against the symbolic update)"}


def format_report(rep: Report) -> str:
    lines = [f"check {printable(rep.title)}"]        # it names the file: a line break in the name is escaped
    lines += [f"  {n}" for n in rep.notes]
    lines.append("  error = |got - want| / max(1, |want|), the worst over points and components (a Fisher "
                 "information at the hard points: also over sqrt(F_ii F_jj))")
    w = max(len(c.name) for c in rep.checks) if rep.checks else 10
    lines.append(f"  {'check':<{w}}  {'value':>10}  {'tolerance':>11}  result  what")
    groups = list(dict.fromkeys(c.group for c in rep.checks))
    for c in sorted(rep.checks, key=lambda c: list(GROUPS).index(c.group)):
        if len(groups) > 1 and c.group in groups:
            lines.append(f"  -- {GROUPS[c.group]}")
            groups.remove(c.group)
        if c.kind == "na":
            lines.append(f"  {c.name:<{w}}  {'n/a':>10}  {'':>11}  {'n/a':<6}  {c.note}")
            continue
        tol = f"{'<=' if c.kind == 'max' else '>='} {c.tol:.0e}" if c.name != "mu_vs_monte_carlo" else f"<= {c.tol:g} σ"
        res = "pass" if c.passed else "FAIL"
        what = DESCRIPTIONS.get(c.name, "")
        if not c.passed and c.note:
            what += f"  [{c.note}]"
        lines.append(f"  {c.name:<{w}}  {c.value:>10.3g}  {tol:>11}  {res:<6}  {what}")
    n_fail = len(rep.failed)
    n_na = sum(c.kind == "na" for c in rep.checks)
    na = f" ({n_na} not applicable)" if n_na else ""
    if n_fail:
        lines.append(f"  FAIL: {n_fail} of {len(rep.checks)} checks failed{na}: " + "; ".join(
            f"{c.name} ({HINTS.get(c.name, 'see above')})" for c in rep.failed))
    else:
        lines.append(f"  all {len(rep.checks) - n_na} checks passed{na}")
    return "\n".join(lines) + "\n"
