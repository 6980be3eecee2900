"""Test certificates made with the ``openssl`` command line tool.

    certs = make_certs(tmp_dir)          # skips the test (with the reason) when openssl is absent
    ctx = certs.client_context()         # an SSLContext that trusts only the test CA

One CA and one server certificate whose only subject alternative name is ``DNS:localhost`` (no
``IP:127.0.0.1``), so dialing ``127.0.0.1`` must fail hostname verification. For mutual TLS, a
client certificate signed by the same CA (``client_cert_file``, ``client_key_file``) and one
signed by another CA the server does not trust (``rogue_cert_file``, ``rogue_key_file``). EC
P-256 keys keep generation fast; nothing here depends on the code under test.

    ctx = certs.client_context(client_cert=True)   # also presents the client certificate
    certs.server_tls_block("verify: true")         # a server that requires and verifies one
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
from dataclasses import dataclass

import pytest

__all__ = ["Certs", "make_certs", "openssl_unavailable_reason"]

_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True)
class Certs:
    dir: str
    ca_file: str
    ca_key: str
    cert_file: str
    key_file: str
    client_cert_file: str = ""
    client_key_file: str = ""
    rogue_cert_file: str = ""
    rogue_key_file: str = ""

    def client_context(self, *, client_cert: bool = False, rogue: bool = False) -> ssl.SSLContext:
        """A client context that verifies the server against the test CA (hostname checked);
        with ``client_cert`` it presents the client certificate, with ``rogue`` the one signed
        by an untrusted CA."""
        ctx = ssl.create_default_context(cafile=self.ca_file)
        ctx.check_hostname = True
        ctx.verify_mode = ssl.CERT_REQUIRED
        if client_cert:
            ctx.load_cert_chain(self.client_cert_file, self.client_key_file)
        elif rogue:
            ctx.load_cert_chain(self.rogue_cert_file, self.rogue_key_file)
        return ctx

    def server_tls_block(self, extra: str = "") -> str:
        """A nats-server ``tls { ... }`` config block using these files."""
        lines = [
            "tls {",
            f'  cert_file: "{self.cert_file}"',
            f'  key_file: "{self.key_file}"',
            f'  ca_file: "{self.ca_file}"',
            "  timeout: 2",
        ]
        if extra:
            lines.append(f"  {extra}")
        lines.append("}")
        return "\n".join(lines)


def openssl_unavailable_reason() -> str | None:
    exe = shutil.which("openssl")
    if exe is None:
        return "the openssl command line tool is not installed (needed to make test certificates)"
    try:
        subprocess.run([exe, "version"], check=True, capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"openssl does not run: {exc}"
    return None


def _run(args: list[str], cwd: str) -> None:
    proc = subprocess.run(args, cwd=cwd, capture_output=True, timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stderr.decode(errors='replace')}"
        )


def make_certs(directory: str) -> Certs:
    """Create a CA and a ``localhost`` server certificate in ``directory``.

    Skips the calling test with a printed reason when openssl is missing.
    """
    reason = openssl_unavailable_reason()
    if reason is not None:
        print(f"skipping TLS test: {reason}")
        pytest.skip(reason)
    exe = shutil.which("openssl")
    assert exe is not None
    os.makedirs(directory, exist_ok=True)
    ca_key = os.path.join(directory, "ca.key")
    ca_file = os.path.join(directory, "ca.pem")
    key_file = os.path.join(directory, "server.key")
    csr_file = os.path.join(directory, "server.csr")
    cert_file = os.path.join(directory, "server.pem")
    ext_file = os.path.join(directory, "server.ext")
    _run(
        [exe, "req", "-x509", *_EC, "-keyout", ca_key, "-out", ca_file, "-days", "2",
         "-subj", "/CN=jssync test CA",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        directory,
    )
    _run([exe, "req", *_EC, "-keyout", key_file, "-out", csr_file, "-subj", "/CN=localhost"], directory)
    with open(ext_file, "w", encoding="ascii") as fh:
        fh.write(
            "subjectAltName=DNS:localhost\n"
            "basicConstraints=CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth\n"
        )
    _run(
        [exe, "x509", "-req", "-in", csr_file, "-CA", ca_file, "-CAkey", ca_key, "-CAcreateserial",
         "-out", cert_file, "-days", "2", "-extfile", ext_file],
        directory,
    )
    client_cert, client_key = _leaf(exe, directory, "client", "jssync test client", ca_file, ca_key)
    rogue_ca_key = os.path.join(directory, "rogue-ca.key")
    rogue_ca_file = os.path.join(directory, "rogue-ca.pem")
    _run(
        [exe, "req", "-x509", *_EC, "-keyout", rogue_ca_key, "-out", rogue_ca_file, "-days", "2",
         "-subj", "/CN=untrusted CA",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        directory,
    )
    rogue_cert, rogue_key = _leaf(exe, directory, "rogue", "jssync test client", rogue_ca_file, rogue_ca_key)
    return Certs(
        dir=directory, ca_file=ca_file, ca_key=ca_key, cert_file=cert_file, key_file=key_file,
        client_cert_file=client_cert, client_key_file=client_key,
        rogue_cert_file=rogue_cert, rogue_key_file=rogue_key,
    )


def _leaf(exe: str, directory: str, name: str, cn: str, ca_file: str, ca_key: str) -> tuple[str, str]:
    """A client certificate (extendedKeyUsage clientAuth) signed by the given CA."""
    key_file = os.path.join(directory, f"{name}.key")
    csr_file = os.path.join(directory, f"{name}.csr")
    cert_file = os.path.join(directory, f"{name}.pem")
    ext_file = os.path.join(directory, f"{name}.ext")
    _run([exe, "req", *_EC, "-keyout", key_file, "-out", csr_file, "-subj", f"/CN={cn}"], directory)
    with open(ext_file, "w", encoding="ascii") as fh:
        fh.write(
            "basicConstraints=CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=clientAuth\n"
        )
    _run(
        [exe, "x509", "-req", "-in", csr_file, "-CA", ca_file, "-CAkey", ca_key, "-CAcreateserial",
         "-out", cert_file, "-days", "2", "-extfile", ext_file],
        directory,
    )
    return cert_file, key_file
