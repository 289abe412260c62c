/* Pipeline schedules as action lists; see schedule.h. */
#include "schedule.h"

#include <stdlib.h>

#include "common/common.h"

/* Megatron-LM's get_model_chunk_id and microbatch id of virtual micro-batch k (interleaved). */
static dx_pp_action virtual_action(int k, int kind, int p, int v)
{
    int in_group = k % (p * v), chunk = in_group / p;
    dx_pp_action a = {kind, kind == DX_PP_FORWARD ? chunk : v - 1 - chunk, (k / (p * v)) * p + k % p};
    return a;
}

int dx_pp_schedule_build(dx_pp_schedule kind, int p, int stage, int m, int v, dx_pp_action *out)
{
    if (p < 1 || stage < 0 || stage >= p || m < 1 || v < 1)
        return dx_fail("schedule: stage %d of %d, %d micro-batches, %d chunks", stage, p, m, v);
    int n = 0;
    if (kind == DX_PP_GPIPE) {
        if (v != 1) return dx_fail("schedule: GPipe runs one model chunk per stage, not %d", v);
        for (int k = 0; k < m; k++) out[n++] = (dx_pp_action){DX_PP_FORWARD, 0, k};
        for (int k = 0; k < m; k++) out[n++] = (dx_pp_action){DX_PP_BACKWARD, 0, k};
        return n;
    }
    if (kind == DX_PP_1F1B) {
        if (v != 1) return dx_fail("schedule: 1F1B runs one model chunk per stage, not %d", v);
        int warmup = p - stage - 1 < m ? p - stage - 1 : m, f = 0, b = 0;
        /* warm-up: forwards only */
        for (; f < warmup; f++) out[n++] = (dx_pp_action){DX_PP_FORWARD, 0, f};
        /* steady state: one forward, one backward */
        while (f < m) {
            out[n++] = (dx_pp_action){DX_PP_FORWARD, 0, f++};
            out[n++] = (dx_pp_action){DX_PP_BACKWARD, 0, b++};
        }
        /* cool-down: the backwards left */
        while (b < m) out[n++] = (dx_pp_action){DX_PP_BACKWARD, 0, b++};
        return n;
    }
    /* interleaved 1F1B */
    if (m % p) return dx_fail("schedule: the interleaved schedule needs micro-batches (%d) a multiple of the stages (%d)", m, p);
    const int total = m * v;
    int warmup = m == p ? total : (p - stage - 1) * 2 + (v - 1) * p;
    if (warmup > total) warmup = total;
    const int remaining = total - warmup;
    for (int k = 0; k < warmup; k++) out[n++] = virtual_action(k, DX_PP_FORWARD, p, v);
    for (int k = 0; k < remaining; k++) {
        out[n++] = virtual_action(k + warmup, DX_PP_FORWARD, p, v);
        out[n++] = virtual_action(k, DX_PP_BACKWARD, p, v);
    }
    for (int k = remaining; k < total; k++) out[n++] = virtual_action(k, DX_PP_BACKWARD, p, v);
    return n;
}

int dx_pp_slots(const dx_pp_action *a, int n, int v)
{
    int best = 1;
    int *live = calloc((size_t)v, sizeof *live);
    if (!live) return -1;
    for (int i = 0; i < n; i++) {
        live[a[i].chunk] += a[i].kind == DX_PP_FORWARD ? 1 : -1;
        if (live[a[i].chunk] > best) best = live[a[i].chunk];
    }
    free(live);
    return best;
}

double dx_pp_bubble_fraction(dx_pp_schedule kind, int p, int m, int v)
{
    if (kind != DX_PP_INTERLEAVED) v = 1;
    return (double)(p - 1) / ((double)v * m + p - 1);
}
