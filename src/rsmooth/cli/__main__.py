"""``python -m rsmooth.cli ...``: as ``python -m rsmooth`` (the current folder dropped from sys.path first)."""
import sys

from ..imports import drop_implicit_cwd

drop_implicit_cwd()

from . import main  # noqa: E402  (after the sys.path fix)

sys.exit(main())
