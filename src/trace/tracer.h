/* dissect tracer: a worker's recorder of trace events (see events.h).
 *
 * The worker sets the context (step, micro-batch, phase) and the code that runs kernels or
 * collectives records spans. Level (trace.level): 0 = step (no events; /steps only), 1 = module
 * (step spans, module spans and collectives), 2 = op (step spans, module spans, every kernel call
 * and collective). Times are this rank's CLOCK_MONOTONIC in ns; the coordinator converts them.
 * On the CPU backend ops are synchronous, so host clock reads bracket them exactly. On backends
 * with timing marks (CUDA), spans are bracketed by marks recorded in stream order and resolved to
 * host-clock times once per step (dx_tr_resolve; a collective still running then resolves at a
 * later step; the worker converts a step's marks while the next step's first forward runs).
 */
#ifndef DX_TRACER_H
#define DX_TRACER_H

#include <stdint.h>

#include "common/common.h"
#include "events.h"
#include "kernels.h"

typedef struct {
    int level;     /* 0 step, 1 module, 2 op */
    int rank;
    int16_t pp, dp, tp; /* the rank's grid coordinates, stamped on every event */
    int32_t step;  /* current step (1-based), 0 outside steps */
    int16_t micro; /* current micro-batch, -1 outside */
    uint8_t phase; /* dx_phase */
    int failed;    /* an append failed (out of memory): recording stops, reported at gather */
    dx_event_buf buf;
    dx_backend *be;   /* when be->mark is set, spans use its timing marks */
    size_t unresolved; /* events from this index on may hold mark ids (flags in pad[0]) */
} dx_tracer;

/* Opens a span: a host time, or a mark id on the compute stream when the backend has marks. */
int64_t dx_tr_begin(dx_tracer *t);
/* Closes a span opened by dx_tr_begin and records it (see dx_tr_record). */
void dx_tr_end(dx_tracer *t, int64_t begin, int module, int layer, int op, int stream, int64_t bytes,
               int64_t flops);
/* Records a span bracketed by two marks of t->be (ids from be->mark). */
void dx_tr_record_marks(dx_tracer *t, int m0, int m1, int module, int layer, int op, int stream,
                        int64_t bytes, int64_t flops);
/* Replaces the mark ids of the recorded events by their host-clock times, for the marks that
 * have completed once the compute stream's queued work has (wait_all: every mark; see
 * dx_backend.resolve_marks). An event with a mark still pending (a collective left running into
 * the next step, e.g. ZeRO-1/2's parameter all-gathers) stays pending until a later call: the
 * step does not wait for it, as it does not without the trace. Returns 0 or -1 + dx_fail.
 * No-op without marks. */
int dx_tr_resolve(dx_tracer *t, int wait_all);

/* True while an event holds a mark id instead of a time (dx_tr_resolve has not resolved it). */
static inline int dx_tr_pending(const dx_event *e) { return e->pad[0] != 0; }

/* Moves the resolved events to the front of t->buf (both parts keep their order) and returns
 * how many there are: the events the coordinator can take now. */
size_t dx_tr_partition(dx_tracer *t);
/* Forgets the first n events (after the coordinator has taken them); the rest move up. */
void dx_tr_drop(dx_tracer *t, size_t n);

/* Records one span [start_ns, end_ns) with the tracer's current step, micro-batch and phase
 * (group none). */
void dx_tr_record(dx_tracer *t, uint64_t start_ns, uint64_t end_ns, int module, int layer, int op,
                  int stream, int64_t bytes, int64_t flops);
/* Records a collective or transfer on process group `group` (dx_group_kind), stream "comm":
 * between the device marks m[0], m[1] that the comm left where it has them (m non-NULL and
 * m[0] >= 0: NCCL), else between the host times t0, t1 around the call. */
void dx_tr_record_comm(dx_tracer *t, int group, const int *m, uint64_t t0, uint64_t t1, int module, int layer,
                       int op, int64_t bytes);

/* True if the tracer records at `level` or finer. NULL tracer: false. */
static inline int dx_tr_on(const dx_tracer *t, int level) { return t && t->level >= level; }

/* Runs `call`, recording it as an op-level span on `stream` (the stream name the event gets;
 * the marks are recorded where the backend runs ops at the time: its compute stream, or its side
 * stream between side_begin and side_end) when the tracer records ops. */
#define DX_TRACE_OP_ON(tr, stream, module, layer, op, flops, bytes, call)                       \
    do {                                                                                        \
        if (dx_tr_on((tr), 2)) {                                                                \
            int64_t t0_ = dx_tr_begin(tr);                                                      \
            call;                                                                               \
            dx_tr_end((tr), t0_, (module), (layer), (op), (stream), (int64_t)(bytes),            \
                      (int64_t)(flops));                                                        \
        } else {                                                                                \
            call;                                                                               \
        }                                                                                       \
    } while (0)
/* DX_TRACE_OP_ON on the compute stream. */
#define DX_TRACE_OP(tr, module, layer, op, flops, bytes, call)                                  \
    DX_TRACE_OP_ON(tr, DX_STREAM_COMPUTE, module, layer, op, flops, bytes, call)

#endif
