"""schemathesis hooks for tests/tests/openapi.rs.

A blocking call (AcquireLock, AcquireSemaphore, WaitForWaitGroup, WaitAtBarrier) may wait up
to its `timeout_seconds` (documented maximum 300) before it answers. schemathesis gives each
request 30 s, so a generated wait of 115 s on a barrier that existed was reported as a network
error (a CI run): the server was right to wait. Valid waits longer than a few seconds are
shortened before the call; waits outside the documented range are sent as generated, so their
400 answers are still checked.
"""

import schemathesis

# Longest wait a fuzzed blocking call may take, in seconds.
WAIT_CAP_SECONDS = 2
# The documented maximum of `timeout_seconds` (docs/openapi.json).
DOCUMENTED_MAX_SECONDS = 300


@schemathesis.hook
def before_call(context, case, kwargs):
    body = case.body
    if not isinstance(body, dict):
        return
    wait = body.get("timeout_seconds")
    # Integers only: the field is an integer, so a generated float is an invalid case to send
    # as it is.
    if isinstance(wait, bool) or not isinstance(wait, int):
        return
    if WAIT_CAP_SECONDS < wait <= DOCUMENTED_MAX_SECONDS:
        body["timeout_seconds"] = WAIT_CAP_SECONDS
