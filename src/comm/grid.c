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
    g->tp_dev = g->tp_host;
    g->dp_dev = g->dp_host;
    g->pp_dev = g->pp_host;
    return 0;
}

int dx_grid_set_device(dx_grid *g, dx_comm *(*make)(dx_comm *host, void *ctx), void *ctx)
{
    dx_comm **dev[3] = {&g->tp_dev, &g->dp_dev, &g->pp_dev};
    dx_comm *host[3] = {g->tp_host, g->dp_host, g->pp_host};
    int rc = 0;
    for (int a = 0; a < 3; a++) {
        /* every rank creates its groups in the same order; a failure is agreed on at once */
        dx_comm *d = host[a]->size > 1 ? make(host[a], ctx) : host[a];
        if (dx_comm_agree(g->world, d ? 0 : -1)) {
            if (d && d != host[a]) d->destroy(d);
            rc = -1;
            break;
        }
        *dev[a] = d;
    }
    return rc;
}

void dx_grid_destroy(dx_grid *g)
{
    dx_comm **dev[3] = {&g->tp_dev, &g->dp_dev, &g->pp_dev};
    dx_comm **host[3] = {&g->tp_host, &g->dp_host, &g->pp_host};
    for (int a = 0; a < 3; a++) {
        if (*dev[a] && *dev[a] != *host[a]) (*dev[a])->destroy(*dev[a]);
        if (*host[a]) (*host[a])->destroy(*host[a]);
        *dev[a] = *host[a] = NULL;
    }
}
