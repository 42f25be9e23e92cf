"""Masking credentials in URLs, for logs and reprs (no database driver needed: the node agent
logs through this too and should not import SQLAlchemy)."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def mask_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (safe to log)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))
    except ValueError:  # an unparsable URL is masked wholesale
        return "<unparsable URL>"
