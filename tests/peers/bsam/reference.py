"""Hand-written torch reference of Bayesian SAM (bSAM) and of the SAM baseline.

Sources
-------
* T. Moellenhoff, M. E. Khan, "SAM as an Optimal Relaxation of Bayes", ICLR 2023
  (arXiv:2210.01620), Algorithm 1 ("bSAM").
* Official code: github.com/team-approx-bayes/bayesian-sam, snapshot HEAD 936eec1
  ("fix hyperparams"); optim.py and train.py are unchanged since the code release 99d9942.
  The code is JAX; line numbers below refer to that snapshot:
    optim.py  16-49   build_sgd_optimizer
    optim.py  51-100  build_sam_optimizer   (the paper's SAM baseline, "SAM-SGD")
    optim.py 103-176  build_bsam_optimizer
    train.py  23-64   get_optimizer (wdecay = priorprec / ndata, line 24)
    train.py  70-106  argparse defaults; train.py 147 ndata *= dafactor
    util.py   41-48   normal_like_tree (one standard normal draw per parameter entry)
* Plain SAM: P. Foret et al., "Sharpness-Aware Minimization for Efficiently Improving
  Generalization", ICLR 2021, Algorithm 1 / Eq. 2: e = rho * g / ||g||_2.

Everything is elementwise per parameter entry except the global norm of SAM.  The loss
whose gradient grad_fn returns is the *mean* minibatch loss (train.py 25-29 with
util.py nll_categorical 10-14, a mean over the batch), so all quantities are "per example":
s is the per-example precision, the posterior is q = N(w, 1 / (Ndata * s)).

bSAM step (optim.py 125-172), for each of the m = msharpness sub-batches k (own noise n_k):
  (1) theta_k = w + sqrt(1 / (Ndata * s)) * n_k,  n_k ~ N(0, I)       optim.py 129-131
  (2) g_k     = grad l_k(theta_k)                  (gradient at the noisy sample) 134
  (3) p_k     = w + rho * g_k / s                  (adversarial point, at the MEAN w) 136
  (4) ge_k    = grad l_k(p_k)                      (gradient at the perturbed point) 137
  (5) gs_k    = sqrt(s * g_k**2)   (= sqrt(s) * |g_k|, Hessian-diagonal estimate)  139
 then, averaging over the sub-batches (optim.py 153-154):
  (6) gs = mean_k gs_k ,  ge = mean_k ge_k
  (7) gm <- beta1 * gm + (1 - beta1) * (ge + wdecay * w)               optim.py 159-160
  (8) w  <- w - learningrate * lrfactor * gm / s     (OLD s)           optim.py 163
  (9) s  <- beta2 * s + (1 - beta2) * (gs + damping + wdecay)          optim.py 166-167
 init: w = weights, gm = 0, s = s_init (optim.py 114-119).  No bias correction.
 Paper Algorithm 1 has the same lines with omega = w, delta = wdecay, gamma = damping,
 alpha = learning rate; as reproduced by a third-party page (the paper PDF itself was not
 readable here) it lists the s-update before the omega-update, whereas the official code
 updates w with the old s (8) and s afterwards (9).  This reference follows the code.

Standard BLR / variational online Newton (diagonal Gaussian, q = N(w, 1/(N s))):
 (1) sampling, (7)+(8) the natural-gradient mean step w <- w - a (grad + delta w)/s (with an
 Adam-like momentum gm) and (9) the precision EMA s <- beta2 s + (1 - beta2) (h + delta),
 i.e. a VON precision step of size 1 - beta2.  bSAM-specific: (3)-(4) the SAM ascent step
 rho*g/s (SAM's rho*g/||g|| replaced by the posterior-scaled rho*g/s) and the use of the
 gradient ge at w + eps instead of E_q[grad];
 (5) the gradient-magnitude Hessian estimate sqrt(s)|g| and the damping gamma in (9).
With rho = 0: p_k = w, so the mean moves with grad l(w) (gradient at the MEAN, not at the
sample) while s still uses sqrt(s)|grad l(theta)| at the sample: an Adam-like diagonal VON
with the gradient-magnitude curvature; with additionally n = 0 it is the deterministic
"w <- w - a EMA(g + delta w)/s, s <- EMA(sqrt(s)|g| + delta + gamma)".

SAM baseline (optim.py 51-100), per sub-batch k, then averaged:
  g_k = grad l_k(w);  e_k = rho * g_k / ||g_k||_2  (global norm over all parameters, no eps, 70-71)
  ge_k = grad l_k(w + e_k);  ge = mean_k ge_k                                    72, 82-83
  gm <- momentum * gm + ge + wdecay * w          (heavy ball, no dampening)      88-89
  w  <- w - learningrate * lrfactor * gm                                         92
 This is exactly torch.optim.SGD(lr, momentum, dampening=0, weight_decay=wdecay,
 nesterov=False) applied to the perturbed gradient; the weight decay is not in the
 ascent gradient g_k.

Only torch is used.
"""
import torch

