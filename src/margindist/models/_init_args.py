"""Storing the arguments of ``__init__`` as attributes, as scikit-learn's estimator contract asks."""

from __future__ import annotations


def store_init_args(estimator, init_locals) -> None:
    """Set every argument of ``__init__`` as an attribute of the same name, unchanged.

    ``init_locals`` is ``locals()`` taken first thing in ``__init__`` (``self`` is left out):
    no validation and no conversion (that happens in ``fit``), so ``get_params``,
    ``set_params`` and ``clone`` behave exactly as with one assignment per argument::

        def __init__(self, C=1.0, kernel="linear"):
            store_init_args(self, locals())
    """
    for name, value in init_locals.items():
        if name not in ("self", "__class__"):
            setattr(estimator, name, value)
