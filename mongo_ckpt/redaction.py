"""Credentials out of connection strings: the one place the CLI, ``doctor``, the demo and
spans redact a MongoDB URI before they print or record it."""

from __future__ import annotations

import re
from urllib.parse import unquote

HIDDEN = "***"
_URI = re.compile(r"mongodb(?:\+srv)?://\S*", re.IGNORECASE)
# Query options whose value is a secret (every property of authMechanismProperties: it
# carries AWS_SESSION_TOKEN and may carry others).
_SECRET_OPTION = re.compile(r"(tlsCertificateKeyFilePassword=)[^&#\s'\"]*", re.IGNORECASE)
SECRET_PROPERTIES = ("AWS_SESSION_TOKEN",)
_PROPERTIES = re.compile(r"(authMechanismProperties=)([^&#\s'\"]*)", re.IGNORECASE)


def _secrets(uri: str) -> list[str]:
    """The secret parts of ``uri`` as written (and percent-decoded): its password, its
    ``tlsCertificateKeyFilePassword`` and its ``SECRET_PROPERTIES``."""
    found = []
    userinfo, _ = _split_userinfo(uri.split("://", 1)[-1])
    if ":" in userinfo:
        found.append(userinfo.split(":", 1)[1])
    for match in _PROPERTIES.finditer(uri):
        for name, _, value in (p.partition(":") for p in match.group(2).split(",")):
            if name.upper() in SECRET_PROPERTIES:
                found.append(value)
    found += [m.group(0).split("=", 1)[1] for m in _SECRET_OPTION.finditer(uri)]
    secrets = {s for s in found if s} | {unquote(s) for s in found if s}
    return sorted(secrets, key=len, reverse=True)


def _split_userinfo(rest: str) -> tuple[str, str]:
    """``user:password`` and the rest of a URI after ``scheme://``; the last ``@`` before
    the options ends the user info (a password may hold an unescaped ``@`` or ``/``)."""
    head, query, options = rest.partition("?")
    userinfo, at, host = head.rpartition("@")
    return (userinfo, host + query + options) if at else ("", rest)


def _redact_one(uri: str) -> str:
    scheme, sep, rest = uri.partition("://")
    userinfo, host = _split_userinfo(rest)
    if ":" in userinfo:
        rest = f"{userinfo.split(':', 1)[0]}:{HIDDEN}@{host}"
    uri = scheme + sep + rest
    uri = _SECRET_OPTION.sub(rf"\g<1>{HIDDEN}", uri)
    return _PROPERTIES.sub(lambda m: m.group(1) + _hidden_properties(m.group(2)), uri)


def _hidden_properties(value: str) -> str:
    """``AWS_SESSION_TOKEN:abc,SERVICE_NAME:x`` -> ``AWS_SESSION_TOKEN:***,SERVICE_NAME:***``."""
    return ",".join(f"{p.split(':', 1)[0]}:{HIDDEN}" if ":" in p else p for p in value.split(","))


def redacted(text: str, uri: str | None = None) -> str:
    """``text`` with the password, ``authMechanismProperties`` values and
    ``tlsCertificateKeyFilePassword`` of every MongoDB URI in it replaced by ``***``.

    ``uri``: the connection string ``text`` may quote in part (an error message about
    it); its secrets are removed wherever they appear, even outside a recognisable URI.
    """
    text = _URI.sub(lambda m: _redact_one(m.group(0)), text)
    for secret in _secrets(uri) if uri else ():
        text = text.replace(secret, HIDDEN)
    return text


def reason(error: BaseException) -> str:
    """A driver error's own words, without the timeouts and the topology description
    PyMongo appends to a failed server selection (one line, at most 200 characters)."""
    return str(error).split(" (configured")[0].split(", Timeout:")[0][:200]
