/* MPI implementation of the dx_comm interface (host memory). */
#include "comm.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "watchdog.h"

typedef struct {
    MPI_Comm comm;
    int owns; /* free the communicator on destroy */
} mpi_impl;

static MPI_Comm C(dx_comm *c) { return ((mpi_impl *)c->impl)->comm; }

static int mpi_type(dx_dtype dt, MPI_Datatype *t)
{
    switch (dt) {
    case DX_F32: *t = MPI_FLOAT; return 0;
    case DX_F64: *t = MPI_DOUBLE; return 0;
    default: *t = MPI_DATATYPE_NULL; return dx_fail("MPI comm: dtype %s not supported on host collectives", dx_dtype_name(dt));
    }
}

/* An MPI error code as a message naming the rank, the operation and the group. */
static int check(int err, const char *op, const dx_comm *c)
{
    if (err == MPI_SUCCESS) return 0;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, msg, &len);
    return dx_fail("rank %d: MPI %s on the %s group (%d ranks) failed: %s", c->rank, op,
                   c->name ? c->name : "unnamed", c->size, msg);
}

/* A blocking MPI call on group c, marked for the watchdog (watchdog.h): WATCHED(c, "op", MPI_X(...)). */
#define WATCHED(c, op, call) (dx_watch_begin(op, c), watched_end(call))
static int watched_end(int err)
{
    dx_watch_end();
    return err;
}

/* MPI counts are int: split large transfers into chunks of at most 1 Gi elements. */
#define CHUNK ((size_t)1 << 30)

static int m_all_reduce_sum(dx_comm *c, void *buf, size_t count, dx_dtype dt)
{
    MPI_Datatype t;
    if (mpi_type(dt, &t)) return -1;
    size_t es = dx_dtype_size(dt);
    for (size_t off = 0; off < count; off += CHUNK) {
        size_t n = count - off < CHUNK ? count - off : CHUNK;
        int err = WATCHED(c, "all-reduce", MPI_Allreduce(MPI_IN_PLACE, (char *)buf + off * es, (int)n, t, MPI_SUM, C(c)));
        if (check(err, "all-reduce", c)) return -1;
    }
    return 0;
}

static int m_all_gather(dx_comm *c, const void *send, void *recv, size_t count, dx_dtype dt)
{
    MPI_Datatype t;
    if (mpi_type(dt, &t)) return -1;
    if (count > CHUNK) return dx_fail("rank %d: all-gather of %zu elements per rank exceeds MPI's int count", c->rank, count);
    const void *s = send;
    if (send == (const char *)recv + (size_t)c->rank * count * dx_dtype_size(dt)) s = MPI_IN_PLACE;
    return check(WATCHED(c, "all-gather", MPI_Allgather(s, (int)count, t, recv, (int)count, t, C(c))), "all-gather", c);
}

static int m_reduce_scatter_sum(dx_comm *c, const void *send, void *recv, size_t count, dx_dtype dt)
{
    MPI_Datatype t;
    if (mpi_type(dt, &t)) return -1;
    if (count > CHUNK) return dx_fail("rank %d: reduce-scatter of %zu elements per rank exceeds MPI's int count", c->rank, count);
    return check(WATCHED(c, "reduce-scatter", MPI_Reduce_scatter_block(send, recv, (int)count, t, MPI_SUM, C(c))),
                 "reduce-scatter", c);
}

/* MPI: the collective completes in start; wait has nothing left to do. */
static int m_all_gather_start(dx_comm *c, const void *send, void *recv, size_t count, dx_dtype dt,
                              dx_comm_req *req)
{
    req->active = 0;
    return m_all_gather(c, send, recv, count, dt);
}

static int m_reduce_scatter_start(dx_comm *c, const void *send, void *recv, size_t count,
                                  dx_dtype dt, dx_comm_req *req)
{
    req->active = 0;
    const size_t bytes = count * dx_dtype_size(dt);
    if (recv != (const char *)send + (size_t)c->rank * bytes || !bytes)
        return m_reduce_scatter_sum(c, send, recv, count, dt);
    /* in place (MPI forbids aliased send and receive buffers): through a scratch part */
    void *tmp = malloc(bytes);
    if (!tmp) return dx_fail("rank %d: reduce-scatter: out of host memory (%zu bytes)", c->rank, bytes);
    int rc = m_reduce_scatter_sum(c, send, tmp, count, dt);
    if (!rc) memcpy(recv, tmp, bytes);
    free(tmp);
    return rc;
}

