"""schemathesis hooks for tests/tests/openapi.rs.

`make test` runs schemathesis with every check (`--checks all`), including
`positive_data_acceptance` (a request the document allows must not be refused) and
`negative_data_rejection` (a request it forbids must be). A few rules depend on the server's
state or clock, which no schema can state; for those only, a request schemathesis generated as
*valid* is adjusted before it is sent, so the checks judge what the document can say. Each is
named here with its reason; cases generated as invalid are always sent as generated.

1. Request ids (`X-Volcano-Request-Id`). A write carrying one is applied once and every later
   call with the same id gets the first answer, or `400` if it is a different request
   (docs/semantics.md). The generator reuses values across operations (every case of a run may
   carry `00000000-0000-0000-0000-000000000000`), which is the client error the rule exists
   to catch. A well-formed id is replaced by a fresh one; a malformed one is kept (its `400`
   is checked).
2. Pagination tokens. Only a token the server issued for the same list continues it; any
   other string is refused with `400` (the document says so). A generated non-empty token in
   a valid case becomes `""` (the first page).
3. Wait-group deadlines. `expires_at` must be at least 60 s after the leader applies the call
   (`UpdateWaitGroup`: after it) — a bound that moves with the clock. In a valid case a
   deadline less than two minutes ahead is moved one hour ahead.
4. Byte lengths. The server bounds descriptions (1024), metadata keys (128) and values
   (256) and key scopes (64) in UTF-8 bytes, since the budgets are bytes; JSON Schema's
   `maxLength` counts characters, so the document can state only the same number as
   characters. A valid case's string that
   is within the character count but over the byte count is cut to fit.
5. Large whole floats. The server reads a number written with a fraction or exponent
   (`60.0`, `6e1`) as the integer it equals, but only below 2^53: above it a float is not
   exact (`9007199254740993.0` parses as ...992), and the server refuses to guess. JSON
   Schema calls every whole number an `integer` whatever its spelling, so a valid case's
   whole float at or above 2^53 is sent in integer form (same value, exact spelling).
6. Blocking calls. AcquireLock, AcquireSemaphore, WaitForWaitGroup and WaitAtBarrier may wait
   up to their `timeout_seconds` (at most 300) before answering, and schemathesis gives each
   request 30 s: a generated wait of 115 s on a barrier that existed was reported as a network
   error (a CI run) while the server was right to wait. Valid waits longer than a few seconds
   are shortened; waits outside the documented range are sent as generated.

A well-formed request that the current state refuses (a stale `expected_version`, a report
past a wait group's counter, a barrier generation already tripped...) answers `409`, which
every check accepts for a valid request: no adjustment is needed for those.
"""

import time
import uuid

import schemathesis
from schemathesis.core.parameters import ParameterLocation

# Longest wait a fuzzed blocking call may take, in seconds.
WAIT_CAP_SECONDS = 2
# The documented maximum of `timeout_seconds` (docs/openapi.json).
DOCUMENTED_MAX_SECONDS = 300
REQUEST_ID = "X-Volcano-Request-Id"
# `expires_at` a valid case gets when the generated one is too close (ns ahead of now).
DEADLINE_LEAD_NS = 3600 * 10**9
# A generated deadline closer than this is moved (the rule is 60 s; margin for the trip).
DEADLINE_MIN_NS = 120 * 10**9


def _generated_valid(case, location):
    """Whether schemathesis generated this part of the case as valid data."""
    meta = getattr(case, "_meta", None)
    if meta is None:
        return False
    if not meta.generation.mode.is_positive:
        return False
    return not meta.is_negative_at(location)


def _is_uuid(value):
    try:
        return len(value) == 36 and str(uuid.UUID(value)) == value.lower()
    except (ValueError, TypeError, AttributeError):
        return False


