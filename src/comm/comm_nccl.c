/* NCCL implementation of the dx_comm interface for device buffers of the CUDA backend.
 *
 * Collectives on device memory run on the comm's own CUDA stream. Ordering with the backend's
 * compute stream uses CUDA events only (no device-wide or host synchronisation): before a
 * collective the comm stream waits for an event recorded on the compute stream (the producer of
 * the data), and after it the compute stream waits for an event recorded on the comm stream (the
 * consumers). The unique id travels over MPI (broadcast from rank 0 of the group).
 * Operations on host memory (gather, gatherv, max_int, barrier) are delegated to the MPI group
 * the comm was made from.
 */
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm.h"
#include "comm_nccl.h"
#include "common/common.h"
#include "cuda/cuda_backend.h"
#include "watchdog.h"

/* NCCL 2.28 can run an all-gather on the copy engines (no SMs taken from the kernels it
 * overlaps) when the communicator's CTA policy is zero and the destination is a symmetric
 * window; NCCL picks the path, and its log does not say which it took. */
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0) && defined(NCCL_CTA_POLICY_ZERO)
#define DX_NCCL_CE 1
#else
#define DX_NCCL_CE 0
#endif

/* An NCCL communicator and the stream its collectives run on, with what the watchdog
 * (watchdog.h) needs to see a collective that does not complete: the event recorded after the
 * newest one (written by the main thread under mu) and the watchdog thread's own view of it. */
typedef struct {
    ncclComm_t comm;
    cudaStream_t stream;
    pthread_mutex_t mu;
    cudaEvent_t w_ev;     /* recorded after the newest collective; NULL before the first */
    const char *w_op;     /* its name */
    unsigned long w_gen;  /* collectives enqueued so far */
    unsigned long w_seen; /* watchdog thread only: the generation it last saw pending */
    uint64_t w_since;     /* watchdog thread only: when it first saw it pending (0 = not) */
} lane;

/* A buffer from alloc_window: ncclMemAlloc'd and registered as a symmetric window of ag.comm. */
typedef struct {
    char *p;
    size_t bytes;
    dx_mem_cat cat;
#if DX_NCCL_CE
    ncclWindow_t win;
#endif
} window;

typedef struct {
    lane main; /* every collective, except all-gathers into a window */
    lane ag;   /* all-gathers into a window: CTA policy zero (with the window, NCCL's conditions
                * for copy-engine all-gathers); ag.comm NULL when unused */
    cudaStream_t compute;
    cudaEvent_t before, after;
    dx_comm *host; /* the MPI group (not owned) */
    dx_backend *be; /* for timing marks on the comm streams */
    cudaEvent_t ring[8]; /* completion events of split-phase collectives, reused in turn */
    int next;
    window *wins;
    int nwins;
    int device;      /* the CUDA device, for the watchdog thread's queries */
    int watch;       /* dx_watch_register handle, -1 = none */
} nccl_impl;

static nccl_impl *I(dx_comm *c) { return c->impl; }

static int ck_cuda(cudaError_t e, const char *op, int rank)
{
    return e == cudaSuccess ? 0 : dx_fail("rank %d: NCCL comm %s: CUDA error %s", rank, op, cudaGetErrorString(e));
}
static int ck_nccl(ncclResult_t r, const char *op, int rank)
{
    return r == ncclSuccess ? 0 : dx_fail("rank %d: NCCL %s failed: %s", rank, op, ncclGetErrorString(r));
}

static int ntype(dx_dtype dt, ncclDataType_t *t)
{
    switch (dt) {
    case DX_F32: *t = ncclFloat32; return 0;
    case DX_F64: *t = ncclFloat64; return 0;
    case DX_BF16: *t = ncclBfloat16; return 0;
    }
    *t = ncclFloat32;
    return dx_fail("NCCL comm: unknown dtype %d", (int)dt);
}

