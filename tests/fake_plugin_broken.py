"""A plugin with a bug at import time: must be raised, not skipped."""

raise RuntimeError("plugin bug at import")
