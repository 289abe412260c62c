#include "events.h"

#include <stdlib.h>

#include "common.h"

const char *const dx_phase_names[DX_PH_COUNT] = {"forward", "backward", "optimizer", "step", "eval"};
const char *const dx_module_names[DX_MOD_COUNT] = {"embedding", "attention", "mlp", "rmsnorm", "lm_head",
                                                   "loss", "optimizer", "layer", "data", "step"};
const char *const dx_op_names[DX_OP_COUNT] = {
    "gemm", "attention", "rmsnorm", "rope", "swiglu", "cross_entropy", "adamw",
    "all_reduce", "reduce_scatter", "all_gather", "broadcast", "send", "recv", "memcpy",
    "embedding", "add", "memset", "grad_norm", "module", "step"};
const char *const dx_stream_names[DX_STREAM_COUNT] = {"compute", "comm", "host"};

_Static_assert(sizeof(dx_event) == 64, "dx_event is 64 bytes");

int dx_event_push(dx_event_buf *b, const dx_event *e)
{
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        dx_event *ev = realloc(b->ev, cap * sizeof *ev);
        if (!ev) return dx_fail("trace: out of memory for %zu events", cap);
        b->ev = ev;
        b->cap = cap;
    }
    b->ev[b->n++] = *e;
    return 0;
}

void dx_event_buf_free(dx_event_buf *b)
{
    free(b->ev);
    b->ev = NULL;
    b->n = b->cap = 0;
}

#include "tracer.h"

void dx_tr_record(dx_tracer *t, uint64_t start_ns, uint64_t end_ns, int module, int layer, int op,
                  int stream, int64_t bytes, int64_t flops)
{
    if (!t || t->failed) return;
    dx_event e = {.start_ns = (int64_t)start_ns, .end_ns = (int64_t)end_ns, .bytes = bytes,
                  .flops = flops, .rank = t->rank, .step = t->step, .micro = t->micro,
                  .layer = (int16_t)layer, .phase = t->phase, .module = (uint8_t)module,
                  .op = (uint8_t)op, .stream = (uint8_t)stream};
    if (dx_event_push(&t->buf, &e)) t->failed = 1;
}

/* pad[0] of an event: 1 while start_ns / end_ns hold mark ids */
#define MARKED 1

int64_t dx_tr_begin(dx_tracer *t)
{
    if (t->be && t->be->mark) return t->be->mark(t->be, NULL);
    return (int64_t)dx_now_ns();
}

void dx_tr_end(dx_tracer *t, int64_t begin, int module, int layer, int op, int stream, int64_t bytes,
               int64_t flops)
{
    if (t->be && t->be->mark)
        dx_tr_record_marks(t, (int)begin, t->be->mark(t->be, NULL), module, layer, op, stream, bytes,
                           flops);
    else
        dx_tr_record(t, (uint64_t)begin, dx_now_ns(), module, layer, op, stream, bytes, flops);
}

void dx_tr_record_marks(dx_tracer *t, int m0, int m1, int module, int layer, int op, int stream,
                        int64_t bytes, int64_t flops)
{
    if (!t || t->failed) return;
    if (m0 < 0 || m1 < 0) { /* a mark could not be recorded: the span is lost, say so once */
        t->failed = 1;
        return;
    }
    dx_tr_record(t, (uint64_t)m0, (uint64_t)m1, module, layer, op, stream, bytes, flops);
    if (!t->failed) t->buf.ev[t->buf.n - 1].pad[0] = MARKED;
}

int dx_tr_resolve(dx_tracer *t)
{
    if (!t->be || !t->be->resolve_marks) return 0;
    const int64_t *ns = NULL;
    int n = t->be->resolve_marks(t->be, &ns);
    if (n < 0) return -1;
    for (size_t i = t->unresolved; i < t->buf.n; i++) {
        dx_event *e = &t->buf.ev[i];
        if (e->pad[0] != MARKED) continue;
        if (e->start_ns >= n || e->end_ns >= n)
            return dx_fail("trace: mark %lld or %lld of %d was not recorded", (long long)e->start_ns,
                           (long long)e->end_ns, n);
        e->start_ns = ns[e->start_ns];
        e->end_ns = ns[e->end_ns];
        e->pad[0] = 0;
    }
    t->unresolved = t->buf.n;
    return 0;
}

void dx_tr_clear(dx_tracer *t)
{
    t->buf.n = 0;
    t->unresolved = 0;
}
