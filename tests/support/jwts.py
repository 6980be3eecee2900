"""nkeys and NATS JWTs made by the tests themselves, with the ``nkeys`` package (the
``jssync[nkeys]`` extra): an operator, its accounts and their users, for a nats-server in
operator mode with ``resolver: MEMORY``.

    op = Operator()                               # self-signed operator JWT
    acc = op.account("APP")                       # account JWT signed by the operator
    user = acc.user("alice", expires=time.time() + 60)
    server config: op.server_config(acc)           # operator + resolver MEMORY + resolver_preload
    user.creds()                                  # the nsc creds file text

JWT layout (nats-io/jwt v2): header ``{"typ":"JWT","alg":"ed25519-nkey"}``; claims ``jti``
(base32 of the SHA-512/256 of the claims with an empty ``jti``), ``iat``, ``iss``, ``name``,
``sub``, optional ``exp``, and ``nats`` holding ``type``, ``version: 2`` and the kind's fields;
signature: ed25519 by the issuer over ``<header b64url>.<claims b64url>``, base64url without
padding. The server checks the signature chain, ``exp`` and the account's ``revocations``
(a user is revoked when its revocation time is at or after the JWT's ``iat``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

nkeys = pytest.importorskip("nkeys", reason="the nkeys package (jssync[nkeys]) is needed to make test keys")

__all__ = ["Account", "Key", "Operator", "User", "creds_text", "encode_jwt", "new_key"]

_HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}
_PREFIX = {"operator": nkeys.PREFIX_BYTE_OPERATOR, "account": nkeys.PREFIX_BYTE_ACCOUNT, "user": nkeys.PREFIX_BYTE_USER}


@dataclass(frozen=True)
class Key:
    seed: str
    public: str

    def sign(self, data: bytes) -> bytes:
        kp = nkeys.from_seed(bytearray(self.seed.encode()))
        try:
            return bytes(kp.sign(data))
        finally:
            kp.wipe()


def new_key(kind: str) -> Key:
    seed = nkeys.encode_seed(os.urandom(32), _PREFIX[kind]).decode()
    public = nkeys.from_seed(bytearray(seed.encode())).public_key.decode()
    return Key(seed=seed, public=public)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def encode_jwt(claims: dict[str, Any], issuer: Key, *, iat: int | None = None, signed_by: Key | None = None) -> str:
    body = {"jti": "", "iat": int(time.time()) if iat is None else iat, "iss": issuer.public, **claims}
    digest = hashlib.new("sha512_256", json.dumps(body, separators=(",", ":")).encode()).digest()
    body["jti"] = base64.b32encode(digest).decode().rstrip("=")
    signing_input = f"{_b64(json.dumps(_HEADER).encode())}.{_b64(json.dumps(body).encode())}"
    return f"{signing_input}.{_b64((signed_by or issuer).sign(signing_input.encode()))}"


def creds_text(jwt: str, seed: str, *, newline: str = "\n") -> str:
    text = (
        "-----BEGIN NATS USER JWT-----\n"
        f"{jwt}\n"
        "------END NATS USER JWT------\n\n"
        "************************* IMPORTANT *************************\n"
        "NKEY Seed printed below can be used to sign and prove identity.\n"
        "NKEYs are sensitive and should be treated as secrets.\n\n"
        "-----BEGIN USER NKEY SEED-----\n"
        f"{seed}\n"
        "------END USER NKEY SEED------\n\n"
        "*************************************************************\n"
    )
    return text.replace("\n", newline)


@dataclass
class User:
    name: str
    key: Key
    jwt: str

    def creds(self, *, newline: str = "\n") -> str:
        return creds_text(self.jwt, self.key.seed, newline=newline)


@dataclass
class Account:
    name: str
    key: Key
    operator: Operator
    revocations: dict[str, int] = field(default_factory=dict)

    def user(self, name: str, *, expires: float | None = None, forged_by: Key | None = None,
             iat: int | None = None) -> User:
        """A user of this account. ``forged_by``: the JWT names this account as its issuer but
        is signed by that other key (a wrongly signed JWT)."""
        key = new_key("user")
        claims: dict[str, Any] = {
            "name": name,
            "sub": key.public,
            "nats": {"pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1, "type": "user", "version": 2},
        }
        if expires is not None:
            claims["exp"] = int(expires)
        return User(name=name, key=key, jwt=encode_jwt(claims, self.key, iat=iat, signed_by=forged_by))

    def revoke(self, user: User, at: int | None = None) -> None:
        """Revoke every JWT of ``user`` issued at or before ``at`` (now by default)."""
        self.revocations[user.key.public] = int(time.time()) if at is None else at

    @property
    def jwt(self) -> str:
        nats: dict[str, Any] = {
            "limits": {
                "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": True,
                "conn": -1, "leaf": -1,
            },
            "default_permissions": {"pub": {}, "sub": {}},
            "type": "account",
            "version": 2,
        }
        if self.revocations:
            nats["revocations"] = dict(self.revocations)
        return encode_jwt({"name": self.name, "sub": self.key.public, "nats": nats}, self.operator.key)


class Operator:
    def __init__(self, name: str = "jssync-test-operator") -> None:
        self.name = name
        self.key = new_key("operator")

    @property
    def jwt(self) -> str:
        claims = {"name": self.name, "sub": self.key.public, "nats": {"type": "operator", "version": 2}}
        return encode_jwt(claims, self.key)

    def account(self, name: str) -> Account:
        return Account(name=name, key=new_key("account"), operator=self)

    def server_config(self, *accounts: Account) -> str:
        """nats-server config lines: this operator, the memory resolver, ``accounts`` preloaded."""
        preload = "\n".join(f"  {a.key.public}: {a.jwt}" for a in accounts)
        return f"operator: {self.jwt}\nresolver: MEMORY\nresolver_preload: {{\n{preload}\n}}\n"
