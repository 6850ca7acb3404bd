"""A test CA and a server certificate it signs, made at test time with the openssl command line (no
certificate lives in the repository): the proxy serves the certificate, clients trust the CA."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.prerequisites import missing


@dataclass(frozen=True)
class TlsFiles:
    ca: Path  # what a client trusts
    certificate: Path  # what the proxy serves (DEXP_TLS_CERT)
    key: Path  # its private key (DEXP_TLS_KEY)

    def context(self) -> ssl.SSLContext:
        """A client's TLS context that trusts the test CA."""
        return ssl.create_default_context(cafile=str(self.ca))


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"openssl {' '.join(args)}: {result.stderr[-1000:]}"


def make_certificate(directory: Path, dns_names: tuple[str, ...]) -> TlsFiles:
    """A P-256 CA valid for two days, and a certificate it signs for `dns_names` and 127.0.0.1.
    The files are readable by every user (the containers' users read them): test material only,
    in the test's own temporary directory."""
    if shutil.which("openssl") is None:
        missing("no openssl command to make the test certificate")
    directory.mkdir(parents=True, exist_ok=True)
    names = ",".join([*(f"DNS:{name}" for name in dns_names), "IP:127.0.0.1"])
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
    _openssl(
        "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=dexp test CA", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign", cwd=directory,
    )  # fmt: skip
    _openssl(
        "req", *ec, "-keyout", "server.key", "-out", "server.csr",
        "-subj", f"/CN={dns_names[0]}", cwd=directory,
    )  # fmt: skip
    (directory / "server.ext").write_text(
        f"subjectAltName={names}\nextendedKeyUsage=serverAuth\n"
        "keyUsage=critical,digitalSignature\nbasicConstraints=critical,CA:FALSE\n"
    )
    _openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "server.ext",
        cwd=directory,
    )  # fmt: skip
    for name in ("ca.pem", "server.pem", "server.key"):
        (directory / name).chmod(0o644)
    directory.chmod(0o755)  # mounted into client containers, whose user reads ca.pem
    return TlsFiles(directory / "ca.pem", directory / "server.pem", directory / "server.key")
