"""The numpy target's configuration: a plain module with ``init`` and a pure ``step`` function (every IR kind)."""
from blr_derive.codegen.config import TargetConfig

CONFIG = TargetConfig(
    name="numpy",
    suffix=".py",
    modules=frozenset({"numpy", "scipy.linalg", "scipy.special"}),
    template="module.py.j2",
    structures=("single", "product"),
    description="a plain module with ``init`` and a pure ``step`` function (every IR kind)",
)