static int m_all_reduce_start(dx_comm *c, void *buf, size_t count, dx_dtype dt, dx_comm_req *req)
{
    req->active = 0;
    return m_all_reduce_sum(c, buf, count, dt);
}

static int m_wait(dx_comm *c, dx_comm_req *req)
{
    int rc = 0;
    if (req->active && req->handle) { /* a send_start's MPI_Request */
        rc = check(WATCHED(c, "send", MPI_Wait((MPI_Request *)req->handle, MPI_STATUS_IGNORE)), "send wait", c);
        free(req->handle);
        req->handle = NULL;
    }
    req->active = 0;
    return rc;
}

static int m_send_start(dx_comm *c, const void *buf, size_t bytes, int peer, int tag, dx_comm_req *req)
{
    if (bytes > CHUNK) return dx_fail("rank %d: send of %zu bytes exceeds MPI's int count", c->rank, bytes);
    MPI_Request *r = malloc(sizeof *r);
    if (!r) return dx_fail("rank %d: out of memory for a send request", c->rank);
    if (check(MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, C(c), r), "send", c)) {
        free(r);
        return -1;
    }
    req->handle = r;
    req->active = 1;
    return 0;
}

static int m_broadcast(dx_comm *c, void *buf, size_t bytes, int root)
{
    for (size_t off = 0; off < bytes || off == 0; off += CHUNK) {
        size_t n = bytes - off < CHUNK ? bytes - off : CHUNK;
        if (check(WATCHED(c, "broadcast", MPI_Bcast((char *)buf + off, (int)n, MPI_BYTE, root, C(c))), "broadcast", c))
            return -1;
        if (bytes == 0) break;
    }
    return 0;
}

static int m_gather(dx_comm *c, const void *send, void *recv, size_t bytes, int root)
{
    if (bytes > CHUNK) return dx_fail("rank %d: gather of %zu bytes exceeds MPI's int count", c->rank, bytes);
    return check(WATCHED(c, "gather", MPI_Gather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, root, C(c))),
                 "gather", c);
}

static int m_gatherv(dx_comm *c, const void *send, size_t bytes, void *recv,
                     const size_t *recv_bytes, int root)
{
    int *counts = NULL, *displs = NULL, rc = 0;
    if (bytes > (size_t)1 << 30) return dx_fail("rank %d: gatherv of %zu bytes exceeds MPI's int count", c->rank, bytes);
    if (c->rank == root) {
        counts = malloc((size_t)c->size * sizeof *counts);
        displs = malloc((size_t)c->size * sizeof *displs);
        if (!counts || !displs) rc = dx_fail("rank %d: out of memory in gatherv", c->rank);
        size_t off = 0;
        for (int r = 0; !rc && r < c->size; r++) {
            if (off + recv_bytes[r] > (size_t)1 << 30) rc = dx_fail("rank %d: gatherv total exceeds 1 GiB", c->rank);
            counts[r] = (int)recv_bytes[r];
            displs[r] = (int)off;
            off += recv_bytes[r];
        }
    }
    /* a root failure must still complete the collective on the other ranks */
    if (!rc || c->rank != root)
        rc = check(WATCHED(c, "gatherv", MPI_Gatherv(send, (int)bytes, MPI_BYTE, recv, counts, displs, MPI_BYTE, root, C(c))),
                   "gatherv", c);
    free(counts);
    free(displs);
    return rc;
}

static int m_send(dx_comm *c, const void *buf, size_t bytes, int peer, int tag)
{
    if (bytes > CHUNK) return dx_fail("rank %d: send of %zu bytes exceeds MPI's int count", c->rank, bytes);
    return check(WATCHED(c, "send", MPI_Send(buf, (int)bytes, MPI_BYTE, peer, tag, C(c))), "send", c);
}

