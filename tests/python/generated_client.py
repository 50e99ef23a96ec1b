"""A client generated from docs/openapi.json, used against a live cluster.

    openapi-python-client generate --path docs/openapi.json --meta none \
        --output-path <dir>/raftlock_client
    PYTHONPATH=<dir> python tests/python/generated_client.py <base-url> <service-role-key>

Run by tests/tests/openapi.rs. Every call goes through the generated functions and models;
each answer is checked, so a schema the server does not follow (or a generator that cannot
read the document) fails here.
"""

import sys
import uuid

from raftlock_client import AuthenticatedClient
from raftlock_client.api.hierarchical_locks import (
    acquire_lock,
    create_lock_lease,
    create_namespace,
    get_lock,
    release_lock,
)
from raftlock_client.api.project_locks import acquire_project_lock, read_project_lock
from raftlock_client.models import (
    AcquireLockRequest,
    AcquireOutcome,
    CreateLockLeaseRequest,
    CreateNamespaceRequest,
    LeaseResponse,
    LockRequest,
    LockState,
    LockStatus,
    ReleaseLockRequest,
    RpcError,
    TtlRequest,
)


def main(base_url: str, key: str) -> None:
    client = AuthenticatedClient(base_url=base_url, token=key)
    suffix = uuid.uuid4().hex[:12]

    # Project locks: acquire, then read it back as held with the same fencing token.
    lock_key = f"py-{suffix}"
    # The generator types uuid headers as UUID but hands them to httpx unconverted: a str.
    owner = str(uuid.uuid4())
    lease = acquire_project_lock.sync(
        key=lock_key, client=client, body=TtlRequest(ttl_seconds=30), x_volcano_lock_token=owner
    )
    assert isinstance(lease, LeaseResponse), lease
    status = read_project_lock.sync(key=lock_key, client=client)
    assert isinstance(status, LockStatus) and status.held, status
    assert status.fencing_token == lease.fencing_token, (status, lease)

    # Hierarchical locks: namespace, lease, exclusive acquire, read, release.
    ns = f"py-{suffix}"
    created = create_namespace.sync(client=client, body=CreateNamespaceRequest(name=ns))
    assert not isinstance(created, RpcError) and created.namespace.version == 1, created
    lease = create_lock_lease.sync(
        client=client,
        body=CreateLockLeaseRequest(namespace_name=ns, process_id="python", ttl_seconds=30),
    ).lease
    acquired = acquire_lock.sync(
        client=client,
        body=AcquireLockRequest(
            namespace_name=ns, lock_name="jobs/nightly", lease_id=lease.lease_id, exclusive=True
        ),
    )
    assert acquired.outcome == AcquireOutcome.ACQUIRE_OUTCOME_ACQUIRED, acquired
    lock = get_lock.sync(client=client, body=LockRequest(namespace_name=ns, lock_name="jobs/nightly"))
    assert lock.lock.state == LockState.LOCK_STATE_EXCLUSIVE_LOCKED, lock
    assert [h.lease_id for h in lock.lock.lock_holders] == [lease.lease_id], lock
    released = release_lock.sync(
        client=client,
        body=ReleaseLockRequest(namespace_name=ns, lock_name="jobs/nightly", lease_id=lease.lease_id),
    )
    assert released.lock.state == LockState.LOCK_STATE_UNLOCKED, released

    # A documented error comes back as the typed error model.
    missing = get_lock.sync(client=client, body=LockRequest(namespace_name=f"absent-{suffix}", lock_name="x"))
    assert isinstance(missing, RpcError) and missing.code.value == "not_found", missing
    print("generated python client: ok")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
