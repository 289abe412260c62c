/* Pipeline execution of a schedule; see pipeline.h. */
#include "pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "common/common.h"

struct dx_pipeline {
    dx_pp_links l;
    int p, s, m, v;
    dx_pp_schedule kind;
    dx_pp_action *act;
    int nact, slots;
    dx_model *model;
    dx_tracer *tr;
    dx_comm_req *req; /* [v * slots]: the last send from each chunk's slot (activation or grad) */
    dx_comm **req_comm; /* [v * slots]: the link that send went on */
    uint64_t seq0;      /* micro-batch 0's first global sequence (dx_pipeline_set_first_sequence) */
    int (*last_bwd_fn)(void *ctx); /* dx_pipeline_set_last_backward_hook */
    void *last_bwd_ctx;
    double (*comm_fn)(void *ctx); /* dx_pipeline_set_comm_clock */
    void *comm_ctx;
    int last_bwd; /* one chunk: the action whose backward leaves every gradient final; -1 none */
};

void dx_pipeline_set_first_sequence(dx_pipeline *p, uint64_t seq0) { p->seq0 = seq0; }

void dx_pipeline_set_last_backward_hook(dx_pipeline *p, int (*fn)(void *ctx), void *ctx)
{
    p->last_bwd_fn = fn;
    p->last_bwd_ctx = ctx;
    p->last_bwd = -1;
    for (int i = 0; p->v == 1 && fn && i < p->nact; i++)
        if (p->act[i].kind == DX_PP_BACKWARD) p->last_bwd = i;
}

void dx_pipeline_set_comm_clock(dx_pipeline *p, double (*fn)(void *ctx), void *ctx)
{
    p->comm_fn = fn;
    p->comm_ctx = ctx;
}

dx_pipeline *dx_pipeline_create(const dx_pp_links *links, int np, int stage, dx_pp_schedule kind,
                                int m, int v)
{
    const int wrap = v > 1;
    if ((stage > 0 || wrap) && np > 1 && (!links->act_prev || !links->grad_prev)) {
        dx_fail("pipeline: stage %d has no link to the previous stage", stage);
        return NULL;
    }
    if ((stage < np - 1 || wrap) && np > 1 && (!links->act_next || !links->grad_next)) {
        dx_fail("pipeline: stage %d has no link to the next stage", stage);
        return NULL;
    }
    dx_pipeline *p = calloc(1, sizeof *p);
    if (!p) { dx_fail("pipeline: out of memory"); return NULL; }
    p->l = *links;
    p->p = np;
    p->s = stage;
    p->m = m;
    p->v = v;
    p->kind = kind;
    p->last_bwd = -1; /* no hook (dx_pipeline_set_last_backward_hook) */
    p->act = calloc((size_t)2 * m * v, sizeof *p->act);
    if (!p->act) { dx_pipeline_destroy(p); dx_fail("pipeline: out of memory"); return NULL; }
    p->nact = dx_pp_schedule_build(kind, p->p, p->s, m, v, p->act);
    if (p->nact < 0) { dx_pipeline_destroy(p); return NULL; }
    p->slots = dx_pp_slots(p->act, p->nact, v);
    p->req = calloc((size_t)v * (size_t)p->slots, sizeof *p->req);
    p->req_comm = calloc((size_t)v * (size_t)p->slots, sizeof *p->req_comm);
    if (p->slots < 1 || !p->req || !p->req_comm) { dx_pipeline_destroy(p); dx_fail("pipeline: out of memory"); return NULL; }
    return p;
}

int dx_pipeline_slots(const dx_pipeline *p) { return p->slots; }

void dx_pipeline_set_model(dx_pipeline *p, dx_model *model, dx_tracer *tr)
{
    p->model = model;
    p->tr = tr;
}

void dx_pipeline_destroy(dx_pipeline *p)
{
    if (!p) return;
    for (int i = 0; p->req && p->req_comm && i < p->v * p->slots; i++)
        if (p->req_comm[i]) p->req_comm[i]->wait(p->req_comm[i], &p->req[i]);
    free(p->req_comm);
    free(p->req);
    free(p->act);
    free(p);
}

/* Virtual stage of chunk c here, and the ranks before and after it. */
static int vstage(const dx_pipeline *p, int c) { return c * p->p + p->s; }
/* The slot's last send done (before the slot's buffers are written again). */
static int wait_slot(dx_pipeline *p, int i)
{
    return p->req_comm[i] ? p->req_comm[i]->wait(p->req_comm[i], &p->req[i]) : 0;
}
/* Message tag: the receiving virtual stage, the micro-batch and the direction. */
static int tag_of(const dx_pipeline *p, int vs_dst, int micro, int backward)
{
    return (int)((((long)vs_dst * p->m + micro) * 2 + backward) % 32767);
}

static int traced(dx_pipeline *p, int op, int micro, int64_t bytes, uint64_t t0, int rc)
{
    if (!rc && dx_tr_on(p->tr, 1)) {
        int16_t saved = p->tr->micro;
        p->tr->micro = (int16_t)micro;
        dx_tr_record_comm(p->tr, DX_GROUP_PP, NULL, t0, dx_now_ns(), DX_MOD_PIPELINE, -1, op, bytes);
        p->tr->micro = saved;
    }
    return rc ? -1 : 0;
}

static int recv_traced(dx_pipeline *p, dx_comm *c, void *buf, size_t bytes, int peer, int tag, int micro)
{
    uint64_t t0 = dx_now_ns();
    return traced(p, DX_OP_RECV, micro, (int64_t)bytes, t0, c->recv(c, buf, bytes, peer, tag));
}

