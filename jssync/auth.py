"""nkey and JWT credentials for the blocking client.

An :class:`Authenticator` is made by a client given ``creds``, ``nkey_seed`` or the
``user_jwt_cb`` / ``signature_cb`` pair. The core (:mod:`jscore.auth`) gets its
:attr:`~Authenticator.credentials`: callables it calls under the client lock during each
handshake. Everything slow happens before that, in :meth:`~Authenticator.load`, which the I/O
thread calls before it dials, outside the lock:

- a creds or seed file is read again for every connect attempt (so a rotated file is used at
  the next reconnect, without a restart), on a helper thread the I/O thread waits for at most
  ``connect_timeout`` (a hung network file system cannot stall the client for longer);
- ``user_jwt_cb`` runs on such a helper thread too (never on the I/O thread, never under the
  lock); ``signature_cb`` does as well, while the I/O thread waits for it (again at most
  ``connect_timeout``: a callback that calls back into the client times out instead of
  deadlocking it).

The seed is kept only from the read to the signature: the key pair is wiped once the nonce is
signed, and the bytes read are overwritten (best effort: Python cannot promise that no copy
survives). A seed given as a string stays in memory as long as the client (there is no file to
read again). Signing needs the ``nkeys`` package (``pip install nkeys``; the ``nkeys`` extra), imported
only when a seed or creds file is used.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import Any, Final, TypeVar, Union

from jscore.auth import MAX_CREDENTIALS_FILE, Credentials, check_user_seed, looks_like_seed, parse_creds, parse_seed
from jscore.errors import CredentialsError, InvalidOptionError

__all__ = ["Authenticator", "NKEYS_INSTALL_HINT", "import_nkeys"]

NKEYS_INSTALL_HINT: Final = "pip install nkeys (the nkeys extra: pip install -e '.[nkeys]' in the jssync checkout)"

T = TypeVar("T")
PathArg = Union[str, "os.PathLike[str]"]


def import_nkeys() -> Any:
    """The ``nkeys`` module, or :class:`CredentialsError` naming the extra to install."""
    try:
        import nkeys
    except ImportError as exc:
        raise CredentialsError(
            f"nkey and creds authentication need the nkeys package (ed25519 signing): {NKEYS_INSTALL_HINT}"
        ) from exc
    return nkeys


def _call_bounded(fn: Callable[[], T], timeout: float, what: str) -> T:
    """``fn()`` on a helper thread; wait at most ``timeout`` seconds for it. Its exceptions
    come back as :class:`CredentialsError` (chained) naming ``what``."""
    box: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()

    def run() -> None:
        try:
            box.put((True, fn()))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            box.put((False, exc))

    threading.Thread(target=run, name="jssync-credentials", daemon=True).start()
    try:
        ok, value = box.get(timeout=timeout)
    except queue.Empty:
        raise CredentialsError(f"{what} did not finish within {timeout:g} s") from None
    if ok:
        return value  # type: ignore[no-any-return]
    if isinstance(value, CredentialsError):
        raise value
    raise CredentialsError(f"{what} raised {type(value).__name__}") from value


def _read_file(path: str, what: str) -> bytearray:
    """The bytes of ``path`` (at most :data:`MAX_CREDENTIALS_FILE`), in a bytearray the
    caller overwrites once parsed."""
    try:
        with open(path, "rb", buffering=0) as fh:
            buf = bytearray(MAX_CREDENTIALS_FILE + 1)
            view = memoryview(buf)
            total = 0
            while total < len(buf):
                n = fh.readinto(view[total:])
                if not n:
                    break
                total += n
            data = bytearray(view[:total])
            view.release()
            buf[:] = bytes(len(buf))
    except OSError as exc:
        raise CredentialsError(f"cannot read the {what} {path!r}: {exc.strerror or type(exc).__name__}") from None
    if total > MAX_CREDENTIALS_FILE:
        data[:] = bytes(len(data))
        raise CredentialsError(f"the {what} {path!r} is larger than {MAX_CREDENTIALS_FILE} bytes")
    return data


def _in_file(path: str, parse: Callable[[bytearray], T], data: bytearray) -> T:
    try:
        return parse(data)
    except CredentialsError as exc:
        raise CredentialsError(f"{path!r}: {exc}") from None
    finally:
        data[:] = bytes(len(data))


class Authenticator:
    """The credentials of one client (see the module docstring). Not picklable; its repr
    shows which method is used, never a value."""

    __slots__ = (
        "_kind",
        "_path",
        "_seed",
        "_jwt_cb",
        "_sig_cb",
        "_timeout",
        "_nkeys",
        "_jwt",
        "_nkey",
        "_kp",
        "credentials",
    )

    def __init__(
        self,
        *,
        creds: PathArg | None = None,
        nkey_seed: PathArg | bytes | None = None,
        user_jwt_cb: Callable[[], str] | None = None,
        signature_cb: Callable[[bytes], bytes] | None = None,
        timeout: float = 2.0,
    ) -> None:
        given = [n for n, v in (("creds", creds), ("nkey_seed", nkey_seed)) if v is not None]
        if user_jwt_cb is not None or signature_cb is not None:
            given.append("user_jwt_cb/signature_cb")
        if len(given) > 1:
            raise InvalidOptionError(f"{' and '.join(given)} exclude each other: give one way to authenticate")
        if (user_jwt_cb is None) != (signature_cb is None):
            raise InvalidOptionError("user_jwt_cb and signature_cb go together (the JWT and the signer of its nonce)")
        for name, cb in (("user_jwt_cb", user_jwt_cb), ("signature_cb", signature_cb)):
            if cb is not None and not callable(cb):
                raise InvalidOptionError(f"{name} must be callable")
        self._timeout = timeout
        self._path: str | None = None
        self._seed: bytearray | None = None
        self._jwt_cb = user_jwt_cb
        self._sig_cb = signature_cb
        self._nkeys: Any = None
        self._jwt: str | None = None
        self._nkey: str | None = None
        self._kp: Any = None
        if creds is not None:
            self._kind = "creds"
            self._path = _path_of(creds, "creds")
            self._nkeys = import_nkeys()
            self.credentials = Credentials(jwt=self._take_jwt, sign=self._sign_with_key)
        elif nkey_seed is not None:
            self._nkeys = import_nkeys()
            if isinstance(nkey_seed, (bytes, bytearray)) or (isinstance(nkey_seed, str) and looks_like_seed(nkey_seed)):
                self._kind = "seed"
                raw = nkey_seed.encode("ascii", "replace") if isinstance(nkey_seed, str) else nkey_seed
                seed = bytearray(raw.strip())
                check_user_seed(seed)
                self._seed = seed
            else:
                self._kind = "seed file"
                self._path = _path_of(nkey_seed, "nkey_seed")
            self.credentials = Credentials(nkey=self._take_nkey, sign=self._sign_with_key)
        elif user_jwt_cb is not None:
            self._kind = "callbacks"
            self.credentials = Credentials(jwt=self._take_jwt, sign=self._sign_with_callback)
        else:
            raise InvalidOptionError("no credentials given")

    def __repr__(self) -> str:
        where = f" {self._path!r}" if self._path is not None else ""
        return f"<jssync Authenticator {self._kind}{where}>"

    def __reduce__(self) -> Any:
        raise TypeError("credentials cannot be pickled: pass the file paths and connect in each process")

    # -- the I/O thread, before each dial (outside the lock) ----------------------------------

    def load(self, timeout: float | None = None) -> None:
        """Get this attempt's credentials ready: read the file again, or ask ``user_jwt_cb``.
        Raises :class:`CredentialsError`."""
        self.forget()
        limit = self._timeout if timeout is None else timeout
        kind = self._kind
        if kind == "callbacks":
            cb = self._jwt_cb
            assert cb is not None
            jwt = _call_bounded(cb, limit, "user_jwt_cb")
            if isinstance(jwt, (bytes, bytearray)):
                jwt = bytes(jwt).decode("ascii", "replace")
            if not isinstance(jwt, str):
                raise CredentialsError(f"user_jwt_cb returned {type(jwt).__name__}, expected str")
            self._jwt = jwt
            return
        if kind == "seed":
            assert self._seed is not None
            self._use_seed(bytearray(self._seed))
            return
        path = self._path
        assert path is not None
        if kind == "creds":
            data = _call_bounded(lambda: _read_file(path, "creds file"), limit, f"reading the creds file {path!r}")
            jwt, seed = _in_file(path, parse_creds, data)
            self._jwt = jwt
            self._use_seed(seed)
        else:
            data = _call_bounded(lambda: _read_file(path, "seed file"), limit, f"reading the seed file {path!r}")
            seed = _in_file(path, parse_seed, data)
            self._use_seed(seed)

    def _use_seed(self, seed: bytearray) -> None:
        try:
            kp = self._nkeys.from_seed(seed)
            if self._kind != "creds":
                self._nkey = bytes(kp.public_key).decode("ascii")
        except Exception as exc:  # noqa: BLE001 - nkeys' own errors carry no secret, but say little
            raise CredentialsError(f"the nkey seed cannot be used ({type(exc).__name__})") from None
        finally:
            seed[:] = bytes(len(seed))
        self._kp = kp

    def forget(self) -> None:
        """Drop what the last :meth:`load` got (the key pair is wiped)."""
        kp, self._kp = self._kp, None
        self._jwt = None
        self._nkey = None
        if kp is not None:
            try:
                kp.wipe()
            except AttributeError:  # already wiped
                pass

    # -- the core, during the handshake (under the client lock) -------------------------------

    def _take_jwt(self) -> str:
        jwt, self._jwt = self._jwt, None
        if jwt is None:
            raise CredentialsError("no user JWT was loaded for this connect attempt")
        return jwt

    def _take_nkey(self) -> str:
        nkey = self._nkey
        if nkey is None:
            raise CredentialsError("no nkey was loaded for this connect attempt")
        return nkey

    def _sign_with_key(self, nonce: bytes) -> bytes:
        kp, self._kp = self._kp, None
        if kp is None:
            raise CredentialsError("no nkey seed was loaded for this connect attempt")
        try:
            return bytes(kp.sign(bytes(nonce)))
        finally:
            kp.wipe()
            self._nkey = None

    def _sign_with_callback(self, nonce: bytes) -> bytes:
        cb = self._sig_cb
        assert cb is not None
        data = bytes(nonce)
        return _call_bounded(lambda: cb(data), self._timeout, "signature_cb")


def _path_of(value: PathArg, name: str) -> str:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip():
        raise InvalidOptionError(f"{name} must be a file path")
    if "-----BEGIN" in value or "\n" in value:
        # The file's content rather than its path: never echo it.
        raise InvalidOptionError(f"{name} must be the path of a file, not its content")
    return value
