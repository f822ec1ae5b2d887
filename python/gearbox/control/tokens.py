"""Bearer tokens: 32 random bytes, shown once; the store keeps only their sha256 (a token is
random enough that one hash needs no salt or stretching)."""

from __future__ import annotations

import hashlib
import secrets


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return "gbx_" + secrets.token_urlsafe(32)
