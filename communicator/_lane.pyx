# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled same-host lane (zpar.comm.lane says what it is; lanepy.py is its twin).

Everything a small message costs between two ranks of one host, in C: packing the header
into a mailbox slot, publishing it, waking a sleeping receiver with a futex, and on the
other side matching the next packet of a link against a receive and copying it into the
user's buffer; the blocking wait spins and sleeps with the GIL released, so the engine's
other threads run meanwhile and the user's thread needs no hand-off to receive.
"""

from cpython.buffer cimport (
    PyBUF_SIMPLE,
    PyBUF_WRITABLE,
    PyBuffer_Release,
    PyObject_GetBuffer,
)
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_FromDouble
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_FromLong
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

import pickle

import numpy as np

_loads = pickle.loads
_dumps = pickle.dumps

#: recv_object's answer when the general path must take over (lanepy.NOT_TAKEN's twin)
NOT_TAKEN = object()
#: recv_object's answer for a raw buffer message (sent with Send): the caller says so
RAW = object()

cdef extern from "<linux/futex.h>":
    int FUTEX_WAIT
    int FUTEX_WAKE

cdef extern from "<sys/syscall.h>":
    long SYS_futex

cdef extern from "<unistd.h>" nogil:
    long syscall(long number, ...)

cdef extern from "<time.h>" nogil:
    ctypedef int clockid_t
    cdef struct timespec:
        long tv_sec
        long tv_nsec
    int clock_gettime(clockid_t clk, timespec *ts)
    int CLOCK_MONOTONIC

cdef extern from "<errno.h>" nogil:
    int errno
    int ENOSYS

cdef extern from "<fcntl.h>" nogil:
    int c_open "open"(const char *path, int flags)
    int O_RDONLY
    int O_CLOEXEC

cdef extern from "<unistd.h>" nogil:
    ssize_t pread(int fd, void *buf, size_t n, long off)
    int c_close "close"(int fd)

cdef extern from "<sched.h>" nogil:
    int sched_yield()

cdef extern from *:
    """
    #include <stdint.h>
    #if defined(__x86_64__) || defined(__i386__)
    #include <immintrin.h>
    static inline void zp_pause(void) { _mm_pause(); }
    #else
    static inline void zp_pause(void) { }
    #endif
    static inline uint64_t zp_load(volatile uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
    static inline void zp_store(volatile uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
    static inline uint32_t zp_load32(volatile uint32_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
    static inline void zp_add32(volatile uint32_t *p) { __atomic_add_fetch(p, 1, __ATOMIC_SEQ_CST); }
    static inline void zp_fence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
    struct zp_waitv { uint64_t val; uint64_t uaddr; uint32_t flags; uint32_t reserved; };
    #ifndef SYS_futex_waitv
    #define SYS_futex_waitv 449
    #endif
    static inline long zp_waitv_call(struct zp_waitv *w, unsigned n, struct timespec *abs) {
        return syscall(SYS_futex_waitv, w, n, 0, abs, CLOCK_MONOTONIC);
    }
    static inline uint16_t zp_be16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }
    static inline uint32_t zp_be32(const uint8_t *p) { return __builtin_bswap32(*(const uint32_t *)p); }
    static inline uint64_t zp_be64(const uint8_t *p) { return __builtin_bswap64(*(const uint64_t *)p); }
    static inline void zp_put32(uint8_t *p, uint32_t v) { *(uint32_t *)p = __builtin_bswap32(v); }
    static inline void zp_put64(uint8_t *p, uint64_t v) { *(uint64_t *)p = __builtin_bswap64(v); }
    static inline void zp_le32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
    static inline void zp_le64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
    static inline uint32_t zp_le32get(const uint8_t *p) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = (v << 8) | p[i]; return v; }
    static inline uint64_t zp_le64get(const uint8_t *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = (v << 8) | p[i]; return v; }
    """
    void zp_pause() nogil
    uint64_t zp_load(volatile uint64_t *p) nogil
    void zp_store(volatile uint64_t *p, uint64_t v) nogil
    uint32_t zp_load32(volatile uint32_t *p) nogil
    void zp_add32(volatile uint32_t *p) nogil
    void zp_fence() nogil
    struct zp_waitv:
        uint64_t val
        uint64_t uaddr
        uint32_t flags
        uint32_t reserved
    long zp_waitv_call(zp_waitv *w, unsigned n, timespec *abs) nogil
    uint32_t zp_be32(const uint8_t *p) nogil
    uint64_t zp_be64(const uint8_t *p) nogil
    void zp_put32(uint8_t *p, uint32_t v) nogil
    void zp_put64(uint8_t *p, uint64_t v) nogil
    void zp_le32(uint8_t *p, uint32_t v) nogil
    void zp_le64(uint8_t *p, uint64_t v) nogil
    uint32_t zp_le32get(const uint8_t *p) nogil
    uint64_t zp_le64get(const uint8_t *p) nogil

# the mailbox layout (zpar.comm.mailbox): counters each on a cache line, then the slots
DEF O_WRITTEN = 0
DEF O_READ = 64
DEF O_STATE = 128
DEF O_SENT = 192
DEF O_BELL = 200
DEF HEAD = 256
DEF HDR = 36       # zpar.comm.peerwire.HEADER.size
DEF SEQ_AT = 12
DEF MAXPEERS = 4096

# receiver states (zpar.comm.mailbox)
DEF ST_SOCKET = 0
DEF ST_SPINNING = 1
DEF ST_SLEEPING = 2
DEF ST_BUSY = 3

DEF KIND_EAGER = 13  # zpar.comm.peerwire.Kind.EAGER

#: how long a reading of the host's runnable tasks (/proc/loadavg) stands, ns
DEF ROOM_CHECK_NS = 1000000

# the phases of a wait (Lane.last_phase): what it did before it slept, if it slept
DEF PH_NONE = 0
DEF PH_SPIN = 1  # the caller's spin_ns alone
DEF PH_ROOM = 2
DEF PH_YIELD = 3


cdef int _running_tasks(int fd) noexcept nogil:
    """The host's runnable tasks now (the fourth field of /proc/loadavg, "running/total":
    the caller counts among them); -1 when it cannot be read."""
    cdef char buf[128]
    cdef ssize_t n = pread(fd, buf, 127, 0)
    cdef int i = 0, spaces = 0, v = 0, digits = 0
    if n <= 0:
        return -1
    while i < n and spaces < 3:
        if buf[i] == 32:
            spaces += 1
        i += 1
    while i < n and 48 <= buf[i] <= 57:
        v = v * 10 + (buf[i] - 48)
        digits += 1
        i += 1
    return v if digits else -1

cdef inline uint64_t _now_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <uint64_t>ts.tv_sec * 1000000000ULL + <uint64_t>ts.tv_nsec


# -- the combine of allreduce: predefined ops on plain dtypes, numpy's results exactly ----

#: op * 8 + dtype: the ops and dtypes Lane.allreduce combines in C (fastcoll maps numpy's)
COMBINE_OPS = {"SUM": 1, "PROD": 2, "MAX": 3, "MIN": 4}
COMBINE_DTYPES = {"<f8": 1, "<f4": 2, "<i8": 3, "<i4": 4}

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    /* out = lo op hi, element-wise, as numpy's add/multiply/maximum/minimum compute it:
       integers wrap (unsigned arithmetic), a NaN wins max/min, ties give the higher's */
    #define ZP_COMBINE(T, U, lo, hi, out, n, op) do { \
        const T *a = (const T *)(lo), *b = (const T *)(hi); T *o = (T *)(out); \
        for (Py_ssize_t i = 0; i < (n); i++) { T x = a[i], y = b[i], z; \
            switch (op) { \
            case 1: z = (T)((U)x + (U)y); break; \
            case 2: z = (T)((U)x * (U)y); break; \
            case 3: z = (x != x) ? x : (y != y) ? y : (x > y ? x : y); break; \
            default: z = (x != x) ? x : (y != y) ? y : (x < y ? x : y); break; } \
            o[i] = z; } } while (0)
    static int zp_combine_size(int code) {
        switch (code & 7) { case 1: case 3: return 8; case 2: case 4: return 4; }
        return 0;
    }
    static void zp_combine(int code, const uint8_t *lo, const uint8_t *hi, uint8_t *out,
                           Py_ssize_t nbytes) {
        int op = code >> 3;
        switch (code & 7) {
        case 1: ZP_COMBINE(double, double, lo, hi, out, nbytes / 8, op); break;
        case 2: ZP_COMBINE(float, float, lo, hi, out, nbytes / 4, op); break;
        case 3: ZP_COMBINE(int64_t, uint64_t, lo, hi, out, nbytes / 8, op); break;
        case 4: ZP_COMBINE(int32_t, uint32_t, lo, hi, out, nbytes / 4, op); break;
        }
    }
    """
    int zp_combine_size(int code) nogil
    void zp_combine(int code, const uint8_t *lo, const uint8_t *hi, uint8_t *out,
                    Py_ssize_t nbytes) nogil