/* The lane's stream waits for the compute stream's work queued so far; then a timing mark. */
static int begin(dx_comm *c, lane *l, const char *op)
{
    nccl_impl *n = I(c);
    if (ck_cuda(cudaEventRecord(n->before, n->compute), op, c->rank)) return -1;
    if (ck_cuda(cudaStreamWaitEvent(l->stream, n->before, 0), op, c->rank)) return -1;
    c->last_mark[0] = n->be->mark ? n->be->mark(n->be, l->stream) : -1;
    return 0;
}
/* The watchdog's record of the newest collective on a lane: ev was just recorded after it. */
static void watch_note(lane *l, cudaEvent_t ev, const char *op)
{
    pthread_mutex_lock(&l->mu);
    l->w_ev = ev;
    l->w_op = op;
    l->w_gen++;
    pthread_mutex_unlock(&l->mu);
}

/* A timing mark; the compute stream's later work waits for the collective. */
static int end(dx_comm *c, lane *l, const char *op)
{
    nccl_impl *n = I(c);
    c->last_mark[1] = n->be->mark ? n->be->mark(n->be, l->stream) : -1;
    if (c->last_mark[1] < 0) c->last_mark[0] = -1;
    if (ck_cuda(cudaEventRecord(n->after, l->stream), op, c->rank)) return -1;
    watch_note(l, n->after, op);
    return ck_cuda(cudaStreamWaitEvent(n->compute, n->after, 0), op, c->rank);
}

/* The lane of an all-gather into recv[bytes]: ag where recv lies in a window. */
static lane *gather_lane(nccl_impl *n, const void *recv, size_t bytes)
{
    const char *r = recv;
    for (int i = 0; n->ag.comm && i < n->nwins; i++)
        if (r >= n->wins[i].p && r + bytes <= n->wins[i].p + n->wins[i].bytes) return &n->ag;
    return &n->main;
}

static int n_all_reduce(dx_comm *c, void *buf, size_t count, dx_dtype dt)
{
    ncclDataType_t t;
    lane *l = &I(c)->main;
    if (ntype(dt, &t) || begin(c, l, "all-reduce")) return -1;
    if (ck_nccl(ncclAllReduce(buf, buf, count, t, ncclSum, l->comm, l->stream), "all-reduce", c->rank)) return -1;
    return end(c, l, "all-reduce");
}

static int n_all_gather(dx_comm *c, const void *send, void *recv, size_t count, dx_dtype dt)
{
    ncclDataType_t t;
    if (ntype(dt, &t)) return -1;
    lane *l = gather_lane(I(c), recv, count * (size_t)c->size * dx_dtype_size(dt));
    if (begin(c, l, "all-gather")) return -1;
    if (ck_nccl(ncclAllGather(send, recv, count, t, l->comm, l->stream), "all-gather", c->rank)) return -1;
    return end(c, l, "all-gather");
}

static int n_reduce_scatter(dx_comm *c, const void *send, void *recv, size_t count, dx_dtype dt)
{
    ncclDataType_t t;
    lane *l = &I(c)->main;
    if (ntype(dt, &t) || begin(c, l, "reduce-scatter")) return -1;
    if (ck_nccl(ncclReduceScatter(send, recv, count, t, ncclSum, l->comm, l->stream), "reduce-scatter", c->rank))
        return -1;
    return end(c, l, "reduce-scatter");
}

/* Split phase: like begin/collective/end, but the compute stream waits only in n_wait. */
static int finish_async(dx_comm *c, lane *l, const char *op, dx_comm_req *req)
{
    nccl_impl *n = I(c);
    c->last_mark[1] = n->be->mark ? n->be->mark(n->be, l->stream) : -1;
    if (c->last_mark[1] < 0) c->last_mark[0] = -1;
    cudaEvent_t ev = n->ring[n->next];
    n->next = (n->next + 1) % (int)(sizeof n->ring / sizeof n->ring[0]);
    if (ck_cuda(cudaEventRecord(ev, l->stream), op, c->rank)) return -1;
    watch_note(l, ev, op);
    req->handle = ev;
    req->active = 1;
    return 0;
}

