"""``python -m rsmooth ...``: the command line, importing exactly what the ``rsmooth`` script imports.

``python -m`` puts the current folder first on ``sys.path``; importing the package removed it
before anything else was imported (:func:`rsmooth.imports.drop_cwd_when_run`), so a stray
``typing.py`` or ``numpy.py`` there is never picked up.  A module named with ``--arch
module:factory`` is still found in the current folder.
"""
import sys

from .cli import main

sys.exit(main())