cdef inline bint _combine_ok(int code, Py_ssize_t nbytes) noexcept:
    cdef int size = zp_combine_size(code)
    return 1 <= (code >> 3) <= 4 and size > 0 and nbytes > 0 and nbytes % size == 0


cdef inline void _combine(int code, const uint8_t *lo, const uint8_t *hi, uint8_t *out,
                          Py_ssize_t nbytes) noexcept:
    zp_combine(code, lo, hi, out, nbytes)


def combine(int code, object lower, object higher, object out):
    """``out = lower op higher`` as Lane.allreduce combines (tests hold it to numpy's)."""
    cdef Py_buffer a, b, o
    PyObject_GetBuffer(lower, &a, PyBUF_SIMPLE)
    PyObject_GetBuffer(higher, &b, PyBUF_SIMPLE)
    PyObject_GetBuffer(out, &o, PyBUF_SIMPLE | PyBUF_WRITABLE)
    try:
        if not (a.len == b.len == o.len and _combine_ok(code, a.len)):
            raise ValueError(f"combine {code}: {a.len}, {b.len}, {o.len} bytes")
        zp_combine(code, <const uint8_t *>a.buf, <const uint8_t *>b.buf, <uint8_t *>o.buf,
                   a.len)
    finally:
        PyBuffer_Release(&o)
        PyBuffer_Release(&b)
        PyBuffer_Release(&a)


