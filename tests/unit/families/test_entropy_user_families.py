"""The entropy H(q) = A − <λ, μ> − E_q[log h] (App. B) of families the library does not ship, written from the
README's "Family file format" alone (``entropy_families/*.yaml``), none declaring ``expected_log_base_measure``.

E_q[log h] comes out three ways: linear in T (log-normal, beta prime), in closed form from the tilted log-partition
d/ds log ∫ h^{1+s} exp(<λ, T>) dθ at s = 0 (inverse Gaussian: ∂K_ν/∂ν at ν = ½ gives e^{x}E₁(2x); a GIG of known
index: the order derivative as an integral; Weibull, Nakagami, chi, Rayleigh, Lévy: digamma), or by numerical
integration (a Cauchy base measure tilted by e^{−sθ²}, a unit-scale Gumbel).  Each is compared at many parameter
values with −∫ q log q by mpmath quadrature (30 digits) of a log-density written here by hand, with its own
normalizing constant (not the engine's A), and with ``scipy.stats.<dist>.entropy()`` where scipy has the law.
"""
from pathlib import Path

import mpmath as mp
import numpy as np
import pytest
from scipy import stats

from blr_derive.families.library import load_family

HERE = Path(__file__).parent / "entropy_families"


def _ig(mu, lam):
    return lambda x: mp.log(lam / (2 * mp.pi * x ** 3)) / 2 - lam * (x - mu) ** 2 / (2 * mu ** 2 * x)


def _gig(p, a, b):
    c = mp.log(2 * mp.besselk(p, mp.sqrt(a * b))) + p * mp.log(b / a) / 2
    return lambda x: (p - 1) * mp.log(x) - (a * x + b / x) / 2 - c


