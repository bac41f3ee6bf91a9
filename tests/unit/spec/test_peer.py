"""A recipe's `peer` section (blr_derive/spec/peer.py): stored state names, constructor checks with the peer's
messages, step counts; bad sections are one-line located errors; messages reach generated code as data."""
import pytest
import torch

from blr_derive import api
from blr_derive.api import build_ir
from blr_derive.core.errors import SpecError
from blr_derive.candidates.load import load_recipe
from blr_derive.derive.driver import derive

BASE = """name: peered
family: gaussian_diag
loss: abstract
learning_rate: lr
hyperparameters:
  lr: {{default: 0.1}}
  betas: {{default: [0.9, 0.99], names: [beta1, beta2]}}
  flag: {{default: false}}
state_init: {{s: 0}}
{peer}
approximations:
  - delta
  - squared_gradient_hessian
  - separate_learning_rates: {{s: 1 - beta2}}
  - ema_momentum: {{rate: beta1, state: u}}
  - square_root_scaling: {{param: s, eps: 1.0e-8}}
"""

GOOD = """peer:
  state_names: {u: first_moment, s: second_moment}
  counts_steps: true
  validate:
    - {require: "lr >= 0", message: "Invalid learning rate: {lr}"}
    - {require: "0 <= beta1 and beta1 < 1", message: "bad beta1 {beta1} (lr {lr}) \\"quoted\\" \\\\ back"}
    - {require: "not flag or beta2 > 0.5", message: "flag needs beta2 > 0.5"}"""


def _module(tmp_path, peer):
    p = tmp_path / "peered.yaml"
    p.write_text(BASE.format(peer=peer))
    return api.derive(str(p)).compile("torch")


@pytest.mark.slow
def test_state_names_checks_and_step_counts_reach_the_torch_optimizer(tmp_path):
    mod = _module(tmp_path, GOOD)
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    opt = mod.Peered([w], lr=0.1)
    w.grad = torch.tensor([0.5, 0.25], dtype=torch.float64)
    opt.step()
    assert sorted(opt.state[w]) == ["first_moment", "second_moment", "step"]
    assert float(opt.state[w]["step"]) == 1.0
    torch.testing.assert_close(opt.state[w]["first_moment"], 0.1 * w.grad, rtol=0, atol=1e-15)
    torch.testing.assert_close(opt.state[w]["second_moment"], 0.01 * w.grad ** 2, rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match=r"^Invalid learning rate: -1\.0$"):
        mod.Peered([w], lr=-1.0)
    with pytest.raises(ValueError) as exc:
        mod.Peered([w], lr=0.5, betas=(1.5, 0.99))
    assert str(exc.value) == 'bad beta1 1.5 (lr 0.5) "quoted" \\ back'
    with pytest.raises(ValueError, match="flag needs beta2"):
        mod.Peered([w], betas=(0.9, 0.1), flag=True)
    mod.Peered([w], betas=(0.9, 0.1), flag=False)            # the condition holds without the flag


def test_old_checkpoints_with_the_recipes_own_state_names_load(tmp_path):
    mod = _module(tmp_path, GOOD)
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    opt = mod.Peered([w])
    sd = opt.state_dict()
    sd["state"] = {0: {"step": 3, "u": torch.tensor([0.1, 0.2], dtype=torch.float64),
                       "s": torch.tensor([0.3, 0.4], dtype=torch.float64)}}
    opt.load_state_dict(sd)
    st = opt.state[w]
    assert sorted(st) == ["first_moment", "second_moment", "step"] and torch.is_tensor(st["step"])
    assert float(st["step"]) == 3.0
    torch.testing.assert_close(st["second_moment"], torch.tensor([0.3, 0.4], dtype=torch.float64))


