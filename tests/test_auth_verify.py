"""Authentication's pure parts, table-tested: the config file, the Authorization header, the
token verdict, the challenge, the public authority, the bind decision."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.authserver import AUDIENCE, Signer, ec_key, rsa_key
from tfunnel.auth.challenge import www_authenticate
from tfunnel.auth.config import AUTH, AuthConfig
from tfunnel.auth.denials import DenyLimiter
from tfunnel.auth.gate import principal
from tfunnel.auth.jwks import parse_jwks
from tfunnel.auth.verify import Verdict, bearer_token, verify
from tfunnel.config.files import read_config
from tfunnel.serve.loopback import bind_refusal

ISSUER = "https://as.example"
RSA = rsa_key("rsa-1")
EC = ec_key("ec-1")
OTHER = rsa_key("rsa-1")  # the same kid, another key: a forged signature
PS = rsa_key("ps-1", "PS256")
SIGNER = Signer(ISSUER, keys=[RSA, EC, PS])
KEYS = parse_jwks({"keys": [RSA.jwk(), EC.jwk(), PS.jwk()]})
CONFIG = AuthConfig(enabled=True, issuer=ISSUER, audience=AUDIENCE, required_scopes=("mcp:tools",))


def _raw(header: dict[str, object], claims: dict[str, object]) -> str:
    import base64

    def b64(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{b64(header)}.{b64(claims)}.c2ln"


NOW = time.time()
# (name, token factory, status, error, part of the server-side reason)
CASES: list[tuple[str, Callable[[], str], int, str, str]] = [
    ("valid RSA", lambda: SIGNER.token(RSA), 200, "", ""),
    ("valid EC", lambda: SIGNER.token(EC), 200, "", ""),
    ("aud list naming us", lambda: SIGNER.token(aud=["https://other.example", AUDIENCE]), 200, "", ""),
    ("scope in scp", lambda: SIGNER.token(scope=None, scp=["mcp:tools"]), 200, "", ""),
    ("expired within tolerance", lambda: SIGNER.token(exp=int(NOW) - 10), 200, "", ""),
    ("nbf within tolerance", lambda: SIGNER.token(nbf=int(NOW) + 10), 200, "", ""),
    ("typ at+jwt", lambda: SIGNER.token(headers={"typ": "at+jwt"}), 200, "", ""),
    ("alg none", SIGNER.unsigned, 401, "invalid_token", "'none' is not accepted"),
    ("HS256 keyed with the public key", SIGNER.hmac_with_public_key, 401, "invalid_token",
     "'HS256' is not accepted"),
    ("PS256 not allowed by default", lambda: SIGNER.token(PS), 401, "invalid_token",
     "'PS256' is not accepted"),
    ("wrong iss", lambda: SIGNER.token(iss="https://evil.example"), 401, "invalid_token", "iss"),
    ("wrong aud", lambda: SIGNER.token(aud="https://other.example/mcp"), 401, "invalid_token", "aud"),
    ("no aud", lambda: SIGNER.token(aud=None), 401, "invalid_token", "aud claim is missing"),
    ("no exp", lambda: SIGNER.token(exp=None), 401, "invalid_token", "exp claim is missing"),
    ("expired", lambda: SIGNER.token(exp=int(NOW) - 100), 401, "invalid_token", "expired"),
    ("future nbf", lambda: SIGNER.token(nbf=int(NOW) + 100), 401, "invalid_token", "nbf"),
    ("missing scope", lambda: SIGNER.token(scope="other"), 403, "insufficient_scope", "mcp:tools"),
    ("unknown kid", lambda: SIGNER.token(rsa_key("new")), 401, "invalid_token", "no key with kid 'new'"),
    ("forged signature", lambda: SIGNER.token(OTHER), 401, "invalid_token", "signature"),
    ("RS256 against an EC key", lambda: SIGNER.token(RSA, headers={"kid": "ec-1"}), 401, "invalid_token",
     "not usable with RS256"),
    ("crit header", lambda: SIGNER.token(headers={"crit": ["exp"]}), 401, "invalid_token",
     "the JOSE header has crit extensions"),
    ("typ of another kind", lambda: SIGNER.token(headers={"typ": "secevent+jwt"}), 401, "invalid_token",
     "typ"),
    ("malformed header", lambda: "bm90LWpzb24.e30.c2ln", 401, "invalid_token", "malformed"),
    ("not a JWT", lambda: "opaque-token", 401, "invalid_token", "malformed"),
    ("a JWE", lambda: "a.b.c.d.e", 401, "invalid_token", "malformed"),
    ("kid not a string", lambda: _raw({"alg": "RS256", "kid": 7}, SIGNER.claims()), 401, "invalid_token",
     "kid"),
    # Time claims: a finite int or float in 0 <= v < 2**53, else refused naming the claim.
    ("exp NaN", lambda: SIGNER.token(exp=float("nan")), 401, "invalid_token", "exp is not a finite"),
    ("exp Infinity", lambda: SIGNER.token(exp=float("inf")), 401, "invalid_token", "exp is not a finite"),
    ("exp 10**400", lambda: SIGNER.token(exp=10**400), 401, "invalid_token", "exp is not a finite"),
    ("exp 2**53", lambda: SIGNER.token(exp=2**53), 401, "invalid_token", "exp is not a finite"),
    ("exp negative", lambda: SIGNER.token(exp=-1), 401, "invalid_token", "exp is not a finite"),
    ("exp a string", lambda: SIGNER.token(exp=str(int(NOW) + 600)), 401, "invalid_token", "exp"),
    ("exp a float", lambda: SIGNER.token(exp=NOW + 600.5), 200, "", ""),
    ("nbf NaN", lambda: SIGNER.token(nbf=float("nan")), 401, "invalid_token", "nbf is not a finite"),
    ("nbf -Infinity", lambda: SIGNER.token(nbf=float("-inf")), 401, "invalid_token", "nbf is not a finite"),
    ("nbf 10**400", lambda: SIGNER.token(nbf=10**400), 401, "invalid_token", "nbf is not a finite"),
]


@pytest.mark.parametrize(("name", "make", "status", "error", "reason"), CASES, ids=[c[0] for c in CASES])
def test_verify(name: str, make: Callable[[], str], status: int, error: str, reason: str) -> None:
    """Each token gets its status, RFC 6750 error code and a reason naming what was wrong."""
    verdict = verify(make(), KEYS, CONFIG, NOW)  # the time the tokens were made for, not the run's
    assert (verdict.status, verdict.error) == (status, error), verdict.reason
    assert reason in verdict.reason
    if status == 200:
        assert verdict.claims["sub"] == "tester" and "mcp:tools" in verdict.scopes


def test_verify_reports_an_unknown_kid_as_retryable() -> None:
    """Only an unknown key makes fresh keys worth fetching."""
    assert verify(SIGNER.token(rsa_key("new")), KEYS, CONFIG, time.time()).unknown_kid
    assert not verify(SIGNER.token(OTHER), KEYS, CONFIG, time.time()).unknown_kid


def test_a_token_without_kid_uses_the_only_key_of_its_family() -> None:
    """No kid: the one key of the algorithm's family verifies; two candidates refuse."""
    token = SIGNER.token(EC, headers={"kid": None})
    assert verify(token, KEYS, CONFIG, time.time()).ok
    two = parse_jwks({"keys": [EC.jwk(), ec_key("ec-2").jwk()]})
    assert "several keys" in verify(token, two, CONFIG, time.time()).reason


