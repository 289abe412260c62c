/* dissect worker: one rank's share of training (its backend, model, optimizer state and data).
 *
 * A training step on DP rank r (see data.h for which sequences r gets):
 *   zero grads; for each of gradient_accumulation_steps micro-batches: forward + backward with
 *   dL/dlogits scaled by 1 / (global tokens), so the summed gradient is that of the mean loss over
 *   the global batch; synchronise gradients over DP (ZeRO stage); clip by global norm; AdamW.
 * Learning rate: linear warm-up from 0 over lr_warmup_iters, then cosine decay to min_lr at
 * lr_decay_iters (Loshchilov & Hutter 2017, SGDR; as Megatron-LM's "cosine" style).
 */
#ifndef DX_WORKER_H
#define DX_WORKER_H

#include <stdint.h>

#include "comm/comm.h"
#include "comm/grid.h"
#include "trace/tracer.h"
#include "config/config.h"
#include "kernels.h"

typedef struct dx_worker dx_worker;

/* What one rank measured in one step (seconds are this rank's wall time). */
typedef struct {
    double loss;      /* mean loss over the global batch (same on every rank) */
    double grad_norm; /* global gradient norm before clipping */
    double lr;
    int64_t tokens;   /* global tokens in the step */
    /* forward_s / backward_s: the phases' time, from the backend's stopwatch (GPU stamps on the
     * compute stream) or, where it has none (CPU, DX_MICRO_SYNC=1, pipeline schedules), the
     * host clock less the host time of the ZeRO / DP collectives called in them; optimizer_s:
     * dx_zero_step's host time less its collectives'; comm_s: those collectives' host time (the
     * calls; on the GPU NCCL's only queue the work) plus the loss's reduction. Host-timed, the
     * four do not overlap, so step_s - their sum is what none of them covers. */
    double forward_s, backward_s, optimizer_s, comm_s, step_s;
    /* the device's energy over the step (J) and the time in it that the power limit held the
     * device's clocks down (s): the differences of the backend's power_counters (samples up to
     * ~25 ms old) taken where step_s starts and ends; NaN where the backend has none (CPU),
     * they are not available, or the run writes no trace (the only place they go) */
    double energy_j, power_capped_s;
    dx_mem_stats mem; /* allocator counters after the step */
} dx_step_stats;

/* Creates the backend (config device), model, ZeRO state and data readers for this rank.
 * `world` is the whole job, split into the PP x DP x TP grid of the config (c->tp, c->pp; TP
 * innermost); the rank's model part is its stage's layers (or interleaved chunks) and TP slice. Collective: the ranks agree on errors
 * before each collective step, so a failure on one rank stops all without a hang. Returns NULL
 * + dx_fail on failure, with *rc = -1 on a rank that failed itself (its message names the rank
 * and the input at fault) and -2 on ranks that stopped because another failed; *rc = 0 on
 * success. */
dx_worker *dx_worker_create(const dx_config *c, dx_comm *world, int *rc);
void dx_worker_destroy(dx_worker *w);

/* Runs training step `step` (1-based). Collective over DP. */
int dx_worker_train_step(dx_worker *w, long step, dx_step_stats *st);

/* After a resume: step `step0` was the last one done and `consumed` training sequences had been
 * consumed (global), so step s > step0 reads the data order from consumed + (s - 1 - step0) x
 * global batch (the default, step0 = consumed = 0, is (s - 1) x global batch). */
void dx_worker_set_data_position(dx_worker *w, long step0, uint64_t consumed);

/* Mean validation loss over eval_iters global batches of the valid shard (the same batches every
 * call). Collective over DP. *val_loss = NaN if there is no valid shard. */
int dx_worker_eval(dx_worker *w, double *val_loss);

/* Generates n tokens after a BOS token (id 1) by sampling softmax(logits / temperature) with a
 * generator seeded by `seed` (the context is the last seq_length tokens); writes n + 1 ids into
 * ids_out (BOS first). Collective over DP (ZeRO-3 gathers parameters); every rank gets the same
 * ids. */
int dx_worker_sample(dx_worker *w, int n, double temperature, uint64_t seed, int32_t *ids_out);

/* One forward + backward on the first micro-batch of the training shard (global sequences
 * rank x micro .. + micro - 1 of the seeded order; on one rank, sequences 0 .. micro - 1), for
 * checks against other implementations (dissect dump): clears the gradients, then
 *   - forward without gradient: *loss = mean loss over the micro x seq_length tokens; the host
 *     batch is copied to inputs / targets (int32 [micro * seq_length], may be NULL) and the
 *     logits to logits (float [micro * seq_length * vocab_size], may be NULL);
 *   - forward + backward with dL/dlogits scaled by 1 / (micro x seq_length): the model groups'
 *     gradients then hold the gradient of that mean loss on this rank (not reduced over DP).
 * Two forwards, because dL/dlogits overwrite the logits (they share memory).
 * Not collective for ZeRO stages 0-1 (stages 2-3 run their hooks' collectives). */
int dx_worker_forward_backward(dx_worker *w, double *loss, int32_t *inputs, int32_t *targets,
                               float *logits);

/* Learning rate at step (1-based) under the config's schedule. */
double dx_lr_at(const dx_config *c, long step);

dx_backend *dx_worker_backend(dx_worker *w);

/* The rank's process grid (PP x DP x TP coordinates and groups). */
const dx_grid *dx_worker_grid(const dx_worker *w);

/* The worker's event recorder (its buffer is drained by the coordinator). */
dx_tracer *dx_worker_tracer(dx_worker *w);
/* Resolves every timing mark of the tracer, waiting for those still pending (dx_tr_resolve with
 * wait_all), and records the span of the last step if dx_worker_train_step left it for its next
 * call (with CUDA marks it converts them while the next step's first forward runs): call before
 * the coordinator takes the run's last events. 0, or -1 + dx_fail. */
int dx_worker_trace_flush(dx_worker *w);

/* The worker's model and ZeRO state (for checkpoints). */
struct dx_model;
struct dx_zero;
struct dx_model *dx_worker_model(dx_worker *w);
struct dx_zero *dx_worker_zero(dx_worker *w);

/* CUDA devices visible to this process (0 without CUDA support or without a device). */
int dx_cuda_devices(void);

/* This rank's index among the ranks of its node: Open MPI's OMPI_COMM_WORLD_LOCAL_RANK, Slurm's
 * SLURM_LOCALID, MPICH's MPI_LOCALRANKID or LOCAL_RANK; 0 if none is set. Picks the GPU. */
int dx_local_rank(void);

/* Bytes this rank may allocate on `device` ("cpu": /proc/meminfo's MemAvailable divided by the
 * ranks of this node (OMPI_COMM_WORLD_LOCAL_SIZE / SLURM_NTASKS_PER_NODE); "cuda": the free
 * memory of the rank's GPU, cudaMemGetInfo); -1 when it cannot be read. */
int64_t dx_device_memory_available(const char *device);

/* Number of OpenMP threads a rank should use (the CPU backend's, and the CUDA backend's host
 * work such as the offloaded AdamW): OMP_NUM_THREADS if set; else online cores / ranks on this
 * node (OMPI_COMM_WORLD_LOCAL_SIZE / SLURM_NTASKS_PER_NODE), capped at the CPUs in the rank's
 * affinity mask (sched_getaffinity: mpirun's --bind-to, Slurm's binding); at least 1. */
int dx_default_threads(void);

#endif
