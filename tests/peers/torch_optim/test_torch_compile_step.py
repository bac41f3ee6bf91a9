"""A whole training step (forward, backward, ``opt.step()``) with a generated optimizer compiles under
``torch.compile(fullgraph=True)`` (issue 39, item 4): no graph break at the step count (the compiled path keeps
every tensor of a group in one bucket at a traced count, checked at run time) nor at a host test of the
scaled-square-root convention (``_positive``).  The compiled steps equal the eager ones to float32 rounding (the
compiled graph may fuse operations).  ``zero_grad`` stays outside, as torch requires for its own optimizers, and
``backward`` inside needs dynamo's ``trace_autograd_ops``.  A host test of the step count itself (SGD's and
RMSprop's momentum start ``if t == 1``) is a ``torch.where`` select when compiling (the select convention); the
eager path keeps its branches, bit for bit as before (test_torch_order_bitwise.py)."""
import copy

import pytest
import torch
import torch._dynamo

from contract_helpers import generated_class

pytestmark = pytest.mark.slow


#: per optimizer, the settings compiled, each a parameter group of one optimizer (one compiled training step carries
#: them all: a graph break in any group's branch fails fullgraph, and each group's parameters are compared with the
#: eager twin's): SGD's and RMSprop's momentum start (``if t == 1``, a select when compiling), SGD's dampening (step 1
#: differs from later ones), nesterov and weight decay, RMSprop's centred and weight-decayed variants, Adam's coupled
#: weight decay and AdamW's AMSGrad (the host test of the scaled square root)
SETTINGS = {"adam": [dict(weight_decay=1e-2)],
            "adamw": [dict(amsgrad=True)],
            "rmsprop": [dict(centered=True), dict(momentum=0.9),
                        dict(momentum=0.9, centered=True, weight_decay=1e-2)],
            "sgd": [dict(momentum=0.9), dict(momentum=0.9, nesterov=True, weight_decay=1e-2),
                    dict(momentum=0.9, dampening=0.3)]}


@pytest.mark.parametrize("name", SETTINGS)
def test_a_training_step_compiles_with_no_graph_break(name):
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        _compiled_steps_equal_eager_ones(name, SETTINGS[name])


def _groups(params, settings):
    """The parameters dealt out to one group per setting (each group has at least one parameter)."""
    params = list(params)
    assert len(params) >= len(settings)
    return [{"params": params[i::len(settings)], **kw} for i, kw in enumerate(settings)]


def _compiled_steps_equal_eager_ones(name, settings):
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    twin = copy.deepcopy(net)
    x, y = torch.randn(32, 8), torch.randn(32, 2)
    opts = [generated_class(name)(_groups(m.parameters(), settings), lr=1e-2) for m in (net, twin)]

    def train_step(model, opt):
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.detach()

    compiled = torch.compile(train_step, fullgraph=True)       # fullgraph: any graph break raises
    for k in range(4):
        for o in opts:
            o.zero_grad()
        got = compiled(net, opts[0])
        want = train_step(twin, opts[1])
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for p, q in zip(net.parameters(), twin.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-5, atol=1e-6)
    for group in opts[0].param_groups:
        state = opts[0].state[group["params"][0]]
        if "step" in state:                     # SGD keeps no count (torch.optim.SGD neither)
            assert float(state["step"]) == 4
