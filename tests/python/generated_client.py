"""A client generated from docs/openapi.json, used against a live cluster.

    openapi-python-client generate --path docs/openapi.json --meta none \
        --output-path <dir>/raftlock_client
    PYTHONPATH=<dir> python tests/python/generated_client.py <base-url> <service-role-key>

Run by tests/tests/openapi.rs. A workflow of every primitive: project locks, hierarchical
locks, semaphores, wait groups and barriers, with blocking calls given integer and float
timeouts (both are numbers a client may send). Every call goes through the generated
functions and models; each answer is checked, so a schema the server does not follow (or a
generator that cannot read the document) fails here.
"""

import sys
import time
import uuid

from raftlock_client import AuthenticatedClient
from raftlock_client.api.hierarchical_locks import (
    acquire_lock,
    acquire_semaphore,
    arrive_at_barrier,
    complete_jobs_from_wait_group,
    create_barrier,
    create_lock_lease,
    create_namespace,
    create_semaphore,
    create_semaphore_lease,
    create_wait_group,
    get_lock,
    release_lock,
    release_semaphore,
    wait_at_barrier,
    wait_for_wait_group,
)
from raftlock_client.api.project_locks import acquire_project_lock, read_project_lock
from raftlock_client.models import (
    AcquireLockRequest,
    AcquireOutcome,
    AcquireSemaphoreRequest,
    ArriveAtBarrierRequest,
    BarrierWaitOutcome,
    CompleteJobsFromWaitGroupRequest,
    CreateBarrierRequest,
    CreateSemaphoreRequest,
    CreateWaitGroupRequest,
    JobReport,
    ReleaseSemaphoreRequest,
    WaitAtBarrierRequest,
    WaitForWaitGroupRequest,
    WaitGroupStatus,
    WaitGroupWaitOutcome,
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

    semaphores(client, ns)
    wait_groups(client, ns)
    barriers(client, ns)

    # A documented error comes back as the typed error model.
    missing = get_lock.sync(client=client, body=LockRequest(namespace_name=f"absent-{suffix}", lock_name="x"))
    assert isinstance(missing, RpcError) and missing.code.value == "not_found", missing
    print("generated python client: ok")


def semaphores(client, ns):
    """Two permits: a weight-2 hold, then a blocking acquire that times out (an integer
    timeout), a release, and the same acquire granted (a float timeout, as JavaScript or a
    JSON library may send it)."""
    made = create_semaphore.sync(
        client=client,
        body=CreateSemaphoreRequest(namespace_name=ns, semaphore_name="api", permits=2),
    )
    assert not isinstance(made, RpcError) and made.semaphore.permits == 2, made
    leases = [
        create_semaphore_lease.sync(
            client=client,
            body=CreateLockLeaseRequest(namespace_name=ns, process_id=f"w{i}", ttl_seconds=30),
        ).lease.lease_id
        for i in range(2)
    ]
    first = acquire_semaphore.sync(
        client=client,
        body=AcquireSemaphoreRequest(
            namespace_name=ns, semaphore_name="api", lease_id=leases[0], weight=2
        ),
    )
    assert first.outcome == AcquireOutcome.ACQUIRE_OUTCOME_ACQUIRED, first
    started = time.monotonic()
    blocked = acquire_semaphore.sync(
        client=client,
        body=AcquireSemaphoreRequest(
            namespace_name=ns, semaphore_name="api", lease_id=leases[1], weight=1, timeout_seconds=1
        ),
    )
    assert blocked.outcome == AcquireOutcome.ACQUIRE_OUTCOME_TIMED_OUT, blocked
    assert time.monotonic() - started >= 0.9, "the integer timeout was waited"
    released = release_semaphore.sync(
        client=client,
        body=ReleaseSemaphoreRequest(namespace_name=ns, semaphore_name="api", lease_id=leases[0]),
    )
    assert released.semaphore.active_holds == 0, released
    granted = acquire_semaphore.sync(
        client=client,
        body=AcquireSemaphoreRequest(
            namespace_name=ns, semaphore_name="api", lease_id=leases[1], weight=1, timeout_seconds=2.0
        ),
    )
    assert granted.outcome == AcquireOutcome.ACQUIRE_OUTCOME_ACQUIRED, granted
    assert granted.fencing_token > first.fencing_token, (granted, first)


def wait_groups(client, ns):
    """Two jobs: a wait that times out while one is missing (a float timeout), then the
    second job completes the group and a wait (an integer timeout) sees it at once."""
    hour_ahead = time.time_ns() + 3600 * 10**9
    made = create_wait_group.sync(
        client=client,
        body=CreateWaitGroupRequest(
            namespace_name=ns,
            wait_group_name="batch",
            counter=2,
            expires_at=hour_ahead,
            delete_after_finished_seconds=600,
        ),
    )
    assert not isinstance(made, RpcError) and made.wait_group.counter == 2, made
    one = complete_jobs_from_wait_group.sync(
        client=client,
        body=CompleteJobsFromWaitGroupRequest(
            namespace_name=ns, wait_group_name="batch", jobs=[JobReport(job_id="a")]
        ),
    )
    assert one.wait_group.completed_jobs == 1, one
    waited = wait_for_wait_group.sync(
        client=client,
        body=WaitForWaitGroupRequest(namespace_name=ns, wait_group_name="batch", timeout_seconds=1.0),
    )
    assert waited.outcome == WaitGroupWaitOutcome.WAIT_GROUP_WAIT_OUTCOME_TIMED_OUT, waited
    both = complete_jobs_from_wait_group.sync(
        client=client,
        body=CompleteJobsFromWaitGroupRequest(
            namespace_name=ns, wait_group_name="batch", jobs=[JobReport(job_id="a"), JobReport(job_id="b")]
        ),
    )
    assert both.wait_group.status == WaitGroupStatus.WAIT_GROUP_STATUS_COMPLETED, both
    done = wait_for_wait_group.sync(
        client=client,
        body=WaitForWaitGroupRequest(namespace_name=ns, wait_group_name="batch", timeout_seconds=5),
    )
    assert done.outcome == WaitGroupWaitOutcome.WAIT_GROUP_WAIT_OUTCOME_COMPLETED, done


def barriers(client, ns):
    """Two processes: the first waits (a float timeout) and times out alone; the second's
    arrival trips generation 1, which a wait (an integer timeout) then reports."""
    made = create_barrier.sync(
        client=client,
        body=CreateBarrierRequest(
            namespace_name=ns, barrier_name="phase", expected_processes=2, delete_inactive_after_seconds=600
        ),
    )
    assert not isinstance(made, RpcError) and made.barrier.generation == 1, made
    first = arrive_at_barrier.sync(
        client=client,
        body=ArriveAtBarrierRequest(namespace_name=ns, barrier_name="phase", process_id="p1", expected_generation=1),
    )
    assert not first.all_arrived, first
    alone = wait_at_barrier.sync(
        client=client,
        body=WaitAtBarrierRequest(namespace_name=ns, barrier_name="phase", expected_generation=1, timeout_seconds=1.0),
    )
    assert alone.outcome == BarrierWaitOutcome.BARRIER_WAIT_OUTCOME_TIMED_OUT, alone
    second = arrive_at_barrier.sync(
        client=client,
        body=ArriveAtBarrierRequest(namespace_name=ns, barrier_name="phase", process_id="p2", expected_generation=1),
    )
    assert second.all_arrived, second
    tripped = wait_at_barrier.sync(
        client=client,
        body=WaitAtBarrierRequest(namespace_name=ns, barrier_name="phase", expected_generation=1, timeout_seconds=5),
    )
    assert tripped.outcome == BarrierWaitOutcome.BARRIER_WAIT_OUTCOME_TRIPPED, tripped


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
