/* The process grid; see grid.h. */
#include "grid.h"

#include <string.h>

#include "common/common.h"

void dx_grid_coords(int r, int tp, int dp, int *tp_rank, int *dp_rank, int *pp_rank)
{
    *tp_rank = r % tp;
    *dp_rank = (r / tp) % dp;
    *pp_rank = r / (tp * dp);
}

int dx_grid_create(dx_grid *g, dx_comm *world, int tp, int pp)
{
    memset(g, 0, sizeof *g);
    if (tp < 1 || pp < 1 || world->size % (tp * pp))
        return dx_fail("grid: TP %d x PP %d does not divide the world size %d", tp, pp, world->size);
    g->world = world;
    g->tp = tp;
    g->pp = pp;
    g->dp = world->size / (tp * pp);
    dx_grid_coords(world->rank, tp, g->dp, &g->tp_rank, &g->dp_rank, &g->pp_rank);
    /* color = the coordinates that stay fixed along the axis; key = the coordinate along it */
    g->tp_host = dx_comm_mpi_split(world, g->pp_rank * g->dp + g->dp_rank, g->tp_rank);
    g->dp_host = dx_comm_mpi_split(world, g->pp_rank * tp + g->tp_rank, g->dp_rank);
    g->pp_host = dx_comm_mpi_split(world, g->dp_rank * tp + g->tp_rank, g->pp_rank);
    if (!g->tp_host || !g->dp_host || !g->pp_host) {
        dx_grid_destroy(g);
        return dx_fail_prefix("grid TP %d x DP %d x PP %d", tp, world->size / (tp * pp), pp);
    }
    g->tp_host->name = "tp";
    g->dp_host->name = "dp";
    g->pp_host->name = "pp";
    g->tp_dev = g->tp_host;
    g->dp_dev = g->dp_host;
    g->pp_dev = g->pp_host;
    return 0;
}

/* The link comms of pair i (stages i, i + 1 mod p): activations and gradients. */
int dx_grid_create_links(dx_grid *g, int wrap)
{
    const int p = g->pp, s = g->pp_rank, pairs = p < 2 ? 0 : wrap ? p : p - 1;
    for (int i = 0; i < pairs; i++) {
        int lo = i, hi = (i + 1) % p, member = s == lo || s == hi, rc = 0;
        for (int d = 0; d < 2; d++) { /* 0: activations lo -> hi, 1: gradients hi -> lo */
            dx_comm *c = dx_comm_mpi_split_member(g->pp_host, member, s == lo ? 0 : 1, &rc);
            if (rc) return dx_fail_prefix("pipeline link between stages %d and %d", lo, hi);
            if (!member) continue;
            c->name = d ? "pipeline link (gradients)" : "pipeline link (activations)";
            if (s == lo) *(d ? &g->grad_next : &g->act_next) = c;
            else *(d ? &g->grad_prev : &g->act_prev) = c;
        }
    }
    g->act_next_dev = g->act_next;
    g->act_prev_dev = g->act_prev;
    g->grad_next_dev = g->grad_next;
    g->grad_prev_dev = g->grad_prev;
    return 0;
}

int dx_grid_set_device(dx_grid *g, dx_comm *(*make)(dx_comm *host, void *ctx), void *ctx)
{
    dx_comm **dev[3] = {&g->tp_dev, &g->dp_dev, &g->pp_dev};
    dx_comm *host[3] = {g->tp_host, g->dp_host, g->pp_host};
    int rc = 0;
    for (int a = 0; a < 3; a++) {
        /* every rank creates its groups in the same order; a failure is agreed on at once */
        dx_comm *d = make(host[a], ctx); /* size 1 too: ZeRO's collectives take device buffers */
        if (dx_comm_agree(g->world, d ? 0 : -1)) {
            if (d) d->destroy(d);
            rc = -1;
            break;
        }
        *dev[a] = d;
    }
    /* links, pair by pair in stage order: this rank's pair with its previous stage comes first
     * unless it is stage 0 (whose pair with the last stage closes the ring) */
    dx_comm **lh[4] = {&g->act_prev, &g->grad_prev, &g->act_next, &g->grad_next};
    dx_comm **ld[4] = {&g->act_prev_dev, &g->grad_prev_dev, &g->act_next_dev, &g->grad_next_dev};
    for (int k = 0; !rc && k < 4; k++) {
        int j = g->pp_rank == 0 ? (k + 2) % 4 : k;
        if (!*lh[j]) continue;
        dx_comm *d = make(*lh[j], ctx);
        if (!d) { rc = -1; break; }
        *ld[j] = d;
    }
    if (dx_comm_agree(g->world, rc ? -1 : 0)) rc = -1;
    return rc;
}

void dx_grid_destroy(dx_grid *g)
{
    /* links in the order dx_grid_set_device made them (stage 0: its pair with stage 1 first):
     * destroying an NCCL comm waits for its peer, so both ends of each pair must reach it in the
     * same order, or the ring of the interleaved schedule deadlocks at exit */
    dx_comm **lh[4] = {&g->act_prev, &g->grad_prev, &g->act_next, &g->grad_next};
    dx_comm **ld[4] = {&g->act_prev_dev, &g->grad_prev_dev, &g->act_next_dev, &g->grad_next_dev};
    for (int k = 0; k < 4; k++) {
        int j = g->pp_rank == 0 ? (k + 2) % 4 : k;
        if (*ld[j] && *ld[j] != *lh[j]) (*ld[j])->destroy(*ld[j]);
        if (*lh[j]) (*lh[j])->destroy(*lh[j]);
        *ld[j] = *lh[j] = NULL;
    }
    dx_comm **dev[3] = {&g->tp_dev, &g->dp_dev, &g->pp_dev};
    dx_comm **host[3] = {&g->tp_host, &g->dp_host, &g->pp_host};
    for (int a = 0; a < 3; a++) {
        if (*dev[a] && *dev[a] != *host[a]) (*dev[a])->destroy(*dev[a]);
        if (*host[a]) (*host[a])->destroy(*host[a]);
        *dev[a] = *host[a] = NULL;
    }
}
