"""Generated modules name a bad oracle value for what it is (issue 36): a NaN from a Hessian oracle was reported
as "H must be symmetric" (NaN is not equal to itself), and the Triton optimizers read an oracle attribute of the
wrong shape (``p.ggn`` of one element for a parameter of four) past its end.

* numpy and jax modules: a matrix in SYMMETRIC must be finite; a NaN or an infinity is reported before the
  symmetry test, naming the oracle that returned it (or the state/data name) and its first entry;
* torch and Triton optimizers: an oracle read from a parameter attribute (``p.ggn``) must be a tensor of the
  parameter's shape on its device.  Its values are not inspected (that would synchronize with the device at every
  step): a NaN flows into the state as a NaN gradient does in torch.optim, and no check fails on it.

The modules and oracles are found in ``catalog/generated/``; the steps run through the generated modules."""
import math
import re

import numpy as np
import pytest
import torch
import yaml

from conftest import CATALOG, FUNCTION_TARGETS, GENERATED, OPTIMIZER_TARGETS, load_generated

#: a read of an oracle into a variable: ``H = _array("H", oracles["hess"](m), _dims, "hess")`` (also the
#: component axis' ``numpy.stack([oracles["hess"](m[_k]) for _k in range(K)])``)
ORACLE_READ = re.compile(r'_array\("(\w+)", (.*?oracles\["(\w+)"\].*), _dims(?:, "(\w+)")?\)$', re.M)


def _symmetric_oracle_reads():
    out = []
    for target in FUNCTION_TARGETS:
        for path in sorted((GENERATED / target).glob("*.py")):
            text = path.read_text(encoding="utf-8")
            sym = re.search(r"^SYMMETRIC = \((.*)\)$", text, re.M)
            names = set(re.findall(r'"(\w+)"', sym.group(1))) if sym else set()
            out += [(target, path.stem, m.group(1), m.group(3), m.group(4))
                    for m in ORACLE_READ.finditer(text) if m.group(1) in names]
    return out


READS = _symmetric_oracle_reads()


def test_every_module_passes_the_oracle_name_with_a_symmetric_oracle_value():
    assert {t for t, *_ in READS} == set(FUNCTION_TARGETS) and {"newton", "multimodal"} <= {r for _, r, *_ in READS}
    for target, recipe, name, oracle, passed in READS:
        assert passed == oracle, (target, recipe, name)


@pytest.mark.parametrize("target,recipe,name,oracle", [r[:4] for r in READS],
                         ids=[f"{t}-{r}-{n}" for t, r, n, *_ in READS])
def test_every_symmetric_oracle_value_names_a_nan_or_an_infinity(target, recipe, name, oracle):
    """Each module's own check, on a matrix of its declared shape (every dimension 2): the first non-finite entry
    is named, before the symmetry test (a NaN was "must be symmetric")."""
    mod = load_generated(recipe, target)
    shape = tuple(2 for _ in mod.SHAPES[name])
    for value, word in ((math.nan, "NaN"), (math.inf, "inf"), (-math.inf, "-inf")):
        a = np.ones(shape)
        at = (0,) * (len(shape) - 1) + (1,)
        a[at] = value
        entry = re.escape(f"{name}[{', '.join(map(str, at))}]")
        with pytest.raises(ValueError, match=rf"^oracle '{oracle}' returned {re.escape(word)} at {entry}$"):
            mod._array(name, a, {}, oracle)
    a = np.ones(shape)
    a[(0,) * (len(shape) - 1) + (1,)] = 2.0
    with pytest.raises(ValueError, match=f"{name} must be symmetric"):          # finite: the symmetry test
        mod._array(name, a, {}, oracle)


def _newton_state(P=3):
    rng = np.random.default_rng(0)
    B = rng.normal(size=(P, P))
    return {"m": rng.normal(size=P), "S": B @ B.T + P * np.eye(P)}


@pytest.mark.parametrize("target", FUNCTION_TARGETS)
def test_newton_step_names_a_nan_hessian(target):
    mod = load_generated("newton", target)
    st = mod.init(**_newton_state())

    def step(H):
        return mod.step(st, oracles={"grad": lambda m: np.asarray(m), "hess": lambda m: H})
    H = 2 * np.eye(3)
    H[1, 2] = H[2, 1] = math.nan                      # symmetric, but NaN: was "H must be symmetric"
    with pytest.raises(ValueError, match=r"^oracle 'hess' returned NaN at H\[1, 2\]$"):
        step(H)
    H = 2 * np.eye(3)
    H[2, 2] = math.inf
    with pytest.raises(ValueError, match=r"^oracle 'hess' returned inf at H\[2, 2\]$"):
        step(H)
    H = 2 * np.eye(3)
    H[0, 1] = 1.0
    with pytest.raises(ValueError, match="^H must be symmetric"):
        step(H)
    out = step(2 * np.eye(3))                         # a finite symmetric Hessian steps
    assert np.all(np.isfinite(np.asarray(out["S"])))
    S = _newton_state()["S"]
    S[0, 0] = math.nan
    with pytest.raises(ValueError, match=r"^S holds NaN at S\[0, 0\]$"):       # a state, not an oracle
        mod.init(m=np.zeros(3), S=S)


