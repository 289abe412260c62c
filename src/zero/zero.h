/* dissect zero: data-parallel optimizer state, gradient synchronisation and ZeRO sharding.
 *
 * Owns, for every flat parameter group of the model (see worker/model.h), the working
 * parameters, the gradients and the fp32 master weights with AdamW moments, partitioned over
 * the DP group as DeepSpeed's ZeRO does (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations
 * Toward Training Trillion Parameter Models", Sec. 5):
 *   stage 0: everything replicated; gradients all-reduced after backward.
 *   stage 1: master weights, m, v sharded; gradients all-reduced; each rank updates its shard and
 *            the working parameters are all-gathered after the update.
 *   stage 2: as 1, and each group's gradient is reduce-scattered as soon as that group's
 *            backward finishes (every micro-batch); only the local gradient shard is kept.
 *   stage 3: as 2, and the working parameters are sharded too: a group's parameters are
 *            all-gathered just before its forward and again before its backward, and freed after;
 *            the next group's all-gather is started (prefetched) before the current group runs.
 * LoRA (frozen base groups, dx_group.frozen): no gradients or optimizer states for the base. At
 * stages 0-2 its parameters are one replicated working copy; at stage 3 they are sharded and
 * gathered before each use like any stage-3 group (and stay valid across steps), while the
 * adapter groups take stage 2 (replicated working copy, gradients reduce-scattered, states
 * sharded): they are small, as DeepSpeed keeps parameters under its
 * stage3_param_persistence_threshold gathered.
 * Collectives on device buffers are split-phase where the comm allows (NCCL): gradient
 * reduce-scatters (two alternating buckets) and prefetched all-gathers run on the comm stream
 * while compute goes on; the compute stream waits only before a buffer is read or reused.
 * A group of n elements is padded to n_pad = ceil(n / P) * P for P DP ranks; rank r owns elements
 * [r * n_pad / P, min((r + 1) * n_pad / P, n)).
 */
#ifndef DX_ZERO_H
#define DX_ZERO_H

#include "comm/comm.h"
#include "trace/tracer.h"
#include "kernels.h"
#include "model/model.h"

typedef struct dx_zero dx_zero;

/* Offload flags for dx_zero_create. */
#define DX_ZERO_OFFLOAD_OPTIMIZER 1 /* offload_optimizer.device "cpu" */
#define DX_ZERO_OFFLOAD_PIN 2       /* offload_optimizer.pin_memory: page-locked host states */
#define DX_ZERO_OFFLOAD_PARAM 4     /* offload_param.device "cpu" (stage 3, with OFFLOAD_OPTIMIZER) */
#define DX_ZERO_OFFLOAD_PARAM_PIN 8 /* offload_param.pin_memory: page-locked parameter shards */
/* QLoRA (Dettmers et al. 2023): the frozen decoder-layer groups (dx_group.frozen, module
 * DX_MOD_LAYER) keep their matrices as NF4 with double-quantized absmaxes (kernels/nf4.h; each
 * matrix of a multiple of 64 elements, quantized on its own; the norm weights as they are), and
 * a group's working copy is dequantized into one shared buffer just before its forward and its
 * backward (traced as op "dequantize"). The embedding and LM head stay unquantized, as in
 * QLoRA. dx_zero_set_master / get_master on such a group take whole parameters. CPU backends
 * only so far (the dequantization reads the NF4 arrays on the host). */
#define DX_ZERO_QUANTIZE_NF4 16

/* Allocates the state for `stage` (0..3) over the DP group and initialises the parameters with
 * dx_model_init_values(seed) (identical whatever the DP size or stage). `dp` carries collectives
 * on backend buffers (MPI on the CPU backend, NCCL on CUDA); `dp_host` is the same ranks over
 * host memory (MPI; may equal dp), used for scalars such as the gradient norm. `offload` holds
 * DX_ZERO_OFFLOAD_* flags (0: none). Installs the model's group hook. Collective: the ranks
 * agree on allocation failures before the first collective. Returns NULL + dx_fail on failure,
 * *rc = -1 where this rank failed (the message names the stage or the allocation) or -2 where
 * another rank did (see dx_comm_agree). */
dx_zero *dx_zero_create(dx_model *m, dx_backend *be, dx_comm *dp, dx_comm *dp_host, int stage,
                        int offload, uint64_t seed, int *rc);
