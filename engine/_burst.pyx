# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of engine.burst.run_burst: one burst of a map's elements.

Per element the interpreted loop pays for the bytecode around the call (the position's
pop, the clock, two appends, the deadline); here they are C, the clock is
clock_gettime(CLOCK_MONOTONIC) (time.monotonic's) and the end time goes into the array's
memory without a float object. The function itself is called as map() calls it."""

from cpython.array cimport array, resize_smart


cdef extern from "<time.h>" nogil:
    ctypedef long time_t
    cdef struct timespec:
        time_t tv_sec
        long tv_nsec
    int clock_gettime(int clk_id, timespec *tp)
    int CLOCK_MONOTONIC


def run_burst(object calls, object take_position, list pending, array ends, dict errors,
              double deadline, object last, object user_errors):
    cdef timespec ts
    cdef double now
    cdef Py_ssize_t n
    while True:
        try:
            last = take_position()
        except IndexError:
            break
        try:
            value = next(calls)
        except user_errors as e:
            value = None
            errors[last] = e
        clock_gettime(CLOCK_MONOTONIC, &ts)
        now = <double>ts.tv_sec + <double>ts.tv_nsec * 1e-9
        n = len(ends)
        resize_smart(ends, n + 1)  # before the value: take() reads ends of what it takes
        ends.data.as_doubles[n] = now
        pending.append(value)
        if now >= deadline:
            break
    return last