def test_time_is_an_input() -> None:
    """exp and nbf are judged against the given time, with the configured tolerance."""
    token = SIGNER.token(exp=1000, nbf=500)
    assert verify(token, KEYS, CONFIG, 700).ok
    assert verify(token, KEYS, CONFIG, 1029).ok
    assert verify(token, KEYS, CONFIG, 1031).description == "the token is expired"
    assert verify(token, KEYS, CONFIG, 469).description == "the token is not valid yet"
    strict = AuthConfig(enabled=True, issuer=ISSUER, audience=AUDIENCE, clock_tolerance_s=0)
    assert not verify(token, KEYS, strict, 1001).ok


def test_a_malformed_url_is_a_problem_naming_it(tmp_path: Path) -> None:
    """An unparsable URL says so; an IDNA-bad host says which rule."""
    path = tmp_path / "auth" / "auth.config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    for issuer, text in [("https://[as.example", "is not a valid URL"),
                         ("https://a..b", "invalid host name")]:
        path.write_text(json.dumps({**GOOD, "issuer": issuer}))
        (problem,) = read_config(tmp_path, AUTH).problems
        assert problem.field == "issuer" and text in problem.message


def test_the_audience_is_canonical_and_both_forms_verify(tmp_path: Path) -> None:
    """Scheme and host lower case, the default port left out, the path kept; a token naming the
    canonical or the written form is for us; a trailing '/' is kept and warned about."""
    _, problems, warnings, value = _read(tmp_path, {**GOOD, "audience": "HTTPS://GW.Example:443/MCP"})
    assert problems == [] and warnings == [] and value is not None
    assert value.audience == "https://gw.example/MCP" and value.audiences == (
        "https://gw.example/MCP", "HTTPS://GW.Example:443/MCP")
    assert value.metadata()["resource"] == "https://gw.example/MCP"
    signer = Signer(ISSUER, keys=[RSA])
    for aud in value.audiences:
        assert verify(signer.token(aud=aud), KEYS, value, time.time()).ok, aud
    assert not verify(signer.token(aud="https://gw.example/mcp"), KEYS, value, time.time()).ok
    _, _, warnings, value = _read(tmp_path, {**GOOD, "audience": "https://gw.example/mcp/"})
    assert value is not None and value.audience == "https://gw.example/mcp/"
    assert len(warnings) == 1 and "ends with '/'" in warnings[0]


