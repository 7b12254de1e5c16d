"""The one CA of a ring across hosts, its superuser's password, and how a host without the CA's
key gets its members' certificates: a certificate request, signed on the host that holds the key.

The ``--ring-ca`` directory of ``asgard cassandra host ...``, on each host::

    ca.pem                 the ring's CA certificate: on every host
    ca.key                 the CA's private key (0600): only on the host that made the CA
    superuser.password     the ring's superuser's password (0600): on every host
    member-<address>.key   a member's private key (0600): made on its own host, never leaves it
    member-<address>.csr   its certificate request: carried to the CA's host
    member-<address>.pem   the certificate the CA's host signed (then the CA's): carried back
    issued/<address>/      the CA's host's record of the certificates it issued itself

One command for each step::

    asgard cassandra host ca-init --ring-ca DIR                     first host, once: the CA and the password
    asgard cassandra host cert-request --ring-ca DIR --address A    a host without ca.key: member-A.key, .csr
    asgard cassandra host cert-sign --ring-ca DIR member-A.csr      the CA's host: member-A.pem

A member's start (:func:`member_certificate`) issues its own certificate where ``ca.key`` is at
hand, else installs its signed ``member-<address>.pem``; failing both it raises
:class:`RingCertificateMissing`, and a host without ``superuser.password`` raises
:class:`RingPasswordMissing`. Nothing here makes a CA or a password in place of a missing one:
only :func:`create_ring_ca`, the operator's explicit first step.
"""
from __future__ import annotations

import datetime as dt
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..paths import write_private
from .tls import (RENEW_BEFORE, CAFileMissing, CAFiles, CertificateError, NodeTLS, ensure_ca, issue_node_certificate,
                  load_ca_certificate, new_private_key, node_certificate_current, pem_certificate, pem_private_key,
                  sign_node_certificate, subject_alt_name, verify_node_certificate, write_node_files)

log = logging.getLogger(__name__)

RING_CA_NAME = "asgard ring CA"
MIN_RSA_BITS = 2048  # what tls.py's own keys have


@dataclass(frozen=True)
class RingCADirectory(CAFiles):
    """Paths of a ``--ring-ca`` directory (module docstring)."""

    @property
    def superuser_password(self) -> Path:
        return self.directory / "superuser.password"

    def member_key(self, address: str) -> Path:
        return self.directory / f"member-{address}.key"

    def member_request(self, address: str) -> Path:
        return self.directory / f"member-{address}.csr"

    def member_cert(self, address: str) -> Path:
        return self.directory / f"member-{address}.pem"


class RingFileMissing(RuntimeError):
    """A file of the ring's is not on this host, so a member cannot start here; nothing was made
    in its place (a new CA or password would not match the rest of the ring).

    Attributes: ``path``, the file to bring to this host; ``missing``, every absent file that
    would do (full paths); ``directory``, the ``--ring-ca`` directory.
    """

    def __init__(self, message: str, path: Path, missing: list[Path], directory: Path):
        self.path, self.missing, self.directory = Path(path), list(missing), Path(directory)
        super().__init__(message)


class RingCertificateMissing(RingFileMissing):
    """A member has no way to its certificate on this host: neither the ring's ``ca.key`` nor a
    signed ``member-<address>.pem`` with its key (or no ``ca.pem`` at all)."""


class RingPasswordMissing(RingFileMissing):
    """The ring's ``superuser.password`` is not on this host."""


def _commands(ring: RingCADirectory, address: str) -> str:
    """The request and sign steps, as an operator types them."""
    request = ring.member_request(address)
    made = " (already made)" if request.exists() else ""
    return (f"here, `asgard cassandra host cert-request --ring-ca {ring.directory} --address {address}` writes "
            f"{request}{made} (the member's key stays here); copy it to the host that holds the ring's ca.key, run "
            f"`asgard cassandra host cert-sign --ring-ca <its ring CA directory> {request.name}` there, and copy the "
            f"{ring.member_cert(address).name} it writes back to {ring.member_cert(address)}")


