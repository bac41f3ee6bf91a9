"""What ``blr-derive check``'s hunt (blr_derive/verify/hunt.py) finds in the built-in families and in the corpus of
user-written families (tests/corpus/families): derived forms that are not finite or not correct somewhere in their
domain.  Making them sound is item 2 of issue 37 (another branch); until then the tests assert that the hunt finds
exactly these, so that a new finding fails and a fixed one is removed from this list.

family -> {failing check: where (the point, for the reader; the report names the worst point of each check)}."""

BUILTIN = {
    # log((e^λ − 1)/λ) and its derivatives are 0/0 at λ = 0 (p = 1/2) and cancel next to it: Newton's method in the
    # module diverges there (NaN)
    "continuous_bernoulli": {
        "hard_log_partition": "p = 0.5", "hard_mu": "p = 0.5", "hard_fisher": "p = 0.5", "hard_entropy": "p = 0.5",
        "hard_maps": "p = 0.5", "generated_numpy": "p = 0.50000001", "generated_jax": "p = 0.50000001"},
    # F(λ) in double precision loses 10% to cancellation at p = 1 − 1e-8 (λ = −1e-8)
    "logarithmic": {"generated_numpy": "p = 0.99999999", "generated_jax": "p = 0.99999999"},
    # I_0(κ) overflows at κ = 1000: the module's F is NaN (the 30-digit form is right)
    "von_mises": {"generated_numpy": "kappa = 1000", "generated_jax": "kappa = 1000"},
    # A = log((2π)^(K/2) I(κ)/κ^(K/2−1)) is 0/0 at v = 0 (the uniform law on the sphere), and Newton's method fails
    # next to it
    "von_mises_fisher": {
        "hard_log_partition": "v1 = 0, v2 = 0, v3 = 0", "hard_mu": "v1 = 0, v2 = 0, v3 = 0",
        "hard_fisher": "v1 = 0, v2 = 0, v3 = 0", "hard_entropy": "v1 = 0, v2 = 0, v3 = 0",
        "hard_maps": "v1 = 0, v2 = 0, v3 = 0", "generated_numpy": "v1 = -1e-08"},
}

CORPUS = {
    # the quartic's declared A (Bessel K_{1/4}) loses F to cancellation as c → 0 even in 30 digits; in double
    # precision Newton's method meets NaN (K underflows) at b = 10
    "quartic_two_term": {"hard_fisher": "c = 1e-08", "generated_numpy": "b = 10, c = 1"},
    # integrated A = log((e^λ − 1)/λ): 0/0 at b = 0, Newton's method fails next to it
    "truncated_exponential": {
        "hard_log_partition": "b = 0", "hard_mu": "b = 0", "hard_fisher": "b = 0", "hard_entropy": "b = 0",
        "hard_maps": "b = 0", "generated_numpy": "b = 1e-06", "generated_jax": "b = 1e-06"},
    # integrated A = ... + log(2 − erfc(λ1/(2√−λ2))): 2 − erfc(x) = 0 for x < −27 even in 30 digits (m = −30), and
    # for x < −5.9 in double precision (Newton's method at m = −8.3)
    "truncated_normal": {
        "hard_log_partition": "m = -30", "hard_mu": "m = -30", "hard_fisher": "m = -30", "hard_entropy": "m = -30",
        "hard_maps": "m = -30", "generated_numpy": "m = -8.3", "generated_jax": "m = -8.3"},
    # F = d²/dκ² log I_0(κ) is 0/0 at κ = 0 in double precision
    "von_mises_cos": {"generated_numpy": "kappa = 0", "generated_jax": "kappa = 0"},
}
