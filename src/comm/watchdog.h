/* dissect watchdog: a collective that does not complete within a timeout takes the rank down
 * with a message naming the step, the operation and the group, instead of hanging the job.
 *
 * The model is PyTorch's ProcessGroupNCCL watchdog with Megatron-LM's
 * --distributed-timeout-minutes (10 minutes by default, as both): one thread per rank checks,
 * about once a second,
 *   - the host-blocking collective the main thread is in (MPI, and the MPI half of NCCL groups),
 *     marked by dx_watch_begin / dx_watch_end around the call;
 *   - each registered device group (NCCL): a poll callback reports how long its newest enqueued
 *     collective has been incomplete, and any asynchronous error the library reports (a peer that
 *     died: ncclRemoteError).
 * On a timeout or an error the thread prints one line to stderr
 *   dissect: error: rank R: <op> on the <group> group (N ranks) at step S has not completed
 *   after T s (distributed_timeout_minutes M): a rank died or hangs; aborting
 * runs the abort callbacks (ncclCommAbort, so no kernel keeps spinning; the trace writer's flush
 * when that is safe) and ends the process with _exit(DX_WATCHDOG_EXIT). The launcher (mpirun,
 * srun --kill-on-bad-exit=1) then ends the other ranks; every rank has its own watchdog, so the
 * ranks that wait for the dead one exit on their own as well.
 *
 * A preemption signal (dx_watch_signal from the handler) that arrives while the main thread is
 * inside a marked collective is reported with the same coordinates, so a job that the launcher
 * tears down after one rank died still says where each rank was. One that arrives between
 * collectives is reported from the next collective the main thread enters (dx_watch_begin wakes
 * the thread), or, when none begins within 0.5 s, as received "outside any collective".
 *
 * The main thread's marks are a few atomic stores (no lock, no system call). All functions are
 * safe to call when the watchdog was never started (they then only record).
 */
#ifndef DX_WATCHDOG_H
#define DX_WATCHDOG_H

#include "comm.h"

/* Exit status of a rank ended by the watchdog. */
#define DX_WATCHDOG_EXIT 3

/* Starts the watchdog thread of this process: `timeout_s` seconds (<= 0: no timeout; errors
 * and signals are still reported; dissect starts no watchdog at all for
 * distributed_timeout_minutes 0), `rank` is the world rank printed in messages. Returns 0 or
 * -1 + dx_fail (thread creation). Call once, before training; dx_watchdog_stop joins it. */
int dx_watchdog_start(double timeout_s, int rank);
void dx_watchdog_stop(void);

/* The step the main thread is in (printed in messages); 0 = before the first step. */
void dx_watch_step(long step);

/* Marks the main thread as blocked in collective `op` (a static string, e.g. "all-reduce") on
 * group c (its name and size are printed) from now until dx_watch_end. Nested marks keep the
 * outermost. */
void dx_watch_begin(const char *op, const dx_comm *c);
/* The same mark around library I/O that blocks on every rank of group c (a parallel-HDF5 /
 * MPI-IO checkpoint: collective file create, dataset creation, close), so that a rank that died
 * during a save is reported and timed out like one that died during an all-reduce. The
 * timeout callback (dx_watch_on_timeout) is not run inside such a mark: HDF5 cannot be entered
 * from the watchdog thread while the main thread is inside it. Ended by dx_watch_end. */
void dx_watch_begin_io(const char *op, const dx_comm *c);
void dx_watch_end(void);

/* A device group's poll, called on the watchdog thread: fills *op (static string) and returns
 * the seconds its newest enqueued collective has been incomplete (0 when none is pending), or -1
 * with a message in err[len] when the library reports an asynchronous error. */
typedef double (*dx_watch_poll_fn)(void *ctx, const char **op, char *err, size_t len);
/* Registers a device group (c names it in messages) with its poll and its abort (run on the
 * watchdog thread before the process exits; NULL = none). Returns a handle for
 * dx_watch_unregister, or -1 when the table (64 groups) is full. */
int dx_watch_register(const dx_comm *c, dx_watch_poll_fn poll, void (*abort_fn)(void *ctx), void *ctx);
void dx_watch_unregister(int handle);

/* A callback run on the watchdog thread before a timeout exit when the main thread is inside a
 * marked collective (not inside other library code), e.g. flushing the trace file so the steps
 * written so far stay readable. One at most; NULL clears it. */
void dx_watch_on_timeout(void (*fn)(void *ctx), void *ctx);

/* From a signal handler (async-signal-safe): signal `sig` arrived. */
void dx_watch_signal(int sig);

#endif