def create_ring_ca(directory: Path) -> RingCADirectory:
    """The ring's CA (``ca.pem``, ``ca.key``) and its superuser's password, made in ``directory``
    once, on the first host: the one step that makes them. Refuses a directory that has a CA."""
    import secrets

    ring = RingCADirectory(Path(directory))
    present = [p for p in (ring.ca_cert, ring.ca_key) if p.exists()]
    if present:
        raise CertificateError(
            f"{ring.directory} already holds a CA ({', '.join(p.name for p in present)}): a ring has one CA, and a "
            "new one would replace the one its members and clients trust. Start members with it as it is; for a "
            "new ring, give an empty directory.")
    ensure_ca(NodeTLS(ring.directory), name=RING_CA_NAME, create=True)
    if not ring.superuser_password.exists():
        # URL-safe: no quoting issue in CQL or a shell
        write_private(ring.superuser_password, secrets.token_urlsafe(24) + "\n")
    return ring


def ring_superuser_password(directory: Path, address: str) -> str:
    """The ring's superuser's password, for the member at ``address``; :class:`RingPasswordMissing`
    where this host lacks the file (never a new one: it would not match the ring's role)."""
    ring = RingCADirectory(Path(directory))
    try:
        return ring.superuser_password.read_text()
    except FileNotFoundError:
        raise RingPasswordMissing(
            f"the member at {address} cannot log in to the ring: {ring.superuser_password} is missing, and a new "
            "password would not match the superuser the ring already has. Copy superuser.password (mode 0600) from "
            "the ring CA directory of the host that made the ring's CA (`asgard cassandra host ca-init`) to "
            f"{ring.superuser_password}.",
            ring.superuser_password, [ring.superuser_password], ring.directory) from None


def request_member_certificate(directory: Path, address: str) -> Path:
    """On a host without the ring's ``ca.key``: the member at ``address``'s key (``member-<address>.key``,
    0600, made once and kept here) and a certificate request for it naming ``address`` in its SAN
    (``member-<address>.csr``, returned), for :func:`sign_member_request` on the CA's host."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID

    ring = RingCADirectory(Path(directory))
    name = subject_alt_name(address)
    if ring.member_key(address).exists():
        # the same key again: a certificate signed for an earlier request still matches it
        key = serialization.load_pem_private_key(ring.member_key(address).read_bytes(), password=None)
    else:
        key = new_private_key()
        write_private(ring.member_key(address), pem_private_key(key))
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"cassandra {address}")]))
        .add_extension(x509.SubjectAlternativeName([name]), critical=False)
        .sign(key, hashes.SHA256())
    )
    ring.member_request(address).write_bytes(request.public_bytes(serialization.Encoding.PEM))
    return ring.member_request(address)


def sign_member_request(directory: Path, request_file: Path, out: Path | None = None) -> Path:
    """On the host with the ring's ``ca.key`` (in ``directory``): the certificate for the request
    in ``request_file``, written to ``out`` (default: ``member-<address>.pem`` beside the request).
    The request must be signed by its own key, name exactly one IP address or host name in its
    SAN and carry an RSA key of at least 2048 bits; the certificate is what the CA issues to its
    own members (``tls.sign_node_certificate``), whatever else the request asks for."""
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import rsa

    ring = RingCADirectory(Path(directory))
    try:
        ca_cert, ca_key = ensure_ca(NodeTLS(ring.directory), create=False)
    except CAFileMissing as exc:
        raise CAFileMissing(exc.directory, exc.missing, remedy=(
            "cert-sign runs on the host that holds the ring's ca.key (where `asgard cassandra host ca-init` ran); "
            "copy the request there")) from None
    request_file = Path(request_file)
    try:
        request = x509.load_pem_x509_csr(request_file.read_bytes())
    except ValueError as exc:
        raise CertificateError(f"{request_file} is not a PEM certificate request ({exc}); make it with "
                               "`asgard cassandra host cert-request`") from exc
    if not request.is_signature_valid:
        raise CertificateError(f"{request_file} is not signed by the key it carries: it was altered on its way; "
                               "make it again with `asgard cassandra host cert-request`")
    try:
        names = list(request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
    except x509.ExtensionNotFound:
        names = []
    if len(names) != 1 or not isinstance(names[0], (x509.IPAddress, x509.DNSName)):
        raise CertificateError(f"{request_file} must name exactly one IP address or host name in its "
                               f"subjectAltName (the member's address), not {names}")
    address = str(names[0].value)
    if subject_alt_name(address) != names[0]:  # a DNS name that is no host name (a wildcard, a space)
        raise CertificateError(f"{request_file} names {address!r}, which is not a host name")
    public_key = request.public_key()
    if not isinstance(public_key, rsa.RSAPublicKey) or public_key.key_size < MIN_RSA_BITS:
        raise CertificateError(f"{request_file} carries a {type(public_key).__name__}; every TLS stack of the ring "
                               f"reads RSA keys of {MIN_RSA_BITS} bits or more: make the request with "
                               "`asgard cassandra host cert-request`")
    cert = sign_node_certificate(ca_cert, ca_key, public_key, address)
    out = Path(out) if out else request_file.with_name(ring.member_cert(address).name)
    out.write_bytes(pem_certificate(cert) + pem_certificate(ca_cert))
    return out


def install_signed_certificate(ring: RingCADirectory, node: NodeTLS, address: str) -> NodeTLS:
    """The member's signed ``member-<address>.pem`` and its key, checked (signed by the ring's CA,
    valid now, naming ``address``, for this key) and written as ``node``'s certificate files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    cert_file, key_file = ring.member_cert(address), ring.member_key(address)
    if not key_file.exists():
        raise RingCertificateMissing(
            f"{cert_file} is here but its key {key_file} is not: the key is made by cert-request on the member's "
            f"own host and never copied. Request a new certificate: {_commands(ring, address)}.",
            key_file, [key_file], ring.directory)
    try:
        verify_node_certificate(cert_file, ring.ca_cert, address)
    except (CertificateError, ValueError) as exc:
        raise CertificateError(f"{cert_file} cannot serve the member at {address}: {exc}. Request a new one: "
                               f"{_commands(ring, address)}") from exc
    cert = x509.load_pem_x509_certificates(cert_file.read_bytes())[0]
    key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)

    def spki(public_key) -> bytes:
        return public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)

    if spki(cert.public_key()) != spki(key.public_key()):
        raise CertificateError(f"{cert_file} was signed for another key than {key_file}: copy back the certificate "
                               f"signed for this host's latest request, or request again: {_commands(ring, address)}")
    left = cert.not_valid_after_utc - dt.datetime.now(dt.timezone.utc)
    if left < RENEW_BEFORE:  # it still works; a member cannot renew it without the CA's host
        log.warning("%s expires in %s: request a new one (%s)", cert_file, left, _commands(ring, address))
    node.directory.mkdir(parents=True, exist_ok=True)
    shutil.copy2(ring.ca_cert, node.ca_cert)
    node.ca_key.unlink(missing_ok=True)
    return write_node_files(node, key, cert, load_ca_certificate(ring.ca_cert))