/* Gradient reduce-scatters in the compute dtype (stages 2-3, DP > 1, the environment's
 * DX_ZERO_REDUCE_ACT=1 on every DP rank, else off on all: dx_zero_create agrees; experimental,
 * for measurements): each group's A gradient bucket is rounded to X after its backward (bf16 on
 * CUDA, round to nearest even), reduce-scattered in X (half the bytes of fp32), and the rank's X
 * shard added into its A gradient shard before anything reads it. DeepSpeed's bf16 default
 * (communication_data_type follows the model's dtype) and FSDP2's reduce_dtype = bf16; the
 * default keeps fp32 sums. The sums are then of bf16-rounded per-rank gradients, added in bf16 by
 * NCCL; micro-batches still accumulate in A. Traced as memcpy (the rounding), reduce_scatter (X
 * bytes) and add (the accumulation). On the CPU backends X == A: the same sums through the
 * extra copies (how the tests check the bookkeeping). Memory: two X buckets of the largest group
 * (src/plan counts them). */
/* Whether this process's environment asks for it (DX_ZERO_REDUCE_ACT=1); no errors. */
int dx_zero_reduce_act_requested(void);

/* Offload staging: DX_ZERO_OFFLOAD_SLOTS page-locked slots, each of dx_zero_offload_chunk()
 * elements (fp32 gradient + act-dtype parameters). */
#define DX_ZERO_OFFLOAD_SLOTS 4
#define DX_ZERO_OFFLOAD_CHUNK ((size_t)1 << 23) /* 8 Mi elements: 32 MiB of fp32 gradient */

/* Elements per offload chunk for a rank whose largest owned group shard is max_shard elements:
 * min(DX_ZERO_OFFLOAD_CHUNK, max_shard), or the environment's DX_OFFLOAD_CHUNK_ELEMS (a test
 * knob, to cut small parameters into several chunks) in place of the constant. */
size_t dx_zero_offload_chunk(size_t max_shard);

/* With offload (DeepSpeed's offload_optimizer.device "cpu", Ren et al. 2021, ZeRO-Offload; stages
 * 1-3, backends with fp32 accumulators): the fp32 master weights and AdamW moments of the rank's
 * shard live in host memory (page-locked with DX_ZERO_OFFLOAD_PIN). dx_zero_step streams the
 * owned gradients to the host in chunks (dx_zero_offload_chunk) through a ring of
 * DX_ZERO_OFFLOAD_SLOTS page-locked staging slots (the backend's download_async), runs dx_host_adamw on each chunk (vectorised,
 * OpenMP over the backend's host threads; the arithmetic of the on-device AdamW) and streams
 * the updated parameters back in the act dtype (upload_async), then all-gathers them as without
 * offload. The three stages of neighbouring chunks overlap; the update starts once the
 * backward and the gradient norm are done, or inside the last backward
 * (dx_zero_begin_last_backward: exact without clipping, speculative with it). On the CPU backend the copies are memcpy
 * and the result equals the run without offload bitwise. The trace shows each chunk's copies
 * (ops memcpy_d2h / memcpy_h2d on stream "copy", between marks on the copy streams; none on the
 * CPU backend), its host AdamW (adamw on stream "host") and any time the host waited for a copy
 * (memcpy on "host").
 * With DX_ZERO_OFFLOAD_PARAM too (DeepSpeed's offload_param.device "cpu", stage 3; Rajbhandari et
 * al. 2021, ZeRO-Infinity): the rank's shard of the working parameters (act dtype) lives in host
 * memory as well; each group's all-gather first copies the shard up into the rank's own slot of
 * the gather buffer (dx_comm.all_gather_host_start: on the collective's stream, so the copy of
 * the prefetched group runs while the current group computes; MPI: a memcpy then the in-place
 * all-gather), and the host AdamW writes the updated parameters straight into the host shard
 * (no upload in the step). The device keeps only the two gather slots of parameters. The trace
 * shows the copies as memcpy_h2d on stream "comm". dx_zero_host_bytes gives the host bytes held
 * (states, parameter shards and staging). */
size_t dx_zero_host_bytes(const dx_zero *z);
void dx_zero_destroy(dx_zero *z);

