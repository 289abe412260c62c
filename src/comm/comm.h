/* dissect comm: collectives over a group of ranks, independent of what the bytes mean.
 *
 * One interface, several implementations: MPI over host memory (this file's dx_comm_mpi_*),
 * NCCL over device memory on its own stream (later). A group is a set of ranks (the world, or a
 * DP / TP / PP group split from it). All calls are collective over the group unless noted and
 * return 0 or -1 with dx_fail() naming the operation and rank.
 */
#ifndef DX_COMM_H
#define DX_COMM_H

#include <stddef.h>

#include "kernels.h"

typedef struct dx_comm dx_comm;

/* A collective in flight (see all_gather_start). */
typedef struct {
    void *handle; /* implementation's: a CUDA event for NCCL; unused for MPI */
    int active;   /* started and not yet waited for */
} dx_comm_req;

struct dx_comm {
    int rank; /* rank within this group */
    int size; /* ranks in this group */
    const char *name; /* the group's name in messages ("world", "dp", "tp", "pp", "pipeline
                       * link"): a static string, set by whoever makes the group */
    void *impl;
    /* Timing marks (dx_backend.mark ids) around the last collective on device buffers, recorded
     * in its own stream; -1 when the comm runs synchronously on the host (MPI), whose callers
     * time it with the host clock. */
    int last_mark[2];
    /* Marks around the host-to-device copy of the last all_gather_host_start; -1 where none. */
    int last_copy_mark[2];

    /* buf[count] of dt summed over the group, in place. */
    int (*all_reduce_sum)(dx_comm *c, void *buf, size_t count, dx_dtype dt);
    /* recv[size * count] = concatenation of every rank's send[count] in rank order. */
    int (*all_gather)(dx_comm *c, const void *send, void *recv, size_t count, dx_dtype dt);
    /* recv[count] = sum over ranks of send[rank * count .. (rank + 1) * count). */
    int (*reduce_scatter_sum)(dx_comm *c, const void *send, void *recv, size_t count,
                              dx_dtype dt);
    /* Split-phase forms of all_gather and reduce_scatter_sum: start the collective and return;
     * `wait` makes later work (the backend's compute stream) wait for it, and must come before
     * the buffers are read or reused. NCCL runs the collective on its own stream meanwhile; MPI
     * completes it in start (host collectives make no progress in the background here), so its
     * wait returns at once. A req with active = 0 waits for nothing. */
    int (*all_gather_start)(dx_comm *c, const void *send, void *recv, size_t count, dx_dtype dt,
                            dx_comm_req *req);
    /* (reduce_scatter_start may run in place: recv = send + rank * count elements, the rank's
     * own part of send; the other parts of send are undefined afterwards.) */
    int (*reduce_scatter_start)(dx_comm *c, const void *send, void *recv, size_t count,
                                dx_dtype dt, dx_comm_req *req);
    /* Split-phase all_reduce_sum (buf[count] summed in place), as above: NCCL on its main
     * stream after the compute stream's work queued so far, in order with the comm's other
     * collectives there (so a wait for the newest covers the older ones); MPI completes it in
     * start. buf must not be read or written until `wait`. */
    int (*all_reduce_start)(dx_comm *c, void *buf, size_t count, dx_dtype dt, dx_comm_req *req);
    /* all_gather_start whose own part comes from host memory (ZeRO-Infinity's parameter
     * offload): copies host_send[send_bytes] (page-locked for an asynchronous copy; send_bytes <=
     * count elements) into this rank's slot of recv (recv + rank * count elements) on the
     * collective's own stream, after the compute stream's work queued so far (so recv may still
     * be in use until then), then all-gathers recv in place. The host buffer may be written
     * again only after a wait and a backend sync. NULL where the comm has no such form (MPI:
     * the caller copies, then calls all_gather_start in place). */
    int (*all_gather_host_start)(dx_comm *c, const void *host_send, size_t send_bytes, void *recv,
                                 size_t count, dx_dtype dt, dx_comm_req *req);
    int (*wait)(dx_comm *c, dx_comm_req *req);
    /* buf[bytes] from root to every rank. */
    int (*broadcast)(dx_comm *c, void *buf, size_t bytes, int root);
    /* recv[size * bytes] on root = every rank's send[bytes] in rank order (recv ignored elsewhere). */
    int (*gather)(dx_comm *c, const void *send, void *recv, size_t bytes, int root);
    /* recv[sum of recv_bytes] on root = every rank's send[bytes] concatenated in rank order;
     * recv_bytes[size] (root only) gives each rank's byte count (< 2 GiB in all). */
    int (*gatherv)(dx_comm *c, const void *send, size_t bytes, void *recv,
                   const size_t *recv_bytes, int root);
    /* Point to point, blocking: buf[bytes] to / from rank `peer` of this group with `tag`.
     * recv: later work (NCCL: the compute stream) sees the data. */
    int (*send)(dx_comm *c, const void *buf, size_t bytes, int peer, int tag);
    int (*recv)(dx_comm *c, void *buf, size_t bytes, int peer, int tag);
    /* Non-blocking send: starts sending buf[bytes] (as queued so far by the compute stream) to
     * `peer` with `tag` and returns; buf must stay unchanged until `wait` on req (MPI_Isend; NCCL:
     * ncclSend on the comm's stream, so a send to a peer that has not yet posted its receive
     * holds up no compute). Messages between two ranks with one tag arrive in order. */
    int (*send_start)(dx_comm *c, const void *buf, size_t bytes, int peer, int tag, dx_comm_req *req);
    int (*barrier)(dx_comm *c);
    /* Maximum of an int over the group (used to agree on errors: any rank's -1 -> all see 1). */
    int (*max_int)(dx_comm *c, int value, int *out);
    /* Optional (NULL where the comm has none: MPI, NCCL < 2.28, one rank, or
     * DX_NCCL_CE_ALLGATHER=0). Device memory of `bytes` for all-gather destinations: NCCL
     * allocates it (ncclMemAlloc) and registers it as a symmetric window of a second
     * communicator with the zero-CTA policy, NCCL 2.28's conditions for running all-gathers on
     * the copy engines instead of SM kernels; all-gathers whose recv lies in a window run on
     * that communicator and its own stream. Counted in the backend's byte counters under `cat`;
     * contents undefined. Collective (every rank asks for the same size in the same order); NULL +
     * dx_fail on every rank if any rank's allocation failed. */
    void *(*alloc_window)(dx_comm *c, size_t bytes, dx_mem_cat cat);
    /* Frees a pointer from alloc_window (NULL is a no-op); collective, after the collectives
     * that use it have been waited for. */
    void (*free_window)(dx_comm *c, void *p);
    void (*destroy)(dx_comm *c);
};

