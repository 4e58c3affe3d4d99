"""Floors of the same-host data plane: ``python -m bench.shmfloor [--runs R] [--mb M]``.

What moving data between two processes of one host costs before any design is on top:

- ``memcpy``: copying M MB between two buffers touched before (numpy.copyto), GB/s: the
  one copy a shared-memory send makes (W5's sender writes the array into a segment);
- ``fresh``: writing M MB into a new memory file (memfd): page faults and zeroing, what a
  send would pay without a pool of segments;
- ``fresh populated``: the same with the file's pages allocated (fallocate) and the
  mapping's page tables filled in one call (MADV_POPULATE_WRITE) before the write: what
  zpar.sharedmem.segment pays for a new segment;
- ``map``: mapping M MB of another process's segment copy-on-write and filling its page
  tables (MADV_POPULATE_READ); ``populate again``: the same call on a mapping whose pages
  are all mapped already (the kernel still walks them);
- ``read``: summing M MB through a fresh copy-on-write mapping (each page faulted in as
  it is read: what a receiver pays, zpar.sharedmem.receipts maps lazily) and through a
  mapping whose pages are mapped (a kept one);
- ``pagemap``: reading /proc/self/pagemap over M MB, the check that a kept mapping has no
  written page (zpar.sharedmem.receipts);
- ``pingpong``: two C processes bouncing an 8-byte message through a shared page, each
  spinning on the other's counter (half round trip, ns): the floor of a same-host
  mailbox; and the same where the receiver sleeps on a futex and is woken by the sender
  (the cost a blocking receive pays once its spin gave up). Needs a C compiler (cc);
- ``cma``: process_vm_readv of M MB from another process's buffer (touched before) into
  one of ours, in one part and split in two page-aligned parts on two threads (what
  zpar.comm.cma does for a long same-host message), beside ``memcpy`` in the same loop;
- ``python pingpong``: the same 8 bytes through the communicator's shared-memory mailboxes
  (zpar.comm.mailbox: put, spin on peek, consume), both sides in Python and nothing else
  (no header, no HMAC, no matching): Python's own floor per message on this path.

Figures are min-max over the runs; the machine is shared, so the min says most.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import subprocess
import tempfile
import time

import numpy as np

PINGPONG_C = r"""
#define _GNU_SOURCE
#include <linux/futex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct { volatile uint32_t seq; char pad[60]; volatile uint64_t data; char pad2[56]; } box_t;

