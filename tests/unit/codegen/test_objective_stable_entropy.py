"""The array targets' estimated objective prints log(1 + exp(a)) in the entropy as softplus(a): BayesBiNN's
Bernoulli entropy at a large natural parameter was inf (exp(2λ) overflows past λ ≈ 355) and the objective −inf,
where q is nearly a point mass (H → 0).  Compared with the Bernoulli entropy of p = sigmoid(2λ) written here."""
import numpy as np

from conftest import load_generated


def bernoulli_entropy(lam):
    # q(θ = +1) = sigmoid(2λ) on {−1, +1}: H = −p log p − (1 − p) log(1 − p), written in log-sigmoids
    log_p, log_1mp = -np.logaddexp(0, -2 * lam), -np.logaddexp(0, 2 * lam)
    return -(np.exp(log_p) * log_p + np.exp(log_1mp) * log_1mp)


def test_bayesbinn_objective_is_finite_where_q_is_nearly_a_point():
    mod = load_generated("bayesbinn")
    lam = np.array([-800.0, -3.0, 0.0, 0.7, 20.0, 400.0, 1e4])
    out = mod.objective({"lam": lam}, loss=[0.5, 0.7], lr=0.1, train_set_size=10)
    assert np.isfinite(out["objective"]) and np.isfinite(out["entropy"])
    assert abs(out["entropy"] - bernoulli_entropy(lam).sum()) < 1e-12
