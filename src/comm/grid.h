/* dissect process grid: world = PP x DP x TP, TP innermost (Megatron-LM's default order, so TP
 * peers are neighbouring ranks of one node), with one communicator per axis.
 *
 *   world rank = pp_rank * (DP * TP) + dp_rank * TP + tp_rank
 *
 * Each axis has its group over host memory (MPI) and over backend buffers (NCCL on the CUDA
 * backend; the same MPI group on the CPU backend).
 */
#ifndef DX_GRID_H
#define DX_GRID_H

#include "comm.h"

typedef struct {
    int tp, dp, pp;                /* sizes */
    int tp_rank, dp_rank, pp_rank; /* this rank's coordinates */
    dx_comm *world;                /* not owned */
    dx_comm *tp_host, *dp_host, *pp_host; /* MPI groups along each axis */
    dx_comm *tp_dev, *dp_dev, *pp_dev;    /* the same ranks over backend buffers */
    /* Pipeline links (dx_grid_create_links): two-rank groups between neighbouring stages, one for
     * activations (stage i -> i + 1) and one for their gradients (i + 1 -> i) per pair, so sends
     * one way never queue behind sends the other way (NCCL runs each group's transfers on its
     * own stream, in order). In each link the lower stage i is rank 0, stage i + 1 rank 1 (for the
     * interleaved schedule's wrap-around pair (p - 1, 0): stage p - 1 is rank 0). NULL where this
     * rank has no such neighbour. */
    dx_comm *act_next, *act_prev, *grad_next, *grad_prev;         /* host (MPI) */
    dx_comm *act_next_dev, *act_prev_dev, *grad_next_dev, *grad_prev_dev; /* backend buffers */
} dx_grid;

/* Coordinates of world rank r in a grid of the given sizes. */
void dx_grid_coords(int r, int tp, int dp, int *tp_rank, int *dp_rank, int *pp_rank);

/* Splits the world (size = tp x dp x pp, checked) into the three MPI groups; the device groups
 * are set to the host ones (see dx_grid_set_device). Collective over the world. Returns 0 or -1 +
 * dx_fail naming the sizes; on failure the grid holds no groups. */
int dx_grid_create(dx_grid *g, dx_comm *world, int tp, int pp);

/* Device groups for a backend with its own collectives (NCCL): make(host group, ctx) returns the
 * device group over the same ranks, or NULL + dx_fail. Collective over the world; every axis gets
 * one, size 1 included (collectives on device buffers must not reach MPI); pipeline links are
 * converted pair by pair in stage order. Returns 0 or -1. */
int dx_grid_set_device(dx_grid *g, dx_comm *(*make)(dx_comm *host, void *ctx), void *ctx);

/* Creates the pipeline links between stages i and i + 1 (and, with wrap, between p - 1 and 0)
 * over MPI; the device links are set to them (dx_grid_set_device converts them too). Collective
 * over the world. Returns 0 or -1 + dx_fail. */
int dx_grid_create_links(dx_grid *g, int wrap);

/* Destroys the groups (device groups first); the world is not the grid's. */
void dx_grid_destroy(dx_grid *g);

#endif
