/* ZeRO stages 0-3 over flat parameter groups; see zero.h. */
#include "zero.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "nf4.h"
#include "trace/tracer.h"

#define OFF_SLOTS DX_ZERO_OFFLOAD_SLOTS

/* A piece of the owned range of one parameter, updated by the host AdamW as one unit. */
typedef struct {
    int param;     /* index in the model's parameter table */
    size_t lo, hi; /* group coordinates */
    int last;      /* the last chunk of its group */
} ochunk;

/* QLoRA: one parameter of a quantized frozen group, NF4 (matrices of a multiple of 64 elements)
 * or as it is (act dtype) */
typedef struct {
    size_t off, numel; /* group coordinates */
    int quant;
    dx_nf4_tensor t;   /* quant: its arrays in backend memory (host on the CPU backends) */
    void *raw;         /* !quant: X [numel] */
} qparam;

typedef struct {
    size_t n, n_pad, shard; /* elements, padded elements, elements per rank */
    size_t lo, hi;          /* owned range [lo, hi) (hi may equal lo on trailing ranks) */
    void *work;             /* X: full [n_pad] (stages 0-2) */
    void *work_shard;       /* X: [shard] (stage 3); host memory with offload_param */
    void *grad;             /* A: full [n_pad] (stages 0-1) or shard [shard] (stages 2-3) */
    void *master, *m, *v;   /* A: [n] (stage 0) or [shard] (stages 1-3); host fp32 with offload */
    int last_param;         /* index of the group's last parameter in the model's table; -1 none */
    int grad_zero;          /* stages 2-3: the gradient shard is all zeros (no reduce-scatter
                             * into it since dx_zero_zero_grad) */
    dx_comm_req work_req;   /* stages 1-2: the all-gather of the updated work, waited for before
                             * the group's next forward (or backward, or any write of work) */
    int ar_started;         /* stages 0-1: its gradient's DP reduction (all-reduce, stage 1
                             * reduce-scatter) was started in the last backward (overlap_reduce),
                             * to be waited for by dx_zero_reduce_grads */
    int frozen;             /* dx_group.frozen (LoRA's base): no gradient, no optimizer state,
                             * owned range empty; its parameters replicated (work, stages 0-2;
                             * or NF4, QLoRA) or sharded and gathered on use (stage 3) */
    int stage;              /* the group's own ZeRO stage: the run's, except at stage 3 with a
                             * frozen base, where the (small) LoRA adapter groups take stage 2 and
                             * stay gathered, as DeepSpeed keeps parameters under
                             * stage3_param_persistence_threshold; 0 for replicated frozen groups */
    int nq;                 /* QLoRA: the group's parameters in NF4 / raw form (no work buffer) */
    qparam *qp;
} zgroup;

struct dx_zero {
    void *qwork;  /* QLoRA: X [largest quantized group]: the dequantized group in use */
    size_t qmax_group;
    int quantize; /* DX_ZERO_QUANTIZE_NF4 given */
    dx_model *model;
    dx_backend *be;
    dx_comm *dp, *dp_host;
    int stage, P, r, ngroups;
    zgroup *g;
    char *has_tp_replicated; /* [ngroups]: the group holds parameters every TP rank holds */
    size_t xs, as;
    /* stages 2-3: two gradient buckets A [max n_pad], used by alternate groups in backward, so
     * one group's reduce-scatter runs while the next group's backward fills the other */
    void *bucket[2];
    dx_comm_req bucket_req[2];
    int bucket_next;
    /* stages 2-3 over DP > 1 with DX_ZERO_REDUCE_ACT=1 (reduce_act): gradients reduce-scattered in
     * the compute dtype X instead of A (bf16 on CUDA: half the bytes; DeepSpeed's
     * communication_data_type, FSDP2's reduce_dtype). After a group's backward its A bucket is
     * rounded into bucket_x[b] (X [max n_pad]), reduce-scattered there in place, and the X shard
     * added into the group's A shard once the collective is waited for (bucket_wait); pend[b]:
     * the group whose X shard bucket_x[b] holds, not yet added (-1 none) */
    int reduce_act;
    void *bucket_x[2];
    int pend[2];
    int rs_group; /* group of the newest gradient reduce-scatter (bucket 1 - bucket_next); -1 none */
    /* stage 3: two slots of gathered parameters X [max n_pad]: the group in use and the next
     * one, prefetched (its all-gather runs while the current group computes) */
    void *gather[2];
    dx_comm_req gather_req[2];
    int gather_group[2]; /* group held (or being gathered) in each slot; -1 none */
    int cur_slot;
    void *scalar;     /* A [1]: sum of squares */
    dx_zero_grid grid; /* the rest of the process grid (TP, the norm's group) */
    /* CPU offload (ZeRO-Offload): master weights and moments live in host memory (page-locked
     * with pin_memory); the step streams the owned gradients through a ring of OFF_SLOTS
     * staging slots of chunk_elems elements (page-locked): device -> host copy, host AdamW,
     * host -> device copy of the updated parameters, each chunk's three stages overlapping the
     * neighbouring chunks' */
    int offload, pin;
    int offload_param, pin_param; /* stage 3: work shards in host memory (ZeRO-Infinity) */
    size_t host_bytes;
    int nthreads;
    ochunk *chunk;
    int nchunks;
    size_t chunk_elems; /* staging slot size in elements */
    float *st_grad[OFF_SLOTS];
    void *st_work[OFF_SLOTS];
    int st_d2h[OFF_SLOTS], st_h2d[OFF_SLOTS]; /* tickets of the slot's copies in flight; -1 none */
    int st_mark[OFF_SLOTS][2];                /* trace marks around the slot's device -> host copy */
    /* the update's queue (offload_pump): chunk indices in update order, positions */
    int *order;                   /* [nchunks]: groups from the last to the first, table order within */
    int *pos_end;                 /* [ngroups]: position after the group's last chunk */
    int oq_pos, oq_issue, oq_ready; /* next to update, next to download, first not final */
    dx_adamw_hparams oq_hp;
    /* early update (dx_zero_begin_last_backward): the host AdamW in the last backward */
    int early, in_backward;
    /* stages 0-1 over DP > 1 (dx_zero_begin_last_backward): each group's gradient reduction
     * (stage 0 all-reduce, stage 1 reduce-scatter into the owned shard) starts in the last
     * backward's hook, overlapping the backward of the groups before it (PyTorch DDP's and
     * Megatron-LM's overlap_grad_reduce); ar_req: the newest (the comm runs them in order); off
     * with DX_ZERO_OVERLAP_REDUCE=0 */
    int overlap_reduce, ar_early;
    dx_comm_req ar_req;
    /* speculative early update (clipping on): run with clip factor 1, repaired (redo) by
     * dx_zero_step when the norm ends above max_norm; last_norm: the previous step's norm
     * (-1: none yet), the guess of DX_OFFLOAD_SPECULATE=auto */
    int spec, redo, speculate;
    double last_norm;
    int *gfence;                  /* [ngroups]: fence at which the group's gradient was final; -1 */
    int *pending, npending;       /* groups updated in the backward, their all-gathers deferred */
    int last_up;                  /* newest detached upload's ticket; -1 none */
    int bucket_group[2];          /* group of each bucket's last reduce-scatter (last backward) */
    uint64_t comm_ns;
    dx_tracer *tr;
    /* AdamW beside the next forward (side_mode, zero.h dx_zero_step): the step's updates run on the
     * backend's side stream, each group's position recorded as slot gi; the compute stream
     * waits for group gi's (side_join) before its next use. side_pending[gi]: recorded, not
     * yet waited for */
    int side;
    unsigned char *side_pending;
};

/* Whether stages 0-1 start the gradient reductions in the last backward: unless the
 * environment's DX_ZERO_OVERLAP_REDUCE is 0 (on any DP rank: dx_zero_create agrees). */
static int overlap_reduce_mode(void)
{
    const char *e = getenv("DX_ZERO_OVERLAP_REDUCE");
    return !(e && e[0] == '0');
}

/* Whether stages 2-3 reduce-scatter gradients in the compute dtype: the environment's
 * DX_ZERO_REDUCE_ACT is 1 (on every DP rank: dx_zero_create agrees). */
int dx_zero_reduce_act_requested(void)
{
    const char *e = getenv("DX_ZERO_REDUCE_ACT");
    return e && e[0] == '1';
}

/* Whether dx_zero_step may run the GPU AdamW beside the next forward: unless the
 * environment's DX_OPT_OVERLAP is 0. */
static int side_mode(void)
{
    const char *e = getenv("DX_OPT_OVERLAP");
    return !(e && e[0] == '0');
}

/* The compute stream's later work waits for group gi's AdamW on the side stream. */
static void side_join(dx_zero *z, int gi)
{
    if (!z->side || !z->side_pending[gi]) return;
    z->be->side_wait(z->be, gi);
    z->side_pending[gi] = 0;
}
static void side_join_all(dx_zero *z)
{
    for (int i = 0; z->side && i < z->ngroups; i++) side_join(z, i);
}

void dx_zero_set_tracer(dx_zero *z, dx_tracer *tr) { z->tr = tr; }

size_t dx_zero_offload_chunk(size_t max_shard)
{
    size_t ce = DX_ZERO_OFFLOAD_CHUNK;
    const char *env = getenv("DX_OFFLOAD_CHUNK_ELEMS");
    if (env && atol(env) > 0) ce = (size_t)atol(env);
    return max_shard && max_shard < ce ? max_shard : ce;
}
void dx_zero_set_grid(dx_zero *z, const dx_zero_grid *grid) { z->grid = *grid; }

