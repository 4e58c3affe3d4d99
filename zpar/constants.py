"""Constants every zpar process agrees on, each with the reason for its value."""

from __future__ import annotations

#: Separates routing identities from the signed message (design.md "Wire format").
DELIM = b"<ZPAR|MSG>"

#: Starts a batch: several signed messages in one ZMQ message, each checked on its own
#: (zpar.wire.batch; docs/protocol.md "Batches"). pyzmq costs ~2 us a frame and ~5 us a
#: multipart; under load a batch pays the multipart once for many messages.
BATCH_DELIM = b"<ZPAR|BATCH>"

#: Most messages one batch may carry; a larger one is refused whole. Bounds the work one
#: receive does, so a receiver's other sockets are not starved (senders split longer runs).
MAX_BATCH = 1024

#: Wire protocol version, carried in every header; bumped on any incompatible change.
#: 2.0: one signed msgpack envelope instead of four frames, buffers covered by the signature.
PROTOCOL_VERSION = "2.0"

#: Signature scheme written into connection files; the only one implemented.
SIGNATURE_SCHEME = "hmac-sha256"

#: Bytes of each buffer's keyed BLAKE3 tag inside the signed envelope: 128 bits, as a MAC
#: needs (the scheme's forgery chance is 2**-128 per try).
BUFFER_TAG_SIZE = 16

#: Buffers smaller than this are covered by the message's HMAC directly (its envelope, then
#: each such buffer): a BLAKE3 tag costs 2-5 us to set up, an HMAC update of 100 bytes
#: 0.1 us. Larger buffers get a tag of their own in the envelope, so a relay or the hub can
#: check a message without reading them.
INLINE_SIGNED_MAX = 64 * 1024

#: Buffers at least this large are hashed by BLAKE3 on every core: below it, starting the
#: threads costs more than it saves (measured: 8 MiB hashes in ~3 ms on one core here).
PARALLEL_TAG_MIN = 8 * 2**20

#: Longest msg_id a receiver accepts (ours are ~30 characters): bounds what a peer can make
#: the hub store per record.
MAX_MSG_ID = 256

#: Buffers at least this large leave the pickle stream and travel as their own zero-copy
#: frames. Matches pyzmq's own copy threshold: below it, copy=False would copy anyway.
OOB_THRESHOLD = 64 * 1024

#: Frames smaller than this are sent with copy=True: building a zmq.Frame costs more than
#: memcpy for small payloads.
COPY_THRESHOLD = 64 * 1024

#: Signatures remembered for replay detection (per receiving process). Same order as
#: jupyter_client's digest_history_size (2**16); 2 MB, fixed (zpar.wire.recent.RecentKeys).
REPLAY_HISTORY = 1 << 16
#: The engine's signal thread sees a few messages a minute: a short history is enough.
SIGNAL_REPLAY_HISTORY = 1 << 10

#: Seconds between heartbeat pings. 0.5 s x 4 misses reports a dead engine in ~2 s,
#: inside the 3 s target (ipyparallel takes ~5 s with 3 s x 1).
HEARTBEAT_PERIOD = 0.5

#: Pings an engine may miss in a row before it is declared dead.
HEARTBEAT_MAX_MISSES = 4

#: Seconds an engine has, after its registration reply, to send its first heartbeat.
REGISTRATION_TIMEOUT = 10.0

#: Seconds a client or engine waits for the hub to answer a registration or connection request.
HUB_TIMEOUT = 10.0

#: Default high-water mark of the task scheduler: unfinished tasks one engine may hold (its
#: prefetch depth). 0 means unlimited. Above 1 the engine is not idle during the scheduler's
#: round trip; a task trapped behind a long one is taken back (STEAL_AFTER). See
#: docs/decisions.md, "Prefetch", for the measurements that chose the value.
TASK_HWM = 2

#: Prefetch depth of an engine that answers while tasks wait in the scheduler's queue, within
#: STEAL_AFTER / TASK_HWM_LOADED of its previous answer (when the high-water mark is above
#: 1): several short tasks go to it in one batch and its replies come back together, while
#: the work it holds stays within about STEAL_AFTER; steal-back still takes back what a
#: stalled engine holds. See docs/decisions.md, "Prefetch under load".
TASK_HWM_LOADED = 8

#: Seconds an engine holding prefetched tasks may go without answering before the scheduler
#: takes its unstarted tasks back (revoke_request) and gives it one at a time until it
#: answers: short against the 10 ms tasks a blocked engine must not trap, long against the
#: ~1 ms round trip of a busy engine streaming short tasks (no revoke traffic then).
STEAL_AFTER = 0.05

#: Load-balancing schemes of the task scheduler (ipyparallel's names).
#: leastload: fewest unfinished tasks; lru: least recently given a task; plainrandom: any
#: engine with room; twobin: the less loaded of two random engines; weighted: the less
#: loaded of two engines drawn with weights 1/(1 + load).
TASK_SCHEMES = ("leastload", "lru", "plainrandom", "twobin", "weighted")