def _fresh_request_id(case):
    headers = case.headers
    if not headers or REQUEST_ID not in headers or not _is_uuid(headers[REQUEST_ID]):
        return
    # Not in a case whose headers were made invalid on purpose (a missing `Authorization`,
    # a malformed lock token): the server refuses it before the id matters, and editing the
    # headers would make schemathesis re-judge the case as valid and send the credential it
    # meant to leave out.
    meta = getattr(case, "_meta", None)
    if meta is not None and meta.is_negative_at(ParameterLocation.HEADER):
        return
    headers[REQUEST_ID] = str(uuid.uuid4())


def _first_page(case, body):
    token = body.get("pagination_token")
    if isinstance(token, str) and token and _generated_valid(case, ParameterLocation.BODY):
        body["pagination_token"] = ""


def _deadline_ahead(case, body):
    if not case.path.endswith("WaitGroup"):
        return
    deadline = body.get("expires_at")
    # A whole float is read as that integer (as for waits, below).
    if isinstance(deadline, float) and deadline.is_integer():
        deadline = int(deadline)
    if isinstance(deadline, bool) or not isinstance(deadline, int):
        return
    if not _generated_valid(case, ParameterLocation.BODY):
        return
    now = time.time_ns()
    if deadline < now + DEADLINE_MIN_NS:
        body["expires_at"] = now + DEADLINE_LEAD_NS


# Byte bounds of the server's validators (crates/raftlock-core/src/validate.rs).
DESCRIPTION_BYTES = 1024
METADATA_KEY_BYTES = 128
METADATA_VALUE_BYTES = 256
SCOPE_BYTES = 64
def _cut(text, limit):
    while len(text.encode("utf-8")) > limit:
        text = text[:-1]
    return text


def _fit_metadata(holder):
    metadata = holder.get("metadata")
    if isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values()):
        fitted = {}
        for key, value in metadata.items():
            if isinstance(key, str):
                fitted[_cut(key, METADATA_KEY_BYTES) or "k"] = _cut(value, METADATA_VALUE_BYTES)
        holder["metadata"] = fitted


def _within_bytes(case, body):
    if not _generated_valid(case, ParameterLocation.BODY):
        return
    if isinstance(body.get("description"), str):
        body["description"] = _cut(body["description"], DESCRIPTION_BYTES)
    _fit_metadata(body)
    # Completed jobs carry metadata of their own.
    for job in body.get("jobs") or []:
        if isinstance(job, dict):
            _fit_metadata(job)
    scopes = body.get("scopes")
    if isinstance(scopes, list) and all(isinstance(x, str) for x in scopes):
        body["scopes"] = [_cut(x, SCOPE_BYTES) or "s" for x in scopes]


EXACT_FLOAT_LIMIT = 2**53


def _exact_integers(value):
    """`value` with every whole float at or above 2^53 written as an integer."""
    if isinstance(value, float) and value.is_integer() and abs(value) >= EXACT_FLOAT_LIMIT:
        return int(value)
    if isinstance(value, dict):
        return {k: _exact_integers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_exact_integers(v) for v in value]
    return value


def _short_wait(body):
    wait = body.get("timeout_seconds")
    if isinstance(wait, bool) or not isinstance(wait, (int, float)):
        return
    # The server reads a number with a zero fraction as that integer (`181.0` is 181,
    # crates/raftlock-server/src/http/body.rs, as the JS SDK may send it), so such a float
    # waits as long: a generated 181.0 on a barrier that existed waited past the 30 s (a
    # `make test` run, 12-04). Any other float is an invalid case, sent as generated.
    if isinstance(wait, float) and not wait.is_integer():
        return
    if WAIT_CAP_SECONDS < wait <= DOCUMENTED_MAX_SECONDS:
        body["timeout_seconds"] = WAIT_CAP_SECONDS


@schemathesis.hook
def before_call(context, case, kwargs):
    _fresh_request_id(case)
    body = case.body
    if not isinstance(body, dict):
        return
    if _generated_valid(case, ParameterLocation.BODY):
        for key, value in list(body.items()):
            body[key] = _exact_integers(value)
    _first_page(case, body)
    _deadline_ahead(case, body)
    _within_bytes(case, body)
    _short_wait(body)
