"""The registry of named rules.

Every transformation the engine applies is a small named rule citing the equation of
Khan & Rue (2023) it implements.  ``identity`` rules are exact (theorems, chain
rules) and are applied automatically where they are needed; the other kinds are
*approximations* that a recipe must name explicitly in its ``approximations`` list.
Algorithms differ only by which approximations their recipes name.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    name: str
    kind: str          # identity | expectation | step | pass | mixture (all but identity are named by recipes)
    equation: str
    summary: str


RULES: dict[str, Rule] = {}


def register(name, kind, equation, summary):
    RULES[name] = Rule(name, kind, equation, summary)


# exact identities, applied automatically
register("blr", "identity", "Eq. 6",
         "λ ← (1-ρ)λ - ρ ∇_μ E_q[ℓ(θ) + log h(θ)]: the BLR (Eq. 3) with ∇_μ H(q) = -λ - ∇_μ E_q[log h] (App. B)")
register("base_measure", "identity", "App. B, Eq. 64",
         "∇_μ E_q[log h(θ)] from the closed-form Gaussian moments of log h (zero when h is constant)")
register("chain_rule_gaussian", "identity", "App. D",
         "∇_μ E_q[f] through the mean m(μ) and covariance C(μ): ∇_{μ1} = ∇_m - 2(∇_C)m, ∇_{μ2} = ∇_C")
register("bonnet", "identity", "Eq. 10, App. D", "Bonnet's theorem: ∇_m E_q[ℓ(θ)] = E_q[∇_θ ℓ(θ)]")
register("price", "identity", "Eq. 11, App. D", "Price's theorem: ∇_C E_q[ℓ(θ)] = ½ E_q[∇²_θ ℓ(θ)]")
register("natural_to_ordinary", "identity", "Eq. 9",
         "solve the updated natural parameters for the ordinary parameters, block by block")
register("increment_form", "identity", "Eq. 12",
         "for parameters that enter λ linearly, write p_{t+1} = p_t + M_{t+1}^{-1}(λ_{t+1} - M_{t+1} p_t) and cancel")
# approximations, named by recipes
register("delta", "expectation", "App. C, Eqs. 13, 65-66",
         "first/second-order delta method: E_q[∇ℓ(θ)] ≈ ∇ℓ(m), E_q[∇²ℓ(θ)] ≈ ∇²ℓ(m) (oracles at the mean, or the "
         "derived derivatives of an explicit loss)")
register("exact", "expectation", "Sec. 1.3.3, Eq. 14",
         "closed-form E_q[ℓ(θ)] of an explicit polynomial loss from the Gaussian moments; ∇_μ read off")
register("monte_carlo", "expectation", "Sec. 4.4 (weight perturbation), Eq. 46",
         "Monte Carlo expectations at samples θ_k = m + σε_k of the candidate (reparameterization)")
register("gauss_hermite", "expectation", "Sec. 5.4; Eqs. 10-11 (Bonnet, Price)",
         "E_q[∇ℓ], E_q[∇²ℓ] of an explicit loss with sums over data of f(aᵀθ + b): Aᵀ E[f'], Aᵀ diag(E[f'']) A, "
         "the one-dimensional Gaussian expectations by Gauss-Hermite quadrature (argument 'nodes'; E[f''] in "
         "Stein's form E[f'(x)(x - η)]/σ², the exact variance derivative of the quadrature)")
register("natural_momentum", "step", "App. F, Eqs. 79-81",
         "BLR with momentum in natural parameters: lambda <- ... + gamma (lambda_t - lambda_{t-1})")
register("score_function", "expectation", "Eq. 4; score-function identity",
         "natural gradient F(λ)⁻¹ Cov_q(ℓ, T) from the loss at samples of q (any family with a sampler)")
register("reparameterization", "expectation", "Eq. 4; reparameterization through the sampler",
         "natural gradient F(λ)⁻¹ E_u[∇ℓ(θ) ∂θ/∂λ] with θ = sampler(u; λ) (any family with a differentiable sampler)")
register("concrete_relaxation", "expectation", "Sec. 4.5, Eqs. 50-51 (Concrete / Gumbel-softmax)",
         "relax the hard threshold sign(x) of a binary family's sampler to tanh(x/τ) and take the gradient at the "
         "relaxed sample: ∇_μ E_q[ℓ] ≈ s∘∇ℓ(θ̂), s = ∇_μ θ̂ (chain rule through the ordinary parameter)")
register("straight_through", "expectation", "Sec. 4.5, Eq. 48 (τ → 0, zero noise; delta method)",
         "the τ → 0, zero-noise limit of the Concrete relaxation: the gradient at the hard sample of u = 1/2 "
         "(θ = sign(λ)), with the straight-through Jacobian ∇_μ θ ≈ 1 (E_q[θ] = μ: the delta method in μ)")
register("no_entropy", "step", "Eq. 2 without H(q); Sec. 4.5",
         "drop the entropy from the Bayesian objective: λ ← λ - ρ∇_μ E_q[ℓ] (no exponential smoothing, as in STE)")
register("family_prior", "step", "Eq. 1 with p(θ) in the candidate family; Sec. 5.1",
         "a prior p₀(θ) = h(θ)exp(<λ₀, T(θ)> - A(λ₀)) in the candidate's family: ∇_μ E_q[ℓ - log p₀ + log h] "
         "= ∇_μ E_q[ℓ] - λ₀ (exact)")
register("unit_learning_rate", "step", "Sec. 5.1",
         "set ρ_t = 1: the BLR jumps to its fixed point λ = ∇_μ E_q[-ℓ] (Eq. 5), the conjugate one-step solution")

# factorized (mean-field) candidates: coordinate-wise BLR steps over blocks (blr_derive/factorized.py)
register("mean_field", "identity", "Eq. 55; Secs. 5.2-5.3",
         "a candidate q = Π_b q_b over blocks of variables, updated coordinate-wise with the others' current q")
register("factor_messages", "identity", "Eqs. 58-60",
         "λ_b ← (1-ρ_b)λ_b + ρ_b Σ_f λ̃_f: per-factor natural-gradient messages summed into the block's λ")
register("plate_sum", "identity", "Eq. 54",
         "messages of i.i.d. data factors add up: per-row quantities enter the global blocks through plate sums")
register("stationarity", "identity", "Sec. 5.2 (M-step)",
         "a delta block with ρ = 1 jumps to the stationary point ∇_θ E_q[ℓ] = 0 of its expected loss")
register("robbins_monro", "identity", "Sec. 5.3 (SVI); Hoffman et al. (2013)",
         "learning-rate schedule ρ_t = (t + delay)^(-forgetting), forgetting in (1/2, 1]")

# federated Bayesian ADMM (blr_derive/federated.py; Möllenhoff, Swaroop, Doshi-Velez & Khan 2025, "Federated ADMM
# from Bayesian Duality"; Eq. 60): exact steps of the derivation, applied when a recipe has a 'federated' section
register("federated_local", "identity", "Bayesian ADMM local step; Eq. 6",
         "client objective E_q[ℓ_k] + <η_k, μ> + ρ KL(q ‖ q_g): ∇_μ E_q[ℓ̄ + log h] = (∇_μ E_q[ℓ_k] + η_k)/ρ − λ_g "
         "(the base measure cancels)")
register("federated_dual", "identity", "Bayesian ADMM dual step",
         "η_k ← η_k + ρ(λ_k − λ_g): at the client's optimum η_k = −∇_μ E_{q_k}[ℓ_k], the local natural gradient")
register("federated_server", "identity", "Bayesian ADMM global step; Eq. 60",
         "λ_g = −∇_μ E_{q_g}[ℓ_0 + log h] + Σ_k (η_k + ρ_s(λ_k − λ_g)): the global natural parameter is the prior's "
         "site plus the sum of the clients' sites (ρ_s = 0: their plain sum, Eq. 60)")

register("posterior_correction", "step", "Khan (2025) posterior correction; Daheim et al. (2026)",
         "replace the batch's old sites in a snapshot q_old: ∇_μ E_q[ℓ_B] − ∇_μ E_{q_old}[ℓ_B] + ∇_μ E_{q_old}[ℓ] "
         "(SVRG over N(m, I))")


def approximation_names():
    return sorted(k for k, r in RULES.items() if r.kind != "identity")

# passes on the update program (blr_derive/passes.py), named by recipes
register("weight_decay", "pass", "Eqs. 1, 34",
         "coupled weight decay: the prior δ‖θ‖²/2 adds δm to the gradient and δ to the Hessian")
register("squared_gradient_hessian", "pass", "Eqs. 38, 45",
         "Hessian ≈ squared gradient (gradient magnitude / Gauss-Newton)")
register("separate_learning_rates", "pass", "Eq. 36", "different learning rates per parameter")
register("square_root_scaling", "pass", "Eq. 38", "precondition with sqrt(s) + eps")
register("ema_momentum", "pass", "App. F, Eq. 77", "exponential-moving-average momentum of the gradient")
register("debias", "pass", "Adam convention", "bias correction x / (1 - rate^t) of zero-initialised averages")
register("running_max", "pass", "AMSGrad convention", "precondition with the running maximum of the scale")
register("centered", "pass", "centered RMSprop convention", "precondition with the gradient variance")
register("heavy_ball_momentum", "pass", "Eqs. 75, 80", "heavy-ball momentum on the mean step (buffer form)")
register("decoupled_weight_decay", "pass", "AdamW convention", "m <- m - rho*delta*m outside the preconditioner")
register("minibatch", "pass", "Eq. 34", "mini-batch estimates scaled by the data-set size N (ess)")
register("price_estimator", "pass", "Eq. 11 (Price), Stein's lemma",
         "E_q[∇²ℓ] ≈ mean_k ∇ℓ(θ_k)(θ_k - m)/σ²: the reparameterization Hessian estimator from gradients at samples")
register("change_variable", "pass", "IVON's parameterization",
         "store a parameter through an invertible affine map (e.g. s = ess*(h + delta))")
register("riemannian_correction", "pass", "improved BLR (Lin et al. 2020; IVON)",
         "s <- (1-rho)s + rho*T + rho^2 (s - T)^2 / (2s): keeps the precision positive")
register("scale_learning_rate", "pass", "IVON convention", "multiply the mean's learning rate by a factor")
register("clip_step", "pass", "IVON convention", "clip the preconditioned mean step elementwise")
register("gauss_newton_hessian", "pass", "Eq. 45",
         "diagonal Gauss-Newton Hessian from squared per-example gradients (oracle 'ggn')")

# finite mixtures with fixed weights (blr_derive/mixture.py; Sec. 3.2, App. E, App. G)
register("mixture_parameters", "identity", "Eq. 27",
         "the joint q(θ, z=k) = π_k q_k(θ) is a minimal conditional exponential family: λ_k of component k, "
         "μ_k = π_k E_{q_k}[T(θ)]")
register("mixture_blr", "identity", "Eq. 28",
         "λ_k ← λ_k - ρ∇_{μ_k}[E_q ℓ - H(q)] with the entropy of the mixture; ∇_{μ_k}(-H) = ∇_{μ_k}E_q[log q] "
         "with log q held fixed (E_q[∇ log q] = 0)")
register("mixture_chain_rule", "identity", "App. E, Eqs. 67-68",
         "∇_{μ_k} through m_k(μ_k) = μ_k⁽¹⁾/π_k and C_k(μ_k) = μ_k⁽²⁾/π_k - m_k m_kᵀ")
register("mixture_bonnet_price", "identity", "App. E (Lin et al. 2019a, Thms 6-7)",
         "∇_{m_k}E_q[f] = π_k E_{q_k}[∇f], ∇_{C_k}E_q[f] = ½π_k E_{q_k}[∇²f]")
register("mixture_score", "identity", "App. E, Eqs. 69-71",
         "∇log q = Σ_j r_j ∇log q_j, ∇²log q = Σ_j r_j(∇²log q_j + ∇log q_j∇log q_jᵀ) - ∇log q∇log qᵀ with the "
         "responsibilities r_j(θ) = π_j q_j(θ)/q(θ)")
register("instantiate", "identity", "Eqs. 29-30",
         "the generic update of component k written for each free component of the mixture")
register("separated_components", "mixture", "App. E, Eq. 74; App. G, Eqs. 85-86",
         "components far apart: r_k(m_k) ≈ 1, r_j(m_k) ≈ 0, so ∇log q(m_k) ≈ ∇log q_k(m_k), "
         "∇²log q(m_k) ≈ ∇²log q_k(m_k)")
register("dropout_masks", "expectation", "App. G, Eq. 84",
         "reparameterize the mixture by its indicator z ~ π (Bernoulli masks from uniform draws), drop the noise: "
         "∇ℓ, ∇²ℓ at the dropout mean θ̃ = Σ_k 1[z=k] m_k, times ∂θ̃/∂m_k (argument 'samples')")
