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
#include <stdlib.h>

#include "comm.h"
#include "comm_nccl.h"
#include "common/common.h"
#include "cuda/cuda_backend.h"

typedef struct {
    ncclComm_t comm;
    cudaStream_t stream, compute;
    cudaEvent_t before, after;
    dx_comm *host; /* the MPI group (not owned) */
    dx_backend *be; /* for timing marks on the comm stream */
    cudaEvent_t ring[8]; /* completion events of split-phase collectives, reused in turn */
    int next;
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

/* The comm stream waits for the compute stream's work queued so far; then a timing mark. */
static int begin(dx_comm *c, const char *op)
{
    nccl_impl *n = I(c);
    if (ck_cuda(cudaEventRecord(n->before, n->compute), op, c->rank)) return -1;
    if (ck_cuda(cudaStreamWaitEvent(n->stream, n->before, 0), op, c->rank)) return -1;
    c->last_mark[0] = n->be->mark ? n->be->mark(n->be, n->stream) : -1;
    return 0;
}
/* A timing mark; the compute stream's later work waits for the collective. */
static int end(dx_comm *c, const char *op)
{
    nccl_impl *n = I(c);
    c->last_mark[1] = n->be->mark ? n->be->mark(n->be, n->stream) : -1;
    if (c->last_mark[1] < 0) c->last_mark[0] = -1;
    if (ck_cuda(cudaEventRecord(n->after, n->stream), op, c->rank)) return -1;
    return ck_cuda(cudaStreamWaitEvent(n->compute, n->after, 0), op, c->rank);
}

static int n_all_reduce(dx_comm *c, void *buf, size_t count, dx_dtype dt)
{
    ncclDataType_t t;
    if (ntype(dt, &t) || begin(c, "all-reduce")) return -1;
    if (ck_nccl(ncclAllReduce(buf, buf, count, t, ncclSum, I(c)->comm, I(c)->stream), "all-reduce", c->rank)) return -1;
    return end(c, "all-reduce");
}

static int n_all_gather(dx_comm *c, const void *send, void *recv, size_t count, dx_dtype dt)
{
    ncclDataType_t t;
    if (ntype(dt, &t) || begin(c, "all-gather")) return -1;
    if (ck_nccl(ncclAllGather(send, recv, count, t, I(c)->comm, I(c)->stream), "all-gather", c->rank)) return -1;
    return end(c, "all-gather");
}

static int n_reduce_scatter(dx_comm *c, const void *send, void *recv, size_t count, dx_dtype dt)
{
    ncclDataType_t t;
    if (ntype(dt, &t) || begin(c, "reduce-scatter")) return -1;
    if (ck_nccl(ncclReduceScatter(send, recv, count, t, ncclSum, I(c)->comm, I(c)->stream), "reduce-scatter", c->rank))
        return -1;
    return end(c, "reduce-scatter");
}

/* Split phase: like begin/collective/end, but the compute stream waits only in n_wait. */
static int finish_async(dx_comm *c, const char *op, dx_comm_req *req)
{
    nccl_impl *n = I(c);
    c->last_mark[1] = n->be->mark ? n->be->mark(n->be, n->stream) : -1;
    if (c->last_mark[1] < 0) c->last_mark[0] = -1;
    cudaEvent_t ev = n->ring[n->next];
    n->next = (n->next + 1) % (int)(sizeof n->ring / sizeof n->ring[0]);
    if (ck_cuda(cudaEventRecord(ev, n->stream), op, c->rank)) return -1;
    req->handle = ev;
    req->active = 1;
    return 0;
}

static int n_all_gather_start(dx_comm *c, const void *send, void *recv, size_t count, dx_dtype dt,
                              dx_comm_req *req)
{
    ncclDataType_t t;
    if (ntype(dt, &t) || begin(c, "all-gather")) return -1;
    if (ck_nccl(ncclAllGather(send, recv, count, t, I(c)->comm, I(c)->stream), "all-gather", c->rank)) return -1;
    return finish_async(c, "all-gather", req);
}

static int n_reduce_scatter_start(dx_comm *c, const void *send, void *recv, size_t count,
                                  dx_dtype dt, dx_comm_req *req)
{
    ncclDataType_t t;
    if (ntype(dt, &t) || begin(c, "reduce-scatter")) return -1;
    if (ck_nccl(ncclReduceScatter(send, recv, count, t, ncclSum, I(c)->comm, I(c)->stream),
                "reduce-scatter", c->rank))
        return -1;
    return finish_async(c, "reduce-scatter", req);
}

static int n_wait(dx_comm *c, dx_comm_req *req)
{
    if (!req->active) return 0;
    req->active = 0;
    return ck_cuda(cudaStreamWaitEvent(I(c)->compute, (cudaEvent_t)req->handle, 0), "wait", c->rank);
}

static int n_broadcast(dx_comm *c, void *buf, size_t bytes, int root)
{
    if (begin(c, "broadcast")) return -1;
    if (ck_nccl(ncclBroadcast(buf, buf, bytes, ncclUint8, root, I(c)->comm, I(c)->stream), "broadcast", c->rank))
        return -1;
    return end(c, "broadcast");
}

static int n_send(dx_comm *c, const void *buf, size_t bytes, int peer, int tag)
{
    (void)tag; /* NCCL orders point-to-point messages per peer; tags are not needed */
    if (begin(c, "send")) return -1;
    if (ck_nccl(ncclSend(buf, bytes, ncclUint8, peer, I(c)->comm, I(c)->stream), "send", c->rank)) return -1;
    return end(c, "send");
}

static int n_recv(dx_comm *c, void *buf, size_t bytes, int peer, int tag)
{
    (void)tag;
    if (begin(c, "recv")) return -1;
    if (ck_nccl(ncclRecv(buf, bytes, ncclUint8, peer, I(c)->comm, I(c)->stream), "recv", c->rank)) return -1;
    return end(c, "recv");
}

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

static void n_destroy(dx_comm *c)
{
    if (!c) return;
    nccl_impl *n = c->impl;
    if (n) {
        if (n->stream) cudaStreamSynchronize(n->stream);
        if (n->comm) ncclCommDestroy(n->comm);
        if (n->before) cudaEventDestroy(n->before);
        if (n->after) cudaEventDestroy(n->after);
        for (size_t i = 0; i < sizeof n->ring / sizeof n->ring[0]; i++)
            if (n->ring[i]) cudaEventDestroy(n->ring[i]);
        if (n->stream) cudaStreamDestroy(n->stream);
        free(n);
    }
    free(c);
}

dx_comm *dx_comm_nccl_create(dx_comm *host, dx_backend *be)
{
    dx_comm *c = calloc(1, sizeof *c);
    nccl_impl *n = calloc(1, sizeof *n);
    int rc = (!c || !n) ? dx_fail("rank %d: out of memory", host->rank) : 0;
    if (!rc && !dx_cuda_stream(be)) rc = dx_fail("rank %d: NCCL comm needs the CUDA backend", host->rank);
    ncclUniqueId id;
    if (!rc && host->rank == 0) rc = ck_nccl(ncclGetUniqueId(&id), "get unique id", host->rank);
    /* every rank joins the broadcast, so a failure on one cannot leave the others waiting */
    if (host->broadcast(host, &id, sizeof id, 0)) rc = -1;
    if (!rc) {
        c->impl = n;
        c->rank = host->rank;
        c->size = host->size;
        n->host = host;
        n->be = be;
        c->last_mark[0] = c->last_mark[1] = -1;
        n->compute = (cudaStream_t)dx_cuda_stream(be);
        rc = ck_cuda(cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking), "stream", host->rank);
    }
    if (!rc) rc = ck_cuda(cudaEventCreateWithFlags(&n->before, cudaEventDisableTiming), "event", host->rank);
    if (!rc) rc = ck_cuda(cudaEventCreateWithFlags(&n->after, cudaEventDisableTiming), "event", host->rank);
    for (size_t i = 0; !rc && i < sizeof n->ring / sizeof n->ring[0]; i++)
        rc = ck_cuda(cudaEventCreateWithFlags(&n->ring[i], cudaEventDisableTiming), "event", host->rank);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
    /* DX_NCCL_CTA_POLICY: NCCL's CTA policy (0 default, 1 efficiency: fewer CTAs, so more SMs
     * left to the kernels the collectives overlap; 2 zero-CTA where NCCL can) */
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    const char *policy = getenv("DX_NCCL_CTA_POLICY");
    if (policy && policy[0]) cfg.CTAPolicy = atoi(policy);
    if (!rc) rc = ck_nccl(ncclCommInitRankConfig(&n->comm, host->size, id, host->rank, &cfg), "init", host->rank);
#else
    if (!rc) rc = ck_nccl(ncclCommInitRank(&n->comm, host->size, id, host->rank), "init", host->rank);
#endif
    if (rc) {
        if (c && !c->impl) free(n);
        n_destroy(c);
        return NULL;
    }
    c->all_reduce_sum = n_all_reduce;
    c->all_gather = n_all_gather;
    c->reduce_scatter_sum = n_reduce_scatter;
    c->all_gather_start = n_all_gather_start;
    c->reduce_scatter_start = n_reduce_scatter_start;
    c->wait = n_wait;
    c->broadcast = n_broadcast;
    c->gather = n_gather;
    c->gatherv = n_gatherv;
    c->send = n_send;
    c->recv = n_recv;
    c->barrier = n_barrier;
    c->max_int = n_max_int;
    c->destroy = n_destroy;
    return c;
}
