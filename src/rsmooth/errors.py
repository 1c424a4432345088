"""User-facing errors: one line that says what is wrong and how to fix it.

The CLI prints ``rsmooth: error: <message>`` for an :class:`RsmoothError` and
exits with status 2, never a traceback.
"""


class RsmoothError(ValueError):
    """A problem with the user's input (arguments, files, data), not a bug."""


def check(condition: bool, message: str) -> None:
    """Raise :class:`RsmoothError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise RsmoothError(message)
