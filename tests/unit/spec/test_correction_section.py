"""The recipe section ``posterior_correction`` (spec/correction.py): bad input is one located line, exit 2."""
import pytest

from blr_derive import api
from blr_derive.core.errors import SpecError

HEAD = "name: x\nfamily: gaussian_diag\nloss: abstract\n"


@pytest.mark.parametrize("body, line, msg", [
    ("approximations: [delta]\nposterior_correction:\n  sites: gradient\n", 5, "name it in approximations"),
    ("approximations: [delta, posterior_correction]\nposterior_correction:\n  sites: prior\n", 6,
     "must be one of gradient, posterior"),
    ("approximations: [delta, posterior_correction]\nposterior_correction:\n  old: [{m: a}]\n", 6,
     "the stored posterior is a mapping"),
    ("approximations: [delta, posterior_correction]\nposterior_correction:\n  old: {m: a, v: b}\n", 6,
     "unknown key 'v'"),
    ("approximations: [delta, posterior_correction]\nposterior_correction:\n  old: {m: \"x y\"}\n", 6,
     "is not a name"),
    ("hyperparameters: {m_old: 1.0}\napproximations: [delta, posterior_correction]\n", 5, "'m_old' is taken"),
    ("approximations: [delta, posterior_correction]\nposterior_correction:\n  old: {m: s_old}\n", 4,
     "'s_old' is taken"),         # s's default name clashes: located at the approximation that asks for it
])
def test_bad_sections_are_located_errors(body, line, msg):
    with pytest.raises(SpecError, match=msg) as exc:
        api.derive(HEAD + body)
    assert exc.value.line == line


def test_the_section_names_the_data():
    d = api.derive(HEAD + "approximations: [delta, posterior_correction]\nposterior_correction:\n"
                          "  old: {m: m_ckpt, s: s_ckpt}\n")
    mod = d.compile("numpy")
    assert {"m_ckpt", "s_ckpt", "grad_full", "hess_full"} <= set(mod.DATA)
