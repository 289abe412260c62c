/* The tracer's timing marks resolved across steps (src/common/tracer.h): an event whose end mark
 * is still pending at dx_tr_resolve (a collective left running into the next step) keeps its
 * mark under the backend's new id, is kept by dx_tr_partition / dx_tr_drop while the resolved
 * events are taken, and gets its time at a later dx_tr_resolve (or at once with wait_all).
 * A fake backend stands in for the CUDA marks: each mark has a time and a completed flag set by
 * the test, and resolve_marks follows the contract of kernels.h (pending marks move to the
 * lowest ids, in order).
 * Last line: "N passed, M failed"; exit status 1 if any failed. */
#include "common/common.h"
#include "trace/tracer.h"
#include "check.h"

#include <stdio.h>
#include <string.h>

/* fake marks: slot id -> (time, done); times of the next marks come from next_time */
static struct { int64_t time; int done; } slot[64];
static int n_marks;
static int64_t next_time, ns_out[64];

static int fake_mark(dx_backend *be, void *stream)
{
    (void)be;
    (void)stream;
    slot[n_marks].time = next_time;
    slot[n_marks].done = 1;
    return n_marks++;
}

static int fake_resolve(dx_backend *be, int wait_all, const int64_t **ns)
{
    (void)be;
    int kept = 0;
    for (int i = 0; i < n_marks; i++) {
        if (slot[i].done || wait_all) {
            ns_out[i] = slot[i].time;
        } else {
            slot[kept] = slot[i];
            ns_out[i] = -1 - kept++;
        }
    }
    int n = n_marks;
    n_marks = kept;
    *ns = ns_out;
    return n;
}

/* a span of two marks at times t0, t1; the end mark done or not */
static void span(dx_tracer *t, int64_t t0, int64_t t1, int end_done, int op)
{
    next_time = t0;
    int m0 = t->be->mark(t->be, NULL);
    next_time = t1;
    int m1 = t->be->mark(t->be, NULL);
    slot[m1].done = end_done;
    dx_tr_record_marks(t, m0, m1, DX_MOD_LAYER, 0, op, DX_STREAM_COMM, 0, 0);
}

int main(void)
{
    dx_backend be;
    memset(&be, 0, sizeof be);
    be.mark = fake_mark;
    be.resolve_marks = fake_resolve;
    dx_tracer t;
    memset(&t, 0, sizeof t);
    t.level = 2;
    t.be = &be;

    /* step 1: A (done), C (end pending: an all-gather still running), B (done) */
    t.step = 1;
    span(&t, 100, 200, 1, DX_OP_GEMM);
    span(&t, 150, 400, 0, DX_OP_ALL_GATHER);
    span(&t, 210, 300, 1, DX_OP_ADAMW);
    int rc = dx_tr_resolve(&t, 0);
    dx_event *e = t.buf.ev;
    check(rc == 0 && t.buf.n == 3, "resolve step 1: %d events, rc %d", (int)t.buf.n, rc);
    check(!dx_tr_pending(&e[0]) && e[0].start_ns == 100 && e[0].end_ns == 200,
          "A resolved: [%lld, %lld]", (long long)e[0].start_ns, (long long)e[0].end_ns);
    check(dx_tr_pending(&e[1]) && e[1].start_ns == 150 && e[1].end_ns == 0,
          "C pending: start resolved to %lld, end kept as new mark id %lld", (long long)e[1].start_ns,
          (long long)e[1].end_ns);
    check(!dx_tr_pending(&e[2]) && e[2].start_ns == 210 && e[2].end_ns == 300,
          "B resolved: [%lld, %lld]", (long long)e[2].start_ns, (long long)e[2].end_ns);
    check(t.unresolved == 1 && n_marks == 1, "first pending event 1 (%zu), 1 mark kept (%d)",
          t.unresolved, n_marks);

    /* step 2: D (done); the coordinator takes A and B, C and D stay */
    t.step = 2;
    span(&t, 500, 600, 1, DX_OP_GEMM);
    size_t ready = dx_tr_partition(&t);
    e = t.buf.ev;
    check(ready == 2 && e[0].op == DX_OP_GEMM && e[1].op == DX_OP_ADAMW && e[2].op == DX_OP_ALL_GATHER &&
              e[3].op == DX_OP_GEMM && e[3].step == 2,
          "partition: %zu ready (A, B), then C, D in order", ready);
    dx_tr_drop(&t, ready);
    e = t.buf.ev;
    check(t.buf.n == 2 && e[0].op == DX_OP_ALL_GATHER && e[0].step == 1 && e[1].step == 2,
          "drop 2: C (step 1) and D (step 2) remain (%zu)", t.buf.n);

    /* the all-gather completes; step 2's resolve gives C its end time and D its times */
    slot[0].done = 1;
    rc = dx_tr_resolve(&t, 0);
    e = t.buf.ev;
    check(rc == 0 && !dx_tr_pending(&e[0]) && e[0].start_ns == 150 && e[0].end_ns == 400,
          "C resolved a step later: [%lld, %lld]", (long long)e[0].start_ns, (long long)e[0].end_ns);
    check(!dx_tr_pending(&e[1]) && e[1].start_ns == 500 && e[1].end_ns == 600,
          "D resolved: [%lld, %lld]", (long long)e[1].start_ns, (long long)e[1].end_ns);
    check(dx_tr_partition(&t) == 2 && t.unresolved == 2 && n_marks == 0,
          "all ready; no mark kept (%d)", n_marks);
    dx_tr_drop(&t, 2);

    /* last step: wait_all resolves what is still pending */
    t.step = 3;
    span(&t, 700, 900, 0, DX_OP_REDUCE_SCATTER);
    rc = dx_tr_resolve(&t, 1);
    e = t.buf.ev;
    check(rc == 0 && t.buf.n == 1 && !dx_tr_pending(&e[0]) && e[0].end_ns == 900,
          "wait_all: pending end resolved to %lld", (long long)e[0].end_ns);

    /* a mark id the backend does not know is an error naming it */
    dx_tr_drop(&t, t.buf.n);
    dx_tr_record_marks(&t, 0, 7, DX_MOD_LAYER, 0, DX_OP_GEMM, DX_STREAM_COMPUTE, 0, 0);
    rc = dx_tr_resolve(&t, 0);
    check(rc == -1 && strstr(dx_last_error(), "mark 0 of 0") != NULL, "unknown mark: %s",
          dx_last_error());

    dx_event_buf_free(&t.buf);
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