static void wait_for(volatile uint32_t *w, uint32_t want, int futex) {
    if (!futex) { while (__atomic_load_n(w, __ATOMIC_ACQUIRE) != want) __builtin_ia32_pause(); return; }
    for (;;) {
        uint32_t v = __atomic_load_n(w, __ATOMIC_ACQUIRE);
        if (v == want) return;
        syscall(SYS_futex, w, FUTEX_WAIT, v, NULL, NULL, 0);
    }
}
static void post(volatile uint32_t *w, uint32_t v, int futex) {
    __atomic_store_n(w, v, __ATOMIC_RELEASE);
    if (futex) syscall(SYS_futex, w, FUTEX_WAKE, 1, NULL, NULL, 0);
}
int main(int argc, char **argv) {
    long n = atol(argv[1]); int futex = atoi(argv[2]);
    box_t *b = mmap(NULL, 2 * sizeof(box_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    box_t *ping = &b[0], *pong = &b[1];
    pid_t pid = fork();
    if (pid == 0) {
        for (uint32_t i = 1; i <= n; i++) { wait_for(&ping->seq, i, futex); pong->data = ping->data; post(&pong->seq, i, futex); }
        _exit(0);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (uint32_t i = 1; i <= n; i++) { ping->data = i; post(&ping->seq, i, futex); wait_for(&pong->seq, i, futex); }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    waitpid(pid, NULL, 0);
    double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
    printf("%.1f\n", ns / n / 2);
    return 0;
}
"""


def _range(xs: list[float], fmt: str = "{:.1f}") -> str:
    return f"{fmt.format(min(xs))}-{fmt.format(max(xs))}"


def copies(mb: int, runs: int) -> dict[str, str]:
    n = mb * 2**20
    src = np.random.default_rng(0).integers(0, 255, n, dtype=np.uint8)
    dst = np.empty_like(src)
    dst[:] = 1
    memcpy, fresh, populated, mapped, again, read_fresh, read_kept, pagemap = ([] for _ in range(8))
    private = {"flags": mmap.MAP_PRIVATE, "prot": mmap.PROT_READ | mmap.PROT_WRITE}
    fd = os.memfd_create("zpar-floor")
    os.ftruncate(fd, n)
    seg = mmap.mmap(fd, n)
    pm = os.open("/proc/self/pagemap", os.O_RDONLY)
    for _ in range(runs):
        t = time.perf_counter()
        np.copyto(dst, src)
        memcpy.append(n / (time.perf_counter() - t) / 1e9)
        f2 = os.memfd_create("zpar-floor-fresh")
        os.ftruncate(f2, n)
        m2 = mmap.mmap(f2, n)
        t = time.perf_counter()
        np.copyto(np.frombuffer(m2, dtype=np.uint8), src)
        fresh.append((time.perf_counter() - t) * 1e3)
        m2.close()
        os.close(f2)
        f2 = os.memfd_create("zpar-floor-fresh")
        t = time.perf_counter()
        os.ftruncate(f2, n)
        os.posix_fallocate(f2, 0, n)
        m2 = mmap.mmap(f2, n)
        m2.madvise(23)  # MADV_POPULATE_WRITE
        np.copyto(np.frombuffer(m2, dtype=np.uint8), src)
        populated.append((time.perf_counter() - t) * 1e3)
        m2.close()
        os.close(f2)
        np.copyto(np.frombuffer(seg, dtype=np.uint8), src)
        lazy = mmap.mmap(fd, n, **private)
        t = time.perf_counter()
        np.frombuffer(lazy, dtype=np.uint64).sum()
        read_fresh.append((time.perf_counter() - t) * 1e3)
        lazy.close()
        t = time.perf_counter()
        priv = mmap.mmap(fd, n, **private)
        priv.madvise(22, 0, n)  # MADV_POPULATE_READ
        mapped.append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        priv.madvise(22, 0, n)
        again.append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        np.frombuffer(priv, dtype=np.uint64).sum()
        read_kept.append((time.perf_counter() - t) * 1e3)
        addr = int(np.frombuffer(priv, dtype=np.uint8).ctypes.data)
        t = time.perf_counter()
        raw = os.pread(pm, n // mmap.PAGESIZE * 8, addr // mmap.PAGESIZE * 8)
        e = np.frombuffer(raw, dtype=np.uint64)
        bool(((e & np.uint64(3 << 61)) == np.uint64(1 << 63)).any())
        pagemap.append((time.perf_counter() - t) * 1e3)
        del e, raw
        priv.close()
    os.close(pm)
    seg.close()
    os.close(fd)
    return {
        f"memcpy {mb} MB (GB/s)": _range(memcpy),
        f"fresh memfd write {mb} MB (ms)": _range(fresh),
        f"fresh memfd, fallocate + populate + write {mb} MB (ms)": _range(populated),
        f"map + populate {mb} MB (ms)": _range(mapped),
        f"populate again, every page mapped, {mb} MB (ms)": _range(again),
        f"read {mb} MB, fresh mapping (page faults) (ms)": _range(read_fresh),
        f"read {mb} MB, pages mapped (ms)": _range(read_kept),
        f"pagemap check {mb} MB (ms)": _range(pagemap, "{:.2f}"),
    }


def _pingpong_runs(runs: int, n: int) -> dict[str, list[float]] | None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "pp.c"), os.path.join(d, "pp")
        with open(src, "w") as f:
            f.write(PINGPONG_C)
        subprocess.run([cc, "-O2", "-o", exe, src], check=True)
        return {
            name: [float(subprocess.check_output([exe, str(n), str(futex)])) for _ in range(runs)]
            for futex, name in ((0, "spin"), (1, "futex"))
        }


def pingpong(runs: int, n: int = 200_000) -> dict[str, str]:
    figs = _pingpong_runs(runs, n)
    if figs is None:
        return {"pingpong": "no C compiler"}
    return {
        f"C shared-memory ping-pong, {name}, 8 B half round trip (ns)": _range(v, "{:.0f}")
        for name, v in figs.items()
    }


def pingpong_figures(n: int = 200_000) -> dict[str, float]:
    """One run of each C ping-pong (spin, futex), half round trip in ns, for bench.comm;
    OSError when there is no C compiler."""
    figs = _pingpong_runs(1, n)
    if figs is None:
        raise OSError("no C compiler (cc)")
    return {f"pingpong_8B_{name}_ns": v[0] for name, v in figs.items()}


def _pong(ping_path: str, pong_path: str, n: int) -> None:
    from zpar.comm.mailbox import Mailbox

    ping, pong = Mailbox.attach(ping_path), Mailbox.attach(pong_path)
    for _ in range(n):
        while (p := ping.peek()) is None:
            pass
        data = bytes(p)
        ping.consume()
        while not pong.put(data):
            pass


def python_pingpong(runs: int, n: int = 20_000) -> dict[str, str]:
    import multiprocessing as mp

    from zpar.comm.mailbox import Mailbox

    figs = []
    for _ in range(runs):
        ping, pong = Mailbox.create(), Mailbox.create()
        child = mp.get_context("fork").Process(target=_pong, args=(ping.path, pong.path, n))
        child.start()
        msg = b"12345678"
        t = time.perf_counter()
        for _ in range(n):
            ping.put(msg)
            while pong.peek() is None:
                pass
            pong.consume()
        figs.append((time.perf_counter() - t) / n / 2 * 1e9)
        child.join()
        ping.close()
        pong.close()
    return {"Python mailbox ping-pong, spin, 8 B half round trip (ns)": _range(figs, "{:.0f}")}


def cma_reads(mb: int, runs: int) -> dict[str, str]:
    """process_vm_readv of ``mb`` MB from a child's buffer, one part and two (threads),
    alternating with a memcpy of the same size; GB/s."""
    from concurrent.futures import ThreadPoolExecutor

    from zpar.comm import cma

    n = mb * 2**20
    src = np.random.default_rng(0).integers(0, 255, n, dtype=np.uint8)
    dst = np.empty_like(src)
    dst[:] = 1
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the sender: its buffer stays put until the parent closes the pipe
        os.close(wfd)
        os.read(rfd, 1)
        os._exit(0)
    os.close(rfd)
    addr, local = cma.address(memoryview(src)), cma.address(memoryview(dst))
    half = (n // 2 + 4095) & ~4095
    one, two, copy = [], [], []
    try:
        with ThreadPoolExecutor(1) as pool:
            for _ in range(runs):
                t = time.perf_counter()
                np.copyto(dst, src)
                copy.append(n / (time.perf_counter() - t) / 1e9)
                t = time.perf_counter()
                if not cma._read_part(pid, local, addr, n):
                    return {"cma": "refused by the kernel"}
                one.append(n / (time.perf_counter() - t) / 1e9)
                t = time.perf_counter()
                f = pool.submit(cma._read_part, pid, local + half, addr + half, n - half)
                ok = cma._read_part(pid, local, addr, half) and f.result()
                two.append(n / (time.perf_counter() - t) / 1e9)
                if not ok:
                    return {"cma": "refused by the kernel"}
    finally:
        os.close(wfd)
        os.waitpid(pid, 0)
    return {
        f"cma: memcpy {mb} MB, same loop (GB/s)": _range(copy),
        f"cma: process_vm_readv {mb} MB, one part (GB/s)": _range(one),
        f"cma: process_vm_readv {mb} MB, two parts on two threads (GB/s)": _range(two),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    ap.add_argument("--cma", action="store_true", help="only the process_vm_readv figures")
    args = ap.parse_args(argv)
    if args.cma:
        figures = cma_reads(args.mb, args.runs)
    else:
        figures = {
            **copies(args.mb, args.runs),
            **cma_reads(args.mb, args.runs),
            **pingpong(args.runs),
            **python_pingpong(args.runs),
        }
    figures["load average"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    if args.json:
        print(json.dumps(figures))
    else:
        for k, v in figures.items():
            print(f"{k:<58} {v}")


if __name__ == "__main__":
    main()
