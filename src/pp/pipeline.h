/* dissect pipeline: runs a schedule's actions (schedule.h) over the model's chunks, sending
 * activations and their gradients point to point between stages (Megatron-LM's
 * p2p_communication: send_forward / recv_forward / send_backward / recv_backward).
 *
 * Virtual stage of chunk c on pipeline rank s: c * p + s (c = 0 without interleaving). Its input
 * comes from virtual stage - 1 (rank s - 1, or rank p - 1's chunk c - 1 when s = 0) and its
 * output goes to virtual stage + 1. A forward's output X[Nr, D] is sent with a non-blocking
 * send straight from its activation slot (the slot is not rewritten before that micro-batch's
 * backward, which comes after the next stage received it); an input gradient is copied into the
 * slot's input buffer (dead once the chunk's backward is done) and sent from there. Receives
 * block until the data is there (NCCL: the compute stream waits). Non-blocking sends make every
 * schedule above deadlock-free over MPI: a rank only ever waits for data that an earlier action
 * of another rank sends.
 *
 * Traced (trace.level module and op) as send / recv ops of module "pipeline" with the
 * micro-batch; time in blocking receives is the stage's wait (pipeline bubble plus transfer).
 */
#ifndef DX_PIPELINE_H
#define DX_PIPELINE_H

#include <stdint.h>

#include "comm/comm.h"
#include "model/model.h"
#include "schedule.h"
#include "trace/tracer.h"

/* Supplies micro-batch k's token ids and targets (backend int32[B*T]); called just before the
 * forward of a chunk that holds the embedding or the LM head. Returns 0 or -1 + dx_fail. */
typedef int (*dx_pp_load_fn)(void *ctx, int micro, const int32_t **ids, const int32_t **targets);

typedef struct dx_pipeline dx_pipeline;

/* The two-rank groups to the neighbouring stages (see dx_grid's pipeline links: the lower stage
 * is rank 0 of each, so a rank sends to the next stage as peer 1 and to the previous as peer 0);
 * NULL where there is no neighbour. Activations and gradients travel on separate groups. */
typedef struct {
    dx_comm *act_next, *act_prev, *grad_next, *grad_prev;
} dx_pp_links;

/* A pipeline of p stages; this rank is `stage`, with a model of v chunks, running `kind` with m
 * micro-batches per step over the links (copied). The schedule's action list and the activation
 * slots it needs (dx_pipeline_slots, for dx_model_part.slots) are fixed here;
 * dx_pipeline_set_model attaches the model built with them. NULL + dx_fail on bad arguments or
 * a missing link. */
dx_pipeline *dx_pipeline_create(const dx_pp_links *links, int p, int stage, dx_pp_schedule kind,
                                int m, int v);
int dx_pipeline_slots(const dx_pipeline *p);
void dx_pipeline_set_model(dx_pipeline *p, dx_model *model, dx_tracer *tr);
void dx_pipeline_destroy(dx_pipeline *p);

/* The global index (data order) of the first sequence of the next step's micro-batch 0 on this
 * DP rank; micro-batch k's first is seq0 + k B. The model's LoRA dropout masks are keyed by it
 * (dx_model_set_micro_sequence, set before each chunk forward). */
void dx_pipeline_set_first_sequence(dx_pipeline *p, uint64_t seq0);

/* fn(ctx) runs in dx_pipeline_train before this rank's last backward action of the step, where
 * the rank holds one model chunk (v = 1: that action is the last micro-batch's backward of every
 * group the rank holds, so each group's gradient is final at its post-backward hook there; with
 * several chunks it is never called). fn returns 0, or -1 + dx_fail to stop the step. The worker
 * arms ZeRO-0/1's gradient reductions in the backward with it (dx_zero_arm_reduce). */
void dx_pipeline_set_last_backward_hook(dx_pipeline *p, int (*fn)(void *ctx), void *ctx);

/* fn(ctx) runs in dx_pipeline_train after each action (once the compute stream is idle) and
 * returns the host time, in seconds, of the collectives outside the pipeline's own transfers
 * that the action called (the worker's: ZeRO / DP collectives of the parameter groups' hooks);
 * it is subtracted from the action's forward or backward time, which the caller counts as
 * communication instead. NULL (the default): nothing subtracted. */
void dx_pipeline_set_comm_clock(dx_pipeline *p, double (*fn)(void *ctx), void *ctx);

/* One step's forward and backward over m micro-batches of B x T tokens (the schedule's order):
 * chunks holding the head add each micro-batch's loss to loss_sum (A[1], +=) with dL/dlogits
 * scaled by dscale; gradients accumulate in the model's groups. Collective over the pipeline
 * (and the TP group). fwd_s / bwd_s (may be NULL) receive this rank's seconds in forward and
 * backward actions, receives included, less what the comm clock returned
 * (dx_pipeline_set_comm_clock). Returns 0 or -1 + dx_fail. */
int dx_pipeline_train(dx_pipeline *p, int B, int T, void *loss_sum, float dscale,
                      dx_pp_load_fn load, void *ctx, double *fwd_s, double *bwd_s);

/* Forward only over m micro-batches (evaluation, sampling): micro-batch order through every
 * virtual stage; losses added as above when targets are given. */
int dx_pipeline_forward(dx_pipeline *p, int m, int B, int T, void *loss_sum, dx_pp_load_fn load,
                        void *ctx);

#endif
