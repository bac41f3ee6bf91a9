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


@pytest.mark.parametrize("name,kwargs", [("adam", dict(lr=1e-2, weight_decay=1e-2)),
                                         ("adamw", dict(lr=1e-2, amsgrad=True)),
                                         ("rmsprop", dict(lr=1e-2, centered=True)),
                                         ("sgd", dict(lr=1e-2, momentum=0.9)),
                                         ("sgd", dict(lr=1e-2, momentum=0.9, nesterov=True, weight_decay=1e-2)),
                                         ("sgd", dict(lr=1e-2, momentum=0.9, dampening=0.3)),   # step 1 ≠ later
                                         ("rmsprop", dict(lr=1e-2, momentum=0.9)),
                                         ("rmsprop", dict(lr=1e-2, momentum=0.9, centered=True, weight_decay=1e-2))])
def test_a_training_step_compiles_with_no_graph_break(name, kwargs):
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        _compiled_steps_equal_eager_ones(name, kwargs)


def _compiled_steps_equal_eager_ones(name, kwargs):
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    twin = copy.deepcopy(net)
    x, y = torch.randn(32, 8), torch.randn(32, 2)
    opts = [generated_class(name)(m.parameters(), **kwargs) for m in (net, twin)]

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
    state = opts[0].state[next(net.parameters())]
    if "step" in state:                         # SGD keeps no count (torch.optim.SGD neither)
        assert float(state["step"]) == 4