static int send_traced(dx_pipeline *p, dx_comm *c, const void *buf, size_t bytes, int peer, int tag,
                       int micro, int slot)
{
    /* the slot's previous send (the forward's output, when the backward sends the input's
     * gradient from the same slot) completes first: a request is waited for before its slot
     * holds another, or the MPI request and its handle leak */
    if (wait_slot(p, slot)) return -1;
    uint64_t t0 = dx_now_ns();
    p->req_comm[slot] = c;
    return traced(p, DX_OP_SEND, micro, (int64_t)bytes, t0,
                  c->send_start(c, buf, bytes, peer, tag, &p->req[slot]));
}

/* The forward of chunk c for micro-batch k: receive its input (or load the batch), run, send. */
static int forward(dx_pipeline *p, int c, int k, int B, int T, void *loss_sum, int want_grad,
                   float dscale, dx_pp_load_fn load, void *ctx)
{
    dx_model *m = p->model;
    const int s = k % p->slots, vs = vstage(p, c), last = p->p * p->v - 1;
    const size_t bytes = dx_model_residual_bytes(m, B * T);
    /* the slot's last send (an input gradient from its input buffer, or the output of an
     * earlier micro-batch) must be done before the slot is written again */
    if (wait_slot(p, c * p->slots + s)) return -1;
    const int32_t *ids = NULL, *targets = NULL;
    if ((dx_model_chunk_has_embedding(m, c) || dx_model_chunk_has_head(m, c)) && load(ctx, k, &ids, &targets))
        return -1;
    if (vs > 0 && recv_traced(p, p->l.act_prev, dx_model_chunk_input(m, c, s), bytes, 0, tag_of(p, vs, k, 0), k))
        return -1;
    p->tr->micro = (int16_t)k;
    if (dx_model_set_micro_sequence(m, c, s, p->seq0 + (uint64_t)k * (uint64_t)B) ||
        dx_model_forward_chunk(m, c, s, ids, targets, B, T, loss_sum, want_grad, dscale))
        return -1;
    if (vs < last)
        return send_traced(p, p->l.act_next, dx_model_chunk_output(m, c, s), bytes, 1, tag_of(p, vs + 1, k, 0),
                           k, c * p->slots + s);
    return 0;
}

/* The backward of chunk c for micro-batch k: receive the output's gradient, run, send the
 * input's gradient. */
static int backward(dx_pipeline *p, int c, int k, int B, int T)
{
    dx_model *m = p->model;
    dx_backend *be = dx_model_backend(m);
    const int s = k % p->slots, vs = vstage(p, c), last = p->p * p->v - 1;
    const size_t bytes = dx_model_residual_bytes(m, B * T);
    if (vs < last && recv_traced(p, p->l.grad_next, dx_model_grad_buffer(m), bytes, 1, tag_of(p, vs, k, 1), k))
        return -1;
    p->tr->micro = (int16_t)k;
    if (dx_model_backward_chunk(m, c, s)) return -1;
    if (vs == 0) return 0;
    /* the slot's input buffer is dead now: the gradient is sent from there */
    void *in = dx_model_chunk_input(m, c, s);
    DX_TRACE_OP(p->tr, DX_MOD_PIPELINE, -1, DX_OP_MEMCPY, 0, 2 * (int64_t)bytes,
                be->copy(be, in, dx_model_grad_buffer(m), bytes));
    return send_traced(p, p->l.grad_prev, in, bytes, 0, tag_of(p, vs - 1, k, 1), k, c * p->slots + s);
}

static int finish(dx_pipeline *p)
{
    for (int i = 0; i < p->v * p->slots; i++)
        if (wait_slot(p, i)) return -1;
    return 0;
}

int dx_pipeline_train(dx_pipeline *p, int B, int T, void *loss_sum, float dscale,
                      dx_pp_load_fn load, void *ctx, double *fwd_s, double *bwd_s)
{
    dx_backend *be = dx_model_backend(p->model);
    double f = 0, b = 0;
    for (int i = 0; i < p->nact; i++) {
        const dx_pp_action *a = &p->act[i];
        uint64_t t0 = dx_now_ns();
        p->tr->phase = a->kind == DX_PP_FORWARD ? DX_PH_FORWARD : DX_PH_BACKWARD;
        if (i == p->last_bwd && p->last_bwd_fn(p->last_bwd_ctx)) return -1;
        int rc = a->kind == DX_PP_FORWARD
                     ? forward(p, a->chunk, a->micro, B, T, loss_sum, 1, dscale, load, ctx)
                     : backward(p, a->chunk, a->micro, B, T);
        if (rc) return -1;
        be->sync(be);
        double dt = (double)(dx_now_ns() - t0) * 1e-9 - (p->comm_fn ? p->comm_fn(p->comm_ctx) : 0.0);
        if (a->kind == DX_PP_FORWARD) f += dt;
        else b += dt;
    }
    p->tr->micro = -1;
    if (fwd_s) *fwd_s = f;
    if (bwd_s) *bwd_s = b;
    return finish(p);
}

int dx_pipeline_forward(dx_pipeline *p, int m, int B, int T, void *loss_sum, dx_pp_load_fn load,
                        void *ctx)
{
    if (m > p->m) return dx_fail("pipeline: %d micro-batches, at most %d", m, p->m);
    /* micro-batch by micro-batch through each chunk in virtual-stage order; sends are
     * non-blocking, so no stage waits for one behind it */
    for (int k = 0; k < m; k++)
        for (int c = 0; c < p->v; c++)
            if (forward(p, c, k, B, T, loss_sum, 0, 0.0f, load, ctx)) return -1;
    p->tr->micro = -1;
    return finish(p);
}