static int n_all_gather_start(dx_comm *c, const void *send, void *recv, size_t count, dx_dtype dt,
                              dx_comm_req *req)
{
    ncclDataType_t t;
    if (ntype(dt, &t)) return -1;
    lane *l = gather_lane(I(c), recv, count * (size_t)c->size * dx_dtype_size(dt));
    if (begin(c, l, "all-gather")) return -1;
    if (ck_nccl(ncclAllGather(send, recv, count, t, l->comm, l->stream), "all-gather", c->rank)) return -1;
    return finish_async(c, l, "all-gather", req);
}

static int n_all_gather_host_start(dx_comm *c, const void *host_send, size_t send_bytes, void *recv,
                                   size_t count, dx_dtype dt, dx_comm_req *req)
{
    ncclDataType_t t;
    if (ntype(dt, &t)) return -1;
    nccl_impl *n = I(c);
    const size_t es = dx_dtype_size(dt);
    char *own = (char *)recv + (size_t)c->rank * count * es;
    lane *l = gather_lane(n, recv, count * (size_t)c->size * es);
    if (begin(c, l, "all-gather (host)")) return -1;
    /* the copy, between marks of its own; the all-gather's first mark follows it */
    c->last_copy_mark[0] = c->last_mark[0];
    if (send_bytes &&
        ck_cuda(cudaMemcpyAsync(own, host_send, send_bytes, cudaMemcpyHostToDevice, l->stream), "all-gather (host)", c->rank))
        return -1;
    c->last_copy_mark[1] = c->last_mark[0] = n->be->mark ? n->be->mark(n->be, l->stream) : -1;
    if (c->last_copy_mark[1] < 0) c->last_copy_mark[0] = -1;
    if (ck_nccl(ncclAllGather(own, recv, count, t, l->comm, l->stream), "all-gather", c->rank)) return -1;
    return finish_async(c, l, "all-gather", req);
}

static int n_reduce_scatter_start(dx_comm *c, const void *send, void *recv, size_t count,
                                  dx_dtype dt, dx_comm_req *req)
{
    ncclDataType_t t;
    lane *l = &I(c)->main;
    if (ntype(dt, &t) || begin(c, l, "reduce-scatter")) return -1;
    if (ck_nccl(ncclReduceScatter(send, recv, count, t, ncclSum, l->comm, l->stream),
                "reduce-scatter", c->rank))
        return -1;
    return finish_async(c, l, "reduce-scatter", req);
}

static int n_all_reduce_start(dx_comm *c, void *buf, size_t count, dx_dtype dt, dx_comm_req *req)
{
    ncclDataType_t t;
    lane *l = &I(c)->main;
    if (ntype(dt, &t) || begin(c, l, "all-reduce")) return -1;
    if (ck_nccl(ncclAllReduce(buf, buf, count, t, ncclSum, l->comm, l->stream), "all-reduce", c->rank)) return -1;
    return finish_async(c, l, "all-reduce", req);
}

static int n_wait(dx_comm *c, dx_comm_req *req)
{
    if (!req->active) return 0;
    req->active = 0;
    return ck_cuda(cudaStreamWaitEvent(I(c)->compute, (cudaEvent_t)req->handle, 0), "wait", c->rank);
}

static int n_broadcast(dx_comm *c, void *buf, size_t bytes, int root)
{
    lane *l = &I(c)->main;
    if (begin(c, l, "broadcast")) return -1;
    if (ck_nccl(ncclBroadcast(buf, buf, bytes, ncclUint8, root, l->comm, l->stream), "broadcast", c->rank))
        return -1;
    return end(c, l, "broadcast");
}

static int n_send(dx_comm *c, const void *buf, size_t bytes, int peer, int tag)
{
    (void)tag; /* NCCL orders point-to-point messages per peer; tags are not needed */
    lane *l = &I(c)->main;
    if (begin(c, l, "send")) return -1;
    if (ck_nccl(ncclSend(buf, bytes, ncclUint8, peer, l->comm, l->stream), "send", c->rank)) return -1;
    return end(c, l, "send");
}