#: Default load-balancing scheme.
TASK_SCHEME = "leastload"

#: Captured stdout/stderr kept per task in the reply metadata; output past this is cut,
#: with a note, so one chatty task cannot bloat every reply (the IOPub stream has it all).
MAX_CAPTURED_OUTPUT = 1 << 20

#: Display outputs (figures, HTML: ``display()`` on an engine's IPython shell) kept per task
#: in the reply metadata, counted in characters of their mime data; past it the rest is left
#: out with a note (IOPub still carries every one). A matplotlib PNG is 20-100 KB in base64:
#: a cell of a few dozen figures fits.
MAX_DISPLAY_OUTPUT = 16 << 20

#: Default profile name, like ipyparallel's.
DEFAULT_PROFILE = "default"

#: Environment variable naming the directory that holds profiles (default ~/.zpar).
ZPAR_DIR_ENV = "ZPAR_DIR"

#: Environment variable through which a controller hands its scheduler the key file.
KEY_FILE_ENV = "ZPAR_KEY_FILE"

#: Environment variable through which a controller started with --curve hands its scheduler
#: the cluster's Curve keys (a 0600 file in its run directory).
CURVE_FILE_ENV = "ZPAR_CURVE_FILE"

#: First frame an XPUB notification socket sends each new subscriber: seeing it proves the
#: subscription is live, so no registration notification after it can be missed.
WELCOME = b"<ZPAR|WELCOME>"

#: The single unsigned frame the hub answers a request with a bad or missing signature on its
#: registration socket: the peer's key is not the cluster's. It carries nothing a peer could
#: act on but "wrong key", so it needs no signature (the sender has the wrong key anyway).
BAD_KEY = b"<ZPAR|BAD-KEY>"

#: Ping payload prefix on the heartbeat PUB; the rest is the ping counter in ASCII.
PING = b"ping"

#: The hub stores a task's result buffers up to this many bytes (larger results are
#: recorded without them); results up to STORE_INLINE_LIMIT travel inside the scheduler's
#: event batch, larger ones in a message of their own (no copy).
STORE_RESULT_LIMIT = 2**20
STORE_INLINE_LIMIT = 64 * 2**10

#: Messages the controller's monitor socket takes ahead of the hub from each peer (the
#: scheduler's event batches and results for the store, engines' copies): past it libzmq
#: stops reading that peer, whose own queue holds the rest (events are never dropped).
#: Without it a hub slowed by its store let 1 GB of results pile up in the controller.
MONITOR_RCVHWM = 32
#: Results for the store (up to STORE_RESULT_LIMIT each) the task scheduler queues toward
#: the hub on their own socket; when that many wait, a result's store copy is skipped (the
#: record is kept without it, as for a larger result): so the store's copies of results
#: hold at most (MONITOR_RCVHWM + RESULT_COPIES_HWM) MiB in flight, whatever the hub does.
RESULT_COPIES_HWM = 16

#: Appended to an engine's uuid: the identity of its signal socket on the hub's query
#: ROUTER, through which signal_request reaches a thread the running task does not block.
SIGNAL_SUFFIX = b"/signal"

#: Appended to an engine's uuid: the identity of its revoke socket on the task scheduler's
#: engine ROUTER, answered by the same thread as signals (engine/revoke.py).
REVOKE_SUFFIX = b"/revoke"

#: --ip values that mean "every interface" (bound as ``*``, advertised by host name).
WILDCARDS = ("0.0.0.0", "*", "::", "")

# -- rendezvous (issue 16): the hub's IMPI-style rendezvous for engine communicators --------

#: Seconds a rendezvous has, from its first member's arrival to every member's DONE, before
#: every member fails with an error naming the missing ones.
RENDEZVOUS_TIMEOUT = 60.0

#: zpar's own COLL labels (IMPI's are 0x1000..0x3100, seed 004): 'ZP' in the high bytes, so
#: no IMPI label collides. Members send labels in ascending order.
ZPAR_LABEL_BASE = 0x5A500000
ZPAR_LABEL_MAX = 0x5A50FFFF
ZPAR_LABEL_HOSTNAME = ZPAR_LABEL_BASE + 0x100
ZPAR_LABEL_ENDPOINTS = ZPAR_LABEL_BASE + 0x200
ZPAR_LABEL_PARAMS = ZPAR_LABEL_BASE + 0x300

#: Appended to an engine's uuid with the communicator's id: the identity of a rendezvous
#: member's socket on the hub's registration ROUTER.
RENDEZVOUS_SUFFIX = b"/rdv/"

# -- engine communicator (issue 16, communicator/): IMPI's negotiated parameters (seed 003) ---------

#: Payloads of at least this many bytes use the collectives' long protocol (pipelined in
#: chunks); IMPI_C_COLL_XSIZE's default for IMPI 0.0.
COLL_XSIZE = 1024