/* The speculative early update's policy, DX_OFFLOAD_SPECULATE: 0 never, 1 every step (tests:
 * the repair runs whenever the norm clips), unset or "auto": when the previous step's norm was
 * at or below max_norm (steps that clip tend to follow steps that clipped). */
static int speculate_mode(void)
{
    const char *e = getenv("DX_OFFLOAD_SPECULATE");
    if (!e || !*e || !strcmp(e, "auto")) return 2;
    return e[0] == '0' ? 0 : 1;
}

/* Trace coordinates of a group: embedding, decoder layer l, or the head. */
static int group_module(const dx_zero *z, int gi) { return dx_model_group(z->model, gi)->module; }
static int group_layer(const dx_zero *z, int gi) { return dx_model_group(z->model, gi)->layer; }

static void *at(const void *p, size_t e, size_t es) { return (char *)p + e * es; }

int dx_zero_stage(const dx_zero *z) { return z->stage; }
size_t dx_zero_host_bytes(const dx_zero *z) { return z->host_bytes; }

double dx_zero_take_comm_seconds(dx_zero *z)
{
    double s = (double)z->comm_ns * 1e-9;
    z->comm_ns = 0;
    return s;
}

/* Records a collective of group gi (-1: optimizer scalars): device-stream marks when the comm
 * that ran it left some (NCCL), else the host times around the call. */
static void trace_comm(dx_zero *z, dx_comm *c, int gi, int op, int64_t bytes, uint64_t t0, uint64_t t1)
{
    int module = gi < 0 ? DX_MOD_OPTIMIZER : group_module(z, gi), layer = gi < 0 ? -1 : group_layer(z, gi);
    int group = c == z->grid.tp_dev ? DX_GROUP_TP : c == z->grid.norm_host ? DX_GROUP_WORLD : DX_GROUP_DP;
    dx_tr_record_comm(z->tr, group, c->last_mark, t0, t1, module, layer, op, bytes);
}

/* Runs a collective of group gi moving `bytes` on comm c, timing it into comm_ns and the trace. */
#define COMM_ON(z, c, gi, op, bytes, call)                                                     \
    do {                                                                                       \
        uint64_t t0_ = dx_now_ns();                                                            \
        int rc_ = (call);                                                                      \
        uint64_t t1_ = dx_now_ns();                                                            \
        (z)->comm_ns += t1_ - t0_;                                                             \
        if (dx_tr_on((z)->tr, 1))                                                              \
            trace_comm((z), (c), (gi), (op), (int64_t)(bytes), t0_, t1_);                      \
        if (rc_) return -1;                                                                    \
    } while (0)
/* ... on the DP group (gi < 0: its host form, for optimizer scalars) */
#define COMM(z, gi, op, bytes, call) COMM_ON(z, (gi) < 0 ? (z)->dp_host : (z)->dp, gi, op, bytes, call)

/* Stages 2-3: later work (the compute stream) waits for bucket b's newest reduce-scatter, which
 * then no longer reads the bucket and has written its group's shard; with reduce_act, that X
 * shard is added into the group's A shard here (so every reader of a shard waits through this). */
static int bucket_wait(dx_zero *z, int b)
{
    if (z->dp->wait(z->dp, &z->bucket_req[b])) return -1;
    const int gi = z->pend[b];
    if (gi < 0) return 0;
    z->pend[b] = -1;
    zgroup *g = &z->g[gi];
    dx_backend *be = z->be;
    DX_TRACE_OP(z->tr, group_module(z, gi), group_layer(z, gi), DX_OP_ADD, (int64_t)g->shard,
                (int64_t)g->shard * (int64_t)(2 * z->as + z->xs),
                be->acc_add_act(be, g->grad, at(z->bucket_x[b], (size_t)z->r * g->shard, z->xs), g->shard));
    return 0;
}

/* Parameter offload: the host shard up into the rank's own part of gather slot `slot`, then the
 * all-gather in place (the copy on the collective's stream where the comm can, so it overlaps
 * the current group's compute; else an upload and a host copy first). The padding tail of the
 * last rank's part is sent but never read. */
static int gather_start_host(dx_zero *z, int gi, int slot)
{
    zgroup *g = &z->g[gi];
    dx_comm *dp = z->dp;
    const size_t own = (g->hi - g->lo) * z->xs;
    void *mine = at(z->gather[slot], (size_t)z->r * g->shard, z->xs);
    const int module = group_module(z, gi), layer = group_layer(z, gi);
    if (dp->all_gather_host_start) {
        COMM(z, gi, DX_OP_ALL_GATHER, g->n_pad * z->xs,
             dp->all_gather_host_start(dp, g->work_shard, own, z->gather[slot], g->shard, z->be->act,
                                       &z->gather_req[slot]));
        if (dx_tr_on(z->tr, 2) && dp->last_copy_mark[0] >= 0)
            dx_tr_record_marks(z->tr, dp->last_copy_mark[0], dp->last_copy_mark[1], module, layer,
                               DX_OP_MEMCPY_H2D, DX_STREAM_COMM, (int64_t)own, 0);
        return 0;
    }
    uint64_t t0 = dx_now_ns();
    int t = z->be->upload_async(z->be, mine, g->work_shard, own);
    if (t < 0 || z->be->copy_wait(z->be, t)) return -1;
    if (dx_tr_on(z->tr, 2))
        dx_tr_record(z->tr, t0, dx_now_ns(), module, layer, DX_OP_MEMCPY_H2D, DX_STREAM_COPY, (int64_t)own, 0);
    COMM(z, gi, DX_OP_ALL_GATHER, g->n_pad * z->xs,
         dp->all_gather_start(dp, mine, z->gather[slot], g->shard, z->be->act, &z->gather_req[slot]));
    return 0;
}

/* Starts the all-gather of group gi's parameters into gather slot `slot` (stage 3). */
static int gather_start(dx_zero *z, int gi, int slot)
{
    zgroup *g = &z->g[gi];
    /* (a kept gather of a frozen group may still be writing the slot) */
    if (z->dp->wait(z->dp, &z->gather_req[slot])) return -1;
    z->gather_group[slot] = gi;
    if (z->offload_param) return gather_start_host(z, gi, slot);
    /* the padding tail of the last rank's shard is sent but never read */
    COMM(z, gi, DX_OP_ALL_GATHER, g->n_pad * z->xs,
         z->dp->all_gather_start(z->dp, g->work_shard, z->gather[slot], g->shard, z->be->act,
                                 &z->gather_req[slot]));
    return 0;
}

/* Stage 3, before group gi runs: its parameters in a slot (waiting for a prefetch if one is in
 * flight), then the prefetch of the group that runs next (gi + 1 in forward, gi - 1 in
 * backward, unless its backward does not read its parameters) into the other slot. */
static int gather_use(dx_zero *z, int gi, int backward)
{
    int s = z->gather_group[0] == gi ? 0 : z->gather_group[1] == gi ? 1 : -1;
    if (s < 0) {
        s = 1 - z->cur_slot;
        if (gather_start(z, gi, s)) return -1;
    }
    if (z->dp->wait(z->dp, &z->gather_req[s])) return -1;
    z->cur_slot = s;
    dx_model_group(z->model, gi)->work = z->gather[s];
    int next = backward ? gi - 1 : gi + 1;
    if (next >= 0 && next < z->ngroups && z->g[next].stage == 3 && z->gather_group[1 - s] != next &&
        (!backward || dx_model_group(z->model, next)->backward_reads_work)) {
        /* the other slot's group has finished: its kernels were queued before this point */
        if (z->dp->wait(z->dp, &z->gather_req[1 - s]) || gather_start(z, next, 1 - s)) return -1;
    }
    return 0;
}

/* Forgets the gathered parameters (they changed: optimizer step, weights loaded); a step
 * (all = 0) keeps a frozen group's, which no step changes. */
static int gather_invalidate_(dx_zero *z, int all)
{
    for (int s = 0; s < 2; s++) {
        if (!all && z->gather_group[s] >= 0 && z->g[z->gather_group[s]].frozen) continue;
        if (z->gather[s] && z->dp->wait(z->dp, &z->gather_req[s])) return -1;
        z->gather_group[s] = -1;
    }
    return 0;
}
static int gather_invalidate(dx_zero *z) { return gather_invalidate_(z, 1); }

static int early_ready(dx_zero *z, int gi);
static void settle_fresh_one(dx_zero *z, int i);

/* QLoRA: stores parameter q of a quantized group from host fp32 values v[numel] (NF4, or the
 * act dtype as it is) */
static int qparam_store(dx_zero *z, qparam *q, const float *v)
{
    dx_backend *be = z->be;
    if (!q->quant) return be->upload_f32(be, q->raw, be->act, v, q->numel);
    dx_nf4_tensor t;
    if (dx_nf4_quantize(v, q->numel, &t)) return -1;
    int rc = be->upload(be, q->t.idx, t.idx, (q->numel + 1) / 2) ||
             be->upload(be, q->t.absmax8, t.absmax8, dx_nf4_blocks(q->numel)) ||
             be->upload(be, q->t.scale, t.scale, dx_nf4_groups(q->numel) * sizeof(float));
    q->t.offset = t.offset;
    dx_nf4_free(&t);
    return rc ? -1 : 0;
}

/* its dequantized values into dst (X [numel], backend memory) */
static int qparam_load(dx_zero *z, const qparam *q, void *dst)
{
    dx_backend *be = z->be;
    if (!q->quant) {
        be->copy(be, dst, q->raw, q->numel * z->xs);
        return 0;
    }
    be->nf4_dequantize(be, dst, q->t.idx, q->t.absmax8, q->t.scale, q->t.offset, q->numel);
    return 0;
}