@pytest.mark.parametrize("peer, line, message", [
    ("peer: [1]", 10, "must be a mapping"),
    ("peer: {colour: red}", 10, "unknown key 'colour'"),
    ("peer:\n  state_names: {nope: x}", 11, "unknown state 'nope'"),
    ("peer:\n  state_names: {u: a, s: a}", 11, "used twice"),
    ("peer:\n  state_names: {u: step}", 11, "used twice"),
    ("peer:\n  state_names: {u: 'a b'}", 11, "is not a name"),
    ("peer:\n  counts_steps: 1", 11, "counts_steps must be true or false"),
    ("peer:\n  validate: {require: x}", 11, "validate must be a list"),
    ("peer:\n  validate:\n    - {require: 'lr >= 0'}", 12, "missing required key 'message'"),
    ("peer:\n  validate:\n    - {require: 'lr + 1', message: m}", 12, "must be a condition"),
    ("peer:\n  validate:\n    - {require: 'zeta > 0', message: m}", 12, "zeta"),
    ("peer:\n  validate:\n    - {require: 'lr > 0', message: 'value {zeta}'}", 12, "placeholder '{zeta}'"),
    ("peer:\n  validate:\n    - {require: 'lr > 0', message: 'value {lr.__class__}'}", 12, "placeholder"),
    ("peer:\n  validate:\n    - {require: 'lr > 0', message: 'a } b'}", 12, "braces"),
    ("peer:\n  validate:\n    - {require: 'lr > 0', message: \"a \\x00 b\"}", 12, "control characters"),
    ("peer:\n  validate:\n    - {require: '__import__(\"os\")', message: m}", 12, "__import__"),
    ("peer:\n  validate:\n    - {require: 'lr > 0', message: m, targets: [numpy]}", 12, "targets must be"),
    ("peer:\n  validate:\n    - {require: 'lr > 0', message: m, targets: jax}", 12, "targets must be"),
    ("peer:\n  validate:\n    - {require: 'lr > 0', message: m, targets: []}", 12, "targets must be"),
    ("peer:\n  switches: [foreach]", 11, "switches must be a mapping"),
    ("peer:\n  switches: {positional: [turbo]}", 11, "'turbo' is not a switch"),
    ("peer:\n  switches: {positional: [foreach], keyword: [foreach]}", 11, "listed twice"),
    ("peer:\n  switches: {sideways: [foreach]}", 11, "unknown key 'sideways'"),
    ("peer:\n  group_entries: {lr: 1}", 11, "already a hyperparameter"),
    ("peer:\n  group_entries: {mode: fast}", 11, "must be true, false or a number"),
    ("peer:\n  group_entries: {'a b': 1}", 11, "is not a name"),
    ("peer:\n  eager_state: yes please", 11, "eager_state must be true or false"),
    ("peer:\n  sparse_gradients: {densify: false}", 11, "densify must be true"),
    ("peer:\n  sparse_gradients:\n    densify: true\n    validate: [{require: 'lr > 0'}]", 13,
     "missing required key 'message'"),
], ids=["not_mapping", "unknown_key", "unknown_state", "duplicate", "step", "not_a_name", "counts_not_bool",
        "validate_not_list", "no_message", "not_condition", "unknown_symbol", "unknown_placeholder",
        "attribute_placeholder", "stray_brace", "control_char", "code", "targets_numpy", "targets_not_list",
        "targets_empty", "switches_list", "unknown_switch",
        "switch_twice", "switch_key", "entry_clash", "entry_text", "entry_name", "eager_not_bool",
        "densify_false", "sparse_check"])
def test_bad_peer_sections_are_located_errors(tmp_path, peer, line, message):
    p = tmp_path / "bad.yaml"
    p.write_text(BASE.format(peer=peer))
    with pytest.raises(SpecError, match=message) as exc:
        build_ir(derive(load_recipe(p)), "bad.yaml")       # state names are checked against the update's state
    assert (exc.value.file, exc.value.line) == (str(p), line)


