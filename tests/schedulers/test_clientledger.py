"""ClientLedger without sockets: a slow client's replies park and its tasks are not admitted,
nothing is lost or reordered, a gone client's state is dropped, connections map to clients."""

from __future__ import annotations

import pytest

from zpar.schedulers.clientledger import ClientLedger, Delivery
from zpar.schedulers.clientlink import Send

A, B = b"\x00client-a", b"\x00client-b"

#: What a reply became, as ClientLink.send carries out the ledger's word
SENT, PARKED, DROPPED = "sent", Delivery.PARKED, Delivery.DROPPED


def deliver(ledger: ClientLedger, client: bytes, reply: object, send) -> object:
    """ClientLink.send without a socket: the ledger's word, the send, its outcome told."""
    verdict = ledger.deliver(client, reply)
    if verdict is not Delivery.SEND:
        return verdict
    outcome = send(client, reply)
    if outcome is Send.FULL:
        ledger.full(client, reply)
        return PARKED
    if outcome is Send.GONE:
        ledger.forget(client)
        return DROPPED
    return SENT


def flush(ledger: ClientLedger, send) -> tuple[list[bytes], list[bytes]]:
    """ClientLink.flush without a socket: (clients caught up, clients found gone)."""
    caught_up, gone = [], []
    for client in ledger.stalled_clients():
        while True:
            outcome = send(client, ledger.oldest(client))
            if outcome is Send.FULL:
                break
            if outcome is Send.GONE:
                gone.append(client)
                break
            if ledger.sent_oldest(client):
                caught_up.append(client)
                break
    return caught_up, gone


class FakePipes:
    """Each client's pipe takes ``room[client]`` replies, then answers FULL; a closed
    client answers GONE. ``out`` is what each client received, in order."""

    def __init__(self, **room: int) -> None:
        self.room = {k.encode(): v for k, v in room.items()}
        self.closed: set[bytes] = set()
        self.out: dict[bytes, list[object]] = {}
        self.calls = 0

    def __call__(self, client: bytes, reply: object) -> Send:
        self.calls += 1
        if client in self.closed:
            return Send.GONE
        key = client.lstrip(b"\x00").removeprefix(b"client-")
        left = self.room.get(key, 10**9)
        if left <= 0:
            return Send.FULL
        self.room[key] = left - 1
        self.out.setdefault(client, []).append(reply)
        return Send.SENT

    def drain(self, client: bytes, n: int) -> None:
        key = client.lstrip(b"\x00").removeprefix(b"client-")
        self.room[key] = self.room.get(key, 0) + n


def test_replies_go_straight_out_while_the_pipe_has_room():
    ledger = ClientLedger()
    send = FakePipes(a=5)
    assert [deliver(ledger, A, i, send) for i in range(3)] == [SENT] * 3
    assert send.out[A] == [0, 1, 2]
    assert not ledger.stalled(A) and not ledger.busy
    assert ledger.admit(A)  # its tasks may run


def test_a_full_pipe_parks_the_reply_and_every_later_one_in_order():
    ledger = ClientLedger()
    send = FakePipes(a=2)
    outcomes = [deliver(ledger, A, i, send) for i in range(6)]
    assert outcomes == [SENT] * 2 + [PARKED] * 4
    assert ledger.stalled(A) and ledger.busy
    assert ledger.parked_of(A) == 4
    # parked replies behind the first are not even tried: order is kept
    assert send.calls == 3
    assert ledger.counts() == {"stalled": 1, "parked": 4, "connections": 0}


def test_a_stalled_clients_tasks_are_not_admitted_until_its_replies_are_out():
    ledger = ClientLedger()
    send = FakePipes(a=0)
    assert deliver(ledger, A, "r0", send) is PARKED
    assert not ledger.admit(A)
    ledger.placed(A)  # the book's other calls change nothing: the limit is the pipe
    ledger.answered(A)
    assert not ledger.admit(A)
    # still full: nobody caught up, nothing lost
    assert flush(ledger, send) == ([], [])
    assert ledger.parked_of(A) == 1
    send.drain(A, 1)
    assert deliver(ledger, A, "r1", send) is PARKED  # behind r0 even with room
    caught_up, gone = flush(ledger, send)
    # room for one: r0 goes, r1 waits, its tasks still wait
    assert (caught_up, gone) == ([], [])
    assert send.out[A] == ["r0"] and not ledger.admit(A)
    send.drain(A, 10)
    caught_up, gone = flush(ledger, send)
    assert caught_up == [A] and gone == []
    assert send.out[A] == ["r0", "r1"]
    assert not ledger.stalled(A) and not ledger.busy and ledger.admit(A)
    assert ledger.counts() == {"stalled": 0, "parked": 0, "connections": 0}
    # caught up: its next reply goes straight out again
    assert deliver(ledger, A, "r2", send) is SENT


def test_other_clients_are_served_while_one_is_stalled():
    ledger = ClientLedger()
    send = FakePipes(a=0, b=100)
    assert deliver(ledger, A, "a0", send) is PARKED
    assert not ledger.admit(A)
    assert ledger.admit(B)
    assert deliver(ledger, B, "b0", send) is SENT
    assert flush(ledger, send) == ([], [])
    assert send.out == {B: ["b0"]}