/* the whole quantized group gi into z->qwork, which becomes the model group's working copy */
static int qgroup_dequantize(dx_zero *z, int gi)
{
    zgroup *g = &z->g[gi];
    int rc = 0;
    int64_t nb = 0;
    for (int k = 0; k < g->nq; k++) nb += (int64_t)g->qp[k].numel * (int64_t)z->xs;
    DX_TRACE_OP(z->tr, group_module(z, gi), group_layer(z, gi), DX_OP_DEQUANTIZE, 4 * (int64_t)g->n, nb,
                for (int k = 0; k < g->nq && !rc; k++) rc = qparam_load(z, &g->qp[k], at(z->qwork, g->qp[k].off, z->xs)));
    if (rc) return dx_fail_prefix("zero: dequantizing group %d", gi);
    dx_model_group(z->model, gi)->work = z->qwork;
    return 0;
}

static int hook(void *ctx, int gi, dx_hook_kind kind)
{
    dx_zero *z = ctx;
    zgroup *g = &z->g[gi];
    dx_group *mg = dx_model_group(z->model, gi);
    dx_backend *be = z->be;
    if (g->frozen) { /* never updated: nothing to reduce; gathered on use at stage 3 */
        if (g->nq && (kind == DX_HOOK_PRE_FORWARD || kind == DX_HOOK_PRE_BACKWARD)) return qgroup_dequantize(z, gi);
        if (g->stage != 3) return 0;
        if (kind == DX_HOOK_PRE_FORWARD || (kind == DX_HOOK_PRE_BACKWARD && mg->backward_reads_work))
            return gather_use(z, gi, kind == DX_HOOK_PRE_BACKWARD);
        if (kind == DX_HOOK_POST_FORWARD || kind == DX_HOOK_POST_BACKWARD) mg->work = NULL;
        return 0;
    }
    switch (kind) {
    case DX_HOOK_PRE_FORWARD:
    case DX_HOOK_PRE_BACKWARD:
        side_join(z, gi); /* the last step's update of the group (work, and the gradient the
                           * backward overwrites) */
        if ((g->stage == 1 || g->stage == 2) && z->dp->wait(z->dp, &g->work_req)) return -1;
        if (g->stage == 3 && (kind == DX_HOOK_PRE_FORWARD || mg->backward_reads_work) &&
            gather_use(z, gi, kind == DX_HOOK_PRE_BACKWARD))
            return -1;
        if (kind == DX_HOOK_PRE_BACKWARD && g->stage >= 2) {
            /* the bucket holds this rank's accumulated shard in its own slot, zeros elsewhere;
             * backward adds this micro-batch's gradient; reduce-scatter then sums the slots.
             * Its previous reduce-scatter must have finished reading it. */
            int b = z->bucket_next;
            if (bucket_wait(z, b)) return -1;
            /* early update: the bucket's last group (two groups back) has its final shard */
            if (z->in_backward && z->bucket_group[b] >= 0 && early_ready(z, z->bucket_group[b])) return -1;
            const int64_t nb = (int64_t)(g->n_pad * z->as), sb = (int64_t)(g->shard * z->as);
            if (g->grad_zero || z->reduce_act) { /* the step's first backward of the group, or
                                 * reduce_act (the shard accumulates after the reduce-scatter): it
                                 * overwrites the bucket (grad_fresh); the padding after it is zeroed */
                const int64_t tail = (int64_t)((g->n_pad - g->n) * z->as);
                if (tail > 0)
                    DX_TRACE_OP(z->tr, group_module(z, gi), group_layer(z, gi), DX_OP_MEMSET, 0, tail,
                                be->zero(be, at(z->bucket[b], g->n, z->as), (size_t)tail));
                mg->grad_fresh = 1;
            } else { /* zeros, and the shard of the earlier micro-batches in this rank's slot */
                DX_TRACE_OP(z->tr, group_module(z, gi), group_layer(z, gi), DX_OP_MEMSET, 0, nb,
                            be->zero(be, z->bucket[b], (size_t)nb));
                DX_TRACE_OP(z->tr, group_module(z, gi), group_layer(z, gi), DX_OP_MEMCPY, 0, 2 * sb,
                            be->copy(be, at(z->bucket[b], (size_t)z->r * g->shard, z->as), g->grad,
                                     (size_t)sb));
            }
            mg->grad = z->bucket[b];
        }
        return 0;
    case DX_HOOK_POST_FORWARD:
        if (g->stage == 3) mg->work = NULL;
        return 0;
    case DX_HOOK_POST_BACKWARD:
        if (g->stage >= 2) {
            int b = z->bucket_next;
            if (z->reduce_act) { /* rounded to X, reduce-scattered in place, added by bucket_wait */
                DX_TRACE_OP(z->tr, group_module(z, gi), group_layer(z, gi), DX_OP_MEMCPY, 0,
                            (int64_t)(g->n_pad * (z->as + z->xs)),
                            be->acc_to_act(be, z->bucket_x[b], z->bucket[b], g->n_pad));
                COMM(z, gi, DX_OP_REDUCE_SCATTER, g->n_pad * z->xs,
                     z->dp->reduce_scatter_start(z->dp, z->bucket_x[b],
                                                 at(z->bucket_x[b], (size_t)z->r * g->shard, z->xs),
                                                 g->shard, be->act, &z->bucket_req[b]));
                z->pend[b] = gi;
            } else
                COMM(z, gi, DX_OP_REDUCE_SCATTER, g->n_pad * z->as,
                     z->dp->reduce_scatter_start(z->dp, z->bucket[b], g->grad, g->shard, be->acc,
                                                 &z->bucket_req[b]));
            z->bucket_next = 1 - b;
            z->bucket_group[b] = gi;
            z->rs_group = gi;
            g->grad_zero = 0;
            mg->grad = NULL;
            /* the gradient shard is read only after a wait on a bucket: the next micro-batch's
             * PRE_BACKWARD (its bucket's last reduce-scatter came after this group's), or
             * dx_zero_step / dx_zero_zero_grad, which wait for both */
        }
        if (g->stage == 3) mg->work = NULL;
        if (z->ar_early && g->stage < 2) { /* final in this (last) backward: reduce it now */
            settle_fresh_one(z, gi);
            if (g->stage == 1) /* only the owned shard is read (Megatron-LM's distributed
                                * optimizer, DeepSpeed's stage 1): half an all-reduce's bytes */
                COMM(z, gi, DX_OP_REDUCE_SCATTER, g->n_pad * z->as,
                     z->dp->reduce_scatter_start(z->dp, g->grad, at(g->grad, (size_t)z->r * g->shard, z->as),
                                                 g->shard, be->acc, &z->ar_req));
            else
                COMM(z, gi, DX_OP_ALL_REDUCE, g->n * z->as,
                     z->dp->all_reduce_start(z->dp, g->grad, g->n, be->acc, &z->ar_req));
            g->ar_started = 1;
        }
        /* early update without reduction (stage 1, one DP rank): the gradient is final now */
        if (z->in_backward && g->stage < 2 && early_ready(z, gi)) return -1;
        return 0;
    }
    return 0;
}

static void *zalloc(dx_zero *z, size_t bytes, dx_mem_cat cat, int *fail)
{
    if (*fail) return NULL;
    void *p = z->be->alloc(z->be, bytes ? bytes : 1, cat);
    if (!p) *fail = 1;
    else z->be->zero(z->be, p, bytes ? bytes : 1);
    return p;
}

/* Device memory that all-gathers write: a window of the comm where it has them (see
 * dx_comm.alloc_window: all-gathers into it run on a zero-CTA communicator), else the backend's.
 * Collective where windows are used, so it is called even after an earlier failure. */
static void *zalloc_gathered(dx_zero *z, size_t bytes, dx_mem_cat cat, int *fail)
{
    if (!z->dp->alloc_window) return zalloc(z, bytes, cat, fail);
    void *p = z->dp->alloc_window(z->dp, bytes ? bytes : 1, cat);
    if (!p) *fail = 1;
    else z->be->zero(z->be, p, bytes ? bytes : 1);
    return p;
}
static void zfree_gathered(dx_zero *z, void *p)
{
    if (z->dp->alloc_window) z->dp->free_window(z->dp, p);
    else z->be->free(z->be, p);
}

/* Host memory of the offload: page-locked (the backend's host_alloc) for the staging slots
 * and, with pin_memory, the states; else ordinary aligned memory. Counted in host_bytes; the
 * size is kept in a 64-byte header. Zero-filled by `nthreads` threads (first touch). */
static void *host_alloc(dx_zero *z, size_t bytes, int pinned, int *fail)
{
    if (*fail) return NULL;
    size_t total = 64 + (bytes + 63) / 64 * 64;
    unsigned char *base = pinned ? z->be->host_alloc(z->be, total) : aligned_alloc(64, total);
    if (!base) {
        if (!pinned) dx_fail("cannot allocate %zu bytes of host memory for the offloaded optimizer", bytes);
        *fail = 1;
        return NULL;
    }
    ((size_t *)base)[0] = total;
    ((size_t *)base)[1] = (size_t)pinned;
    unsigned char *p = base + 64;
    size_t nb = total - 64;
#pragma omp parallel for num_threads(z->nthreads) schedule(static) if (nb >= ((size_t)1 << 24))
    for (size_t c = 0; c < nb; c += (size_t)1 << 20) memset(p + c, 0, nb - c < ((size_t)1 << 20) ? nb - c : ((size_t)1 << 20));
    z->host_bytes += total;
    return p;
}
static void host_free(dx_zero *z, void *p)
{
    if (!p) return;
    unsigned char *base = (unsigned char *)p - 64;
    z->host_bytes -= ((size_t *)base)[0];
    if (((size_t *)base)[1]) z->be->host_free(z->be, base);
    else free(base);
}