cdef enum:
    ENC_PICKLE = 1  # zpar.comm.peerwire.ENC_PICKLE


cdef Py_ssize_t _frame(uint8_t *out, Py_ssize_t body) noexcept:
    """PROTO 5 and, for a body of 4 bytes or more, FRAME (pickle's _FRAME_SIZE_MIN)."""
    out[0], out[1] = 0x80, 5
    if body < 4:
        return 2
    out[2] = 0x95
    zp_le64(out + 3, <uint64_t>body)
    return 11


cdef Py_ssize_t _pickle_small(object obj, uint8_t *out) except -2:
    """pickle.dumps(obj, 5)'s exact bytes for None, True, False, a float or an int in
    [-2**31, 2**31) (each type exactly, not a subclass), written into ``out`` (>= 21
    bytes); their length, or -1 for anything else."""
    cdef Py_ssize_t k
    cdef double d
    cdef long long v
    cdef int overflow = 0
    if obj is None or obj is True or obj is False:
        k = _frame(out, 2)
        out[k] = 0x4E if obj is None else (0x88 if obj is True else 0x89)
        out[k + 1] = 0x2E  # STOP
        return k + 2
    if type(obj) is float:
        d = PyFloat_AS_DOUBLE(obj)
        k = _frame(out, 10)
        out[k] = 0x47  # BINFLOAT, big-endian
        zp_put64(out + k + 1, (<uint64_t *>&d)[0])
        out[k + 9] = 0x2E
        return k + 10
    if type(obj) is int:
        v = PyLong_AsLongLongAndOverflow(obj, &overflow)
        if overflow or v < -2147483648LL or v > 2147483647LL:
            return -1
        if 0 <= v <= 0xFF:
            k = _frame(out, 3)
            out[k], out[k + 1], out[k + 2] = 0x4B, <uint8_t>v, 0x2E  # BININT1
            return k + 3
        if 0 <= v <= 0xFFFF:
            k = _frame(out, 4)
            out[k], out[k + 1], out[k + 2], out[k + 3] = 0x4D, v & 0xFF, v >> 8, 0x2E
            return k + 4
        k = _frame(out, 6)
        out[k] = 0x4A  # BININT, little-endian signed
        zp_le32(out + k + 1, <uint32_t>(<int>v))
        out[k + 5] = 0x2E
        return k + 6
    return -1


cdef object _unpickle_small(const uint8_t *p, Py_ssize_t n):
    """The object of a pickle _pickle_small writes, read without pickle's machinery;
    NOT_TAKEN for any other bytes (then pickle.loads reads them)."""
    cdef Py_ssize_t k
    cdef uint64_t bits
    cdef double d
    if n < 4 or p[0] != 0x80 or p[1] != 5 or p[n - 1] != 0x2E:
        return NOT_TAKEN
    if n == 4:
        if p[2] == 0x4E:
            return None
        if p[2] == 0x88:
            return True
        if p[2] == 0x89:
            return False
        return NOT_TAKEN
    if n == 5 and p[2] == 0x4B:
        return PyLong_FromLong(p[3])
    if n < 15 or p[2] != 0x95 or <Py_ssize_t>zp_le64get(p + 3) != n - 11:
        return NOT_TAKEN
    k = 11
    if n == 21 and p[k] == 0x47:
        bits = zp_be64(p + k + 1)
        memcpy(&d, &bits, 8)
        return PyFloat_FromDouble(d)
    if n == 15 and p[k] == 0x4D:
        return PyLong_FromLong(p[k + 1] | (<long>p[k + 2] << 8))
    if n == 17 and p[k] == 0x4A:
        return PyLong_FromLong(<int32_t>zp_le32get(p + k + 1))
    return NOT_TAKEN


def loads_small(object data):
    """The object of a pickle the lane writes itself (None, bools, floats, 32-bit ints),
    read as recv_object reads it from a slot; NOT_TAKEN for any other bytes."""
    cdef const uint8_t[::1] v = data
    return _unpickle_small(&v[0], v.shape[0]) if v.shape[0] else NOT_TAKEN


def dumps_small(object obj):
    """The bytes send_object writes itself for ``obj`` (pickle.dumps(obj, 5)'s), or None
    when it leaves ``obj`` to pickle."""
    cdef uint8_t out[32]
    cdef Py_ssize_t k = _pickle_small(obj, out)
    return PyBytes_FromStringAndSize(<char *>out, k) if k > 0 else None


