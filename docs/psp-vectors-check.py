#!/usr/bin/env python3
"""Independent check of shared/testdata/{omise-webhook-signatures,2c2p-notification-jwts}.json.
Written for the PSP research notes (psp-research.md). Stdlib only."""
import base64, hashlib, hmac, json, re

import os
TD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "shared", "testdata") + "/"

def omise_verify(secret_b64, body, ts, header, now, tol=300):
    if not header or not ts.isdigit():
        return False
    if abs(now - int(ts)) > tol:
        return False
    key = base64.b64decode(secret_b64, validate=True)
    exp = hmac.new(key, ts.encode() + b"." + body.encode(), hashlib.sha256).hexdigest()
    return any(hmac.compare_digest(s.strip(), exp) for s in header.split(",") if s.strip())

def b64url(s):
    if not re.fullmatch(r"[A-Za-z0-9_-]*", s):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))

def c2p_verify(secret, tok):
    parts = tok.split(".")
    if len(parts) != 3:
        return None
    try:
        hdr = json.loads(b64url(parts[0]))
        sig = b64url(parts[2])
    except Exception:
        return None
    if hdr.get("alg") != "HS256":
        return None
    exp = hmac.new(secret.encode(), (parts[0] + "." + parts[1]).encode(), hashlib.sha256).digest()
    if not hmac.compare_digest(sig, exp):
        return None
    return json.loads(b64url(parts[1]))

o = json.load(open(TD + "omise-webhook-signatures.json"))
print("OMISE key (decoded):", base64.b64decode(o["secret_base64"]))
for c in o["cases"]:
    got = omise_verify(o["secret_base64"], o["payload"], c["timestamp"], c["signature"], c["now"])
    print(f"  {'OK ' if got == c['valid'] else 'BAD'} expect={c['valid']!s:5} got={got!s:5}  {c['name']}")

t = json.load(open(TD + "2c2p-notification-jwts.json"))
for c in t["cases"]:
    claims = c2p_verify(t["secret_key"], c["payload"])
    got = claims is not None
    same = (claims == c.get("claims")) if got else None
    print(f"  {'OK ' if got == c['valid'] else 'BAD'} expect={c['valid']!s:5} got={got!s:5} claims_match={same}  {c['name']}")

# 2C2P's own documented sample (developer.2c2p.com/docs/json-web-tokens-jwt): the key is the ASCII text
doc_tok = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJtZXJjaGFudElEIjoiSlQwMSIsImludm9pY2VObyI6IjE1MjM5NTM2NjEiLCJkZXNjcmlwdGlvbiI6Iml0ZW0gMSIsImFtb3VudCI6MTAwMCwiY3VycmVuY3lDb2RlIjoiU0dEIn0"
           ".ElmhOULUdK63FnriSs2XyhH1LxULoTVIopTUuQ77DvA")
doc_key = "1F4EDB965BBB3094F791A83750FBDCDA3852131CB5218E21E4F42929A1975E60"
print("2C2P doc sample, key as ASCII text :", c2p_verify(doc_key, doc_tok))
h, p, s = doc_tok.split(".")
hexkey_ok = hmac.compare_digest(b64url(s), hmac.new(bytes.fromhex(doc_key), (h + "." + p).encode(), hashlib.sha256).digest())
print("2C2P doc sample, key hex-decoded   :", hexkey_ok)