/* Optimizer state: on the backend, or in host memory when offloaded. */
static void *state_alloc(dx_zero *z, size_t bytes, int *fail)
{
    if (!z->offload) return zalloc(z, bytes, DX_MEM_OPTIM, fail);
    return host_alloc(z, bytes ? bytes : 1, z->pin, fail);
}
static void state_free(dx_zero *z, void *p)
{
    if (z->offload) host_free(z, p);
    else z->be->free(z->be, p);
}

dx_zero *dx_zero_create(dx_model *m, dx_backend *be, dx_comm *dp, dx_comm *dp_host, int stage,
                        int offload_flags, uint64_t seed, int *rc)
{
    const int offload = (offload_flags & DX_ZERO_OFFLOAD_OPTIMIZER) != 0;
    *rc = -1;
    if (stage < 0 || stage > 3) {
        dx_fail("zero_optimization.stage: %d is not a ZeRO stage (0, 1, 2 or 3)", stage);
        return NULL;
    }
    dx_zero *z = calloc(1, sizeof *z);
    if (!z) {
        dx_fail("rank %d: zero: out of memory", dp->rank);
        *rc = dx_comm_agree(dp_host, -1); /* the others stop too, rather than wait below */
        return NULL;
    }
    z->model = m;
    z->be = be;
    z->dp = dp;
    z->dp_host = dp_host;
    z->stage = stage;
    z->P = dp->size;
    z->r = dp->rank;
    z->ngroups = dx_model_num_groups(m);
    z->xs = dx_dtype_size(be->act);
    z->as = dx_dtype_size(be->acc);
    if (offload) {
        if (stage < 1) {
            free(z);
            dx_fail("zero_optimization.offload_optimizer: needs ZeRO stage 1-3, not %d", stage);
            *rc = dx_comm_agree(dp_host, -1);
            return NULL;
        }
        if (be->acc != DX_F32 || !be->host_alloc) {
            free(z);
            dx_fail("zero_optimization.offload_optimizer: the %s backend's accumulators are %s; the "
                    "host AdamW keeps fp32 states", be->name, dx_dtype_name(be->acc));
            *rc = dx_comm_agree(dp_host, -1);
            return NULL;
        }
        z->offload = 1;
        z->pin = (offload_flags & DX_ZERO_OFFLOAD_PIN) != 0;
    }
    if (offload_flags & DX_ZERO_OFFLOAD_PARAM) {
        if (stage != 3 || !offload) {
            free(z);
            dx_fail("zero_optimization.offload_param: needs ZeRO stage 3 (not %d) and offload_optimizer "
                    "device \"cpu\"", stage);
            *rc = dx_comm_agree(dp_host, -1);
            return NULL;
        }
        z->offload_param = 1;
        z->pin_param = (offload_flags & DX_ZERO_OFFLOAD_PARAM_PIN) != 0;
    }
    z->quantize = (offload_flags & DX_ZERO_QUANTIZE_NF4) != 0;
    z->nthreads = be->nthreads > 0 ? be->nthreads : 1;
    for (int s = 0; s < OFF_SLOTS; s++) z->st_d2h[s] = z->st_h2d[s] = -1;
    z->g = calloc((size_t)z->ngroups, sizeof *z->g);
    if (!z->g) {
        free(z);
        dx_fail("rank %d: zero: out of memory", dp->rank);
        *rc = dx_comm_agree(dp_host, -1);
        return NULL;
    }

    z->has_tp_replicated = calloc((size_t)z->ngroups, sizeof *z->has_tp_replicated);
    if (!z->has_tp_replicated) {
        free(z->g);
        free(z);
        dx_fail("rank %d: zero: out of memory", dp->rank);
        *rc = dx_comm_agree(dp_host, -1);
        return NULL;
    }
    /* AdamW beside the next forward: the GPU update of stage 0 (or 1 on one rank: no
     * all-gather starts from it); stages 2-3 start collectives from the updated groups */
    z->side = !offload && be->side_begin && (stage == 0 || (stage == 1 && z->P == 1)) && side_mode();
    z->overlap_reduce = stage < 2 && z->P > 1 && overlap_reduce_mode();
    z->reduce_act = stage >= 2 && z->P > 1 && dx_zero_reduce_act_requested();
    z->pend[0] = z->pend[1] = -1;
    if (z->side && !(z->side_pending = calloc((size_t)z->ngroups, 1))) {
        free(z->has_tp_replicated);
        free(z->g);
        free(z);
        dx_fail("rank %d: zero: out of memory", dp->rank);
        *rc = dx_comm_agree(dp_host, -1);
        return NULL;
    }
    for (int i = 0; i < z->ngroups; i++) z->g[i].last_param = -1;
    for (int pi = 0; pi < dx_model_num_params_table(m); pi++) {
        const dx_param *p = dx_model_param(m, pi);
        z->g[p->group].last_param = pi;
        if (p->tp_replicated) z->has_tp_replicated[p->group] = 1;
    }

    int fail = 0;
    size_t max_pad = 0, max_shard = 0, max_gather = 0;
    const size_t xs = z->xs, as = z->as;
    int has_frozen = 0;
    for (int i = 0; i < z->ngroups; i++) has_frozen |= dx_model_group(m, i)->frozen;
    for (int i = 0; i < z->ngroups; i++) {
        zgroup *g = &z->g[i];
        g->n = dx_model_group(m, i)->numel;
        g->n_pad = (g->n + (size_t)z->P - 1) / (size_t)z->P * (size_t)z->P;
        g->shard = g->n_pad / (size_t)z->P;
        if (dx_model_group(m, i)->frozen) { /* LoRA's base model: working parameters only */
            if (z->offload) {
                fail = 1;
                dx_fail("zero: frozen parameters (LoRA's base model) need ZeRO without offload");
                break;
            }
            g->frozen = 1;
            g->lo = g->hi = 0;
            if (z->quantize && dx_model_group(m, i)->module == DX_MOD_LAYER) { /* QLoRA: NF4 matrices */
                for (int pi = 0; pi < dx_model_num_params_table(m); pi++) g->nq += dx_model_param(m, pi)->group == i;
                g->qp = calloc((size_t)g->nq, sizeof *g->qp);
                if (!g->qp) { fail = 1; dx_fail("zero: out of memory"); break; }
                int k = 0;
                for (int pi = 0; pi < dx_model_num_params_table(m); pi++) {
                    const dx_param *p = dx_model_param(m, pi);
                    if (p->group != i) continue;
                    qparam *q = &g->qp[k++];
                    q->off = p->offset;
                    q->numel = q->t.n = p->numel;
                    q->quant = p->cols && p->numel % DX_NF4_BLOCK == 0;
                    if (q->quant) {
                        q->t.idx = zalloc(z, (p->numel + 1) / 2, DX_MEM_PARAMS, &fail);
                        q->t.absmax8 = zalloc(z, dx_nf4_blocks(p->numel), DX_MEM_PARAMS, &fail);
                        q->t.scale = zalloc(z, dx_nf4_groups(p->numel) * sizeof(float), DX_MEM_PARAMS, &fail);
                    } else {
                        q->raw = zalloc(z, p->numel * xs, DX_MEM_PARAMS, &fail);
                    }
                }
                if (g->n_pad > z->qmax_group) z->qmax_group = g->n_pad;
                continue;
            }
            if (stage == 3) { /* sharded, all-gathered into a slot before each use */
                g->stage = 3;
                g->work_shard = zalloc(z, g->shard * xs, DX_MEM_PARAMS, &fail);
                if (g->n_pad > max_gather) max_gather = g->n_pad;
                continue;
            }
            g->work = zalloc(z, g->n_pad * xs, DX_MEM_PARAMS, &fail);
            continue;
        }
        const int gs = g->stage = stage == 3 && has_frozen ? 2 : stage;
        if (gs == 0) {
            g->lo = 0;
            g->hi = g->n;
        } else {
            g->lo = (size_t)z->r * g->shard;
            g->hi = g->lo + g->shard < g->n ? g->lo + g->shard : g->n;
            if (g->lo > g->n) g->lo = g->hi = g->n;
        }
        size_t own = gs == 0 ? g->n : g->shard;
        if (gs == 1 || gs == 2) g->work = zalloc_gathered(z, g->n_pad * xs, DX_MEM_PARAMS, &fail);
        else if (gs == 0) g->work = zalloc(z, g->n_pad * xs, DX_MEM_PARAMS, &fail);
        else if (z->offload_param) g->work_shard = host_alloc(z, g->shard * xs, z->pin_param, &fail);
        else g->work_shard = zalloc(z, g->shard * xs, DX_MEM_PARAMS, &fail);
        if (gs == 3 && g->n_pad > max_gather) max_gather = g->n_pad;
        g->grad = zalloc(z, (gs < 2 ? g->n_pad : g->shard) * as, DX_MEM_GRADS, &fail);
        g->grad_zero = 1;
        g->master = state_alloc(z, own * as, &fail);
        g->m = state_alloc(z, own * as, &fail);
        g->v = state_alloc(z, own * as, &fail);
        if (g->n_pad > max_pad) max_pad = g->n_pad;
        if (g->shard > max_shard) max_shard = g->shard;
    }
    if (z->qmax_group && !fail) {
        z->qwork = zalloc(z, z->qmax_group * xs, DX_MEM_PARAMS, &fail);
    }
    for (int s = 0; s < 2; s++) {
        if (stage >= 2) z->bucket[s] = zalloc(z, max_pad * as, DX_MEM_GRADS, &fail);
        if (z->reduce_act) z->bucket_x[s] = zalloc(z, max_pad * xs, DX_MEM_GRADS, &fail);
        if (stage == 3) z->gather[s] = zalloc_gathered(z, max_gather * xs, DX_MEM_PARAMS, &fail);
        z->gather_group[s] = -1;
    }
    z->cur_slot = 1;
    z->rs_group = -1;
    z->scalar = zalloc(z, as, DX_MEM_OTHER, &fail);
    if (z->offload && !fail) {
        z->chunk_elems = dx_zero_offload_chunk(max_shard);
        for (int s = 0; s < OFF_SLOTS; s++) {
            z->st_grad[s] = host_alloc(z, z->chunk_elems * sizeof(float), 1, &fail);
            if (!z->offload_param) /* else the host AdamW writes the host shards directly */
                z->st_work[s] = host_alloc(z, z->chunk_elems * xs, 1, &fail);
        }
        /* the chunks: each parameter's owned range, in table order, cut into OFF_CHUNK pieces */
        const int np = dx_model_num_params_table(m);
        for (int pass = 0; pass < 2 && !fail; pass++) {
            int k = 0;
            for (int pi = 0; pi < np; pi++) {
                const dx_param *p = dx_model_param(m, pi);
                zgroup *g = &z->g[p->group];
                size_t lo = p->offset > g->lo ? p->offset : g->lo;
                size_t hi = p->offset + p->numel < g->hi ? p->offset + p->numel : g->hi;
                const size_t ce = z->chunk_elems;
                for (size_t c = lo; c < hi; c += ce, k++)
                    if (pass) z->chunk[k] = (ochunk){pi, c, hi - c < ce ? hi : c + ce, 0};
                /* a group whose owned range is empty here still ends (all-gathers) at its last param */
                if (pi == g->last_param) {
                    if (lo >= hi) {
                        if (pass) z->chunk[k] = (ochunk){pi, 0, 0, 1};
                        k++;
                    } else if (pass) z->chunk[k - 1].last = 1;
                }
            }
            if (!pass) {
                z->nchunks = k;
                z->chunk = calloc((size_t)(k ? k : 1), sizeof *z->chunk);
                if (!z->chunk) fail = 1;
            }
        }
    }
    z->last_up = -1;
    z->last_norm = -1;
    z->speculate = speculate_mode();
    if (z->offload && !fail) { /* the update order: the backward's order of groups */
        z->order = calloc((size_t)(z->nchunks ? z->nchunks : 1), sizeof *z->order);
        z->pos_end = calloc((size_t)z->ngroups, sizeof *z->pos_end);
        z->gfence = calloc((size_t)z->ngroups, sizeof *z->gfence);
        z->pending = calloc((size_t)z->ngroups, sizeof *z->pending);
        if (!z->order || !z->pos_end || !z->gfence || !z->pending) fail = 1;
        for (int i = z->ngroups - 1, pos = 0; i >= 0 && !fail; i--) {
            for (int k = 0; k < z->nchunks; k++)
                if (dx_model_param(m, z->chunk[k].param)->group == i) z->order[pos++] = k;
            z->pos_end[i] = pos;
            z->gfence[i] = -1;
        }
    }
    size_t max_frozen = 0;
    for (int i = 0; i < z->ngroups; i++)
        if (z->g[i].frozen && z->g[i].n > max_frozen) max_frozen = z->g[i].n;
    size_t host_n = stage == 0 ? max_pad : max_shard;
    if (max_frozen > host_n) host_n = max_frozen;
    float *host = fail ? NULL : malloc(host_n * sizeof(float) + 1);
    if (fail || !host) dx_fail_prefix("rank %d: ZeRO stage %d state", dp->rank, stage);
    /* the initialisation below is collective (stages 1-2): agree first, so no rank waits there */
    *rc = dx_comm_agree(dp_host, fail || !host ? -1 : 0);
    /* the reductions in the backward are collective: on only if every DP rank's environment
     * says so (a rank launched without DX_ZERO_OVERLAP_REDUCE=0 would otherwise wait forever) */
    int any_off = 0;
    if (!*rc && z->P > 1 && stage < 2 && dp_host->max_int(dp_host, !z->overlap_reduce, &any_off)) *rc = -1;
    if (any_off) z->overlap_reduce = 0;
    /* the gradients' reduce-scatter dtype, the same on every DP rank: X only if all ask for it */
    any_off = 0;
    if (!*rc && z->P > 1 && stage >= 2 && dp_host->max_int(dp_host, !z->reduce_act, &any_off)) *rc = -1;
    if (any_off && z->reduce_act) {
        for (int s = 0; s < 2; s++) be->free(be, z->bucket_x[s]), z->bucket_x[s] = NULL;
        z->reduce_act = 0;
    }
    if (*rc) {
        free(host);
        dx_zero_destroy(z);
        return NULL;
    }

    /* initial parameters: master from the counter-based init, work = cast(master) */
    for (int i = 0; i < z->ngroups; i++) {
        zgroup *g = &z->g[i];
        if (g->frozen && g->stage == 3) { /* this rank's shard of the init values */
            size_t a = (size_t)z->r * g->shard, b = a + g->shard < g->n ? a + g->shard : g->n;
            if (a < b) {
                dx_model_init_values(m, i, a, b - a, seed, host);
                if (be->upload_f32(be, g->work_shard, be->act, host, b - a)) {
                    fail = 1;
                    break;
                }
            }
            dx_model_group(m, i)->work = dx_model_group(m, i)->grad = NULL;
            continue;
        }
        if (g->frozen) { /* work = the init values, on every rank */
            dx_model_init_values(m, i, 0, g->n, seed, host);
            if (g->nq) {
                for (int k = 0; k < g->nq && !fail; k++) fail = qparam_store(z, &g->qp[k], host + g->qp[k].off) != 0;
                if (fail) break;
            } else if (be->upload_f32(be, g->work, be->act, host, g->n)) {
                fail = 1;
                break;
            }
            dx_model_group(m, i)->work = g->work; /* NULL when quantized: set by the hooks */
            dx_model_group(m, i)->grad = NULL;
            continue;
        }
        size_t cnt = g->hi - g->lo;
        /* offload: straight into the host master; the working copy converted on upload */
        float *init = z->offload ? (float *)g->master : host;
        dx_model_init_values(m, i, g->lo, cnt, seed, init);
        if (z->offload_param) {
            dx_host_convert_f32(g->work_shard, be->act, init, cnt);
        } else if (z->offload) {
            if (be->upload_f32(be, g->stage == 3 ? g->work_shard : at(g->work, g->lo, xs), be->act, init, cnt)) {
                fail = 1;
                break;
            }
        } else if (be->upload_f32(be, g->master, be->acc, host, cnt)) {
            fail = 1;
            break;
        }
        if (g->stage == 3) {
            if (!z->offload) be->acc_to_act(be, g->work_shard, g->master, cnt);
        } else {
            if (!z->offload) be->acc_to_act(be, at(g->work, g->lo, xs), g->master, cnt);
            if (g->stage >= 1 && dp->all_gather(dp, at(g->work, (size_t)z->r * g->shard, xs), g->work,
                                                g->shard, be->act)) { fail = 1; break; }
        }
        dx_group *mg = dx_model_group(m, i);
        mg->work = g->work;                        /* NULL at stage 3 until gathered */
        mg->grad = g->stage < 2 ? g->grad : NULL;  /* stages 2-3: the bucket, in backward */
    }
    free(host);
    if (fail) { dx_zero_destroy(z); return NULL; }
    *rc = 0;
    dx_model_set_hook(m, hook, z);
    return z;
}

