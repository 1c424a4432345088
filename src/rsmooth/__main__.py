"""``python -m rsmooth ...``: the command line (same as the ``rsmooth`` script)."""
import sys

from .cli import main

sys.exit(main())