static int n_send_start(dx_comm *c, const void *buf, size_t bytes, int peer, int tag, dx_comm_req *req)
{
    (void)tag;
    lane *l = &I(c)->main;
    if (begin(c, l, "send")) return -1;
    if (ck_nccl(ncclSend(buf, bytes, ncclUint8, peer, l->comm, l->stream), "send", c->rank)) return -1;
    return finish_async(c, l, "send", req);
}

static int n_recv(dx_comm *c, void *buf, size_t bytes, int peer, int tag)
{
    (void)tag;
    lane *l = &I(c)->main;
    if (begin(c, l, "recv")) return -1;
    if (ck_nccl(ncclRecv(buf, bytes, ncclUint8, peer, l->comm, l->stream), "recv", c->rank)) return -1;
    return end(c, l, "recv");
}

#if DX_NCCL_CE
/* Collective: every rank allocates, the ranks agree, then register (itself collective), so one
 * rank's failed allocation cannot leave the others waiting in the registration. */
static void *n_alloc_window(dx_comm *c, size_t bytes, dx_mem_cat cat)
{
    nccl_impl *n = I(c);
    void *p = NULL;
    window *w = realloc(n->wins, (size_t)(n->nwins + 1) * sizeof *w);
    if (w) n->wins = w;
    int bad = !w || ncclMemAlloc(&p, bytes) != ncclSuccess, any = 1;
    if (n->host->max_int(n->host, bad, &any) || any) {
        if (p) ncclMemFree(p);
        dx_fail("rank %d: NCCL window of %zu bytes: %s", c->rank, bytes,
                bad ? "allocation failed" : "another rank's allocation failed");
        return NULL;
    }
    w = &n->wins[n->nwins];
    if (ck_nccl(ncclCommWindowRegister(n->ag.comm, p, bytes, &w->win, NCCL_WIN_COLL_SYMMETRIC),
                "window register", c->rank)) {
        ncclMemFree(p);
        return NULL;
    }
    w->p = p;
    w->bytes = bytes;
    w->cat = cat;
    n->nwins++;
    dx_mem_account(&n->be->mem, cat, (long long)bytes);
    return p;
}

static void n_free_window(dx_comm *c, void *p)
{
    nccl_impl *n = I(c);
    for (int i = 0; p && i < n->nwins; i++) {
        window *w = &n->wins[i];
        if (w->p != p) continue;
        cudaStreamSynchronize(n->compute); /* kernels reading it */
        cudaStreamSynchronize(n->ag.stream);
        ncclCommWindowDeregister(n->ag.comm, w->win);
        ncclMemFree(p);
        dx_mem_account(&n->be->mem, w->cat, -(long long)w->bytes);
        *w = n->wins[--n->nwins];
        return;
    }
}
#endif

/* host-memory operations: the MPI group */
static int n_gather(dx_comm *c, const void *send, void *recv, size_t bytes, int root)
{
    return I(c)->host->gather(I(c)->host, send, recv, bytes, root);
}
static int n_gatherv(dx_comm *c, const void *send, size_t bytes, void *recv, const size_t *rb, int root)
{
    return I(c)->host->gatherv(I(c)->host, send, bytes, recv, rb, root);
}
static int n_barrier(dx_comm *c) { return I(c)->host->barrier(I(c)->host); }
static int n_max_int(dx_comm *c, int v, int *out) { return I(c)->host->max_int(I(c)->host, v, out); }

static void lane_destroy(lane *l)
{
    if (l->stream) cudaStreamSynchronize(l->stream);
    if (l->comm) ncclCommDestroy(l->comm);
    if (l->stream) cudaStreamDestroy(l->stream);
    l->comm = NULL;
    l->stream = NULL;
}

/* Watchdog thread: seconds the lane's newest collective has been incomplete (as seen by this
 * thread's polls), or -1 + err on an asynchronous NCCL error (a peer that died: ncclRemoteError). */