# file: (method word, ordinary parameters at each point, hand-written log-density, scipy law or None, support)
CASES = {
    "inverse_gaussian": ("tilted", [dict(mu=m, lam=lv) for m, lv in
                                    [(1.0, 1.0), (0.05, 40.0), (20.0, 0.05), (3.0, 3.0), (0.4, 0.02), (7.0, 150.0)]],
                         lambda o: _ig(o["mu"], o["lam"]), lambda o: stats.invgauss(o["mu"] / o["lam"], scale=o["lam"]),
                         "positive"),
    "wald_known_shape": ("tilted", [dict(nu=n, lam0=lv) for n, lv in [(1.0, 1.0), (0.2, 9.0), (12.0, 0.3), (2.5, 60.0)]],
                         lambda o: _ig(o["nu"], o["lam0"]),
                         lambda o: stats.invgauss(o["nu"] / o["lam0"], scale=o["lam0"]), "positive"),
    "gig_known_index": ("tilted", [dict(p=p, a=a, b=b) for p, a, b in
                                   [(0.7, 1.0, 2.0), (-1.3, 0.5, 3.0), (2.5, 2.0, 0.4), (3.0, 1.0, 1.0), (-0.5, 4.0, 0.2),
                                    (0.0, 0.3, 0.3)]],
                        lambda o: _gig(o["p"], o["a"], o["b"]),
                        lambda o: stats.geninvgauss(o["p"], np.sqrt(o["a"] * o["b"]), scale=np.sqrt(o["b"] / o["a"])),
                        "positive"),
    "gig_index_2": ("tilted", [dict(a=a, b=b) for a, b in [(1.0, 1.0), (0.2, 5.0), (6.0, 0.1), (30.0, 40.0)]],
                    lambda o: _gig(2, o["a"], o["b"]),
                    lambda o: stats.geninvgauss(2, np.sqrt(o["a"] * o["b"]), scale=np.sqrt(o["b"] / o["a"])), "positive"),
    "log_normal": ("linear", [dict(m=m, s=s) for m, s in [(0.0, 1.0), (-2.5, 0.05), (3.0, 2.5), (0.7, 0.4)]],
                   lambda o: (lambda x: -mp.log(x) - mp.log(o["s"]) - mp.log(2 * mp.pi) / 2
                              - (mp.log(x) - o["m"]) ** 2 / (2 * o["s"] ** 2)),
                   lambda o: stats.lognorm(o["s"], scale=np.exp(o["m"])), "positive"),
    "weibull_shape_1_7": ("tilted", [dict(c=c) for c in (1.0, 0.03, 40.0, 2.7)],
                          lambda o: (lambda x: mp.log(mp.mpf(17) / 10) - mp.log(o["c"])
                                     + (mp.mpf(7) / 10) * mp.log(x / o["c"]) - (x / o["c"]) ** (mp.mpf(17) / 10)),
                          lambda o: stats.weibull_min(1.7, scale=o["c"]), "positive"),
    "weibull_shape_0_6": ("tilted", [dict(c=c) for c in (1.0, 0.03, 40.0, 2.7)],
                          lambda o: (lambda x: mp.log(mp.mpf(3) / 5) - mp.log(o["c"])
                                     - (mp.mpf(2) / 5) * mp.log(x / o["c"]) - (x / o["c"]) ** (mp.mpf(3) / 5)),
                          lambda o: stats.weibull_min(0.6, scale=o["c"]), "positive"),
    "nakagami_known_shape": ("tilted", [dict(w=w, m=m) for w, m in [(1.0, 0.5), (0.05, 3.8), (20.0, 1.0), (2.0, 8.0)]],
                             lambda o: (lambda x: mp.log(2) + o["m"] * mp.log(o["m"] / o["w"]) - mp.loggamma(o["m"])
                                        + (2 * o["m"] - 1) * mp.log(x) - o["m"] * x ** 2 / o["w"]),
                             lambda o: stats.nakagami(o["m"], scale=np.sqrt(o["w"])), "positive"),
    "chi_known_dof": ("tilted", [dict(sc=s, k=k) for s, k in [(1.0, 1.0), (0.05, 3.0), (20.0, 0.3), (0.5, 12.0)]],
                      lambda o: (lambda x: (o["k"] - 1) * mp.log(x / o["sc"]) - x ** 2 / (2 * o["sc"] ** 2)
                                 - (o["k"] / 2 - 1) * mp.log(2) - mp.loggamma(o["k"] / 2) - mp.log(o["sc"])),
                      lambda o: stats.chi(o["k"], scale=o["sc"]), "positive"),
    "beta_prime": ("linear", [dict(a=a, b=b) for a, b in [(1.0, 1.0), (0.22, 0.81), (15.0, 3.0), (2.0, 20.0)]],
                   lambda o: (lambda x: (o["a"] - 1) * mp.log(x) - (o["a"] + o["b"]) * mp.log1p(x)
                              - mp.log(mp.beta(o["a"], o["b"]))),
                   None, "positive"),        # scipy's betaprime entropy is a quad that misses 1e-6 at a = 0.22
    "rayleigh": ("tilted", [dict(sigma=s) for s in (1.0, 0.02, 50.0)],
                 lambda o: (lambda x: mp.log(x / o["sigma"] ** 2) - x ** 2 / (2 * o["sigma"] ** 2)),
                 lambda o: stats.rayleigh(scale=o["sigma"]), "positive"),
    "levy": ("tilted", [dict(c=c) for c in (1.0, 0.06, 30.0)],
             lambda o: (lambda x: mp.log(o["c"] / (2 * mp.pi)) / 2 - 3 * mp.log(x) / 2 - o["c"] / (2 * x)),
             lambda o: stats.levy(scale=o["c"]), "positive"),
    "gumbel_known_scale": ("numerical", [dict(loc=v) for v in (0.0, -4.0, 4.5, 30.0)],
                           lambda o: (lambda x: -(x - o["loc"]) - mp.exp(-(x - o["loc"]))),
                           lambda o: stats.gumbel_r(loc=o["loc"]), "real"),
    "cauchy_tilted": ("numerical", [dict(s=s) for s in (1.0, 0.001, 0.3, 50.0, 3000.0)],
                      lambda o: (lambda x: -mp.log(mp.pi * (1 + x ** 2)) - o["s"] * x ** 2
                                 - (o["s"] + mp.log(mp.erfc(mp.sqrt(o["s"]))))),     # Z = e^s erfc(√s)
                      None, "real"),
    "truncated_power": ("tilted", [dict(r=r) for r in (1.0, 0.01, 8.0, 60.0)],
                        lambda o: (lambda x: -mp.log(x) / 2 - o["r"] * x
                                   - mp.log(mp.sqrt(mp.pi / o["r"]) * mp.erf(mp.sqrt(o["r"])))),
                        None, "unit_interval"),
    "lomax_tilted": ("tilted", [dict(r=r) for r in (1.0, 0.05, 9.0)],
                     lambda o: (lambda x: mp.log(2) - 3 * mp.log1p(x) - o["r"] * x
                                - mp.log(1 - o["r"] + o["r"] ** 2 * mp.exp(o["r"]) * mp.e1(o["r"]))),
                     None, "positive"),
}

#: cheap to derive (about a second each): compared with scipy in the fast tier too
FAST = ("log_normal", "rayleigh", "levy", "gumbel_known_scale")


