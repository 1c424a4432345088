"""``python -m rsmooth.cli ...``: as ``python -m rsmooth`` (the current folder left ``sys.path`` when the package was imported)."""
import sys

from . import main

sys.exit(main())