/* Clears the gradients before a step's first micro-batch: stages 2-3 zero the local shards;
 * stages 0-1 mark the full buffers fresh (dx_group.grad_fresh: the first backward of each group
 * overwrites its gradient, with no memset; a gradient still fresh when it is read is zeroed
 * then, by dx_zero_reduce_grads, dx_zero_step or the early update). Stages 2-3 likewise let the
 * first micro-batch's backward overwrite each group's gradient bucket. */
int dx_zero_zero_grad(dx_zero *z);

/* After the last micro-batch's backward: stages 0 and 1 all-reduce the gradients (stages 2 and 3
 * already reduce-scattered them in the backward hooks); gradients still fresh (a group without
 * a backward since dx_zero_zero_grad) are zeroed first. Where dx_zero_begin_last_backward came
 * (or dx_zero_arm_reduce) before that backward (DP > 1, unless DX_ZERO_OVERLAP_REDUCE=0 on any
 * DP rank: dx_zero_create makes the ranks agree), each group's reduction
 * was already started by its post-backward hook, as soon as its gradient was final, and ran on
 * the comm's stream beside the backward of the groups before it (PyTorch DDP's bucketed
 * all-reduce, Megatron-LM's overlap_grad_reduce, with one bucket per group): at stage 1 a
 * reduce-scatter into the rank's own shard of the gradient (the optimizer reads only that; the
 * rest of the buffer is left undefined until the next backward overwrites it), at stage 0 an
 * all-reduce. This call then only makes the compute stream wait for them (and all-reduces any
 * group the backward did not reach). The owned sums are the same either way. */
int dx_zero_reduce_grads(dx_zero *z);

/* Global gradient L2 norm (over all parameters, all ranks), clipping factor
 * min(1, max_norm / (norm + 1e-6)) (max_norm <= 0: no clipping), AdamW on the local shard, and
 * refresh of the working parameters: stages 1 and 2 start each group's all-gather as soon as
 * its update is queued and return without waiting; the compute stream waits for it before the
 * group's next forward or backward (hook) or dx_zero_set_master (Megatron-LM's
 * --overlap-param-gather). Stage 3 starts the all-gathers of the next forward's first two
 * groups. hp->grad_scale and
 * hp->weight_decay are set per parameter from the clipping factor and the parameter's decay flag;
 * *grad_norm receives the norm before clipping.
 * AdamW beside the next forward (stage 0, or stage 1 on one DP rank, without offload, on a
 * backend with a side stream (CUDA), unless the environment's DX_OPT_OVERLAP is 0): the updates are queued on
 * the backend's side stream in the parameter table's order and the call returns; the compute
 * stream waits for a group's update only before the group's next forward or backward (hook),
 * and for all of them before any other use of the states (dx_zero_reduce_grads, dx_zero_step,
 * dx_zero_get_master / set_master / read_state / write_state, dx_zero_destroy). So the
 * memory-bound update of layer l + 1 runs while layer l's forward GEMMs run. The same kernels on
 * the same values: the result is bitwise the serial update's. The trace records these AdamW
 * ops on stream "optimizer". */
int dx_zero_step(dx_zero *z, const dx_adamw_hparams *hp, double max_norm, double *grad_norm);

/* Early update (offload only): called before the step's last micro-batch backward with the
 * step's AdamW hyper-parameters and max_norm. Where each group's gradient is final once its
 * backward (stage 1 with one DP rank) or its reduce-scatter (stages 2-3) is done, and no TP
 * reduction follows: the host AdamW of each group runs inside the backward hooks of the groups
 * after it (its downloads ordered after a fence at the point its gradient became final, uploads
 * detached so the backward goes on), overlapping the device's remaining backward; dx_zero_step
 * (same hp) finishes the last groups, makes the compute stream wait for the uploads and starts
 * the deferred all-gathers. Without clipping (max_norm <= 0) the result equals the update after
 * the backward bitwise (same chunks, same arithmetic).
 * With clipping the factor min(1, max_norm / norm) needs every gradient first, so the early
 * update is speculative: it runs with factor 1, which is exactly the clipped update whenever
 * the norm ends at or below max_norm (bitwise the update after the backward). When it ends
 * above, dx_zero_step repairs each chunk updated early (its gradient downloaded again,
 * dx_host_adamw_redo: undone and redone with the factor, within a few fp32 ulps of the direct
 * update) before the rest; the trace shows the repair as op adamw_redo. DeepSpeed and FSDP
 * wait for the norm instead (ZeRO-Offload's answer, the one-step delayed parameter update,
 * changes the training). Whether to speculate: the environment's DX_OFFLOAD_SPECULATE, "auto"
 * (default): when the previous step's norm (dx_zero_last_grad_norm; none at the first step
 * of a run without a checkpoint) was at or below max_norm; 1: always; 0: never (the update
 * waits for the norm).
 * Returns 1 when armed, 0 when the update stays after the backward, -1 + dx_fail. Not for
 * pipeline schedules (their backwards interleave micro-batches).
 * Stages 0-1 over DP > 1, with or without offload: also arms the gradient all-reduces of that
 * backward's hooks (see dx_zero_reduce_grads). */