void dx_zero_destroy(dx_zero *z)
{
    if (!z) return;
    dx_backend *be = z->be;
    if (z->side) { /* no AdamW may still run on what is freed */
        side_join_all(z);
        be->sync(be);
    }
    for (int i = 0; i < z->ngroups; i++) /* no collective may still write what is freed */
        z->dp->wait(z->dp, &z->g[i].work_req);
    for (int s = 0; s < 2; s++) {
        z->dp->wait(z->dp, &z->bucket_req[s]);
        z->dp->wait(z->dp, &z->gather_req[s]);
    }
    z->dp->wait(z->dp, &z->ar_req); /* (the newest reduction started in a backward) */
    for (int i = 0; i < z->ngroups; i++) {
        zgroup *g = &z->g[i];
        if ((g->stage == 1 || g->stage == 2) && !g->frozen) zfree_gathered(z, g->work);
        else be->free(be, g->work);
        if (z->offload_param) host_free(z, g->work_shard);
        else be->free(be, g->work_shard);
        for (int k = 0; k < g->nq; k++) {
            be->free(be, g->qp[k].t.idx);
            be->free(be, g->qp[k].t.absmax8);
            be->free(be, g->qp[k].t.scale);
            be->free(be, g->qp[k].raw);
        }
        free(g->qp);
        be->free(be, g->grad);
        state_free(z, g->master);
        state_free(z, g->m);
        state_free(z, g->v);
    }
    for (int s = 0; s < 2; s++) {
        be->free(be, z->bucket[s]);
        be->free(be, z->bucket_x[s]);
        zfree_gathered(z, z->gather[s]);
    }
    be->free(be, z->scalar);
    be->free(be, z->qwork);
    for (int s = 0; s < OFF_SLOTS; s++) { /* no copy may still use a staging slot */
        if (z->st_d2h[s] >= 0) be->copy_wait(be, z->st_d2h[s]);
        if (z->st_h2d[s] >= 0) be->copy_wait(be, z->st_h2d[s]);
        host_free(z, z->st_grad[s]);
        host_free(z, z->st_work[s]);
    }
    free(z->chunk);
    free(z->order);
    free(z->pos_end);
    free(z->gfence);
    free(z->pending);
    if (z->model) dx_model_set_hook(z->model, NULL, NULL);
    free(z->has_tp_replicated);
    free(z->side_pending);
    free(z->g);
    free(z);
}