def member_certificate(directory: Path, node_directory: Path, address: str) -> NodeTLS:
    """The certificate files of the ring member at ``address`` in ``node_directory``, at its start:
    issued here by the ring's CA where ``ca.key`` is in ``directory``; else its signed
    ``member-<address>.pem``; else the certificate it already holds from the ring's CA. Failing
    all three, :class:`RingCertificateMissing` naming the files to copy and the commands to run."""
    ring = RingCADirectory(Path(directory))
    node = NodeTLS(Path(node_directory))
    if not ring.ca_cert.exists():
        raise RingCertificateMissing(
            f"the member at {address} has no ring CA: {ring.ca_cert} is missing. Copy ca.pem from the ring CA "
            "directory of the host that made the ring's CA; if this is the ring's first host, make the CA once with "
            f"`asgard cassandra host ca-init --ring-ca {ring.directory}`. No CA is made at a member's start: the "
            "ring has one.",
            ring.ca_cert, [ring.ca_cert], ring.directory)
    if ring.ca_key.exists():
        return issue_node_certificate(ring.directory, node.directory, address)
    if ring.member_cert(address).exists():
        return install_signed_certificate(ring, node, address)
    ca_cert = load_ca_certificate(ring.ca_cert)
    if node_certificate_current(node, address, ca_cert):  # installed before, or issued ahead on the CA's host
        shutil.copy2(ring.ca_cert, node.ca_cert)
        return node
    missing = [ring.ca_key, ring.member_cert(address)]
    raise RingCertificateMissing(
        f"the member at {address} has no certificate and none can be issued here: {ring.ca_key} and "
        f"{ring.member_cert(address)} are both missing. Get one signed: {_commands(ring, address)}. Or copy ca.key "
        f"(mode 0600) from that host to {ring.ca_key}. No CA is made at a member's start: the ring has one.",
        ring.member_cert(address), missing, ring.directory)
