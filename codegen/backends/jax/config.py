"""The jax target's configuration: an ``optax.GradientTransformation`` factory per elementwise recipe, plain
jax.numpy functions for every other recipe (numpy on the host for quadrature nodes, fitness-shaping weights and
the Newton solver of the family maps)."""
from blr_derive.codegen.config import TargetConfig

CONFIG = TargetConfig(
    name="jax",
    suffix=".py",
    modules=frozenset({"math", "typing", "jax", "jax.numpy", "jax.scipy.special", "jax.scipy.linalg", "numpy", "optax"}),
    template="transformation.py.j2",
    structures=("single", "product"),
    description="an ``optax.GradientTransformation`` factory (jax.numpy, any pytree, jax.jit-compatible); other "
                "recipes as plain jax.numpy ``init``/``step`` functions",
)