static int m_recv(dx_comm *c, void *buf, size_t bytes, int peer, int tag)
{
    if (bytes > CHUNK) return dx_fail("rank %d: recv of %zu bytes exceeds MPI's int count", c->rank, bytes);
    return check(WATCHED(c, "recv", MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, tag, C(c), MPI_STATUS_IGNORE)), "recv", c);
}

static int m_barrier(dx_comm *c) { return check(WATCHED(c, "barrier", MPI_Barrier(C(c))), "barrier", c); }

static int m_max_int(dx_comm *c, int value, int *out)
{
    return check(WATCHED(c, "all-reduce(max)", MPI_Allreduce(&value, out, 1, MPI_INT, MPI_MAX, C(c))), "all-reduce(max)", c);
}

static void m_destroy(dx_comm *c)
{
    if (!c) return;
    mpi_impl *m = c->impl;
    if (m->owns) MPI_Comm_free(&m->comm);
    free(m);
    free(c);
}

static dx_comm *wrap(MPI_Comm comm, int owns)
{
    dx_comm *c = calloc(1, sizeof *c);
    mpi_impl *m = calloc(1, sizeof *m);
    if (!c || !m) {
        free(c);
        free(m);
        dx_fail("MPI comm: out of memory");
        return NULL;
    }
    m->comm = comm;
    m->owns = owns;
    c->impl = m;
    c->last_mark[0] = c->last_mark[1] = -1;
    c->last_copy_mark[0] = c->last_copy_mark[1] = -1;
    MPI_Comm_rank(comm, &c->rank);
    MPI_Comm_size(comm, &c->size);
    c->all_reduce_sum = m_all_reduce_sum;
    c->all_gather = m_all_gather;
    c->reduce_scatter_sum = m_reduce_scatter_sum;
    c->broadcast = m_broadcast;
    c->gather = m_gather;
    c->all_gather_start = m_all_gather_start;
    c->reduce_scatter_start = m_reduce_scatter_start;
    c->all_reduce_start = m_all_reduce_start;
    c->wait = m_wait;
    c->gatherv = m_gatherv;
    c->send = m_send;
    c->recv = m_recv;
    c->send_start = m_send_start;
    c->barrier = m_barrier;
    c->max_int = m_max_int;
    c->destroy = m_destroy;
    return c;
}

dx_comm *dx_comm_mpi_world(int *argc, char ***argv)
{
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided;
        if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
            dx_fail("MPI_Init_thread failed");
            return NULL;
        }
    }
    /* errors come back as codes, never abort silently */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    dx_comm *c = wrap(MPI_COMM_WORLD, 0);
    if (c) c->name = "world";
    return c;
}

dx_comm *dx_comm_mpi_split(dx_comm *parent, int color, int key)
{
    MPI_Comm sub;
    if (check(MPI_Comm_split(C(parent), color, key, &sub), "comm split", parent)) return NULL;
    MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
    return wrap(sub, 1);
}

dx_comm *dx_comm_mpi_split_member(dx_comm *parent, int member, int key, int *rc)
{
    MPI_Comm sub;
    *rc = check(MPI_Comm_split(C(parent), member ? 0 : MPI_UNDEFINED, key, &sub), "comm split", parent);
    if (*rc || !member) return NULL;
    MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
    dx_comm *c = wrap(sub, 1);
    if (!c) *rc = -1;
    return c;
}

void dx_comm_mpi_finalize(void)
{
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
}

void dx_comm_mpi_abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

int dx_comm_agree(dx_comm *c, int rc)
{
    /* the lowest failing rank wins the max of (size - rank); 0 = no failure */
    int mine = rc == -1 ? c->size - c->rank : 0, worst = 0;
    if (c->max_int(c, mine, &worst)) return -1;
    if (worst == 0) return rc == -2 ? -2 : 0;
    if (rc == -1) return -1;
    dx_fail("rank %d failed (see its message)", c->size - worst);
    return -2;
}

int dx_comm_mpi_handle(dx_comm *c, void *out)
{
    if (!c || c->all_reduce_sum != m_all_reduce_sum) return dx_fail("MPI comm: not an MPI group");
    *(MPI_Comm *)out = C(c);
    return 0;
}