__all__ = ["BSAMReference", "SAMReference", "DEFAULTS_BSAM", "DEFAULTS_SAM"]

# train.py defaults (argparse, lines 72-106) as the official script hands them to the builders
# (train.py 38-58).  The builders themselves (optim.py 51-56, 103-112) have no defaults.
DEFAULTS_BSAM = dict(
    learningrate=1.0,   # --alpha 1.0 (train.py 72)
    beta1=0.9,          # --beta1 0.9 (train.py 77)
    beta2=0.999,        # --beta2 0.999 (train.py 79)
    priorprec=25.0,     # --priorprec 25.0 (train.py 81); wdecay = priorprec / Ndata (train.py 24)
    rho=0.1,            # --rho 0.1 (train.py 74)
    msharpness=8,       # --batchsplit 8 (train.py 93)
    s_init=1.0,         # --custominit 1.0 (train.py 103)
    damping=0.1,        # --damping 0.1 (train.py 105)
)
# README (bSAM, CIFAR-10): --alpha 0.5 --beta1 0.9 --beta2 0.999 --priorprec 40 --rho 0.01
#   --batchsplit 8 --dafactor 4 (Ndata = 4 * 50000).
DEFAULTS_SAM = dict(
    learningrate=1.0,   # --alpha (train.py 72)
    momentum=0.9,       # momentum = args.beta1 (train.py 42, 77)
    priorprec=25.0,     # wdecay = priorprec / Ndata (train.py 24, 81)
    rho=0.1,            # --rho (train.py 74)
    msharpness=8,       # --batchsplit (train.py 93)
)
# README (SAM-SGD, CIFAR-10): --alpha 0.03 --beta1 0.9 --priorprec 25 --rho 0.05 --batchsplit 8.


def _as_subbatch_list(noise, msharpness, nparams):
    """Normalise the noise argument to a list of msharpness lists of tensors."""
    if msharpness == 1 and len(noise) == nparams and all(isinstance(t, torch.Tensor) for t in noise):
        return [list(noise)]
    noise = [list(nk) for nk in noise]
    if len(noise) != msharpness:
        raise ValueError(f"expected {msharpness} noise draws (one per sub-batch), got {len(noise)}")
    for nk in noise:
        if len(nk) != nparams:
            raise ValueError("each noise draw needs one tensor per parameter")
    return noise


def _mean(lists):
    m = len(lists)
    out = [t.clone() for t in lists[0]]
    for other in lists[1:]:
        for o, t in zip(out, other):
            o.add_(t)
    return [o / m for o in out]