def mp_entropy(logq, support):
    """−∫ q log q by mpmath's tanh-sinh quadrature (20 digits) in log, logit or plain coordinates u, over finite
    panels around the mode of the density in u out to where it has fallen by e^{−80} (mpmath's infinite-interval
    nodes reach x = 10^(10^k), where exp(−λx) costs minutes)."""
    with mp.workdps(20):
        if support == "positive":
            x_of, log_j = mp.exp, (lambda u: u)
        elif support == "unit_interval":
            x_of = lambda u: 1 / (1 + mp.exp(-u))                                    # noqa: E731
            log_j = lambda u: -mp.log(1 + mp.exp(-u)) - mp.log(1 + mp.exp(u))        # noqa: E731
        else:
            x_of, log_j = (lambda u: u), (lambda u: 0)
        f = lambda u: logq(x_of(u)) + log_j(u)                                       # noqa: E731
        grid = np.sinh(np.linspace(-6, 6, 601))
        vals = [float(f(mp.mpf(u))) for u in grid]
        u0, top = grid[int(np.argmax(vals))], max(vals)
        ends = []
        for sign in (-1, 1):
            d = 1e-3
            while float(f(u0 + sign * d)) > top - 80 and d < 1e6:
                d *= 1.5
            ends.append(d)
        pts = sorted([u0 - ends[0] * t for t in (1, 0.5, 0.25, 0.1, 0.03)] + [u0]
                     + [u0 + ends[1] * t for t in (0.03, 0.1, 0.25, 0.5, 1)])
        return float(-mp.quad(lambda u: mp.exp(f(u)) * logq(x_of(u)), pts))


def evaluated(fam, H, o):
    return float(fam.evaluate(H, {fam.params[k].symbol: v for k, v in o.items()}))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_entropy_of_a_user_family_matches_quadrature_and_scipy(name):
    how, points, logq, law, support = CASES[name]
    fam = load_family(str(HERE / f"{name}.yaml"))
    assert fam.expected_log_h is None                        # nothing declared: E_q[log h] is derived
    H = fam.entropy()
    assert how in fam.expect_log_h_method, fam.expect_log_h_method
    for o in points:
        got = evaluated(fam, H, o)
        want = mp_entropy(logq(o), support)
        assert abs(got - want) <= 1e-8 * max(1.0, abs(want)), (o, got, want)
        if law is not None:
            ref = float(law(o).entropy())
            assert abs(got - ref) <= 1e-8 * max(1.0, abs(ref)), (o, got, ref)


@pytest.mark.parametrize("name", FAST)
def test_entropy_of_a_user_family_matches_scipy(name):
    how, points, _, law, _ = CASES[name]
    fam = load_family(str(HERE / f"{name}.yaml"))
    H = fam.entropy()
    assert how in fam.expect_log_h_method, fam.expect_log_h_method
    for o in points:
        got, ref = evaluated(fam, H, o), float(law(o).entropy())
        assert abs(got - ref) <= 1e-8 * max(1.0, abs(ref)), (o, got, ref)


@pytest.mark.slow
def test_blr_over_the_user_inverse_gaussian_equals_the_built_in_one():
    """Eq. 6 needs ∇_μ E_q[log h]: from the derived E_q[log h] (tilted log-partition: E[log θ] = log m +
    e^{2s/m}E₁(2s/m)) of the user's file it must give the step of the built-in ``inverse_gaussian``, which declares
    that E_q[log h] (``expected_log_base_measure``, checked against quadrature by ``check``)."""
    import yaml

    from blr_derive import api
    steps = []
    for family in (str(HERE / "inverse_gaussian.yaml"), "inverse_gaussian"):
        text = yaml.safe_dump({"name": "ig_step", "family": family, "loss": {"expression": "a*theta + b/theta"},
                               "hyperparameters": {"a": 0.4, "b": 0.9, "rho": 0.3}, "approximations": ["exact"]})
        steps.append(api.derive(text).compile("numpy"))
    rng = np.random.default_rng(2)
    for _ in range(6):
        mu, lam = rng.uniform(0.1, 5, size=4), rng.uniform(0.1, 20, size=4)
        hp = dict(a=rng.uniform(0, 2), b=rng.uniform(0, 2), rho=rng.uniform(0.05, 1))
        got, want = (m.step(m.init(mu=mu, lam=lam), **hp) for m in steps)
        for k in ("mu", "lam"):
            np.testing.assert_allclose(got[k], want[k], rtol=1e-12, atol=0)