def test_a_check_with_targets_is_made_by_those_targets_only(tmp_path):
    """`targets: [jax]`: a setting refused by the jax factory (a name optax reads otherwise) and accepted by the
    torch optimizer; the untargeted checks stay in both."""
    mod = _module(tmp_path, GOOD + """
    - {require: "not flag", targets: [jax], message: "flag means something else in optax: use the torch target"}""")
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    mod.Peered([w], flag=True)
    with pytest.raises(ValueError, match="Invalid learning rate"):
        mod.Peered([w], lr=-1.0)
    p = tmp_path / "peered.yaml"
    jax_mod = api.derive(str(p)).compile("jax")
    jax_mod.peered(flag=False)
    with pytest.raises(ValueError, match="^flag means something else in optax: use the torch target$"):
        jax_mod.peered(flag=True)
    with pytest.raises(ValueError, match="Invalid learning rate"):
        jax_mod.peered(lr=-1.0)


LAYOUT = """peer:
  switches: {positional: [foreach], keyword: [maximize, differentiable]}
  group_entries: {legacy_mode: true, version: 2}
  eager_state: true
  sparse_gradients:
    densify: true
    validate: [{require: "lr <= 1", message: "sparse steps need lr <= 1, got {lr}"}]"""


def test_switch_layout_group_entries_eager_state_and_sparse_gradients(tmp_path):
    import inspect
    mod = _module(tmp_path, LAYOUT)
    sig = inspect.signature(mod.Peered.__init__).parameters
    assert sig["foreach"].kind == sig["foreach"].POSITIONAL_OR_KEYWORD
    assert list(sig)[-4:] == ["foreach", "maximize", "differentiable", "fused"]      # fused: keyword-only, added
    assert sig["maximize"].kind == sig["fused"].kind == sig["maximize"].KEYWORD_ONLY
    assert "capturable" not in sig
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64))
    with pytest.raises(TypeError):
        mod.Peered([w], capturable=False)                 # not a switch of this peer
    positional = [a for a, x in sig.items() if x.kind == x.POSITIONAL_OR_KEYWORD]
    assert positional[:4] == ["self", "params", "lr", "betas"] and positional[-1] == "foreach"
    opt = mod.Peered([w], *[{"lr": 0.1, "betas": (0.9, 0.99)}.get(a, False) for a in positional[2:]])
    assert opt.param_groups[0]["legacy_mode"] is True and opt.param_groups[0]["version"] == 2
    assert sorted(opt.state[w]) == ["s", "u"]             # created by the constructor
    w.grad = torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.tensor([0.5, -1.0], dtype=torch.float64), (3,))
    dense = torch.nn.Parameter(w.detach().clone())
    ref = mod.Peered([dense], 0.1)
    dense.grad = w.grad.to_dense()
    opt.step()
    ref.step()
    assert torch.equal(w.detach(), dense.detach()) and w.detach()[1] == -2.0 and w.detach()[0] != 1.0
    bad = mod.Peered([torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))], lr=2.0)
    bad.param_groups[0]["params"][0].grad = w.grad
    with pytest.raises(RuntimeError, match=r"^sparse steps need lr <= 1, got 2\.0$"):
        bad.step()


def test_an_integer_check_is_not_decided_by_the_symbols_assumptions(tmp_path):
    """An int hyperparameter's symbol is declared positive; `n >= 1` must still test the value given."""
    text = BASE.replace("  flag: {{default: false}}", "  flag: {{default: false}}\n  n: {{default: 1, type: int}}")
    p = tmp_path / "peered.yaml"
    p.write_text(text.format(peer='peer:\n  validate:\n    - {require: "n >= 1", message: "Invalid n: {n}"}'))
    mod = api.derive(str(p)).compile("torch")
    w = torch.nn.Parameter(torch.zeros(2))
    mod.Peered([w], n=1)
    with pytest.raises(ValueError, match="^Invalid n: 0$"):
        mod.Peered([w], n=0)
