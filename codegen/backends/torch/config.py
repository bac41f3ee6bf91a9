"""The torch target's configuration: a ``torch.optim.Optimizer`` subclass with multi-tensor (``_foreach``) and fused updates."""
from blr_derive.codegen.config import TargetConfig

CONFIG = TargetConfig(
    name="torch",
    suffix=".py",
    modules=frozenset({"contextlib", "math", "torch", "warnings"}),
    template="optimizer.py.j2",
    structures=("single",),
    description="a ``torch.optim.Optimizer`` subclass with multi-tensor (``_foreach``) and fused updates",
)
