/* NCCL comm for device buffers of the CUDA backend (built with -Dcuda and NCCL found). */
#ifndef DX_COMM_NCCL_H
#define DX_COMM_NCCL_H

#include "comm.h"

/* Creates an NCCL communicator over the ranks of the MPI group `host` (collective over it; the
 * NCCL unique id is broadcast from its rank 0), ordered with `be`'s compute stream through CUDA
 * events. Collectives (all-reduce, all-gather, reduce-scatter, broadcast, send, recv) take device
 * buffers; gather, gatherv, max_int and barrier take host memory and go through `host`, which
 * must outlive the returned comm. NULL + dx_fail naming the rank on failure.
 * With NCCL >= 2.27, DX_NCCL_CTA_POLICY=n in the environment sets ncclConfig_t.CTAPolicy
 * (0 default, 1 efficiency, 2 zero-CTA) of the communicator that runs the collectives. With
 * NCCL >= 2.28 and more than one rank, a second communicator (zero-CTA policy, own stream)
 * runs the all-gathers into buffers from alloc_window (see comm.h), unless
 * DX_NCCL_CE_ALLGATHER=0, which leaves alloc_window NULL. NCCL's own NCCL_* variables apply as
 * usual. */
dx_comm *dx_comm_nccl_create(dx_comm *host, dx_backend *be);

#endif