/* MPI: initialises MPI if needed (MPI_Init_thread, FUNNELED). The world group. */
dx_comm *dx_comm_mpi_world(int *argc, char ***argv);
/* Splits a group (MPI_Comm_split): ranks with equal color form a group, ordered by key. */
dx_comm *dx_comm_mpi_split(dx_comm *parent, int color, int key);
/* Splits off one group: the ranks passing member = 1, ordered by key; collective over the
 * parent. Returns the group on members, NULL elsewhere; *rc = 0, or -1 + dx_fail on failure. */
dx_comm *dx_comm_mpi_split_member(dx_comm *parent, int member, int key, int *rc);
/* The MPI communicator of an MPI group, into *(MPI_Comm *)out (for MPI-IO: parallel HDF5);
 * -1 + dx_fail where c is not an MPI group. */
int dx_comm_mpi_handle(dx_comm *c, void *out);
/* Finalises MPI (after every group is destroyed). */
void dx_comm_mpi_finalize(void);
/* Aborts every rank of the job with exit code `code` (last resort, e.g. on a hang). */
void dx_comm_mpi_abort(int code);

/* Agrees on an error across the group: every rank passes its rc (0, or < 0 when it failed).
 * Returns 0 on every rank if none failed; else -1 on the ranks that failed themselves (rc == -1;
 * their own message stays) and -2 on the others, whose message becomes "rank R failed" for the
 * lowest failing rank R. A rank passing -2 (it only learnt of another rank's failure) counts as
 * not failed itself. */
int dx_comm_agree(dx_comm *c, int rc);

#endif
