"""``python -m rsmooth ...``: the command line, importing exactly what the ``rsmooth`` script imports.

``python -m`` puts the current folder first on ``sys.path``; it is removed before anything else is
imported (:func:`rsmooth.imports.drop_implicit_cwd`), so a stray ``numpy.py`` there is never
picked up.  A module named with ``--arch module:factory`` is still found in the current folder.
"""
import sys

from .imports import drop_implicit_cwd

drop_implicit_cwd()

from .cli import main  # noqa: E402  (after the sys.path fix)

sys.exit(main())
