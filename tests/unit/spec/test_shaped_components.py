"""Variables of components with different shapes (``components: [{name: theta, shape: vector}, {name: Lambda,
shape: matrix}]``): what is accepted, and every mistake a located one-line error."""
from __future__ import annotations

import textwrap

import pytest

from blr_derive.core.errors import SpecError
from blr_derive.core.yamlio import load_yaml_text
from blr_derive.families.library import family_from_spec

GOOD = """
name: nw
variable:
  components:
    - {name: theta, shape: vector}
    - {name: Lambda, shape: matrix}
dimension: P
support: [real, positive_definite]
parameters:
  m: {shape: vector}
  kappa: {domain: positive}
  V: {shape: matrix, domain: positive_definite}
  n: {domain: real, greater_than: P - 1}
sufficient_statistics:
  - Lambda*theta
  - theta.T*Lambda*theta
  - Lambda
  - logdet(Lambda)
base_measure: (2*pi)**(-P/2)
natural_parameters:
  - kappa*m
  - -kappa/2
  - -(inv(V) + kappa*m*m.T)/2
  - (n - P)/2
log_partition: -P/2*log(-2*lambda2) - (lambda4 + P/2)*logdet(-2*lambda3 + lambda1*lambda1.T/(2*lambda2)) + (lambda4 + P/2)*P*log(2) + lmvgamma(lambda4 + P/2, P)
sampler:
  define:
    B: chol(V)*bartlett(n)
  value: [m + inv(chol(kappa*B*B.T)).T*normals(P), B*B.T]
"""


def build(text):
    return family_from_spec(load_yaml_text(textwrap.dedent(text).lstrip("\n"), "f.yaml"), "f.yaml")


def test_the_declaration_builds_with_the_inverse_maps_solved():
    fam = build(GOOD)
    assert fam.variable_kind == "mixed" and [str(c) for c in fam.components] == ["theta", "Lambda"]
    assert {str(k) for k in fam.ord_from_nat} == {"m", "kappa", "V", "n"}
    assert fam.sampler is not None and fam.components[1] in fam.symmetric


def line(needle):
    lines = GOOD.lstrip("\n").splitlines()
    return [i + 1 for i, l in enumerate(lines) if needle in l][0]


@pytest.mark.parametrize("old, new, message, at", [
    ("    - {name: Lambda, shape: matrix}", "    - {name: Lambda, shape: cube}", "component shape must be", "name: Lambda"),
    ("    - {name: Lambda, shape: matrix}", "    - {name: theta, shape: matrix}", "declared twice", "name: theta, shape: matrix"),
    ("    - {name: Lambda, shape: matrix}", "    - {name: Lambda, shape: matrix, size: 3}", "a name or a mapping", "size: 3"),
    ("support: [real, positive_definite]", "support: [positive_definite, real]", "has support", "support:"),
    ("support: [real, positive_definite]", "support: [real]", "aligned with the variable's components", "support:"),
    ("dimension: P\n", "", "needs a 'dimension'", "name: theta, shape: vector"),
    ("  value: [m + inv(chol(kappa*B*B.T)).T*normals(P), B*B.T]", "  value: [B*B.T, m + normals(P)]",
     "must have its shape", "value:"),
    ("  value: [m + inv(chol(kappa*B*B.T)).T*normals(P), B*B.T]", "  value: [m + normals(3), B*B.T]",
     "normals() takes the dimension P", "value:"),
    ("log_partition:", "not_a_key:", "unknown key", "not_a_key"),
    ("    - {name: theta, shape: vector}", "    - {name: __class__, shape: vector}", "is not a name", "__class__"),
    ("    - {name: Lambda, shape: matrix}", "    - {name: m, shape: matrix}", "clashes", "  m: {shape: vector}"),
])
def test_mistakes_are_located(old, new, message, at):
    text = GOOD.replace(old, new)
    assert text != GOOD
    with pytest.raises(SpecError) as exc:
        build(text)
    assert message in str(exc.value)
    lines = text.lstrip("\n").splitlines()
    want = [i + 1 for i, l in enumerate(lines) if at in l]
    assert exc.value.line in want, (exc.value.line, want, str(exc.value))


def test_without_a_log_partition_the_message_says_to_declare_it():
    text = "\n".join(l for l in GOOD.splitlines() if not l.startswith("log_partition"))
    with pytest.raises(SpecError, match="log_partition must be given for components with shapes"):
        build(text)