int dx_zero_zero_grad(dx_zero *z)
{
    /* a reduce-scatter still writing a shard must finish before the shard is cleared */
    if (z->stage >= 2 && (bucket_wait(z, 0) || bucket_wait(z, 1))) return -1;
    for (int i = 0; i < z->ngroups; i++) {
        zgroup *g = &z->g[i];
        if (g->frozen) continue;
        if (g->stage < 2) /* the backward overwrites it (the padding after it is never read:
                           * stage 1's in-place reduce-scatter leaves it undefined) */
            dx_model_group(z->model, i)->grad_fresh = 1;
        else
            z->be->zero(z->be, g->grad, g->shard * z->as);
        g->grad_zero = 1;
    }
    return 0;
}

/* Stages 0-1: a gradient still marked fresh (no backward of its group since
 * dx_zero_zero_grad) is zeroed before it is read (group i; settle_fresh: groups
 * from..ngroups-1). */
static void settle_fresh_one(dx_zero *z, int i)
{
    zgroup *g = &z->g[i];
    dx_group *mg = dx_model_group(z->model, i);
    if (g->frozen || g->stage >= 2 || !mg->grad_fresh) return;
    mg->grad_fresh = 0;
    DX_TRACE_OP(z->tr, group_module(z, i), group_layer(z, i), DX_OP_MEMSET, 0, (int64_t)(g->n_pad * z->as),
                z->be->zero(z->be, g->grad, g->n_pad * z->as));
}

static void settle_fresh(dx_zero *z, int from)
{
    for (int i = from; i < z->ngroups; i++) settle_fresh_one(z, i);
}

int dx_zero_reduce_grads(dx_zero *z)
{
    z->ar_early = 0;
    side_join_all(z); /* (a group no forward used since the last step: settle_fresh writes it) */
    settle_fresh(z, 0);
    if (z->P == 1 || z->stage >= 2) return 0;
    /* the reductions started in the backward ran in order on the comm: the newest covers them */
    if (z->dp->wait(z->dp, &z->ar_req)) return -1;
    for (int i = 0; i < z->ngroups; i++) {
        zgroup *g = &z->g[i];
        if (g->ar_started) {
            g->ar_started = 0;
            continue;
        }
        if (!g->frozen) /* (stages 0-1: every trained group has the run's stage) */
            COMM(z, i, DX_OP_ALL_REDUCE, g->n * z->as, z->dp->all_reduce_sum(z->dp, g->grad, g->n, z->be->acc));
    }
    return 0;
}

/* Gradient element e (group coordinates, lo <= e < hi) of the owned range. */
static void *grad_at(dx_zero *z, zgroup *g, size_t e)
{
    return g->stage < 2 ? at(g->grad, e, z->as) : at(g->grad, e - g->lo, z->as);
}

/* After group gi's last parameter is updated: stages 1-2 start the all-gather of its working
 * parameters (when `gather`), stage 3 the gather of the next forward's first two groups. */
static int group_updated(dx_zero *z, int gi, int gather)
{
    zgroup *g = &z->g[gi];
    if (g->frozen) return 0;
    if (gather && (g->stage == 1 || g->stage == 2))
        COMM(z, gi, DX_OP_ALL_GATHER, g->n_pad * z->xs,
             z->dp->all_gather_start(z->dp, at(g->work, (size_t)z->r * g->shard, z->xs), g->work,
                                     g->shard, z->be->act, &g->work_req));
    if (g->stage == 3 && gi < 2 && gather_start(z, gi, gi)) return -1;
    return 0;
}

/* Offload, chunk k: queues the device -> host copy of its owned gradient into staging slot s
 * (traced between marks on the copy stream), after the compute stream's position `fence` (-1:
 * its work queued so far). */
static int offload_d2h(dx_zero *z, int k, int s, int fence)
{
    const ochunk *c = &z->chunk[k];
    z->st_mark[s][0] = z->st_mark[s][1] = -1;
    z->st_d2h[s] = -1;
    if (c->hi <= c->lo) return 0;
    dx_backend *be = z->be;
    zgroup *g = &z->g[dx_model_param(z->model, c->param)->group];
    void *cs = be->copy_stream(be, 0);
    int tr = dx_tr_on(z->tr, 2) && cs && be->mark;
    if (tr) z->st_mark[s][0] = be->mark(be, cs);
    z->st_d2h[s] = be->download_async(be, z->st_grad[s], grad_at(z, g, c->lo), (c->hi - c->lo) * sizeof(float), fence);
    if (tr) z->st_mark[s][1] = be->mark(be, cs);
    return z->st_d2h[s] < 0 ? -1 : 0;
}

/* The offloaded update (ZeRO-Offload, Ren et al. 2021): the owned gradients stream to the host
 * chunk by chunk, AdamW runs on the host states, the updated parameters stream back. Chunks go
 * in the backward's order of groups (the last group first; order[]), through a ring of
 * OFF_SLOTS staging slots: while the host updates the chunk at position oq_pos, the copy
 * engines move the next ones (up to OFF_SLOTS - 1 ahead, and only those whose gradients are
 * final: positions < oq_ready) down and the previous one up, so the step costs about the
 * slowest of the three (the host AdamW, memory-bound, on a typical host), not their sum.
 * Updates run up to position `until`; a download waits for the compute-stream position of its
 * group's fence (set when its gradient became final) or, fence -1, for everything queued.
 * In the backward (z->in_backward, early update): uploads are detached (the backward goes on;
 * dx_zero_step joins them) and each finished group's all-gather is deferred (pending). */
static int offload_pump(dx_zero *z, int until, double clip, int gather)
{
    dx_backend *be = z->be;
    const dx_adamw_hparams *hp_in = &z->oq_hp;
    dx_adamw_hparams hp = *hp_in;
    hp.grad_scale = clip;
    const int trace = dx_tr_on(z->tr, 2);
    void *up = be->copy_stream(be, 1);
    for (;;) {
        while (z->oq_issue < z->oq_ready && z->oq_issue < z->oq_pos + OFF_SLOTS) {
            const int k = z->order[z->oq_issue];
            const int gi = dx_model_param(z->model, z->chunk[k].param)->group;
            if (offload_d2h(z, k, z->oq_issue % OFF_SLOTS, z->in_backward ? z->gfence[gi] : -1)) return -1;
            z->oq_issue++;
        }
        if (z->oq_pos >= until) break;
        const ochunk *c = &z->chunk[z->order[z->oq_pos]];
        const dx_param *p = dx_model_param(z->model, c->param);
        zgroup *g = &z->g[p->group];
        const int s = z->oq_pos % OFF_SLOTS, layer = group_layer(z, p->group);
        if (c->hi > c->lo) {
            const size_t n = c->hi - c->lo, so = c->lo - g->lo;
            uint64_t t0 = dx_now_ns();
            /* the gradient on the host, and the slot's last upload done with its buffer */
            if (be->copy_wait(be, z->st_d2h[s])) return -1;
            if (z->st_h2d[s] >= 0 && be->copy_wait(be, z->st_h2d[s])) return -1;
            uint64_t t1 = dx_now_ns();
            if (trace) {
                if (z->st_mark[s][0] >= 0 && z->st_mark[s][1] >= 0)
                    dx_tr_record_marks(z->tr, z->st_mark[s][0], z->st_mark[s][1], DX_MOD_OPTIMIZER, layer,
                                       DX_OP_MEMCPY_D2H, DX_STREAM_COPY, (int64_t)(n * sizeof(float)), 0);
                if (t1 - t0 > 1000) /* the host waited for the copy engines (exposed copy time) */
                    dx_tr_record(z->tr, t0, t1, DX_MOD_OPTIMIZER, layer, DX_OP_MEMCPY, DX_STREAM_HOST, 0, 0);
            }
            hp.weight_decay = p->decay ? hp_in->weight_decay : 0.0;
            /* parameter offload: the updated parameters straight into the host shard */
            void *out = z->offload_param ? at(g->work_shard, so, z->xs) : z->st_work[s];
            (z->redo ? dx_host_adamw_redo : dx_host_adamw)((float *)g->master + so, (float *)g->m + so,
                                                           (float *)g->v + so, z->st_grad[s], out, be->act, n,
                                                           &hp, z->nthreads);
            uint64_t t2 = dx_now_ns();
            if (trace)
                dx_tr_record(z->tr, t1, t2, DX_MOD_OPTIMIZER, layer, z->redo ? DX_OP_ADAMW_REDO : DX_OP_ADAMW,
                             DX_STREAM_HOST, (int64_t)n * (7 * 4 + 4 + (int64_t)z->xs), 12 * (int64_t)n);
            if (!z->offload_param) {
                void *work = g->stage == 3 ? at(g->work_shard, so, z->xs) : at(g->work, c->lo, z->xs);
                int m0 = trace && up && be->mark ? be->mark(be, up) : -1;
                z->st_h2d[s] = z->in_backward ? be->upload_async_detached(be, work, z->st_work[s], n * z->xs)
                                              : be->upload_async(be, work, z->st_work[s], n * z->xs);
                if (z->st_h2d[s] < 0) return -1;
                if (z->in_backward) z->last_up = z->st_h2d[s];
                if (m0 >= 0) {
                    int m1 = be->mark(be, up);
                    if (m1 >= 0)
                        dx_tr_record_marks(z->tr, m0, m1, DX_MOD_OPTIMIZER, layer, DX_OP_MEMCPY_H2D,
                                           DX_STREAM_COPY, (int64_t)(n * z->xs), 0);
                }
            }
        }
        z->oq_pos++;
        if (c->last && !z->redo) {
            if (z->in_backward) z->pending[z->npending++] = p->group;
            else if (group_updated(z, p->group, gather)) return -1;
        }
    }
    return 0;
}

