/* dissect plan: the memory plan of a config, per rank; see plan_cli.h. */
#include "plan_cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "plan/plan.h"
#include "worker/worker.h"

int dx_plan_print(const dx_config *c, int world, double memory_gib)
{
    const char *device = strcmp(c->device, "auto") ? c->device : dx_cuda_devices() > 0 ? "cuda" : "cpu";
    const double G = 1 << 30;
    int64_t limit = memory_gib > 0 ? (int64_t)(memory_gib * G) : dx_device_memory_available(device);
    printf("dissect plan: %s, %d rank%s = PP %d x DP %d x TP %d, ZeRO stage %d, micro-batch %d x %d tokens, "
           "recompute %s, device %s\n",
           c->model.preset[0] ? c->model.preset : "custom model", world, world > 1 ? "s" : "", c->pp, c->dp,
           c->tp, c->zero_stage, c->micro_batch, c->seq_length,
           c->recompute == DX_RECOMPUTE_FULL ? "full" : c->recompute == DX_RECOMPUTE_SELECTIVE ? "selective" : "none",
           device);
    printf("%6s %14s %10s %10s %12s %12s %10s %10s %10s\n", "rank", "(pp, dp, tp)", "params", "grads",
           "optim states", "activations", "other", "peak", "host");
    int64_t worst = 0;
    for (int r = 0; r < world; r++) {
        dx_plan_rank pr;
        if (dx_plan_rank_bytes(c, r, device, &pr)) return -1;
        char co[32];
        snprintf(co, sizeof co, "(%d, %d, %d)", pr.pp, pr.dp, pr.tp);
        printf("%6d %14s %9.3fG %9.3fG %11.3fG %11.3fG %9.3fG %9.3fG %9.3fG\n", r, co, (double)pr.bytes[0] / G,
               (double)pr.bytes[1] / G, (double)pr.bytes[2] / G, (double)pr.bytes[3] / G,
               (double)pr.bytes[4] / G, (double)pr.peak / G, (double)pr.host / G);
        if (pr.peak > worst) worst = pr.peak;
    }
    printf("bytes in GiB (2^30) of the compute device (peak) and of the host (offloaded optimizer states and ZeRO-3 parameter shards); "
           "communication buffers are the ZeRO buckets and gather slots in grads / params%s\n",
           !strcmp(device, "cuda") ? "; the CUDA backend's own workspaces are not included" : "");
    if (limit > 0) {
        int mb = dx_plan_max_micro_batch(c, device, limit, 1024);
        printf("memory per rank: %.2f GiB (%s): the peak %s; the largest micro-batch that fits: %d\n",
               (double)limit / G, memory_gib > 0 ? "--memory-gib" : "available now",
               worst <= limit ? "fits" : "does NOT fit", mb);
        if (worst > limit) {
            char advice[256];
            dx_plan_advice(c, device, limit, advice, sizeof advice);
            printf("it would fit with %s\n", advice);
        }
    }
    return 0;
}
