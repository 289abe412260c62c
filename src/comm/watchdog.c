/* The collective watchdog; see watchdog.h. */
#include "watchdog.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"

/* what the main thread is blocked in (written by it, read by the watchdog thread) */
static _Atomic(const char *) cur_op;
static _Atomic(const char *) cur_group;
static atomic_int cur_size;
static atomic_ullong cur_since_ns; /* 0 = not in a marked collective */
static atomic_int depth;           /* main thread only; atomic for simplicity */
static atomic_int cur_in_library;  /* the outermost mark is library I/O (dx_watch_begin_io) */
static atomic_long cur_step;
static volatile sig_atomic_t signal_seen; /* last signal number; set by the handler */
/* posted by the handler (sem_post is async-signal-safe) and at stop, so that the thread reports a
 * signal at once: a launcher tearing the job down may SIGKILL within a fraction of a second */
static sem_t wake;
static volatile sig_atomic_t wake_ready;
static atomic_int signal_reported; /* the watchdog thread reported the first signal */

typedef struct {
    int used;
    const char *group;
    int size;
    dx_watch_poll_fn poll;
    void (*abort_fn)(void *);
    void *ctx;
} slot;
enum { SLOTS = 64 };
static slot slots[SLOTS];
static pthread_mutex_t slots_mu = PTHREAD_MUTEX_INITIALIZER;

static void (*on_timeout_fn)(void *);
static void *on_timeout_ctx;

static pthread_t thread;
static int running;
static atomic_int stop_flag;
static double timeout_s;
static int my_rank;

static const char *group_name(const dx_comm *c) { return c && c->name ? c->name : "unnamed"; }

void dx_watch_step(long step) { atomic_store_explicit(&cur_step, step, memory_order_relaxed); }

static void watch_begin(const char *op, const dx_comm *c, int in_library)
{
    if (atomic_fetch_add_explicit(&depth, 1, memory_order_relaxed) > 0) return;
    atomic_store_explicit(&cur_in_library, in_library, memory_order_relaxed);
    atomic_store_explicit(&cur_op, op, memory_order_relaxed);
    atomic_store_explicit(&cur_group, group_name(c), memory_order_relaxed);
    atomic_store_explicit(&cur_size, c ? c->size : 0, memory_order_relaxed);
    atomic_store_explicit(&cur_since_ns, dx_now_ns(), memory_order_release);
    /* a signal seen between collectives is reported from the first one entered after it (the
     * rank that waits there for a dead peer is what the user needs to see) */
    if (signal_seen && !signal_reported && wake_ready) sem_post(&wake);
}

void dx_watch_begin(const char *op, const dx_comm *c) { watch_begin(op, c, 0); }
void dx_watch_begin_io(const char *op, const dx_comm *c) { watch_begin(op, c, 1); }

void dx_watch_end(void)
{
    if (atomic_fetch_sub_explicit(&depth, 1, memory_order_relaxed) == 1)
        atomic_store_explicit(&cur_since_ns, 0, memory_order_release);
}

void dx_watch_signal(int sig)
{
    signal_seen = sig;
    if (wake_ready) sem_post(&wake);
}

void dx_watch_on_timeout(void (*fn)(void *), void *ctx)
{
    pthread_mutex_lock(&slots_mu);
    on_timeout_fn = fn;
    on_timeout_ctx = ctx;
    pthread_mutex_unlock(&slots_mu);
}

int dx_watch_register(const dx_comm *c, dx_watch_poll_fn poll, void (*abort_fn)(void *), void *ctx)
{
    pthread_mutex_lock(&slots_mu);
    int h = -1;
    for (int i = 0; i < SLOTS && h < 0; i++)
        if (!slots[i].used) {
            slots[i] = (slot){1, group_name(c), c ? c->size : 0, poll, abort_fn, ctx};
            h = i;
        }
    pthread_mutex_unlock(&slots_mu);
    return h;
}

void dx_watch_unregister(int h)
{
    if (h < 0 || h >= SLOTS) return;
    pthread_mutex_lock(&slots_mu);
    slots[h].used = 0;
    pthread_mutex_unlock(&slots_mu);
}

static const char *signame(int sig)
{
    switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGINT: return "SIGINT";
    default: return "a signal";
    }
}

/* Ends the process: abort callbacks (device groups first), the timeout callback when the main
 * thread sits in a marked collective, then _exit. Called with slots_mu held. */
static void take_down(int main_in_collective)
{
    for (int i = 0; i < SLOTS; i++)
        if (slots[i].used && slots[i].abort_fn) slots[i].abort_fn(slots[i].ctx);
    if (main_in_collective && on_timeout_fn) on_timeout_fn(on_timeout_ctx);
    fflush(stdout);
    fflush(stderr);
    /* a second for the launcher to forward this rank's message (and its peers', which time out
     * at about the same moment) before the first exit makes it tear the job down; other ranks
     * wait 3 s, so rank 0 (which writes the trace, and may have entered its collective a little
     * later) usually times out and flushes before the launcher kills it */
    struct timespec ts = {my_rank == 0 ? 1 : 3, 0};
    nanosleep(&ts, NULL);
    _exit(DX_WATCHDOG_EXIT);
}

