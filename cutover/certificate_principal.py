"""The principal Apache Kafka gives a client that logs in with its certificate (mutual TLS).

With ``ssl.client.auth=required`` and no ``ssl.principal.mapping.rules``, a broker names a TLS
client ``User:<subject>``, the certificate's subject distinguished name as Java writes it
(RFC 2253: the most specific name first, ``CN=cutover-router,OU=streaming,O=example``). ACLs
must name exactly that, so ``cutover doctor`` reads it from the certificate the settings give
(``ssl.certificate.location`` or ``ssl.certificate.pem``) rather than asking the operator to
spell it. Only the subject is read, from the certificate's DER encoding; nothing is verified
here (the broker does that).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

_PEM = re.compile(rb"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", re.S)
# The attribute names Java's RFC 2253 form writes as keywords; others as dotted OIDs.
_KEYWORDS = {"2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST",
             "2.5.4.10": "O", "2.5.4.11": "OU", "2.5.4.9": "STREET",
             "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID"}
_STRINGS = {0x0C, 0x13, 0x14, 0x16, 0x1A}   # UTF8, Printable, Teletex, IA5, Visible
_SEQUENCE, _SET, _OID = 0x30, 0x31, 0x06


class _Tlv(NamedTuple):
    tag: int
    body: bytes
    end: int          # offset just past this element in the buffer it was read from


def _read(der: bytes, at: int) -> _Tlv:
    tag, size, at = der[at], der[at + 1], at + 2
    if size & 0x80:
        width = size & 0x7F
        size, at = int.from_bytes(der[at:at + width], "big"), at + width
    if at + size > len(der):
        raise ValueError("truncated DER")
    return _Tlv(tag, der[at:at + size], at + size)


def _children(body: bytes) -> list[_Tlv]:
    out, at = [], 0
    while at < len(body):
        tlv = _read(body, at)
        out.append(tlv)
        at = tlv.end
    return out


def _oid(body: bytes) -> str:
    first = body[0]
    parts, value = [min(first // 40, 2), first - 40 * min(first // 40, 2)], 0
    for byte in body[1:]:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            parts.append(value)
            value = 0
    return ".".join(map(str, parts))


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;=])', r"\\\1", value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def _attribute(atv: _Tlv) -> str:
    oid, value = _children(atv.body)[:2]
    name = _KEYWORDS.get(_oid(oid.body)) or _oid(oid.body)
    if value.tag == 0x1E:       # BMPString
        text = value.body.decode("utf-16-be")
    elif value.tag in _STRINGS:
        text = value.body.decode("utf-8", "replace")
    else:
        return f"{name}=#{bytes([value.tag, len(value.body)]).hex()}{value.body.hex()}"
    return f"{name}={_escape(text)}"


def subject_dn(der: bytes) -> str:
    """The subject of a DER certificate in RFC 2253 form, as Kafka's principal names it."""
    certificate = _read(der, 0)
    tbs = _children(certificate.body)[0]
    fields = _children(tbs.body)
    if fields and fields[0].tag == 0xA0:   # [0] version
        fields = fields[1:]
    subject = fields[4]   # serial, signature algorithm, issuer, validity, subject
    rdns = [_children(rdn.body) for rdn in _children(subject.body) if rdn.tag == _SET]
    return ",".join("+".join(_attribute(atv) for atv in rdn) for rdn in reversed(rdns))


def certificate_principal(conf: Mapping[str, Any]) -> str | None:
    """``User:<subject>`` of the client certificate the settings name (the first certificate
    in ``ssl.certificate.pem`` or the file ``ssl.certificate.location``), or None when they name
    none or it cannot be read."""
    pem: bytes | None = None
    if conf.get("ssl.certificate.pem"):
        pem = str(conf["ssl.certificate.pem"]).encode()
    elif conf.get("ssl.certificate.location"):
        try:
            pem = Path(str(conf["ssl.certificate.location"])).read_bytes()
        except OSError:
            return None
    found = _PEM.search(pem or b"")
    if found is None:
        return None
    try:
        return f"User:{subject_dn(base64.b64decode(found.group(1)))}"
    except (ValueError, IndexError):
        return None