/* Early update, in the last micro-batch's backward: the gradients of group gi (and of every
 * group after it, whose backward came before) are final at the compute stream's present
 * position. Downloads of the ready groups start; the host updates the groups made ready by
 * the previous call (one group of lag, so the device has this group's backward queued while
 * the host works) — the host AdamW runs during the rest of the backward. */
static int early_ready(dx_zero *z, int gi)
{
    settle_fresh(z, gi);
    int f = z->be->fence(z->be);
    if (f < 0) return -1;
    for (int i = gi; i < z->ngroups && z->gfence[i] < 0; i++) z->gfence[i] = f;
    int until = z->oq_ready;
    if (z->pos_end[gi] > z->oq_ready) z->oq_ready = z->pos_end[gi];
    return offload_pump(z, until, 1.0, 0);
}

double dx_zero_last_grad_norm(const dx_zero *z) { return z->last_norm; }
void dx_zero_set_last_grad_norm(dx_zero *z, double norm) { z->last_norm = norm >= 0 ? norm : -1; }

/* The speculative early update ran with clip factor 1 but the norm ended above max_norm: the
 * chunks it updated (positions before oq_pos) are repaired, each gradient downloaded again (the
 * owned gradients stay until the next step's zero_grad), the update undone and redone with the
 * factor clip on the host (dx_host_adamw_redo, traced as adamw_redo) and the parameters
 * uploaded again (after the speculative uploads: the host-to-device stream is in order). The
 * downloads already issued for the chunks after them are waited for and issued again. */
static int offload_redo(dx_zero *z, double clip)
{
    const int done = z->oq_pos;
    for (int s = 0; s < OFF_SLOTS; s++) { /* no copy may still use a staging slot */
        if (z->st_d2h[s] >= 0 && z->be->copy_wait(z->be, z->st_d2h[s])) return -1;
        if (z->st_h2d[s] >= 0 && z->be->copy_wait(z->be, z->st_h2d[s])) return -1;
        z->st_d2h[s] = z->st_h2d[s] = -1;
    }
    z->redo = 1;
    z->oq_pos = z->oq_issue = 0;
    z->oq_ready = done;
    int rc = offload_pump(z, done, clip, 0);
    z->redo = 0;
    z->oq_pos = z->oq_issue = done;
    return rc;
}

void dx_zero_arm_reduce(dx_zero *z) { z->ar_early = z->overlap_reduce; }

int dx_zero_begin_last_backward(dx_zero *z, const dx_adamw_hparams *hp, double max_norm)
{
    z->early = z->spec = 0;
    z->ar_early = z->overlap_reduce;
    if (!z->offload || z->grid.tp_dev || (z->stage < 2 && z->P > 1) || z->nchunks == 0) return 0;
    if (max_norm > 0) { /* clipping: speculate that the factor will be 1 */
        if (z->speculate == 0 || (z->speculate == 2 && !(z->last_norm >= 0 && z->last_norm <= max_norm)))
            return 0;
        if (hp->beta1 == 0 || hp->beta2 == 0 || hp->lr * hp->weight_decay == 1.0) return 0; /* (redo divides) */
        z->spec = 1;
    }
    z->oq_hp = *hp;
    z->early = z->in_backward = 1;
    for (int s = 0; s < 2; s++) z->bucket_group[s] = -1;
    return 1;
}

int dx_zero_step(dx_zero *z, const dx_adamw_hparams *hp_in, double max_norm, double *grad_norm)
{
    dx_backend *be = z->be;
    z->in_backward = 0;
    side_join_all(z);
    settle_fresh(z, 0);
    /* global norm: sum of squares over the owned ranges, summed over ranks when sharded.
     * Stages 2-3: the backward's last reduce-scatter (the newest, of group rs_group: the
     * embedding) may still run; the others are complete once the older bucket's is (the comm
     * stream runs them in order), so their shards are summed first, while it goes on. */
    /* parameters replicated over TP whose gradients are partial on each TP rank (norm weights
     * under sequence parallelism, replicated k/v_proj): summed over TP on the owned range, once
     * every micro-batch's gradient is in (the sum is linear, so once per step suffices) */
    if (z->grid.tp_dev && z->stage >= 2 && (bucket_wait(z, 0) || bucket_wait(z, 1))) return -1;
    const int np_ = dx_model_num_params_table(z->model);
    for (int pi = 0; z->grid.tp_dev && pi < np_; pi++) {
        const dx_param *p = dx_model_param(z->model, pi);
        zgroup *g = &z->g[p->group];
        size_t lo = p->offset > g->lo ? p->offset : g->lo;
        size_t hi = p->offset + p->numel < g->hi ? p->offset + p->numel : g->hi;
        if (p->tp_reduce && hi > lo)
            COMM_ON(z, z->grid.tp_dev, p->group, DX_OP_ALL_REDUCE, (hi - lo) * z->as,
                 z->grid.tp_dev->all_reduce_sum(z->grid.tp_dev, grad_at(z, g, lo), hi - lo, be->acc));
    }
    be->zero(be, z->scalar, z->as);
    const int newest = z->stage >= 2 ? z->rs_group : -1;
    for (int pass = 0; pass < 2; pass++) {
        if (z->stage >= 2 && bucket_wait(z, pass ? 1 - z->bucket_next : z->bucket_next))
            return -1;
        for (int i = 0; i < z->ngroups; i++) {
            zgroup *g = &z->g[i];
            size_t n = g->hi - g->lo;
            if (!n || (i == newest) != (pass == 1)) continue;
            if (!z->has_tp_replicated[i] || z->grid.tp_rank == 0) {
                DX_TRACE_OP(z->tr, DX_MOD_OPTIMIZER, group_layer(z, i), DX_OP_GRAD_NORM, 2 * (int64_t)n,
                            (int64_t)n * (int64_t)z->as, be->sumsq(be, z->scalar, grad_at(z, g, g->lo), n));
                continue;
            }
            /* TP ranks other than 0 leave out the parameters every TP rank holds */
            for (int pi = 0; pi < np_; pi++) {
                const dx_param *p = dx_model_param(z->model, pi);
                size_t lo = p->offset > g->lo ? p->offset : g->lo;
                size_t hi = p->offset + p->numel < g->hi ? p->offset + p->numel : g->hi;
                if (p->group != i || p->tp_replicated || hi <= lo) continue;
                DX_TRACE_OP(z->tr, DX_MOD_OPTIMIZER, group_layer(z, i), DX_OP_GRAD_NORM, 2 * (int64_t)(hi - lo),
                            (int64_t)(hi - lo) * (int64_t)z->as, be->sumsq(be, z->scalar, grad_at(z, g, lo), hi - lo));
            }
        }
    }
    z->rs_group = -1;
    double ss;
    if (dx_read_acc_scalar(be, z->scalar, &ss)) return -1;
    /* over the whole grid: DP shards (stage 0: DP replicas, counted by DP rank 0 only), TP slices
     * and pipeline stages */
    dx_comm *nc = z->grid.norm_host ? z->grid.norm_host : z->stage >= 1 ? z->dp_host : NULL;
    if (nc && nc->size > 1) {
        if (z->stage == 0 && z->r != 0) ss = 0;
        COMM_ON(z, nc, -1, DX_OP_ALL_REDUCE, sizeof ss, nc->all_reduce_sum(nc, &ss, 1, DX_F64));
    }
    double norm = sqrt(ss);
    *grad_norm = norm;
    z->last_norm = norm;
    double clip = 1.0;
    if (max_norm > 0 && norm > max_norm) clip = max_norm / (norm + 1e-6);

    dx_adamw_hparams hp = *hp_in;
    hp.grad_scale = clip;
    const int np = dx_model_num_params_table(z->model);
    /* stages 1-2: each group's updated bf16 shard is all-gathered as soon as the last of its
     * parameters is updated, so the all-gathers (on the comm stream) run while AdamW updates
     * the next groups and while the next forward runs: the compute stream waits for a group's
     * all-gather only before the group is next used (hook) or written (set_master), as
     * Megatron-LM's --overlap-param-gather does */
    const int gather = z->P > 1; /* for the groups of stage 1-2 (group_updated) */
    for (int i = 0; gather && i < z->ngroups; i++) /* the last step's, if no forward came since */
        if (z->dp->wait(z->dp, &z->g[i].work_req)) return -1;
    /* stage 3: the gathered copies are stale (and an all-gather in flight reads the shards
     * AdamW is about to write); the next forward's first two groups are all-gathered into the
     * two slots as soon as their update is queued, so they arrive during the other updates */
    if (z->stage == 3 && gather_invalidate_(z, 0)) return -1;
    /* parameter offload: no copy may still read the host shards the host AdamW writes */
    if (z->offload_param) be->sync(be);
    if (z->offload) {
        if (!z->early) z->oq_hp = *hp_in; /* (positions are 0: reset after each step) */
        /* a speculation that failed: the early chunks again, with the factor (before their
         * all-gathers, pending, start) */
        if (z->spec && clip != 1.0 && z->oq_pos > 0 && offload_redo(z, clip)) return -1;
        z->spec = 0;
        z->oq_ready = z->nchunks;
        /* the early update's uploads, then the all-gathers of the groups it finished */
        if (z->early && z->last_up >= 0 && be->copy_join(be, z->last_up)) return -1;
        for (int i = 0; i < z->npending; i++)
            if (group_updated(z, z->pending[i], gather)) return -1;
        z->npending = 0;
        z->last_up = -1;
        z->early = 0;
        int rc = offload_pump(z, z->nchunks, clip, gather);
        z->oq_pos = z->oq_issue = z->oq_ready = 0; /* the next step starts over */
        for (int i = 0; i < z->ngroups; i++) z->gfence[i] = -1;
        return rc;
    }
    /* AdamW beside the next forward (z->side): the updates run on the backend's side stream in
     * the parameter table's order (the forward's: embedding, layers, head), each group's end
     * recorded; the next forward's hook for the group waits for it (side_join), so the forward
     * of layer l runs while the later layers are updated. The same kernels on the same values:
     * the result is bitwise that of the update on the compute stream. */
    if (z->side) be->side_begin(be);
    const int on = z->side ? DX_STREAM_OPTIMIZER : DX_STREAM_COMPUTE;
    int rc = 0;
    for (int pi = 0; pi < np && !rc; pi++) {
        const dx_param *p = dx_model_param(z->model, pi);
        zgroup *g = &z->g[p->group];
        size_t lo = p->offset > g->lo ? p->offset : g->lo;
        size_t hi = p->offset + p->numel < g->hi ? p->offset + p->numel : g->hi;
        if (hi > lo) {
            hp.weight_decay = p->decay ? hp_in->weight_decay : 0.0;
            size_t so = lo - g->lo; /* offset in the owned state */
            void *work = g->stage == 3 ? at(g->work_shard, so, z->xs) : at(g->work, lo, z->xs);
            int64_t n = (int64_t)(hi - lo);
            DX_TRACE_OP_ON(z->tr, on, DX_MOD_OPTIMIZER, group_layer(z, p->group), DX_OP_ADAMW, 12 * n,
                           n * (7 * (int64_t)z->as + (int64_t)z->xs),
                           be->adamw(be, at(g->master, so, z->as), work, grad_at(z, g, lo),
                                     at(g->m, so, z->as), at(g->v, so, z->as), hi - lo, &hp));
        }
        if (pi != g->last_param) continue;
        if (z->side) {
            rc = be->side_record(be, p->group);
            if (!rc) z->side_pending[p->group] = 1;
        }
        if (!rc) rc = group_updated(z, p->group, gather);
    }
    if (z->side) be->side_end(be);
    return rc;
}