#: Collectives use logarithmic algorithms from this many hosts on, linear below;
#: IMPI_C_COLL_MAXLINEAR's default for IMPI 0.0.
COLL_MAXLINEAR = 4

#: Largest packet payload on a peer link (IMPI_Pk_maxdatalen). Large enough that a Python
#: loop per packet costs little against the copy; a message above it is "long" (its rest
#: waits for the receiver to match it) and collectives pipeline chunks of this size.
PK_MAXDATALEN = 1024 * 1024

#: The receiver acknowledges every PK_ACKMARK packets; the sender stops at PK_HIWATER
#: unacknowledged ones (IMPI_Pk_ackmark / IMPI_Pk_hiwater, 1 <= ackmark <= hiwater): at most
#: 8 x 1 MiB = 8 MiB queued toward one slow receiver per sender, and a shared-memory ring of
#: 8 MiB per pair of processes on one host that exchanged a long message (8 engines, all
#: pairs: 448 MiB of /dev/shm); 16 measured no faster.
PK_ACKMARK = 4
PK_HIWATER = 8

# -- bounded memory toward clients (issue 13 item 3: schedulers/clientledger.py) ------------

#: Replies the task scheduler lets libzmq queue toward one client before it calls that
#: client slow: past it, further replies wait in the scheduler and the client's queued tasks
#: are held back, not run. What a stopped client costs is about this many of its replies
#: (256 x 100 KB = 26 MB) plus those of its tasks already running; a live client drains its
#: pipe long before (libzmq's I/O thread empties it as fast as TCP takes it).
CLIENT_SNDHWM = 256

#: Seconds between tries to send the replies parked for a client that is not reading.
PARK_RETRY = 0.01

#: TCP keepalive on the task scheduler's client connections (idle seconds, probe interval,
#: probes): a client whose host vanished without closing its connection is found gone after
#: about 60 + 6 x 10 s. The kernel answers probes for a stopped process, so a SIGSTOPped
#: client stays connected (slow, not gone).
CLIENT_KEEPALIVE = (60, 10, 6)

# credits (issue 13 item 3): submission windows and the scheduler's queue bounds ----------

#: Work requests (apply / execute) a client leaves unanswered in the controller per
#: channel (load-balanced, direct); the rest wait in the client (client/window.py). One
#: client alone keeps 8 engines x TASK_HWM busy with room to spare (docs/decisions.md).
WINDOW_REQUESTS = 256
#: Bytes of those requests' frames per channel (always at least one request, however big).
WINDOW_BYTES = 16 * 2**20

#: What the task scheduler holds of one client at most (schedulers/quota.py): tasks past
#: either bound are refused with SubmissionRefused. Room for a client window raised to 4x.
CLIENT_QUEUE_LIMIT = 4 * WINDOW_REQUESTS
CLIENT_QUEUE_BYTES = 4 * WINDOW_BYTES
#: Bytes of all clients' unfinished tasks (frames + QUEUED_TASK_COST each) above which the
#: task scheduler stops reading submissions until it falls below again.
QUEUE_BUDGET = 128 * 2**20
#: What a task costs the scheduler beyond its frames (header dicts, the Task, the
#: Message): ~3.5 KB per queued task was measured with 100,000 queued.
QUEUED_TASK_COST = 3072
#: Messages libzmq buffers from one client in the scheduler's ROUTER (a batch is one):
#: while the scheduler does not read, more wait in the client's own socket.
CLIENT_RCVHWM = 64

# faults (issue 13): a restarted controller
#: Seconds an engine whose controller went silent waits for a new controller (a connection
#: file written by another process) before it exits; it then registers under its old id.
ENGINE_RECONNECT_WINDOW = 30.0

# faults (issue 13): refusal counts
#: Seconds at least between two refused_report messages of one process (sent only when its
#: counts changed), so a flood of garbage costs the hub one message per process per interval.
REFUSAL_REPORT_INTERVAL = 0.5
#: Processes the hub keeps refusal counts of (engines come and go; the oldest are dropped).
REFUSAL_PROCESSES_KEPT = 4096

# dashboard (issue 29)
#: Seconds between two engine_stats reports of an engine (CPU, memory): the dashboard's
#: refresh is once a second, and one small message per engine per second costs the hub
#: nothing it would notice.
ENGINE_STATS_INTERVAL = 1.0

# faults (issue 13): an engine declared dead while it lives on (faultsfix)
#: Engines the hub unregistered that it remembers, to tell one whose heart still beats that
#: its registration is gone (hub/staleheart.py); the oldest are forgotten first.
STALE_HEARTS_KEPT = 1024
#: Seconds at least between two such tells to one engine: its heart echoes every ping, and
#: one signed message a second is enough for a tell that may be lost to a partition.
STALE_HEART_TELL_INTERVAL = 1.0
#: Seconds an engine continued after a stop (SIGCONT) waits for the hub to say whether it
#: still counts it, before it takes the next request; silent hub: it goes on (the heartbeat
#: decides then).
RESUME_CHECK_TIMEOUT = 5.0