@pytest.mark.parametrize("target", FUNCTION_TARGETS)
def test_component_axis_mixture_names_the_component_entry(target):
    """A mixture with the components as an array axis stacks the oracle's values of every component: the entry
    names the component first."""
    mod = load_generated("multimodal", target)
    K, P = 2, 2
    st = mod.init(m=np.zeros((K, P)), S=np.stack([np.eye(P)] * K))

    def hess(m):
        return np.array([[1.0, 0.0], [0.0, math.nan]]) if float(np.asarray(m)[0]) == 1.0 else np.eye(P)
    st["m"] = np.array([[0.0, 0.0], [1.0, 0.0]])
    with pytest.raises(ValueError, match=r"^oracle 'hess' returned NaN at H\[1, 1, 1\]$"):
        mod.step(st, oracles={"grad": lambda m: np.zeros(P), "hess": hess})


def _attribute_oracles():
    """(recipe, oracle) of every torch optimizer that reads an oracle from a parameter attribute, if it has a
    Triton artifact too."""
    out = []
    for path in sorted((GENERATED / "torch").glob("*.py")):
        if (GENERATED / "triton" / path.name).exists():
            out += [(path.stem, o) for o in sorted(set(re.findall(r"_oracle\(params, lambda p: p\.(\w+)",
                                                                   path.read_text(encoding="utf-8"))))]
    return out


ATTRIBUTE_ORACLES = _attribute_oracles()


def _required(recipe):
    spec = yaml.safe_load((CATALOG / f"{recipe}.yaml").read_text(encoding="utf-8"))
    return {h: 10 if d.get("type") == "int" else 10.0 for h, d in spec["hyperparameters"].items()
            if isinstance(d, dict) and d.get("required")}


def _optimizer_class(mod):
    return next(v for v in vars(mod).values()
                if isinstance(v, type) and issubclass(v, torch.optim.Optimizer) and v.__module__ == mod.__name__)


def _step(recipe, target, oracle, value):
    """One step of a parameter of four elements whose p.<oracle> is ``value``; the parameter after it."""
    p = torch.nn.Parameter(torch.zeros(4))
    opt = _optimizer_class(load_generated(recipe, target))([p], **_required(recipe))

    def set_oracles():
        p.grad = torch.ones(4)
        setattr(p, oracle, value)
    if hasattr(opt, "sampled_params"):                # Monte Carlo: the oracles at a sample of q
        with opt.sampled_params(train=True):
            set_oracles()
        opt.step()
    else:
        set_oracles()
        opt.step()
    return p.detach().clone()


@pytest.mark.parametrize("target", OPTIMIZER_TARGETS)
@pytest.mark.parametrize("recipe,oracle", ATTRIBUTE_ORACLES)
def test_attribute_oracle_of_another_shape_is_refused(recipe, oracle, target):
    """The Triton kernels read p.<oracle> through a pointer, as many elements as the parameter has: a one-element
    value was read past its end (and torch broadcast it); now both name the attribute and the shapes."""
    assert {r for r, _ in ATTRIBUTE_ORACLES} >= {"ogn", "vogn"}
    for bad in (torch.ones(1), torch.ones(5), torch.ones(2, 2)):
        with pytest.raises(ValueError, match=rf"^p\.{oracle} has shape {re.escape(str(tuple(bad.shape)))}, "
                                             r"the parameter \(4,\)$"):
            _step(recipe, target, oracle, bad)
    with pytest.raises(TypeError, match=rf"^p\.{oracle} must be a tensor, got float$"):
        _step(recipe, target, oracle, 1.0)
    ok = _step(recipe, target, oracle, torch.full((4,), 0.5))
    assert torch.isfinite(ok).all() and (ok != 0).all()
    # a NaN value is not inspected on the device: it reaches the parameter as a NaN gradient would in torch.optim
    assert torch.isnan(_step(recipe, target, oracle, torch.full((4,), math.nan))).all()