int dx_zero_begin_last_backward(dx_zero *z, const dx_adamw_hparams *hp, double max_norm);

/* Arms only the gradient reductions of dx_zero_begin_last_backward (stages 0-1 over DP > 1,
 * unless DX_ZERO_OVERLAP_REDUCE=0): each group's reduction starts at its post-backward hook
 * until dx_zero_reduce_grads. For the pipeline's last backward action on a rank holding one
 * model chunk (dx_pipeline_set_last_backward_hook), where every group's gradient is final at its
 * hook; no effect at stages 2-3 or on one DP rank. */
void dx_zero_arm_reduce(dx_zero *z);

/* The global gradient norm of the last dx_zero_step (-1: no step yet), the guess of the
 * speculative early update; checkpoints keep it (attribute grad_norm), so a resumed run
 * speculates as the uninterrupted one would. set: norm < 0 means none. */
double dx_zero_last_grad_norm(const dx_zero *z);
void dx_zero_set_last_grad_norm(dx_zero *z, double norm);

/* The rest of the process grid, for ZeRO over the DP axis of a PP x DP x TP grid:
 *   tp_dev: the TP group over backend buffers (NULL when tp == 1): gradients of parameters marked
 *           tp_reduce (dx_param) are summed over it in dx_zero_step, on the owned range;
 *   tp_rank: this rank's TP index: parameters marked tp_replicated count in the gradient norm on
 *           TP rank 0 only;
 *   norm_host: the group the gradient norm's sum of squares is summed over (the world, MPI);
 *           NULL = the DP group. */
typedef struct {
    dx_comm *tp_dev;
    int tp_rank;
    dx_comm *norm_host;
} dx_zero_grid;
void dx_zero_set_grid(dx_zero *z, const dx_zero_grid *grid);

/* Seconds spent in collectives since the last call (and resets the counter). */
double dx_zero_take_comm_seconds(dx_zero *z);

int dx_zero_stage(const dx_zero *z);

/* Records collectives (trace.level module and op) and optimizer ops (op) into tr (NULL = off). */
void dx_zero_set_tracer(dx_zero *z, dx_tracer *tr);

/* Copies the current fp32 master value of elements [start, start+count) of group g into out
 * (host), gathering shards from their owners (collective over the DP group). Used by tests and
 * checkpoints. */
int dx_zero_get_master(dx_zero *z, int g, size_t start, size_t count, float *out);

/* Sets elements [start, start+count) of group g's fp32 master weights from host values (every
 * rank passes the same values and keeps its own shard), and refreshes the working copy.
 * Collective over the DP group (stages 1-2 all-gather the refreshed working parameters). */
int dx_zero_set_master(dx_zero *z, int g, size_t start, size_t count, const float *src);

/* The optimizer state of this rank's shard, for full checkpoints: which = 0 fp32 master weights,
 * 1 AdamW exp_avg (m), 2 exp_avg_sq (v). dx_zero_owned gives the owned range [*lo, *hi) of group
 * gi (group coordinates; stage 0: the whole group, every DP rank). read_state copies elements
 * [lo, hi) of the owned range to host fp32 out; write_state sets them from host src (m and v
 * only: master weights go through dx_zero_set_master, which refreshes the working copy). Not
 * collective. Return 0 or -1 + dx_fail (a range outside the owned one). */
void dx_zero_owned(const dx_zero *z, int gi, size_t *lo, size_t *hi);
int dx_zero_read_state(dx_zero *z, int gi, int which, size_t lo, size_t hi, float *out);
int dx_zero_write_state(dx_zero *z, int gi, int which, size_t lo, size_t hi, const float *src);

#endif
