"""The triton target's configuration: a ``torch.optim.Optimizer`` subclass whose update is one ``@triton.jit`` kernel."""
from blr_derive.codegen.config import TargetConfig

CONFIG = TargetConfig(
    name="triton",
    suffix=".py",
    modules=frozenset({"contextlib", "math", "torch", "triton", "triton.language"}),
    template="optimizer.py.j2",
    structures=("single",),
    description="a ``torch.optim.Optimizer`` subclass whose update is one ``@triton.jit`` kernel",
)