static double lane_poll(lane *l, const char **op, char *err, size_t len)
{
    if (!l->comm) return 0;
    ncclResult_t ar = ncclSuccess;
    if (ncclCommGetAsyncError(l->comm, &ar) == ncclSuccess && ar != ncclSuccess && ar != ncclInProgress) {
        snprintf(err, len, "NCCL asynchronous error: %s", ncclGetErrorString(ar));
        pthread_mutex_lock(&l->mu);
        *op = l->w_op ? l->w_op : "collective";
        pthread_mutex_unlock(&l->mu);
        return -1;
    }
    pthread_mutex_lock(&l->mu);
    cudaEvent_t ev = l->w_ev;
    unsigned long gen = l->w_gen;
    *op = l->w_op ? l->w_op : "collective";
    pthread_mutex_unlock(&l->mu);
    if (!ev || cudaEventQuery(ev) != cudaErrorNotReady) {
        l->w_since = 0;
        return 0;
    }
    const uint64_t now = dx_now_ns();
    if (gen != l->w_seen || !l->w_since) {
        l->w_seen = gen;
        l->w_since = now;
    }
    return (double)(now - l->w_since) * 1e-9;
}

static double n_watch_poll(void *ctx, const char **op, char *err, size_t len)
{
    nccl_impl *n = ctx;
    cudaSetDevice(n->device); /* the watchdog thread's queries go to this rank's device */
    const char *op2 = NULL;
    double a = lane_poll(&n->main, op, err, len);
    if (a < 0) return a;
    double b = lane_poll(&n->ag, &op2, err, len);
    if (b < 0 || b > a) {
        *op = op2;
        return b;
    }
    return a;
}

/* Watchdog thread, before the process exits: ncclCommAbort, so no kernel keeps waiting for a
 * peer that will never come. */
static void n_watch_abort(void *ctx)
{
    nccl_impl *n = ctx;
    cudaSetDevice(n->device);
    if (n->ag.comm) ncclCommAbort(n->ag.comm);
    if (n->main.comm) ncclCommAbort(n->main.comm);
    n->ag.comm = n->main.comm = NULL;
}

static void n_destroy(dx_comm *c)
{
    if (!c) return;
    nccl_impl *n = c->impl;
    if (n) {
        dx_watch_unregister(n->watch);
#if DX_NCCL_CE
        while (n->nwins) n_free_window(c, n->wins[0].p); /* windows not freed by their owner */
#endif
        free(n->wins);
        lane_destroy(&n->ag);
        lane_destroy(&n->main);
        if (n->before) cudaEventDestroy(n->before);
        if (n->after) cudaEventDestroy(n->after);
        pthread_mutex_destroy(&n->main.mu);
        pthread_mutex_destroy(&n->ag.mu);
        for (size_t i = 0; i < sizeof n->ring / sizeof n->ring[0]; i++)
            if (n->ring[i]) cudaEventDestroy(n->ring[i]);
        free(n);
    }
    free(c);
}

/* A communicator over the ranks of `host` (collective: the unique id comes from its rank 0) with
 * CTA policy `policy` (-1: NCCL's default), and its stream. */
static int lane_create(lane *l, dx_comm *host, int policy)
{
    ncclUniqueId id;
    int rc = 0;
    if (host->rank == 0) rc = ck_nccl(ncclGetUniqueId(&id), "get unique id", host->rank);
    /* every rank joins the broadcast, so a failure on one cannot leave the others waiting */
    if (host->broadcast(host, &id, sizeof id, 0)) rc = -1;
    if (!rc) rc = ck_cuda(cudaStreamCreateWithFlags(&l->stream, cudaStreamNonBlocking), "stream", host->rank);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    if (policy >= 0) cfg.CTAPolicy = policy;
    if (!rc) rc = ck_nccl(ncclCommInitRankConfig(&l->comm, host->size, id, host->rank, &cfg), "init", host->rank);
#else
    (void)policy;
    if (!rc) rc = ck_nccl(ncclCommInitRank(&l->comm, host->size, id, host->rank), "init", host->rank);
#endif
    return rc;
}

