/* dissect pipeline schedules: the order of one pipeline rank's forward and backward passes over
 * the micro-batches of a step, as a list of actions (pure functions, no communication).
 *
 * Schedules (dx_pp_schedule, config key pipeline_schedule), p stages, m micro-batches:
 *   GPipe (Huang et al. 2019): every micro-batch's forward, then every backward; m in flight.
 *   1F1B (PipeDream-Flush, Narayanan et al. 2021, sec. 2.1; Megatron-LM's
 *     forward_backward_pipelining_without_interleaving): warm-up of min(p - stage - 1, m)
 *     forwards, steady state of one forward then one backward, cool-down of the remaining
 *     backwards; at most p - stage micro-batches in flight.
 *   Interleaved 1F1B (Narayanan et al. 2021, sec. 2.2; Megatron-LM's
 *     forward_backward_pipelining_with_interleaving): each rank holds v model chunks (virtual
 *     stages c * p + stage); virtual micro-batch k runs chunk (k mod (p v)) / p of micro-batch
 *     (k / (p v)) p + k mod p (backward: chunk v - 1 - that); warm-up of
 *     min((p - stage - 1) 2 + (v - 1) p, m v) forwards (all of them when m == p), then 1F1B.
 *     Needs m to be a multiple of p.
 * The bubble, as a fraction of the step: (p - 1) / (m + p - 1) for GPipe and 1F1B,
 * (p - 1) / (v m + p - 1) for the interleaved schedule (Narayanan et al. 2021, eqs. 1-2).
 */
#ifndef DX_SCHEDULE_H
#define DX_SCHEDULE_H

#include "config/config.h"

enum { DX_PP_FORWARD = 0, DX_PP_BACKWARD = 1 };

typedef struct {
    int kind;  /* DX_PP_FORWARD or DX_PP_BACKWARD */
    int chunk; /* model chunk on this rank (0 .. v-1) */
    int micro; /* micro-batch (0 .. m-1) */
} dx_pp_action;

/* Writes the 2 m v actions of pipeline rank `stage` (0 .. p-1) into out[2 m v] and returns
 * their count, or -1 + dx_fail for impossible arguments (v > 1 outside the interleaved
 * schedule, m not a multiple of p for it). v = 1 for GPipe and 1F1B. */
int dx_pp_schedule_build(dx_pp_schedule kind, int p, int stage, int m, int v, dx_pp_action *out);

/* The most micro-batches of one chunk in flight (forward done, backward not yet) along the
 * list: the activation slots the rank needs. Forwards and backwards of a chunk both run in
 * micro-batch order, so micro-batch k can use slot k mod slots. */
int dx_pp_slots(const dx_pp_action *a, int n, int v);

/* The schedule's theoretical bubble fraction of the step (see above). */
double dx_pp_bubble_fraction(dx_pp_schedule kind, int p, int m, int v);

#endif
