#include "events.h"

#include <stdlib.h>
#include <string.h>

#include "common/common.h"

const char *const dx_phase_names[DX_PH_COUNT] = {"forward", "backward", "optimizer", "step", "eval",
                                                 "recompute"};
const char *const dx_module_names[DX_MOD_COUNT] = {"embedding", "attention", "mlp", "rmsnorm", "lm_head",
                                                   "loss", "optimizer", "layer", "data", "step",
                                                   "pipeline"};
const char *const dx_op_names[DX_OP_COUNT] = {
    "gemm", "attention", "rmsnorm", "rope", "swiglu", "cross_entropy", "adamw",
    "all_reduce", "reduce_scatter", "all_gather", "broadcast", "send", "recv", "memcpy",
    "embedding", "add", "memset", "grad_norm", "module", "step", "memcpy_d2h", "memcpy_h2d",
    "lora_gemm", "dequantize", "adamw_redo"};
const char *const dx_stream_names[DX_STREAM_COUNT] = {"compute", "comm", "host", "copy", "optimizer",
                                                       "aux"};
const char *const dx_group_names[DX_GROUP_COUNT] = {"none", "world", "dp", "tp", "pp"};

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

static void record(dx_tracer *t, uint64_t start_ns, uint64_t end_ns, int module, int layer, int op,
                   int stream, int64_t bytes, int64_t flops, int group)
{
    if (!t || t->failed) return;
    dx_event e = {.start_ns = (int64_t)start_ns, .end_ns = (int64_t)end_ns, .bytes = bytes,
                  .flops = flops, .rank = t->rank, .step = t->step, .micro = t->micro,
                  .layer = (int16_t)layer, .phase = t->phase, .module = (uint8_t)module,
                  .op = (uint8_t)op, .stream = (uint8_t)stream, .pp = t->pp, .dp = t->dp,
                  .tp = t->tp, .group = (uint8_t)group};
    if (dx_event_push(&t->buf, &e)) t->failed = 1;
}

void dx_tr_record(dx_tracer *t, uint64_t start_ns, uint64_t end_ns, int module, int layer, int op,
                  int stream, int64_t bytes, int64_t flops)
{
    record(t, start_ns, end_ns, module, layer, op, stream, bytes, flops, DX_GROUP_NONE);
}

/* pad[0] of an event: which of start_ns / end_ns still hold mark ids (see dx_tr_pending) */
#define START_ID 1
#define END_ID 2

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

static void record_marks(dx_tracer *t, int m0, int m1, int module, int layer, int op, int stream,
                         int64_t bytes, int64_t flops, int group)
{
    if (!t || t->failed) return;
    if (m0 < 0 || m1 < 0) { /* a mark could not be recorded: the span is lost, say so once */
        t->failed = 1;
        return;
    }
    record(t, (uint64_t)m0, (uint64_t)m1, module, layer, op, stream, bytes, flops, group);
    if (!t->failed) t->buf.ev[t->buf.n - 1].pad[0] = START_ID | END_ID;
}

void dx_tr_record_marks(dx_tracer *t, int m0, int m1, int module, int layer, int op, int stream,
                        int64_t bytes, int64_t flops)
{
    record_marks(t, m0, m1, module, layer, op, stream, bytes, flops, DX_GROUP_NONE);
}

void dx_tr_record_comm(dx_tracer *t, int group, const int *m, uint64_t t0, uint64_t t1, int module, int layer,
                       int op, int64_t bytes)
{
    if (m && m[0] >= 0) record_marks(t, m[0], m[1], module, layer, op, DX_STREAM_COMM, bytes, 0, group);
    else record(t, t0, t1, module, layer, op, DX_STREAM_COMM, bytes, 0, group);
}

/* One end of an event: a mark id -> its time, or its new id while it is still pending. */
static int resolve_end(int64_t *v, uint8_t *flags, uint8_t bit, const int64_t *ns, int n)
{
    if (!(*flags & bit)) return 0;
    if (*v < 0 || *v >= n) return dx_fail("trace: mark %lld of %d was not recorded", (long long)*v, n);
    if (ns[*v] >= 0) {
        *v = ns[*v];
        *flags &= (uint8_t)~bit;
    } else {
        *v = -1 - ns[*v];
    }
    return 0;
}

int dx_tr_resolve(dx_tracer *t, int wait_all)
{
    if (!t->be || !t->be->resolve_marks) return 0;
    const int64_t *ns = NULL;
    int n = t->be->resolve_marks(t->be, wait_all, &ns);
    if (n < 0) return -1;
    size_t first = t->buf.n;
    for (size_t i = t->unresolved; i < t->buf.n; i++) {
        dx_event *e = &t->buf.ev[i];
        if (resolve_end(&e->start_ns, &e->pad[0], START_ID, ns, n) ||
            resolve_end(&e->end_ns, &e->pad[0], END_ID, ns, n))
            return -1;
        if (e->pad[0] && first == t->buf.n) first = i;
    }
    t->unresolved = first;
    return 0;
}

size_t dx_tr_partition(dx_tracer *t)
{
    size_t n = t->unresolved, k = n; /* events before `unresolved` are all resolved */
    size_t npend = 0;
    for (size_t i = n; i < t->buf.n; i++) npend += dx_tr_pending(&t->buf.ev[i]);
    dx_event *pend = npend ? malloc(npend * sizeof *pend) : NULL;
    if (npend && !pend) { /* cannot keep them: they are lost, and the trace says so */
        t->failed = 1;
        return t->buf.n;
    }
    size_t p = 0;
    for (size_t i = n; i < t->buf.n; i++) {
        if (dx_tr_pending(&t->buf.ev[i])) pend[p++] = t->buf.ev[i];
        else t->buf.ev[k++] = t->buf.ev[i];
    }
    if (npend) memcpy(t->buf.ev + k, pend, npend * sizeof *pend);
    free(pend);
    t->unresolved = k;
    return k;
}

void dx_tr_drop(dx_tracer *t, size_t n)
{
    if (n > t->buf.n) n = t->buf.n;
    memmove(t->buf.ev, t->buf.ev + n, (t->buf.n - n) * sizeof *t->buf.ev);
    t->buf.n -= n;
    t->unresolved = t->unresolved > n ? t->unresolved - n : 0;
}
