"""The jax target's configuration: an ``optax.GradientTransformation`` factory per elementwise recipe, plain
jax.numpy functions per matrix recipe."""
from blr_derive.codegen.config import TargetConfig

CONFIG = TargetConfig(
    name="jax",
    suffix=".py",
    modules=frozenset({"typing", "jax", "jax.numpy", "jax.scipy.special", "jax.scipy.linalg", "optax"}),
    template="transformation.py.j2",
    structures=("single",),
    description="an ``optax.GradientTransformation`` factory (jax.numpy, any pytree, jax.jit-compatible); matrix "
                "recipes as plain jax.numpy ``init``/``step`` functions",
)