def test_duplicate_kids_pick_the_key_of_the_token_family() -> None:
    """A kid shared by an EC and an RSA key: each token verifies with the key of its algorithm."""
    rsa, ec = rsa_key("same"), ec_key("same")
    keys = parse_jwks({"keys": [ec.jwk(), rsa.jwk()]})
    signer = Signer(ISSUER, keys=[rsa, ec])
    for key in (rsa, ec):
        verdict = verify(signer.token(key, scope="mcp:tools"), keys, CONFIG, time.time())
        assert verdict.ok, (key.alg, verdict.reason)


def test_a_jwk_the_library_cannot_read_is_skipped() -> None:
    """`alg: none` (PyJWK raises NotImplementedError), an unknown alg, broken numbers: skipped,
    and the good key beside them still verifies."""
    bad = [{**RSA.jwk(), "kid": "none", "alg": "none"}, {**EC.jwk(), "kid": "x", "alg": "XX9"},
           {"kty": "EC", "crv": "P-999", "x": "AA", "y": "AA", "kid": "crv"},
           {**RSA.jwk(), "kid": "n", "n": 7}]
    keys = parse_jwks({"keys": [*bad, RSA.jwk()]})
    assert [k.kid for k in keys] == ["rsa-1"]
    assert verify(SIGNER.token(RSA), keys, CONFIG, time.time()).ok


def test_no_part_of_another_scheme_credential_is_in_the_reason() -> None:
    """Only a known scheme's name is logged; anything else by its length."""
    for value in ("ghp_SECRETSECRETSECRETSECRET1234", "Bearer\tSECRETTOKENxyz0123456789",
                  "basicSECRETSECRET zzz", "Token SECRETSECRETSECRET"):
        got = bearer_token([value])
        assert isinstance(got, Verdict) and got.status == 401
        secret = value.split("\t")[-1]
        assert not any(secret[i:i + 6] in got.reason for i in range(len(secret) - 5)), got.reason
    got = bearer_token(["Basic eDp5"])
    assert isinstance(got, Verdict) and "'Basic'" in got.reason and "eDp5" not in got.reason