static void *watch_main(void *arg)
{
    (void)arg;
    /* signals go to the main thread (its handler sets the preemption flag) */
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    unsigned long long signal_at_ns = 0; /* when the thread first saw the signal */
    const double M = timeout_s / 60.0;
    while (!atomic_load(&stop_flag)) {
        /* woken at once by a signal (reported promptly), else every tenth of a second: the timeout check */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (sem_timedwait(&wake, &ts) && errno == EINTR) {
        }
        const unsigned long long since = atomic_load_explicit(&cur_since_ns, memory_order_acquire);
        const char *op = atomic_load_explicit(&cur_op, memory_order_relaxed);
        const char *group = atomic_load_explicit(&cur_group, memory_order_relaxed);
        const int size = atomic_load_explicit(&cur_size, memory_order_relaxed);
        const long step = atomic_load_explicit(&cur_step, memory_order_relaxed);
        const double waited = since ? (double)(dx_now_ns() - since) * 1e-9 : 0.0;

        const int sig = signal_seen;
        if (sig && !atomic_load(&signal_reported)) {
            /* inside a collective: where it waits; between collectives: wait (woken by
             * dx_watch_begin) for the next one, at most half a second, then say so */
            if (!signal_at_ns) signal_at_ns = dx_now_ns();
            if (since) {
                atomic_store(&signal_reported, 1);
                fprintf(stderr, "dissect: rank %d: %s received at step %ld while in %s on the %s group (%d ranks) "
                                "for %.1f s\n",
                        my_rank, signame(sig), step, op, group, size, waited);
            } else if (dx_now_ns() - signal_at_ns > 500ull * 1000 * 1000) {
                atomic_store(&signal_reported, 1);
                fprintf(stderr, "dissect: rank %d: %s received at step %ld outside any collective (computing)\n",
                        my_rank, signame(sig), step);
            }
        }

        /* the timeout callback (a trace flush through HDF5) only when the main thread is not
         * itself inside HDF5 or MPI-IO: neither library may be re-entered from this thread */
        const int flush_safe = since && !atomic_load_explicit(&cur_in_library, memory_order_relaxed);
        if (since && timeout_s > 0 && waited > timeout_s) {
            fprintf(stderr, "dissect: error: rank %d: %s on the %s group (%d ranks) at step %ld has not completed "
                            "after %.0f s (distributed_timeout_minutes %g): a rank died or hangs; aborting\n",
                    my_rank, op, group, size, step, waited, M);
            pthread_mutex_lock(&slots_mu);
            take_down(flush_safe);
        }
        pthread_mutex_lock(&slots_mu);
        for (int i = 0; i < SLOTS; i++) {
            if (!slots[i].used || !slots[i].poll) continue;
            const char *dop = "collective";
            char err[256] = "";
            double age = slots[i].poll(slots[i].ctx, &dop, err, sizeof err);
            if (age < 0) {
                fprintf(stderr, "dissect: error: rank %d: %s on the %s group (%d ranks) at step %ld failed: %s; "
                                "aborting\n",
                        my_rank, dop, slots[i].group, slots[i].size, step, err);
                take_down(flush_safe);
            }
            if (timeout_s > 0 && age > timeout_s) {
                fprintf(stderr, "dissect: error: rank %d: %s on the %s group (%d ranks) at step %ld has not completed "
                                "after %.0f s on the device (distributed_timeout_minutes %g): a rank died or hangs; "
                                "aborting\n",
                        my_rank, dop, slots[i].group, slots[i].size, step, age, M);
                take_down(flush_safe);
            }
        }
        pthread_mutex_unlock(&slots_mu);
    }
    return NULL;
}

int dx_watchdog_start(double t, int rank)
{
    if (running) return 0;
    timeout_s = t;
    my_rank = rank;
    atomic_store(&stop_flag, 0);
    if (!wake_ready) {
        if (sem_init(&wake, 0, 0))
            return dx_fail("rank %d: cannot create the watchdog's semaphore: %s", rank, strerror(errno));
        wake_ready = 1;
    }
    int e = pthread_create(&thread, NULL, watch_main, NULL);
    if (e) return dx_fail("rank %d: cannot start the watchdog thread: %s", rank, strerror(e));
    running = 1;
    return 0;
}

void dx_watchdog_stop(void)
{
    if (!running) return;
    atomic_store(&stop_flag, 1);
    sem_post(&wake);
    pthread_join(thread, NULL);
    running = 0;
}
