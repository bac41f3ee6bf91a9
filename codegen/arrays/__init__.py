"""What the targets that print array programs (numpy, jax) share: the array printer (``printer.py``: sympy's
NumPyPrinter extended for the update IR, with numpy and scipy names that the jax target renames), the lowering of
a plate's per-row program on all rows at once (``rows.py``), of a product recipe's component axis
(``components.py``) and of a mixture's component axis (``mixture_axis.py``), and the views of the IR that both
targets' templates read (``views.py``).  No target imports another: each imports these."""
