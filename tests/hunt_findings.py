"""What ``blr-derive check``'s hunt (blr_derive/verify/hunt.py) finds in the built-in families and in the corpus of
user-written families (tests/corpus/families): derived forms that are not finite or not correct somewhere in their
domain.  The tests assert that the hunt finds exactly these, so that a new finding fails and a fixed one is removed
from this list (the truncated exponential's 0/0 at b = 0 and the continuous Bernoulli's at p = 1/2 were fixed by the
Taylor polynomials of blr_derive/families/singular.py, issue 37 item 2; the von Mises module's I_0(κ) overflow at
κ = 1000 and the quartic's K underflow at b = 10, by the printers' scaled Bessel functions, codegen/scaled.py;
bernoulli_logit's log(e^λ + e^−λ) at |λ| = 1000, by their lowering of sums of exponentials, codegen/expsums.py;
the modules' Newton solve μ → λ that stalled for the generalized inverse Gaussian at p = 0, a = 2e-6, b = 1
(|∇A − μ| = 7.5e4) and for tilted_zipf20 at r = −1, s = 0 (|∇A − μ| = 0.58: its full step from the nearly singular
start λ = (1, −1) landed on a point mass), by the Levenberg–Marquardt damping and step cap of
blr_derive/core/newton.py; the logarithmic family's F, which lost 10% to cancellation at p = 1 − 1e-8 and was inf at
1 − 1e-10 (its 1 − e^λ), by the printers' expm1 and log1mexp, codegen/cancel.py: 1.2e-16 at both).

family -> {failing check: where (the point, for the reader; the report names the worst point of each check)}."""

BUILTIN = {
    # A = log((2π)^(K/2) I(κ)/κ^(K/2−1)) is 0/0 at v = 0 (the uniform law on the sphere), and Newton's method fails
    # next to it
    "von_mises_fisher": {
        "hard_log_partition": "v1 = 0, v2 = 0, v3 = 0", "hard_mu": "v1 = 0, v2 = 0, v3 = 0",
        "hard_fisher": "v1 = 0, v2 = 0, v3 = 0", "hard_entropy": "v1 = 0, v2 = 0, v3 = 0",
        "hard_maps": "v1 = 0, v2 = 0, v3 = 0", "generated_numpy": "v1 = -1e-08"},
}

CORPUS = {
    # the quartic's declared A (Bessel K_{1/4}) loses F to cancellation as c → 0 even in 30 digits, and the module
    # (double precision) more (its F is off by 1e13 at c = 1e-8); K no longer underflows (scaled: codegen/scaled.py),
    # so there is no NaN left (there were at b = 10 and b = 1000, and at c = 1e-8)
    "quartic_two_term": {"hard_fisher": "b = 1, c = 1e-08", "generated_numpy": "b = 1, c = 1e-08"},
    # (truncated_normal: its integrated A = ... + log(1 + erf(λ1/(2√−λ2))) cancelled to log(0) for λ1/(2√−λ2) < −27
    # even in 30 digits (m = −30), and below −5.9 in double precision; the family builder now writes it with
    # log Φ (blr_derive/core/specialfns.py normal_cdf_form), fixed)
    # F = d²/dκ² log I_0(κ) is 0/0 at κ = 0 in double precision
    "von_mises_cos": {"generated_numpy": "kappa = 0", "generated_jax": "kappa = 0"},
    # E_q[log h] from the tilted log-partition is a quotient with e^r E1(r), expint(2, r) and
    # hyper((1, 1, 1), (2, 2, 3), -r): not finite at r = 1000 in double precision (the check fails there; A, μ, F and
    # both modules are right: its jax module hung on exp1 at small arguments before codegen/backends/jax/runtime.py
    # _exp1)
    "e1_weighted_exponential": {"hard_entropy": "r = 1000"},
    # (found when F was first compared on its own scale, |ΔF_ij|/sqrt(F_ii F_jj) (hunt.fisher_rel): ising_pair's
    # hard_fisher at h1 = 30 (the simplified ∇² log Σ e^{λ·T} in 30 digits: Var(s1) = 3.5026121e-26 for
    # 4/(e^60 + 1) = 3.5026043e-26) and tilted_zipf20's modules at r = 30 (Var = 1.137e-13 for 9.358e-14, E[T²] −
    # E[T]²); fixed by F as a corrected two-pass sum over the support, blr_derive/families/partition.py centred_fisher,
    # asserted by tests/unit/families/test_centred_fisher.py)
    # the modules' F at m = −30 through log Φ's derivatives (their relative error grows as x² ulps; see the probit
    # notes): Var(θ²) = 2.4235e-05 for 2.4292e-05 (0.2 %)
    "truncated_normal": {"generated_numpy": "m = -30, s = 1", "generated_jax": "m = -30, s = 1"},
    "truncated_normal_sampled": {"generated_numpy": "m = -30, s = 1", "generated_jax": "m = -30, s = 1"},
}