dx_comm *dx_comm_nccl_create(dx_comm *host, dx_backend *be)
{
    dx_comm *c = calloc(1, sizeof *c);
    nccl_impl *n = calloc(1, sizeof *n);
    int rc = (!c || !n) ? dx_fail("rank %d: out of memory", host->rank) : 0;
    if (!rc && !dx_cuda_stream(be)) rc = dx_fail("rank %d: NCCL comm needs the CUDA backend", host->rank);
    if (c && n) {
        c->impl = n;
        c->rank = host->rank;
        c->size = host->size;
        c->name = host->name;
        n->host = host;
        n->watch = -1;
        pthread_mutex_init(&n->main.mu, NULL);
        pthread_mutex_init(&n->ag.mu, NULL);
        cudaGetDevice(&n->device);
        n->be = be;
        c->last_mark[0] = c->last_mark[1] = -1;
        c->last_copy_mark[0] = c->last_copy_mark[1] = -1;
        n->compute = (cudaStream_t)dx_cuda_stream(be);
    }
    if (!rc) rc = ck_cuda(cudaEventCreateWithFlags(&n->before, cudaEventDisableTiming), "event", host->rank);
    if (!rc) rc = ck_cuda(cudaEventCreateWithFlags(&n->after, cudaEventDisableTiming), "event", host->rank);
    for (size_t i = 0; !rc && i < sizeof n->ring / sizeof n->ring[0]; i++)
        rc = ck_cuda(cudaEventCreateWithFlags(&n->ring[i], cudaEventDisableTiming), "event", host->rank);
    /* DX_NCCL_CTA_POLICY: NCCL's CTA policy of the main communicator (0 default, 1 efficiency:
     * fewer CTAs, so more SMs left to the kernels the collectives overlap; 2 zero-CTA where
     * NCCL can). Every rank joins the communicator's creation, even one that failed above, so
     * none waits for it there; the ranks then agree on the outcome. */
    const char *policy = getenv("DX_NCCL_CTA_POLICY");
    lane spare = {0};
    int rc_lane = lane_create(n ? &n->main : &spare, host, policy && policy[0] ? atoi(policy) : -1);
    lane_destroy(&spare);
    if (!rc) rc = rc_lane;
    int any_failed = 1;
    if (host->max_int(host, rc ? 1 : 0, &any_failed)) rc = -1;
    else if (any_failed && !rc) rc = dx_fail("rank %d: NCCL comm: another rank failed to create it", host->rank);
#if DX_NCCL_CE
    /* the all-gather communicator, for all-gathers into windows (DX_NCCL_CE_ALLGATHER=0: none,
     * every all-gather runs as an SM kernel on the main one) */
    const char *ce = getenv("DX_NCCL_CE_ALLGATHER");
    if (!rc && host->size > 1 && !(ce && ce[0] == '0'))
        rc = lane_create(&n->ag, host, NCCL_CTA_POLICY_ZERO);
#endif
    if (rc) {
        if (!c) free(n); /* else c->impl owns it, if any */
        n_destroy(c);
        return NULL;
    }
    c->all_reduce_sum = n_all_reduce;
    c->all_gather = n_all_gather;
    c->reduce_scatter_sum = n_reduce_scatter;
    c->all_gather_start = n_all_gather_start;
    c->all_gather_host_start = n_all_gather_host_start;
    c->reduce_scatter_start = n_reduce_scatter_start;
    c->all_reduce_start = n_all_reduce_start;
    c->wait = n_wait;
    c->broadcast = n_broadcast;
    c->gather = n_gather;
    c->gatherv = n_gatherv;
    c->send = n_send;
    c->recv = n_recv;
    c->send_start = n_send_start;
    c->barrier = n_barrier;
    c->max_int = n_max_int;
#if DX_NCCL_CE
    if (n->ag.comm) {
        c->alloc_window = n_alloc_window;
        c->free_window = n_free_window;
    }
#endif
    c->destroy = n_destroy;
    n->watch = dx_watch_register(c, n_watch_poll, n_watch_abort, n);
    return c;
}
