"""Security options as Spark's Kafka connector takes them, for the tagger's librdkafka clients.

A job written for Spark's connector secures it with the Java client's names
(``kafka.security.protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``,
``kafka.ssl.truststore.location`` with ``kafka.ssl.truststore.type=PEM``). The tagger always
writes through its own sink, and reads through the Python source when the JVM connector is
absent, both librdkafka clients: the same options must work there, or securing a job would
mean writing its options twice. So:

* ``sasl.jaas.config`` with the SCRAM or PLAIN login module becomes ``sasl.username`` and
  ``sasl.password``; with the OAUTHBEARER login module and ``clientId``/``clientSecret`` (the
  OIDC client-credentials login, whose token endpoint is ``sasl.oauthbearer.token.endpoint.url``
  in both clients) it becomes librdkafka's ``sasl.oauthbearer.method=oidc`` with
  ``sasl.oauthbearer.client.id``/``.client.secret``/``.scope``, and the Java login callback
  handler is dropped. Other login modules, Kerberos and AWS IAM are refused with a sentence
  naming the logins that work;
* a PEM trust store (``ssl.truststore.location`` or ``ssl.truststore.certificates``) becomes
  ``ssl.ca.location`` / ``ssl.ca.pem``; a JKS or PKCS12 one is refused, since librdkafka reads
  CA certificates as PEM only;
* a client certificate for mutual TLS (``security.protocol=SSL``): a PEM key store
  (``ssl.keystore.type=PEM``; ``ssl.keystore.location``, one file with the private key and the
  certificate chain, or ``ssl.keystore.key`` with ``ssl.keystore.certificate.chain``) becomes
  ``ssl.key.location`` and ``ssl.certificate.location`` on that file (``ssl.key.pem`` and
  ``ssl.certificate.pem``); a PKCS12 one passes through (librdkafka reads it as
  ``ssl.keystore.location`` with ``ssl.keystore.password``); a JKS one is refused;
  ``ssl.key.password`` means the same in both;
* ``security.protocol``, ``sasl.mechanism`` and ``ssl.endpoint.identification.algorithm``
  mean the same in both and pass through; so do librdkafka's own names.

A value may also be a secret reference, ``${env:NAME}`` or ``${file:PATH}``
(:mod:`cutover.secret_refs`), resolved on the driver; the JVM connector does not read these, so
use them only where the Python client serves the job. No error here repeats an option's value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from cutover.kafka_errors import unsupported_login
from cutover.secret_refs import SecretError, resolve

_LOGIN = re.compile(r"^\s*(?P<module>[\w.$]+)\s+(?:required|requisite|sufficient|optional)"
                    r"(?P<options>.*?);?\s*$", re.DOTALL)
_OPTION = re.compile(r'(?P<name>[\w.-]+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s;]+))')
_PASSWORD_MODULES = ("ScramLoginModule", "PlainLoginModule")
_OAUTH_MODULE = "OAuthBearerLoginModule"
_OAUTH_OPTIONS = {"clientId": "sasl.oauthbearer.client.id",
                  "clientSecret": "sasl.oauthbearer.client.secret",
                  "scope": "sasl.oauthbearer.scope"}
_JAVA_OAUTH_HANDLER = "OAuthBearerLoginCallbackHandler"


class KafkaOptionError(ValueError):
    """An option of the Kafka source or sink is missing or wrong; the message says which."""


def _refusal(message: str) -> ValueError:
    return KafkaOptionError(message)


def _jaas_login(jaas: str) -> dict[str, str]:
    m = _LOGIN.match(jaas)
    if m is None:
        raise _refusal("option 'kafka.sasl.jaas.config' is not a JAAS login entry (expected "
                       "'<LoginModule class> required username=\"...\" password=\"...\";')")
    module = m.group("module").rsplit(".", 1)[-1]
    unescape = re.compile(r"\\(.)")
    found = {o.group("name"): unescape.sub(r"\1", o.group("quoted")
                                           if o.group("quoted") is not None
                                           else o.group("bare"))
             for o in _OPTION.finditer(m.group("options"))}
    if module == _OAUTH_MODULE:
        if not found.get("clientId") or found.get("clientSecret") is None:
            raise _refusal("option 'kafka.sasl.jaas.config' uses OAuthBearerLoginModule without "
                           "clientId and clientSecret; the tagger's Kafka client logs in with "
                           "OIDC client credentials (and kafka.sasl.oauthbearer.token.endpoint"
                           ".url)")
        login = {"sasl.oauthbearer.method": "oidc"}
        login.update({key: found[name] for name, key in _OAUTH_OPTIONS.items() if name in found})
        return login
    if module not in _PASSWORD_MODULES:
        raise _refusal(f"option 'kafka.sasl.jaas.config' uses {module}; the tagger's Kafka "
                       "client understands the SCRAM, PLAIN and OAUTHBEARER (OIDC) login "
                       "modules only (or give librdkafka's own kafka.sasl.* options)")
    if not found.get("username") or found.get("password") is None:
        raise _refusal("option 'kafka.sasl.jaas.config' names no username and password")
    return {"sasl.username": found["username"], "sasl.password": found["password"]}


def librdkafka_security(params: Mapping[str, str]) -> dict[str, str]:
    """Client settings (``kafka.`` prefix removed) with Java security names translated and
    secret references resolved."""
    out: dict[str, str] = {}
    for key, value in params.items():
        try:
            out[key] = resolve(value, key)
        except SecretError as exc:
            raise _refusal(str(exc)) from None
    jaas = out.pop("sasl.jaas.config", None)
    if jaas is not None and "IAMLoginModule" not in jaas:  # AWS IAM: refused just below
        for key, value in _jaas_login(jaas).items():
            out.setdefault(key, value)
    problem = unsupported_login({**out, "sasl.jaas.config": jaas or ""})
    if problem is not None:
        raise _refusal(problem)
    if _JAVA_OAUTH_HANDLER in out.get("sasl.login.callback.handler.class", ""):
        del out["sasl.login.callback.handler.class"]  # librdkafka's oidc method does its work
    store_type = (out.pop("ssl.truststore.type", None) or "JKS").upper()
    location = out.pop("ssl.truststore.location", None)
    certificates = out.pop("ssl.truststore.certificates", None)
    out.pop("ssl.truststore.password", None)  # a PEM trust store has none
    if (location or certificates) and store_type != "PEM":
        raise _refusal(f"option 'kafka.ssl.truststore.type' is {store_type}; the tagger's Kafka "
                       "client reads CA certificates as PEM only: export them (keytool "
                       "-exportcert -rfc) and set kafka.ssl.truststore.type=PEM, which Spark's "
                       "connector reads too")
    if location:
        out.setdefault("ssl.ca.location", location)
    if certificates:
        out.setdefault("ssl.ca.pem", certificates)
    return _client_certificate(out)


def _client_certificate(out: dict[str, str]) -> dict[str, str]:
    """The Java client's key store (mutual TLS) in librdkafka's names."""
    store_type = (out.pop("ssl.keystore.type", None) or "JKS").upper()
    location = out.get("ssl.keystore.location")
    key, chain = out.pop("ssl.keystore.key", None), out.pop("ssl.keystore.certificate.chain", None)
    if not (location or key or chain):
        return out
    if store_type == "PKCS12" and location:
        return out
    if store_type != "PEM":
        raise _refusal(f"option 'kafka.ssl.keystore.type' is {store_type}; the tagger's Kafka "
                       "client reads a client certificate as PEM or PKCS12 only: convert the "
                       "key store (keytool -importkeystore -deststoretype PKCS12) or set "
                       "kafka.ssl.keystore.type=PEM with the private key and the certificate "
                       "chain in one file, which Spark's connector reads too")
    if location:
        del out["ssl.keystore.location"]
        out.pop("ssl.keystore.password", None)   # a PEM key store has none
        out.setdefault("ssl.key.location", location)
        out.setdefault("ssl.certificate.location", location)
        return out
    if not (key and chain):
        raise _refusal("options 'kafka.ssl.keystore.key' and 'kafka.ssl.keystore.certificate."
                       "chain' go together: give both (PEM), or kafka.ssl.keystore.location")
    out.setdefault("ssl.key.pem", key)
    out.setdefault("ssl.certificate.pem", chain)
    return out