#: beyond the hunt's points (its scales stop at 1e3 and ±30): the generated numpy module evaluated at extreme but
#: valid parameters against the engine's forms in mpmath (SymbolicRecord: 30 digits and more until the value
#: settles; tests/unit/verify/test_beyond_hunt.py asserts that each is still wrong, so that a fix removes it).
#: family -> [(module function, ordinary parameters, what goes wrong)]
#: (bernoulli_logit's A = log(e^λ + e^−λ) = inf and μ = inf/inf at |λ| = 1000 were fixed by the printers' lowering of
#: sums of exponentials, codegen/expsums.py: BEYOND_HUNT_FIXED, asserted right by the same test)
BEYOND_HUNT = {
    # K_p(√(ab)) overflows in its order, not its argument (K_1000(1.5) ~ 1e2700): no exponential scaling helps; it
    # needs log K_p computed as such
    "generalized_inverse_gaussian": [("log_partition", {"p": 1000.0, "a": 1.5, "b": 1.5}, "inf")],
    # (a corpus family, tests/corpus/families) A = log(e^r − 1) − λ ≈ r/2 with r = e^λ, μ = r/(1 − e^(−r)) − 1 and
    # F = ∂μ/∂λ cancel for a small rate r in their closed forms even with every difference of exponentials printed as
    # expm1/log1mexp and F's (1 − e^(−r))² kept as a square (codegen/cancel.py, which took A, μ, F at r = 1e-9 from
    # relative errors 56, 56, 1 (A = −2.7e-8 < 0) to 3.5e-6, 8.3e-8, 1.5e-7, and F at r = 1e-12 from NaN to 3.2e-3):
    # −λ + log(expm1(r)) loses |λ|·1e-16 absolute, r/(−expm1(−r)) − 1 and expm1(r) − r lose 1e-16 of 1 and of r.
    # At r = 1e-300 A and μ are 0 (for 5e-301) and F is 0/0 (expm1(−r)² underflows); it needs a Taylor
    # polynomial in r about r = 0 (λ → −∞), which blr_derive/families/singular.py does not look for
    "zt_poisson": [("log_partition", {"r": 1e-9}, "wrong"), ("log_partition", {"r": 1e-12}, "wrong"),
                   ("expectation_parameters", {"r": 1e-12}, "wrong"), ("fisher_information", {"r": 1e-12}, "wrong"),
                   ("log_partition", {"r": 1e-300}, "wrong"), ("expectation_parameters", {"r": 1e-300}, "wrong"),
                   ("fisher_information", {"r": 1e-300}, "nan")],
}

#: entries BEYOND_HUNT listed that a fix made right: family -> [(module function, ordinary parameters)], each asserted
#: finite and equal to the forms in mpmath by tests/unit/verify/test_beyond_hunt.py
BEYOND_HUNT_FIXED = {
    # one entry of F (~1.2e14) lost 0.5% to cancellation at β = 1e-8: its repeated denominator, expanded by sympy, is
    # kept factored (blr_derive/families, factor_repeated_denominator); what is left is 1.5e-10 relative in every
    # entry (the third element: this entry's bound, measured, instead of the test's 1e-13)
    "normal_gamma": [("fisher_information", {"m": 0.3, "kappa": 1.5, "alpha": 1.5, "beta": 1e-8}, 3e-10)],
    # logaddexp(−λ, λ) and e^{λ − logaddexp(−λ, λ)} − e^{−softplus(2λ)} (codegen/expsums.py)
    "bernoulli_logit": [("log_partition", {"lam": 1000.0}), ("expectation_parameters", {"lam": 1000.0}),
                        ("log_partition", {"lam": -1e4}), ("expectation_parameters", {"lam": -1e4})],
    # the expm1/log1mexp forms of codegen/cancel.py at ordinary and large rates (right before them too: they must
    # stay so; r = 1000 is past e^r's overflow, which the exponential-sum lowering takes out first)
    "zt_poisson": [(fn, {"r": r}) for r in (0.5, 30.0, 1000.0)
                   for fn in ("log_partition", "expectation_parameters", "fisher_information")],
}