def test_a_client_found_gone_while_flushing_is_reported_and_forgotten():
    ledger = ClientLedger()
    send = FakePipes(a=0)
    deliver(ledger, A, "r0", send)
    deliver(ledger, A, "r1", send)
    send.closed.add(A)
    caught_up, gone = flush(ledger, send)
    assert caught_up == [] and gone == [A]
    ledger.forget(A)  # the caller cancels its tasks
    assert not ledger.busy and ledger.counts()["parked"] == 0
    assert ledger.is_gone(A)
    calls = send.calls
    assert deliver(ledger, A, "late", send) is DROPPED
    assert send.calls == calls  # a gone client is not even tried
    assert not ledger.admit(A)  # never again


def test_send_answering_gone_drops_the_reply():
    ledger = ClientLedger()
    send = FakePipes()
    send.closed.add(B)
    assert deliver(ledger, B, "r", send) is DROPPED
    assert not ledger.stalled(B)


def test_a_closed_connection_names_the_client_last_seen_on_it():
    ledger = ClientLedger()
    assert not ledger.known(A, 7)
    ledger.seen(A, 7)
    ledger.seen(B, 8)
    assert ledger.known(A, 7) and ledger.known(B, 8)
    assert ledger.counts()["connections"] == 2
    assert ledger.closed(7) == A
    assert ledger.closed(7) is None  # told twice: nothing more
    assert ledger.closed(99) is None  # a connection that never sent anything
    assert not ledger.known(A, 7)


def test_a_reused_fd_belongs_to_its_new_client_once_the_old_close_was_noted():
    ledger = ClientLedger()
    ledger.seen(A, 7)
    assert ledger.closed(7) == A
    ledger.forget(A)
    ledger.seen(B, 7)  # the OS gave the next connection the same fd
    assert ledger.closed(7) == B
    # a late message of the gone client does not take the fd back
    ledger.seen(A, 7)
    assert not ledger.known(A, 7)


def test_a_client_seen_on_another_connection_moves_there():
    ledger = ClientLedger()
    ledger.seen(A, 7)
    ledger.seen(A, 9)
    assert ledger.closed(7) is None
    ledger.seen(B, 11)
    ledger.seen(A, 11)  # fd 11 now A's (B's close was missed): B no longer maps there
    assert ledger.closed(11) == A
    assert not ledger.known(B, 11)


def test_forget_drops_the_clients_connection_and_bounds_the_gone_memory():
    ledger = ClientLedger(gone_remembered=3)
    ledger.seen(A, 5)
    ledger.forget(A)
    assert ledger.closed(5) is None  # its close, reported after, is nobody's
    for i in range(5):
        ledger.forget(bytes([i]))
    assert not ledger.is_gone(A) and not ledger.is_gone(b"\x01")
    assert all(ledger.is_gone(bytes([i])) for i in (2, 3, 4))


@pytest.mark.parametrize("room", [0, 1, 3])
def test_every_reply_arrives_exactly_once_whatever_the_pipe_room(room):
    """A long exchange: the client reads ``room`` replies between flushes; in the end it
    has every reply once, in order, and it was admitted again each time it caught up."""
    ledger = ClientLedger()
    send = FakePipes(a=room)
    stalls = catch_ups = 0
    for i in range(50):
        was_admitted = ledger.admit(A)
        deliver(ledger, A, i, send)
        stalls += was_admitted and not ledger.admit(A)
        send.drain(A, room)
        caught_up, gone = flush(ledger, send)
        assert gone == []
        catch_ups += len(caught_up)
        assert ledger.admit(A) == (not ledger.stalled(A))
    while ledger.busy:
        send.drain(A, 1)
        catch_ups += len(flush(ledger, send)[0])
    assert send.out[A] == list(range(50))
    assert ledger.admit(A) and catch_ups == stalls


# -- close events read late, after the OS reused the descriptor's number ------------------
# (the events come through the listener guard's thread; the caller names the socket a
# descriptor names now: its inode, here 100, 101, ...)


def test_a_late_close_of_a_reused_descriptor_does_not_make_its_new_client_gone():
    ledger = ClientLedger()
    ledger.seen(A, 7, 100)
    # A closes, B connects and gets number 7 (socket 101); B's message is read before
    # A's close event: A is proven gone, B takes the number
    assert ledger.seen(B, 7, 101) == A
    assert ledger.closed(7, 101) is None  # A's event, late: 7 still names B's socket
    assert ledger.owner(7) == B and ledger.known(B, 7)
    assert ledger.closed(7, None) == B  # B's own close: the number names nothing now


def test_a_close_event_before_libzmq_closed_the_descriptor_names_the_client_on_a_new_look():
    ledger = ClientLedger()
    ledger.seen(A, 7, 100)
    assert ledger.closed(7, 100) is None and ledger.owner(7) == A  # not yet closed: ask again
    assert ledger.closed(7, None) == A


def test_a_message_queued_from_a_closed_connection_does_not_take_the_live_ones_number():
    ledger = ClientLedger()
    ledger.seen(B, 7, 101)
    assert ledger.seen(A, 7, 101) is None  # A's message came on 7 before B's socket had it
    assert ledger.owner(7) == B and not ledger.known(A, 7)
    assert not ledger.is_gone(A) and not ledger.is_gone(B)


def test_a_client_whose_socket_was_closed_when_seen_is_gone_once_its_number_is_reused():
    ledger = ClientLedger()
    ledger.seen(A, 7, None)  # its message was read after its connection had closed
    assert ledger.seen(B, 7, 101) == A
    assert ledger.owner(7) == B