int dx_zero_get_master(dx_zero *z, int gi, size_t start, size_t count, float *out)
{
    side_join_all(z);
    zgroup *g = &z->g[gi];
    dx_backend *be = z->be;
    if (start + count > g->n) return dx_fail("zero: master range [%zu, %zu) outside group %d of %zu elements", start, start + count, gi, g->n);
    if (g->nq) { /* QLoRA: the dequantized values, a whole parameter */
        for (int k = 0; k < g->nq; k++)
            if (g->qp[k].off == start && g->qp[k].numel == count) {
                if (qparam_load(z, &g->qp[k], z->qwork)) return -1;
                return be->download_f32(be, out, z->qwork, be->act, count);
            }
        return dx_fail("zero: quantized group %d is read a whole parameter at a time, not [%zu, %zu)", gi, start, start + count);
    }
    if (g->frozen && g->stage == 3) { /* the shards all-gathered (collective) */
        void *full = be->alloc(be, g->n_pad * z->xs, DX_MEM_OTHER);
        if (!full) return -1;
        int rc = z->dp->all_gather(z->dp, g->work_shard, full, g->shard, be->act);
        if (!rc) rc = be->download_f32(be, out, at(full, start, z->xs), be->act, count);
        be->free(be, full);
        return rc;
    }
    if (g->frozen) return be->download_f32(be, out, at(g->work, start, z->xs), be->act, count);
    if (g->stage == 0) return be->download_f32(be, out, at(g->master, start, z->as), be->acc, count);
    void *full = be->alloc(be, g->n_pad * z->as, DX_MEM_OTHER);
    if (!full) return -1;
    void *shard = g->master;
    int rc = 0;
    if (z->offload) { /* the host shard goes through the backend for the all-gather */
        shard = be->alloc(be, (g->shard ? g->shard : 1) * z->as, DX_MEM_OTHER);
        rc = !shard ? -1 : be->upload_f32(be, shard, be->acc, g->master, g->hi - g->lo);
    }
    if (!rc) rc = z->dp->all_gather(z->dp, shard, full, g->shard, be->acc);
    if (z->offload) be->free(be, shard);
    if (!rc) rc = be->download_f32(be, out, at(full, start, z->as), be->acc, count);
    be->free(be, full);
    return rc;
}

int dx_zero_set_master(dx_zero *z, int gi, size_t start, size_t count, const float *src)
{
    side_join_all(z);
    zgroup *g = &z->g[gi];
    dx_backend *be = z->be;
    if (start + count > g->n)
        return dx_fail("zero: master range [%zu, %zu) outside group %d of %zu elements", start,
                       start + count, gi, g->n);
    if (g->nq) { /* QLoRA: quantized as it is set, a whole parameter */
        for (int k = 0; k < g->nq; k++)
            if (g->qp[k].off == start && g->qp[k].numel == count) return qparam_store(z, &g->qp[k], src);
        return dx_fail("zero: quantized group %d is set a whole parameter at a time, not [%zu, %zu)", gi, start, start + count);
    }
    if (g->frozen && g->stage == 3) { /* the part in this rank's shard */
        size_t a = (size_t)z->r * g->shard, b = a + g->shard < g->n ? a + g->shard : g->n;
        size_t lo = start > a ? start : a, hi = start + count < b ? start + count : b;
        if (gather_invalidate(z)) return -1;
        return hi > lo ? be->upload_f32(be, at(g->work_shard, lo - a, z->xs), be->act, src + (lo - start), hi - lo) : 0;
    }
    if (g->frozen) return be->upload_f32(be, at(g->work, start, z->xs), be->act, src, count);
    size_t lo = start > g->lo ? start : g->lo, hi = start + count < g->hi ? start + count : g->hi;
    if (z->dp->wait(z->dp, &g->work_req)) return -1; /* the step's all-gather still writing work */
    if (z->offload_param) { /* no copy may still read the host shard */
        if (gather_invalidate(z)) return -1;
        be->sync(be);
    }
    if (hi > lo) {
        size_t so = g->stage == 0 ? lo : lo - g->lo;
        void *work = g->stage == 3 ? at(g->work_shard, lo - g->lo, z->xs) : at(g->work, lo, z->xs);
        if (z->offload_param) {
            memcpy((float *)g->master + so, src + (lo - start), (hi - lo) * sizeof(float));
            dx_host_convert_f32(work, be->act, src + (lo - start), hi - lo);
        } else if (z->offload) {
            memcpy((float *)g->master + so, src + (lo - start), (hi - lo) * sizeof(float));
            if (be->upload_f32(be, work, be->act, src + (lo - start), hi - lo)) return -1;
        } else {
            if (be->upload_f32(be, at(g->master, so, z->as), be->acc, src + (lo - start), hi - lo)) return -1;
            be->acc_to_act(be, work, at(g->master, so, z->as), hi - lo);
        }
    }
    if ((g->stage == 1 || g->stage == 2) && z->P > 1)
        COMM(z, gi, DX_OP_ALL_GATHER, g->n_pad * z->xs,
             z->dp->all_gather(z->dp, at(g->work, (size_t)z->r * g->shard, z->xs), g->work, g->shard,
                               be->act));
    return gather_invalidate(z);
}

void dx_zero_owned(const dx_zero *z, int gi, size_t *lo, size_t *hi)
{
    *lo = z->g[gi].lo;
    *hi = z->g[gi].hi;
}

/* Group gi's state `which` at owned element e, after a range check. */
static void *state_at(dx_zero *z, int gi, int which, size_t lo, size_t hi, const char *what)
{
    zgroup *g = &z->g[gi];
    if (which < 0 || which > 2 || lo > hi || lo < g->lo || hi > g->hi) {
        dx_fail("zero: %s: state %d range [%zu, %zu) outside group %d's owned [%zu, %zu)", what, which, lo, hi,
                gi, g->lo, g->hi);
        return NULL;
    }
    void *base = which == 0 ? g->master : which == 1 ? g->m : g->v;
    return at(base, g->stage == 0 ? lo : lo - g->lo, z->as);
}

int dx_zero_read_state(dx_zero *z, int gi, int which, size_t lo, size_t hi, float *out)
{
    void *p = state_at(z, gi, which, lo, hi, "read_state");
    if (!p) return -1;
    if (hi == lo) return 0;
    side_join_all(z);
    if (z->offload) { memcpy(out, p, (hi - lo) * sizeof(float)); return 0; }
    return z->be->download_f32(z->be, out, p, z->be->acc, hi - lo);
}

int dx_zero_write_state(dx_zero *z, int gi, int which, size_t lo, size_t hi, const float *src)
{
    if (which == 0) return dx_fail("zero: write_state: master weights go through dx_zero_set_master");
    void *p = state_at(z, gi, which, lo, hi, "write_state");
    if (!p) return -1;
    if (hi == lo) return 0;
    side_join_all(z);
    if (z->offload) { memcpy(p, src, (hi - lo) * sizeof(float)); return 0; }
    return z->be->upload_f32(z->be, p, z->be->acc, src, hi - lo);
}