def test_principal() -> None:
    """(iss, sub); without sub the client id; else anonymous; never the raw values."""
    alice = principal({"iss": ISSUER, "sub": "alice"})
    assert alice == principal({"iss": ISSUER, "sub": "alice", "jti": "x"}) and "alice" not in alice
    assert alice != principal({"iss": ISSUER, "sub": "mallory"})
    assert alice != principal({"iss": "https://other.example", "sub": "alice"})
    assert principal({"iss": ISSUER, "client_id": "c1"}) == principal({"iss": ISSUER, "azp": "c1"})
    assert principal({"iss": ISSUER, "client_id": "alice"}) != alice
    assert principal({"iss": ISSUER}) == "anonymous"


def test_denial_records_are_aggregated_per_minute() -> None:
    """The first LIMIT denials of a window verbatim, then one summary per window with counts."""
    now = [0.0]
    limiter = DenyLimiter(lambda: now[0], limit=3, window_s=60.0)
    written = [r for i in range(10)
               for r in limiter.note({"error": "no_token" if i % 2 else "x", "path": "/"})]
    assert [r["event"] for r in written] == ["deny"] * 3
    assert limiter.flush() == []  # the window has not ended
    now[0] = 60.0
    assert limiter.flush() == [{"event": "deny_summary", "counts": {"no_token": 4, "x": 3}, "suppressed": 7,
                                "window_s": 60.0}]
    assert limiter.flush() == []
    now[0] = 200.0
    assert [r["event"] for r in limiter.note({"error": "x"})] == ["deny"]