class BSAMReference:
    """Official bSAM update (optim.py 103-176) on a flat list of tensors.

    Hyperparameters (names as in build_bsam_optimizer, optim.py 103-112):
      learningrate  alpha; the step also multiplies by lrfactor (schedule, optim.py 163)
      beta1         momentum of the gradient gm (optim.py 160)
      beta2         EMA factor of the precision s (optim.py 166)
      wdecay        delta / N: the L2 term, prior precision divided by Ndata (train.py 24);
                    if None, wdecay = priorprec / Ndata
      rho           size of the adversarial step rho * g / s (optim.py 136)
      msharpness    number of sub-batches, each with its own noise and SAM step (optim.py 147-154)
      Ndata         data-set size (times dafactor, train.py 147); noise std sqrt(1/(Ndata s)) (131)
      s_init        initial value of s (optim.py 119)
      damping       gamma, added to the curvature in the s update (optim.py 166)
      priorprec     only used to form wdecay when wdecay is None (train.py 24)

    State (official optstate keys): w (mean), gm (momentum), s (per-example precision),
    alpha (= learningrate, stored but unused by the step, optim.py 118).
    """

    def __init__(self, params, Ndata, learningrate=1.0, beta1=0.9, beta2=0.999, wdecay=None,
                 rho=0.1, msharpness=8, s_init=1.0, damping=0.1, priorprec=25.0):
        if Ndata is None or Ndata <= 0:
            raise ValueError("Ndata (the data-set size) is required")
        self.learningrate = float(learningrate)
        self.beta1 = float(beta1)
        self.beta2 = float(beta2)
        self.Ndata = float(Ndata)
        self.wdecay = float(priorprec) / self.Ndata if wdecay is None else float(wdecay)
        self.rho = float(rho)
        self.msharpness = int(msharpness)
        self.s_init = float(s_init)
        self.damping = float(damping)
        # init (optim.py 114-119)
        self.w = [p.detach().clone() for p in params]
        self.gm = [torch.zeros_like(p) for p in self.w]
        self.alpha = self.learningrate
        self.s = [torch.full_like(p, self.s_init) for p in self.w]
        self.last = {}

    @property
    def optstate(self):
        return {"w": self.w, "gm": self.gm, "alpha": self.alpha, "s": self.s}

    def noise_std(self):
        """sqrt(1 / (Ndata * s)), the posterior standard deviation (optim.py 131, demo2d.py 112)."""
        return [torch.sqrt(1.0 / (self.Ndata * s)) for s in self.s]

    def step(self, grad_fn, noise, lrfactor=1.0):
        """One bSAM step.

        grad_fn(params, k) -> list of gradients of the mean loss of sub-batch k at params.
        noise: msharpness lists of standard-normal tensors (one list per sub-batch); with
        msharpness == 1 a single flat list is accepted.  Returns None; state is updated in place
        and the intermediates of the step are kept in self.last.
        """
        noise = _as_subbatch_list(noise, self.msharpness, len(self.w))
        gs_all, ge_all, rec = [], [], {"noisy_param": [], "grad": [], "perturbed_params": [],
                                         "perturbed_grad": [], "gs": []}
        for k, n_k in enumerate(noise):
            # (1) noisy sample, optim.py 129-131
            noisy = [mu + torch.sqrt(1.0 / (self.Ndata * s)) * n for n, mu, s in zip(n_k, self.w, self.s)]
            # (2) gradient at the noisy sample, optim.py 134
            g = [t.detach().clone() for t in grad_fn([t.clone() for t in noisy], k)]
            # (3) adversarial point around the MEAN, optim.py 136
            pert = [p + self.rho * gi / s for p, gi, s in zip(self.w, g, self.s)]
            # (4) gradient at the perturbed point, optim.py 137
            ge = [t.detach().clone() for t in grad_fn([t.clone() for t in pert], k)]
            # (5) curvature estimate sqrt(s * g^2), optim.py 139
            gs = [torch.sqrt(s * (gi ** 2.0)) for gi, s in zip(g, self.s)]
            gs_all.append(gs)
            ge_all.append(ge)
            for key, val in zip(("noisy_param", "grad", "perturbed_params", "perturbed_grad", "gs"),
                                (noisy, g, pert, ge, gs)):
                rec[key].append(val)
        # (6) mean over sub-batches, optim.py 153-154
        gs = _mean(gs_all)
        ge = _mean(ge_all)
        # (7) momentum, optim.py 159-160
        self.gm = [self.beta1 * gm + (1 - self.beta1) * (gi + self.wdecay * w)
                   for gm, gi, w in zip(self.gm, ge, self.w)]
        # (8) mean update with the old s, optim.py 163
        self.w = [p - self.learningrate * lrfactor * gm / s for p, gm, s in zip(self.w, self.gm, self.s)]
        # (9) precision update, optim.py 166-167
        self.s = [self.beta2 * s + (1 - self.beta2) * (g_s + self.damping + self.wdecay)
                  for s, g_s in zip(self.s, gs)]
        rec["gs_mean"] = gs
        rec["perturbed_grad_mean"] = ge
        self.last = rec


