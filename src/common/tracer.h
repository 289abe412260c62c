/* dissect tracer: a worker's recorder of trace events (see events.h).
 *
 * The worker sets the context (step, micro-batch, phase) and the code that runs kernels or
 * collectives records spans. Level (trace.level): 0 = step (no events; /steps only), 1 = module
 * (step spans, module spans and collectives), 2 = op (step spans, module spans, every kernel call
 * and collective). Times are this rank's CLOCK_MONOTONIC in ns; the coordinator converts them.
 * On the CPU backend ops are synchronous, so host clock reads bracket them exactly.
 */
#ifndef DX_TRACER_H
#define DX_TRACER_H

#include <stdint.h>

#include "common.h"
#include "events.h"

typedef struct {
    int level;     /* 0 step, 1 module, 2 op */
    int rank;
    int32_t step;  /* current step (1-based), 0 outside steps */
    int16_t micro; /* current micro-batch, -1 outside */
    uint8_t phase; /* dx_phase */
    int failed;    /* an append failed (out of memory): recording stops, reported at gather */
    dx_event_buf buf;
} dx_tracer;

/* Records one span [start_ns, end_ns) with the tracer's current step, micro-batch and phase. */
void dx_tr_record(dx_tracer *t, uint64_t start_ns, uint64_t end_ns, int module, int layer, int op,
                  int stream, int64_t bytes, int64_t flops);

/* True if the tracer records at `level` or finer. NULL tracer: false. */
static inline int dx_tr_on(const dx_tracer *t, int level) { return t && t->level >= level; }

/* Runs `call`, recording it as an op-level span when the tracer records ops. */
#define DX_TRACE_OP(tr, module, layer, op, flops, bytes, call)                                  \
    do {                                                                                        \
        if (dx_tr_on((tr), 2)) {                                                                \
            uint64_t t0_ = dx_now_ns();                                                         \
            call;                                                                               \
            dx_tr_record((tr), t0_, dx_now_ns(), (module), (layer), (op), DX_STREAM_COMPUTE,     \
                         (int64_t)(bytes), (int64_t)(flops));                                   \
        } else {                                                                                \
            call;                                                                               \
        }                                                                                       \
    } while (0)

#endif