def test_jwks_parsing_keeps_only_public_signing_keys() -> None:
    """Secret, encryption and private keys, and garbage, are left out of the key set."""
    private = {**RSA.jwk(), "d": "AQAB", "kid": "priv"}
    keys = parse_jwks({"keys": [RSA.jwk(), {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
                                {**EC.jwk(), "use": "enc", "kid": "enc"}, private, {"kty": "RSA"}, 7]})
    assert [k.kid for k in keys] == ["rsa-1"]


BEARER: list[tuple[list[str], str, str | tuple[int, str]]] = [
    ([], "", (401, "")),
    (["Bearer abc.def-_~+/="], "", "abc.def-_~+/="),
    (["bearer abc"], "", "abc"),
    (["BEARER   abc  "], "", "abc"),
    (["Basic dXNlcjpwdw=="], "", (401, "")),
    (["Bearer"], "", (400, "invalid_request")),
    (["Bearer a b"], "", (400, "invalid_request")),
    (['Bearer a"b'], "", (400, "invalid_request")),
    (["Bearer a,b"], "", (400, "invalid_request")),
    (["Bearer " + "a" * 9000], "", (400, "invalid_request")),
    (["Bearer a", "Bearer a"], "", (400, "invalid_request")),
    ([], "access_token=abc", (400, "invalid_request")),
    (["Bearer abc"], "x=1&access_token=abc", (400, "invalid_request")),
    (["Bearer abc"], "x=access_token", "abc"),
]


@pytest.mark.parametrize(("values", "query", "expected"), BEARER)
def test_bearer_token(values: list[str], query: str, expected: str | tuple[int, str]) -> None:
    """Exactly one `Bearer <b64token>`, never in the query string; anything else its refusal."""
    got = bearer_token(values, query)
    if isinstance(expected, str):
        assert got == expected
    else:
        assert isinstance(got, Verdict) and (got.status, got.error) == expected


def test_challenge_values() -> None:
    """The bare challenge, one with an error and scopes, and one whose inputs try to break out."""
    url = "https://gw.example/.well-known/oauth-protected-resource/mcp"
    assert www_authenticate(url) == f'Bearer resource_metadata="{url}"'
    assert www_authenticate(url, error="insufficient_scope", description="missing scope: a b",
                            scopes=("a", "b")) == \
        f'Bearer resource_metadata="{url}", scope="a b", error="insufficient_scope", ' \
        'error_description="missing scope: a b"'
    evil = www_authenticate('u"\r\nx: 1', error='invalid_token"\n', description='a"\r\nSet-Cookie: x\\',
                            scopes=('s"',))
    assert "\r" not in evil and "\n" not in evil and "\\" not in evil
    assert evil.count('"') == 8  # four parameters, each quoted once


def _read(tmp_path: Path, document: object | str) -> tuple[str, list[str], list[str], AuthConfig | None]:
    path = tmp_path / "auth" / "auth.config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    reading = read_config(tmp_path, AUTH)
    return (reading.kind, [p.field or "" for p in reading.problems], [str(w) for w in reading.warnings],
            reading.value if reading.kind == "valid" else None)


GOOD = {"enabled": True, "issuer": ISSUER, "audience": "https://gw.example/mcp"}
CONFIG_CASES: list[tuple[object | str, list[str]]] = [
    (GOOD, []),
    ({**GOOD, "issuer": "http://127.0.0.1:8080", "jwksUri": "http://localhost:1/jwks?x=1"}, []),
    ({**GOOD, "algorithms": ["RS256", "PS512", "EdDSA"], "requiredScopes": ["mcp:tools"],
      "clockToleranceSec": 0, "protectOperations": False}, []),
    ({"enabled": False, "issuer": "not a url"}, ["issuer"]),
    ({"enabled": True}, ["issuer", "audience"]),
    ({**GOOD, "enabled": "yes"}, ["enabled"]),
    ({**GOOD, "issuer": "http://as.example"}, ["issuer"]),
    ({**GOOD, "audience": "https://gw.example/mcp#x"}, ["audience"]),
    ({**GOOD, "audience": "https://gw.example/mcp?x=1"}, ["audience"]),
    ({**GOOD, "audience": "https://user@gw.example/mcp"}, ["audience"]),
    ({**GOOD, "audience": 'https://gw.example/"x'}, ["audience"]),
    ({**GOOD, "jwksUri": "ftp://as.example/jwks"}, ["jwksUri"]),
    ({**GOOD, "algorithms": ["none"]}, ["algorithms[0]"]),
    ({**GOOD, "algorithms": ["RS256", "HS256"]}, ["algorithms[1]"]),
    ({**GOOD, "algorithms": ["XX1"]}, ["algorithms[0]"]),
    ({**GOOD, "algorithms": []}, ["algorithms"]),
    ({**GOOD, "algorithms": "RS256"}, ["algorithms"]),
    ({**GOOD, "requiredScopes": ["a b", ""]}, ["requiredScopes[0]", "requiredScopes[1]"]),
    ({**GOOD, "clockToleranceSec": 301}, ["clockToleranceSec"]),
    ({**GOOD, "clockToleranceSec": -1}, ["clockToleranceSec"]),
    ({**GOOD, "protectOperations": 1}, ["protectOperations"]),
    # URLs that do not parse, or whose host no fetch could use, are problems (never a crash).
    ({**GOOD, "issuer": "https://[as.example"}, ["issuer"]),
    ({**GOOD, "jwksUri": "https://[as.example/jwks"}, ["jwksUri"]),
    ({**GOOD, "issuer": "https://a..b"}, ["issuer"]),
    ({**GOOD, "issuer": "https://" + "a" * 64 + ".example"}, ["issuer"]),
    ({**GOOD, "jwksUri": "https://[zz]/jwks"}, ["jwksUri"]),
    ({**GOOD, "audience": "https://gw.example:99999/mcp"}, ["audience"]),
    ({**GOOD, "issuer": "https://[::1]:8443"}, []),
    # Unknown fields are problems here: a typo must not remove a requirement.
    ({**GOOD, "requiredScope": ["mcp:tools"]}, ["requiredScope"]),
]


def test_refused_algorithms_say_why(tmp_path: Path) -> None:
    """`none` and HMAC are refused as such, not merely as unknown names."""
    for name in ("none", "HS256", "hs512"):
        path = tmp_path / "auth" / "auth.config.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**GOOD, "algorithms": [name]}))
        (problem,) = read_config(tmp_path, AUTH).problems
        assert f"{name!r} is refused: only asymmetric signatures are accepted" in problem.message


@pytest.mark.parametrize(("document", "fields"), CONFIG_CASES)
def test_config_validation(tmp_path: Path, document: object, fields: list[str]) -> None:
    """Every invalid field is a problem naming it; a valid file is valid."""
    kind, problems, _, _ = _read(tmp_path, document)
    assert problems == fields
    assert kind == ("valid" if not fields else "malformed")


def test_config_defaults_missing_and_malformed(tmp_path: Path) -> None:
    """Missing: off. Defaults as documented. Bad JSON: malformed. Unknown fields: problems (a typo
    in a security field must not silently remove enforcement), naming the nearest known field."""
    missing = read_config(tmp_path, AUTH)
    assert missing.kind == "missing" and missing.value == AuthConfig() and not missing.value.enabled
    _, _, _, value = _read(tmp_path, GOOD)
    assert value is not None and value.algorithms == ("RS256", "ES256") and value.clock_tolerance_s == 30
    assert value.protect_operations and value.required_scopes == ()
    kind, problems, _, _ = _read(tmp_path, '{"enabled": true,')
    assert kind == "malformed" and problems == [""]
    kind, problems, _, _ = _read(tmp_path, {**GOOD, "requiredScope": ["mcp:tools"]})
    assert kind == "malformed" and problems == ["requiredScope"]
    (problem,) = read_config(tmp_path, AUTH).problems
    assert "did you mean 'requiredScopes'?" in problem.message


def test_metadata_and_public_authority() -> None:
    """The metadata URL is path-inserted; the public Host and Origin are the audience's."""
    config = AuthConfig(enabled=True, issuer=ISSUER, audience="https://GW.example/mcp",
                        required_scopes=("mcp:tools",))
    assert config.resource_metadata_url == "https://GW.example/.well-known/oauth-protected-resource/mcp"
    assert config.metadata_paths == {"/.well-known/oauth-protected-resource",
                                     "/.well-known/oauth-protected-resource/mcp"}
    assert config.metadata() == {"resource": "https://GW.example/mcp", "authorization_servers": [ISSUER],
                                 "bearer_methods_supported": ["header"], "scopes_supported": ["mcp:tools"]}
    for host, ok in [("gw.example", True), ("GW.EXAMPLE:443", True), ("gw.example:8443", False),
                     ("gw.example?", False), ("gw.example#", False), ("gw.example ", False),
                     ("gw.example\t", False), ("gw.example:443?x", False),
                     ("evil.example", False), ("gw.example@evil.example", False), ("gw.example/x", False),
                     ("", False), ("gw.example:", False)]:
        assert config.is_public_authority(host) is ok, host
    assert config.is_public_origin("https://gw.example")
    assert not config.is_public_origin("http://gw.example")
    assert not config.is_public_origin("https://gw.example.evil.example")
    root = AuthConfig(enabled=True, issuer=ISSUER, audience="http://127.0.0.1:8000")
    assert root.resource_metadata_url == "http://127.0.0.1:8000/.well-known/oauth-protected-resource"
    assert root.is_public_authority("127.0.0.1:8000") and not root.is_public_authority("127.0.0.1")


def test_bind_decision() -> None:
    """A non-loopback bind needs authentication on; loopback never does."""
    assert bind_refusal("127.0.0.1", authenticated=False) is None
    assert bind_refusal("::1", authenticated=False) is None
    refused = bind_refusal("0.0.0.0", authenticated=False)
    assert refused is not None and "auth/auth.config.json" in refused
    assert bind_refusal("0.0.0.0", authenticated=True) is None
    assert bind_refusal("192.0.2.7", authenticated=True) is None
