"""rsmooth's version, in a module of its own that imports nothing (so every module can read it)."""
__version__ = "0.1.0"