class SAMReference:
    """Official SAM baseline (build_sam_optimizer, optim.py 51-100) on a flat list of tensors.

    Hyperparameters (names as in optim.py 51-56):
      learningrate  step size, times lrfactor (optim.py 92)
      momentum      heavy-ball momentum, no dampening (optim.py 88-89); train.py passes --beta1
      wdecay        L2 term added to the perturbed gradient (optim.py 89); if None,
                    wdecay = priorprec / Ndata (train.py 24)
      rho           radius of the ascent step rho * g / ||g||_2 (optim.py 71)
      msharpness    number of sub-batches, each with its own ascent step (optim.py 79-83)
    State: w (weights), gm (momentum buffer), alpha (= learningrate).
    """

    def __init__(self, params, learningrate=1.0, momentum=0.9, wdecay=None, rho=0.1, msharpness=8,
                 priorprec=25.0, Ndata=None):
        if wdecay is None:
            if Ndata is None:
                raise ValueError("give wdecay, or priorprec and Ndata")
            wdecay = float(priorprec) / float(Ndata)
        self.learningrate = float(learningrate)
        self.momentum = float(momentum)
        self.wdecay = float(wdecay)
        self.rho = float(rho)
        self.msharpness = int(msharpness)
        self.w = [p.detach().clone() for p in params]
        self.gm = [torch.zeros_like(p) for p in self.w]
        self.alpha = self.learningrate
        self.last = {}

    @property
    def optstate(self):
        return {"w": self.w, "gm": self.gm, "alpha": self.alpha}

    def step(self, grad_fn, lrfactor=1.0):
        """grad_fn(params, k) -> gradients of the mean loss of sub-batch k at params."""
        rec = {"grad": [], "grad_norm": [], "e": [], "perturbed_params": [], "perturbed_grad": []}
        for k in range(self.msharpness):
            g = [t.detach().clone() for t in grad_fn([t.clone() for t in self.w], k)]      # optim.py 69
            grad_norm = torch.sqrt(sum(torch.sum(torch.square(gi)) for gi in g))          # optim.py 70
            e = [self.rho * gi / grad_norm for gi in g]
            pert = [p + ei for p, ei in zip(self.w, e)]                                    # optim.py 71
            ge = [t.detach().clone() for t in grad_fn([t.clone() for t in pert], k)]       # optim.py 72
            for key, val in zip(("grad", "grad_norm", "e", "perturbed_params", "perturbed_grad"),
                                (g, grad_norm, e, pert, ge)):
                rec[key].append(val)
        ge = _mean(rec["perturbed_grad"])                                                  # optim.py 83
        self.gm = [self.momentum * gm + gi + self.wdecay * w for gm, gi, w in zip(self.gm, ge, self.w)]  # 88-89
        self.w = [p - self.learningrate * lrfactor * gm for p, gm in zip(self.w, self.gm)]  # optim.py 92
        rec["perturbed_grad_mean"] = ge
        self.last = rec
