"""A tiny OpenID Connect token issuer on loopback: the client-credentials grant and a JWKS.

Managed Kafka with OAuth (Confluent Cloud, MSK's OIDC, Strimzi with Keycloak) has its clients
fetch a JWT from the identity provider's token endpoint with a client id and secret, and the
brokers validate it against the provider's published keys. This stands in for the provider:

* ``POST /token`` with HTTP Basic ``client_id:client_secret`` (as librdkafka sends them) and
  ``grant_type=client_credentials`` answers an RS256-signed JWT whose ``sub`` is the client id
  (Kafka's principal ``User:<client id>``), with the configured ``iss`` and ``aud``; a wrong
  secret or an unknown client gets 401, as a provider answers;
* ``GET /jwks`` publishes the signing key.

Tokens are counted per client, so a test can tell that a login really went through the issuer.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

ISSUER = "https://issuer.cutover.test"
AUDIENCE = "kafka"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _uint(n: int) -> str:
    return _b64(n.to_bytes((n.bit_length() + 7) // 8, "big"))


class OidcIssuer:
    """Start with :meth:`start` (or as a context manager); clients are registered with
    :meth:`register`."""

    def __init__(self, token_lifetime_s: int = 3600) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = uuid.uuid4().hex[:12]
        self.lifetime = token_lifetime_s
        self.clients: dict[str, str] = {}
        self.issued: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self._server: ThreadingHTTPServer | None = None

    # -- what clients and brokers are told ----------------------------------------------------

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start the issuer first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def token_url(self) -> str:
        return f"{self.base_url}/token"

    @property
    def jwks_url(self) -> str:
        return f"{self.base_url}/jwks"

    def register(self, client_id: str, secret: str) -> None:
        self.clients[client_id] = secret

    # -- tokens -------------------------------------------------------------------------------

    def jwks(self) -> dict[str, Any]:
        pub = self.key.public_key().public_numbers()
        return {"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": self.kid,
                          "n": _uint(pub.n), "e": _uint(pub.e)}]}

    def token(self, subject: str, scope: str | None = None) -> str:
        now = int(time.time())
        header = {"alg": "RS256", "typ": "JWT", "kid": self.kid}
        claims: dict[str, Any] = {"iss": ISSUER, "aud": AUDIENCE, "sub": subject,
                                  "iat": now, "nbf": now, "exp": now + self.lifetime,
                                  "jti": uuid.uuid4().hex}
        if scope:
            claims["scope"] = scope
        signing_input = (_b64(json.dumps(header).encode()) + "."
                         + _b64(json.dumps(claims).encode())).encode()
        signature = self.key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
        return signing_input.decode() + "." + _b64(signature)

    def _grant(self, authorization: str | None, body: bytes) -> tuple[int, dict[str, Any]]:
        form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
        if form.get("grant_type") != "client_credentials":
            return 400, {"error": "unsupported_grant_type"}
        client_id, secret = form.get("client_id"), form.get("client_secret")
        if authorization and authorization.lower().startswith("basic "):
            decoded = base64.b64decode(authorization.split(None, 1)[1]).decode()
            client_id, _, secret = decoded.partition(":")
        if not client_id or self.clients.get(client_id) != secret:
            self.refused[client_id or ""] += 1
            return 401, {"error": "invalid_client"}
        self.issued[client_id] += 1
        return 200, {"access_token": self.token(client_id, form.get("scope")),
                     "token_type": "Bearer", "expires_in": self.lifetime}

    # -- the HTTP server ----------------------------------------------------------------------

    def start(self) -> OidcIssuer:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, code: int, doc: dict[str, Any]) -> None:
                data = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.split("?")[0] == "/jwks":
                    self._answer(200, issuer.jwks())
                else:
                    self._answer(404, {"error": "not_found"})

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.split("?")[0] != "/token":
                    self._answer(404, {"error": "not_found"})
                    return
                self._answer(*issuer._grant(self.headers.get("Authorization"), body))

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: a request line per token would drown the test's output."""

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True,
                         name="oidc-issuer").start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> OidcIssuer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