cdef class Lane:
    """The mailboxes of one rank, both directions, and its links' sequence numbers.

    ``send_seq`` / ``recv_seq`` are int64 numpy arrays the Python side (PeerLinks) shares:
    a link's packets are one sequence over the mailbox and the socket."""

    cdef uint8_t *outp[MAXPEERS]
    cdef uint8_t *inp[MAXPEERS]
    cdef uint32_t slots[MAXPEERS]
    cdef uint32_t slot_size[MAXPEERS]
    cdef uint32_t islots[MAXPEERS]
    cdef uint32_t islot_size[MAXPEERS]
    cdef int64_t[::1] _send
    cdef int64_t[::1] _recv
    cdef int size
    cdef list _keep
    cdef public object send_seq
    cdef public object recv_seq
    cdef public int last_tag
    cdef public int last_enc
    cdef public int last_acks
    cdef public int last_src
    cdef public object last_payload
    cdef public object last_pickle
    cdef public long last_n
    cdef public bint futex_mode
    #: whether the last wait went to sleep (its spin found nothing)
    cdef public bint last_slept
    #: the wait's spin (docs/decisions.md, "A blocking receive spins while the host has
    #: room"): ``spin_room_ns`` of pause-spinning while the host has a CPU for every
    #: runnable task (0: never; only when this communicator's ranks here fit its CPUs),
    #: else ``yield_ns`` of sched_yield calls, so ranks that share a CPU take turns; then
    #: the futex. ``host_cpus``: the CPUs the runnable tasks are counted against
    cdef public long spin_room_ns
    cdef public long yield_ns
    cdef public int host_cpus
    #: the last wait's phase (PH_*), and how many waits spun with room, yielded, slept
    cdef public int last_phase
    cdef public long room_waits
    cdef public long yield_waits
    cdef public long sleeps
    #: the peer the last allreduce left on its sockets, to be woken by a frame (-1: none)
    cdef public int wake_peer
    #: this rank (the source of what it sends); fast sends and receives allowed at all
    cdef public int rank
    cdef public bint enabled
    cdef int _loadfd
    cdef uint64_t _running_at
    cdef int _running
    cdef uint8_t blocked[MAXPEERS]
    cdef int nin
    cdef int inlist[MAXPEERS]

    def __cinit__(self, int size):
        if not 0 < size <= MAXPEERS:
            raise ValueError(f"a lane holds 1..{MAXPEERS} ranks, got {size}")
        self.size = size
        self.send_seq = np.zeros(size, dtype=np.int64)
        self.recv_seq = np.zeros(size, dtype=np.int64)
        self._send = self.send_seq
        self._recv = self.recv_seq
        self._keep = []
        self.nin = 0
        self.enabled = True
        self._loadfd = c_open(b"/proc/loadavg", O_RDONLY | O_CLOEXEC)
        self._running_at = 0
        self._running = -1
        for i in range(size):
            self.outp[i] = NULL
            self.inp[i] = NULL
            self.blocked[i] = 0

    def __dealloc__(self):
        if self._loadfd >= 0:
            c_close(self._loadfd)

    cdef uint8_t *_addr(self, object mapping) except NULL:
        cdef Py_buffer view
        PyObject_GetBuffer(mapping, &view, PyBUF_SIMPLE | PyBUF_WRITABLE)
        cdef uint8_t *p = <uint8_t *>view.buf
        PyBuffer_Release(&view)  # the mapping object is kept alive in _keep
        self._keep.append(mapping)
        return p

    def set_out(self, int peer, object mapping, int slots, int slot_size):
        """The mailbox toward ``peer`` (its mmap, this rank writes)."""
        self.outp[peer] = self._addr(mapping)
        self.slots[peer], self.slot_size[peer] = slots, slot_size

    def set_in(self, int peer, object mapping, int slots, int slot_size):
        """The mailbox from ``peer`` (its mmap, this rank reads)."""
        self.inp[peer] = self._addr(mapping)
        self.islots[peer], self.islot_size[peer] = slots, slot_size
        self.inlist[self.nin] = peer
        self.nin += 1

    def has_out(self, int peer):
        return self.outp[peer] != NULL

    def set_state(self, int state):
        """This rank's state as a receiver, in every mailbox it reads."""
        cdef int k
        for k in range(self.nin):
            zp_store(<uint64_t *>(self.inp[self.inlist[k]] + O_STATE), state)
        zp_fence()

    # -- sender ------------------------------------------------------------------------

    def block(self, int peer, bint on):
        """Sends to ``peer`` wait in the general path's queue: no fast send may pass them."""
        self.blocked[peer] = on

    cpdef int send_eager(self, int dest, object data, int tag, int ctx, int enc):
        """The fast send: a whole small message to a rank of this host as one EAGER packet,
        in one call. 0: not taken (another host, queued sends, full, too big, not a plain
        contiguous buffer: the general path sends it or says what is wrong), 1: put, 2: put
        and the receiver needs a wake-up frame."""
        if not self.enabled or dest < 0 or dest >= self.size or self.blocked[dest]:
            return 0
        if self.outp[dest] == NULL:
            return 0
        cdef Py_buffer view
        try:
            PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        except Exception:
            return 0
        cdef int r = self._put(dest, KIND_EAGER, ctx, enc, 0, self.rank, tag, 0, 0,
                               <const uint8_t *>view.buf, view.len)
        PyBuffer_Release(&view)
        return r

    cpdef int send_object(self, int dest, object obj, int tag, int ctx) except -9:
        """send_eager of ``obj`` pickled (protocol 5), in one call: None, bools, floats and
        32-bit ints are written here as the exact bytes pickle.dumps(obj, 5) makes, others
        pickled by it. 0 when not taken: ``last_pickle`` then holds the pickle if one was
        made (None: nothing was, the message is not for this lane), for the general path."""
        cdef uint8_t small[32]
        cdef Py_ssize_t k
        cdef Py_buffer view
        cdef int r
        self.last_pickle = None
        if not self.enabled or dest < 0 or dest >= self.size or self.blocked[dest]:
            return 0
        if self.outp[dest] == NULL:
            return 0
        k = _pickle_small(obj, small)
        if k > 0:
            r = self._put(dest, KIND_EAGER, ctx, ENC_PICKLE, 0, self.rank, tag, 0, 0, small, k)
            if r == 0:
                self.last_pickle = PyBytes_FromStringAndSize(<char *>small, k)
            return r
        data = _dumps(obj, 5)
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        r = self._put(dest, KIND_EAGER, ctx, ENC_PICKLE, 0, self.rank, tag, 0, 0,
                      <const uint8_t *>view.buf, view.len)
        PyBuffer_Release(&view)
        if r == 0:
            self.last_pickle = data
        return r

    cdef int _put(self, int peer, int kind, int ctx, int enc, int acks, int src, int tag,
                  uint64_t msgid, uint64_t arg, const uint8_t *data, Py_ssize_t n) noexcept:
        cdef uint8_t *box = self.outp[peer]
        cdef uint64_t written = zp_load(<uint64_t *>(box + O_WRITTEN))
        cdef uint64_t read = zp_load(<uint64_t *>(box + O_READ))
        cdef uint8_t *slot
        cdef int64_t seq
        if n + HDR + 4 > self.slot_size[peer] or written - read >= self.slots[peer]:
            return 0
        slot = box + HEAD + (written % self.slots[peer]) * self.slot_size[peer]
        (<uint32_t *>slot)[0] = <uint32_t>(n + HDR)
        seq = self._send[peer]
        self._send[peer] = seq + 1
        slot[4], slot[5], slot[6], slot[7] = kind, ctx, enc, acks
        zp_put32(slot + 8, <uint32_t>src)
        zp_put32(slot + 12, <uint32_t>tag)
        zp_put64(slot + 16, <uint64_t>seq)
        zp_put64(slot + 24, msgid)
        zp_put64(slot + 32, <uint64_t>n if kind == KIND_EAGER else arg)
        if n:
            memcpy(slot + 4 + HDR, data, n)
        zp_store(<uint64_t *>(box + O_WRITTEN), written + 1)
        zp_store(<uint64_t *>(box + O_SENT), <uint64_t>(seq + 1))
        return self._ring(box, written + 1 - read)

    cpdef int send(self, int peer, int kind, int ctx, int enc, int acks, int src, int tag,
                   uint64_t msgid, uint64_t arg, object payload) except -9:
        """Pack one packet (numbered: the link's next) into ``peer``'s mailbox (an EAGER
        packet's ``arg`` is its payload's length in bytes, whatever the payload object's
        ``len`` says). 0: no room
        or too big (nothing numbered: the caller sends it through the socket), 1: put, 2:
        put and the receiver is blocked on its sockets (send it an empty frame)."""
        cdef uint8_t *box = self.outp[peer]
        if box == NULL:
            return 0
        cdef Py_buffer view
        cdef int r
        if payload is None:
            return self._put(peer, kind, ctx, enc, acks, src, tag, msgid, arg, NULL, 0)
        PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
        r = self._put(peer, kind, ctx, enc, acks, src, tag, msgid, arg,
                      <const uint8_t *>view.buf, view.len)
        PyBuffer_Release(&view)
        return r

    cdef inline int _ring(self, uint8_t *box, uint64_t unread) noexcept nogil:
        zp_fence()  # publish, then read the receiver's state (mailbox.py: one side sees)
        cdef uint64_t st = zp_load(<uint64_t *>(box + O_STATE))
        if st == ST_SLEEPING:
            zp_add32(<uint32_t *>(box + O_BELL))
            syscall(SYS_futex, <uint32_t *>(box + O_BELL), FUTEX_WAKE, 1, NULL, NULL, 0)
        elif st == ST_SOCKET and unread == 1:
            return 2
        return 1

    def note_socket_send(self, int peer):
        """A packet of this link went through the socket (numbered by the caller): tell a
        sleeping receiver to look at its sockets."""
        cdef uint8_t *box = self.outp[peer]
        if box == NULL:
            return
        zp_store(<uint64_t *>(box + O_SENT), <uint64_t>self._send[peer])
        cdef uint64_t w = zp_load(<uint64_t *>(box + O_WRITTEN))
        self._ring(box, 0)

    def unread_out(self, int peer):
        cdef uint8_t *box = self.outp[peer]
        if box == NULL:
            return 0
        return zp_load(<uint64_t *>(box + O_WRITTEN)) - zp_load(<uint64_t *>(box + O_READ))

    # -- receiver ----------------------------------------------------------------------

    cdef inline uint8_t *_head(self, int peer) noexcept nogil:
        """The next slot of ``peer``'s mailbox if it holds the link's next packet."""
        cdef uint8_t *box = self.inp[peer]
        if box == NULL:
            return NULL
        cdef uint64_t read = zp_load(<uint64_t *>(box + O_READ))
        if zp_load(<uint64_t *>(box + O_WRITTEN)) == read:
            return NULL
        cdef uint8_t *slot = box + HEAD + (read % self.islots[peer]) * self.islot_size[peer]
        return slot

    cdef inline void _consume(self, int peer) noexcept nogil:
        cdef uint8_t *box = self.inp[peer]
        zp_store(<uint64_t *>(box + O_READ), zp_load(<uint64_t *>(box + O_READ)) + 1)
        self._recv[peer] += 1

    def peek(self, int peer):
        """(length, seq) of the mailbox's oldest packet, or None."""
        cdef uint8_t *slot = self._head(peer)
        if slot == NULL:
            return None
        cdef uint32_t n = (<uint32_t *>slot)[0]
        if n + 4 > self.islot_size[peer] or n < HDR:
            raise ValueError(f"mailbox of rank {peer}: slot length {n} out of range")
        return n, <int64_t>zp_be64(slot + 4 + SEQ_AT)

    def take(self, int peer):
        """The oldest packet's bytes (header + payload) if it is the link's next; consumed
        and counted. None when empty or when an earlier packet is still on the socket."""
        cdef uint8_t *slot = self._head(peer)
        if slot == NULL:
            return None
        cdef uint32_t n = (<uint32_t *>slot)[0]
        if n + 4 > self.islot_size[peer] or n < HDR:
            raise ValueError(f"mailbox of rank {peer}: slot length {n} out of range")
        if <int64_t>zp_be64(slot + 4 + SEQ_AT) != self._recv[peer]:
            return None
        out = PyBytes_FromStringAndSize(<char *>slot + 4, n)
        self._consume(peer)
        return out

    cpdef int take_eager(self, int peer, int ctx, int tag, object buf) except -9:
        """Receive the link's next packet if it is an EAGER message matching (ctx, tag):
        into ``buf`` (a writable buffer) or, buf None, as ``last_payload`` bytes; returns
        its length, with last_tag / last_enc / last_acks set. -1: nothing there yet, -2:
        the next packet is something else (the general path takes it), -4: it does not fit
        ``buf`` (the general path reports the truncation)."""
        cdef uint8_t *slot = self._head(peer)
        if slot == NULL:
            return -1
        cdef uint32_t n = (<uint32_t *>slot)[0]
        cdef uint8_t *p = slot + 4
        cdef int ptag
        cdef Py_buffer view
        if n + 4 > self.islot_size[peer] or n < HDR:
            return -2
        if <int64_t>zp_be64(p + SEQ_AT) != self._recv[peer] or <int>zp_be32(p + 4) != peer:
            return -2
        ptag = <int>zp_be32(p + 8)
        if p[0] != KIND_EAGER or p[1] != ctx or (tag != -1 and ptag != tag):
            return -2
        n -= HDR
        if buf is None:
            self.last_payload = PyBytes_FromStringAndSize(<char *>p + HDR, n)
        else:
            PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE | PyBUF_WRITABLE)
            if <Py_ssize_t>n > view.len:
                PyBuffer_Release(&view)
                return -4
            memcpy(view.buf, p + HDR, n)
            PyBuffer_Release(&view)
        self.last_tag, self.last_enc, self.last_acks = ptag, p[2], p[3]
        self.last_src = peer
        self._consume(peer)
        return n

    cpdef long recv_eager(self, int source, int tag, int ctx, object buf, long timeout_ns):
        """The fast receive: the next message from ``source`` (a rank of this host) if it
        is a small one matching (tag, ctx), into ``buf`` (or, None, ``last_payload``),
        waiting for it up to ``timeout_ns`` with the GIL released (``wait``'s spin, then
        the futex). Its length, with last_tag / last_enc set; -1: nothing came in time,
        -2: something else came first, or a bad buffer, -3: not a same-host peer: the
        general path takes over (and says what is wrong)."""
        cdef long n
        if not self.enabled or not self.futex_mode or source < 0 or source >= self.size:
            return -3
        if self.inp[source] == NULL:
            return -3
        try:
            n = self.take_eager(source, ctx, tag, buf)
            if n != -1:
                return n
            if self._wait(0, timeout_ns, source) != 1:
                return -1
            return self.take_eager(source, ctx, tag, buf)
        except Exception:
            return -2

    def recv_object(self, int source, int tag, int ctx, long timeout_ns):
        """recv_eager for a pickled message, unpickled here (the pickles send_object writes
        itself are read straight from the slot, others copied out and unpickled after the
        packet is consumed, so what unpickling runs never sees the slot): the object, RAW
        when the message is a raw buffer (the caller's error to raise), NOT_TAKEN for the
        general path. ``last_tag`` / ``last_n`` tell the status."""
        cdef uint8_t *slot
        cdef uint8_t *p
        cdef uint32_t n
        cdef int ptag
        if not self.enabled or not self.futex_mode or source < 0 or source >= self.size:
            return NOT_TAKEN
        if self.inp[source] == NULL:
            return NOT_TAKEN
        slot = self._eager_head(source, ctx, tag)
        if slot == NULL:
            if self._head(source) != NULL:  # something else is next
                return NOT_TAKEN
            if self._wait(0, timeout_ns, source) != 1:
                return NOT_TAKEN
            slot = self._eager_head(source, ctx, tag)
            if slot == NULL:
                return NOT_TAKEN
        p = slot + 4
        n = (<uint32_t *>slot)[0] - HDR
        ptag = <int>zp_be32(p + 8)
        self.last_tag, self.last_enc, self.last_acks = ptag, p[2], p[3]
        self.last_src = source
        self.last_n = n
        if p[2] != ENC_PICKLE:
            self._consume(source)
            return RAW
        obj = _unpickle_small(p + HDR, n)
        if obj is not NOT_TAKEN:
            self._consume(source)
            return obj
        data = PyBytes_FromStringAndSize(<char *>p + HDR, n)
        self._consume(source)
        return _loads(data)

    cdef uint8_t *_eager_head(self, int peer, int ctx, int tag) noexcept:
        """take_eager's match without the take: the slot of the link's next packet if it
        is an EAGER message of (ctx, tag) from ``peer``, else NULL."""
        cdef uint8_t *slot = self._head(peer)
        if slot == NULL:
            return NULL
        cdef uint32_t n = (<uint32_t *>slot)[0]
        cdef uint8_t *p = slot + 4
        if n + 4 > self.islot_size[peer] or n < HDR:
            return NULL
        if <int64_t>zp_be64(p + SEQ_AT) != self._recv[peer] or <int>zp_be32(p + 4) != peer:
            return NULL
        if p[0] != KIND_EAGER or p[1] != ctx or (tag != -1 and <int>zp_be32(p + 8) != tag):
            return NULL
        return slot

    cpdef long allreduce(self, object acc, object got, int n, int tag, int ctx, int code,
                         long timeout_ns) except -9:
        """A small allreduce over ``n`` ranks (a power of two, every one on this host), in
        one call: recursive doubling exactly as fastcoll.allreduce_small's Python rounds
        (same tag, partners and operand order: the lower rank's first), each round one
        EAGER send of ``acc`` and one receive into ``got``, combined in place into ``acc``
        by ``code`` (COMBINE's op * 8 + dtype). -1: done, the result in ``acc``; else where
        it stopped for the Python rounds to go on: round * 2, + 1 when that round's send
        is out (a full or blocked mailbox, something else came first, the wait ran out,
        a receiver on its sockets: ``wake_peer`` then names it)."""
        cdef Py_buffer va, vg
        cdef int k = 0, mask = 1, peer, r
        cdef long m
        self.wake_peer = -1
        if not self.enabled or not self.futex_mode:
            return 0
        PyObject_GetBuffer(acc, &va, PyBUF_SIMPLE | PyBUF_WRITABLE)
        try:
            PyObject_GetBuffer(got, &vg, PyBUF_SIMPLE | PyBUF_WRITABLE)
        except BaseException:
            PyBuffer_Release(&va)
            raise
        try:
            if vg.len != va.len or not _combine_ok(code, va.len):
                return 0
            while mask < n:
                peer = self.rank ^ mask
                if peer >= self.size or self.outp[peer] == NULL or self.inp[peer] == NULL:
                    return k * 2
                if self.blocked[peer]:
                    return k * 2
                r = self._put(peer, KIND_EAGER, ctx, 0, 0, self.rank, tag, 0, 0,
                              <const uint8_t *>va.buf, va.len)
                if r == 0:
                    return k * 2
                if r == 2:
                    self.wake_peer = peer
                    return k * 2 + 1
                m = self.take_eager(peer, ctx, tag, got)
                if m == -1:
                    if self._wait(0, timeout_ns, peer) != 1:
                        return k * 2 + 1
                    m = self.take_eager(peer, ctx, tag, got)
                if m != va.len or self.last_enc != 0:
                    return k * 2 + 1 if m < 0 else -2
                if peer < self.rank:
                    _combine(code, <uint8_t *>vg.buf, <uint8_t *>va.buf, <uint8_t *>va.buf,
                             va.len)
                else:
                    _combine(code, <uint8_t *>va.buf, <uint8_t *>vg.buf, <uint8_t *>va.buf,
                             va.len)
                mask <<= 1
                k += 1
            return -1
        finally:
            PyBuffer_Release(&vg)
            PyBuffer_Release(&va)

    cdef inline int _check(self, int only) noexcept nogil:
        """1: a mailbox holds a packet; 2: a packet is on its way through a socket; 0."""
        cdef int k, peer, r = 0
        cdef uint8_t *box
        cdef int64_t sent
        for k in range(self.nin):
            peer = self.inlist[k]
            if only >= 0 and peer != only:
                continue
            box = self.inp[peer]
            # ``sent`` first: a sender stores WRITTEN before SENT, so a SENT read here that
            # counts a mailbox packet comes with its WRITTEN (read second, it is not taken
            # for a packet on a socket when the sender wrote both between the two reads)
            sent = <int64_t>zp_load(<uint64_t *>(box + O_SENT))
            if zp_load(<uint64_t *>(box + O_WRITTEN)) != zp_load(<uint64_t *>(box + O_READ)):
                return 1
            if sent > self._recv[peer]:
                r = 2
        return r

    def wait(self, long spin_ns, long timeout_ns, int only=-1):
        """Wait for a packet from any peer (or from ``only``) with the GIL released: spin
        (``spin_room_ns`` while the host has a CPU for every runnable task, else
        ``yield_ns`` of sched_yield calls; at least ``spin_ns`` either way; none when
        ``spin_ns`` < 0: a long wait's, leaving the CPUs to others), then sleep on
        the mailboxes' futex words (state SLEEPING, so senders ring) until ``timeout_ns``.
        1: a mailbox packet, 2: one through a socket, 0."""
        return self._wait(spin_ns, timeout_ns, only)

    def running_tasks(self):
        """The host's runnable tasks as the last wait read them (-1: not read, or no
        /proc/loadavg)."""
        return self._running

    cdef int _tasks(self, uint64_t now) noexcept nogil:
        """The host's runnable tasks, read at most every ROOM_CHECK_NS."""
        if self._loadfd < 0:
            return -1
        if self._running_at == 0 or now - self._running_at >= ROOM_CHECK_NS:
            self._running = _running_tasks(self._loadfd)
            self._running_at = now
        return self._running

    cdef int _wait(self, long spin_ns, long timeout_ns, int only):
        cdef int r, k, nw = 0
        cdef uint64_t start, end, deadline
        cdef long spins = 0
        cdef zp_waitv w[64]
        cdef timespec ts
        cdef uint8_t *box
        cdef long rc
        cdef int phase, tasks
        if self.nin == 0:
            return 0
        self.last_slept = False
        self.last_phase = PH_NONE
        with nogil:
            r = self._check(only)
            if r == 0 and spin_ns >= 0 and (spin_ns > 0 or self.spin_room_ns > 0 or self.yield_ns > 0):
                start = _now_ns()
                phase = PH_SPIN
                tasks = self._tasks(start) if self.spin_room_ns > 0 else -1
                if 0 < tasks <= self.host_cpus:
                    phase, spin_ns = PH_ROOM, max(spin_ns, self.spin_room_ns)
                elif self.yield_ns > 0:
                    phase, spin_ns = PH_YIELD, max(spin_ns, self.yield_ns)
                self.last_phase = phase
                end = start + spin_ns
                while True:
                    r = self._check(only)
                    if r:
                        break
                    spins += 1
                    if phase == PH_YIELD:
                        sched_yield()
                        if _now_ns() >= end:
                            break
                    else:
                        if spins % 64 == 0 and _now_ns() >= end:
                            break
                        zp_pause()
            if r == 0 and timeout_ns > 0:
                self.last_slept = True
                deadline = _now_ns() + timeout_ns
                while r == 0:
                    nw = 0
                    for k in range(self.nin):
                        if only >= 0 and self.inlist[k] != only:
                            continue
                        if nw == 64:
                            break
                        box = self.inp[self.inlist[k]]
                        w[nw].val = zp_load32(<uint32_t *>(box + O_BELL))
                        w[nw].uaddr = <uint64_t>(box + O_BELL)
                        w[nw].flags = 2  # FUTEX2_SIZE_U32, shared between processes
                        w[nw].reserved = 0
                        nw += 1
                        zp_store(<uint64_t *>(box + O_STATE), ST_SLEEPING)
                    zp_fence()
                    r = self._check(only)
                    if r == 0:
                        if _now_ns() >= deadline:
                            break
                        ts.tv_sec = deadline // 1000000000ULL
                        ts.tv_nsec = deadline % 1000000000ULL
                        rc = zp_waitv_call(w, nw, &ts)
                        if rc < 0 and errno == ENOSYS:  # before Linux 5.16: one futex
                            ts.tv_sec = 0
                            ts.tv_nsec = 1000000
                            syscall(SYS_futex, <uint32_t *>w[0].uaddr, FUTEX_WAIT,
                                    <uint32_t>w[0].val, &ts, NULL, 0)
                        r = self._check(only)
                    if _now_ns() >= deadline:
                        break
                for k in range(self.nin):
                    zp_store(<uint64_t *>(self.inp[self.inlist[k]] + O_STATE), ST_BUSY)
                zp_fence()
                if r == 0:
                    r = self._check(only)
        if self.last_phase == PH_ROOM:
            self.room_waits += 1
        elif self.last_phase == PH_YIELD:
            self.yield_waits += 1
        self.sleeps += self.last_slept
        return r

    def close(self):
        self.enabled = False
        if self._loadfd >= 0:
            c_close(self._loadfd)
            self._loadfd = -1
        for i in range(self.size):
            self.outp[i] = NULL
            self.inp[i] = NULL
        self.nin = 0
        self._keep = []


COMPILED = True
#: the layout compiled in, checked against zpar.comm.mailbox and peerwire by the tests
LAYOUT = {"head": HEAD, "header": HDR, "eager": KIND_EAGER, "state": O_STATE,
          "sent": O_SENT, "bell": O_BELL}
