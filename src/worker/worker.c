/* One rank's training loop pieces; see worker.h. */
#include "worker.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoints/safetensors.h"
#include "comm/grid.h"
#include "common/common.h"
#include "trace/tracer.h"
#include "data.h"
#include "model/model.h"
#include "pp/pipeline.h"
#include "zero/zero.h"
#ifdef DX_HAVE_CUDA
#include <cuda_runtime.h>

#include "cuda/cuda_backend.h"
#include "cuda/marks.h"
#endif
#ifdef DX_HAVE_NCCL
#include "comm/comm_nccl.h"
#endif

/* A step's host times, kept until its span is recorded (finish_step_span). */
typedef struct {
    int on;
    long step;
    uint64_t t_step, t_end;
} step_span;

struct dx_worker {
    dx_config cfg;
    dx_grid grid;    /* PP x DP x TP: one group per axis, over host memory and backend buffers */
    int have_grid;
    dx_comm *world;
    dx_comm *dp;     /* the DP group over host memory (MPI) */
    dx_backend *be;
    dx_model *model;
    dx_zero *zero;
    dx_pipeline *pipe;
    int first_stage, last_stage; /* this rank holds the embedding / the LM head */
    long data_step0;             /* dx_worker_set_data_position */
    uint64_t data_consumed0;
    dx_shard train, valid;
    int have_train, have_valid;
    dx_batcher tb, vb;
    int32_t *h_in, *h_tg; /* host batch [rows * T]: a step's micro-batches, or one micro-batch */
    int32_t *d_in, *d_tg; /* backend copies */
    step_span span;       /* the step whose span finish_step_span records next */
    int micro_sync;       /* DX_MICRO_SYNC=1: wait for the GPU after every forward and backward
                             (the phase times then come from the host clock) */
    void *d_loss;         /* A[1] */
    float *h_logits;      /* one row of logits [V] for sampling */
    int power_on;         /* read the backend's power_counters around each step: it has them, the
                             run writes a trace (the figures go only there) and DX_POWER_COUNTERS
                             is not 0 (cleared, with a warning, at a failure) */
    double phase_comm;    /* this step's collective host time taken out of host-timed forward /
                             backward phases (phase_time, take_phase_comm): it goes to comm_s */
    dx_tracer tr;
};

static double take_phase_comm(void *ctx);

dx_tracer *dx_worker_tracer(dx_worker *w) { return &w->tr; }
dx_model *dx_worker_model(dx_worker *w) { return w->model; }
dx_zero *dx_worker_zero(dx_worker *w) { return w->zero; }

int dx_cuda_devices(void)
{
#ifdef DX_HAVE_CUDA
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
#else
    return 0;
#endif
}

int dx_local_rank(void)
{
    const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return 0;
}

int64_t dx_device_memory_available(const char *device)
{
    if (!strcmp(device, "cuda")) {
#ifdef DX_HAVE_CUDA
        int n = dx_cuda_devices();
        size_t fr = 0, tot = 0;
        if (n <= 0 || cudaSetDevice(dx_local_rank() % n) != cudaSuccess || cudaMemGetInfo(&fr, &tot) != cudaSuccess)
            return -1;
        return (int64_t)fr;
#else
        return -1;
#endif
    }
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    fclose(f);
    if (kb < 0) return -1;
    const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!ls) ls = getenv("SLURM_NTASKS_PER_NODE");
    long local = ls ? atol(ls) : 1;
    return kb * 1024 / (local < 1 ? 1 : local);
}

int dx_default_threads(void)
{
    const char *omp = getenv("OMP_NUM_THREADS");
    if (omp && atoi(omp) > 0) return atoi(omp);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!ls) ls = getenv("SLURM_NTASKS_PER_NODE");
    long local = ls ? atol(ls) : 1;
    if (local < 1) local = 1;
    long t = cores / local;
    /* no more threads than CPUs this rank may run on (mpirun binds 1- and 2-rank jobs to one
     * core each by default, Slurm to its allocation): more would share those CPUs and wait for
     * each other at every parallel region */
    cpu_set_t mask;
    if (sched_getaffinity(0, sizeof mask, &mask) == 0) {
        const long allowed = CPU_COUNT(&mask);
        if (allowed >= 1 && allowed < t) t = allowed;
    }
    return t < 1 ? 1 : (int)t;
}

double dx_lr_at(const dx_config *c, long step)
{
    long warm = c->lr_warmup_iters, decay = c->lr_decay_iters > 0 ? c->lr_decay_iters : c->train_iters;
    if (warm > 0 && step <= warm) return c->lr * (double)step / (double)warm;
    if (step >= decay) return c->min_lr;
    double progress = (double)(step - warm) / (double)(decay - warm);
    return c->min_lr + 0.5 * (c->lr - c->min_lr) * (1.0 + cos(M_PI * progress));
}

dx_backend *dx_worker_backend(dx_worker *w) { return w->be; }
const dx_grid *dx_worker_grid(const dx_worker *w) { return &w->grid; }

void dx_worker_destroy(dx_worker *w)
{
    if (!w) return;
    dx_pipeline_destroy(w->pipe);
    dx_zero_destroy(w->zero);
    dx_model_destroy(w->model);
    if (w->have_grid) dx_grid_destroy(&w->grid);
    if (w->be) {
        w->be->free(w->be, w->d_in);
        w->be->free(w->be, w->d_tg);
        w->be->free(w->be, w->d_loss);
        w->be->destroy(w->be);
    }
    if (w->have_train) { dx_batcher_free(&w->tb); dx_shard_close(&w->train); }
    if (w->have_valid) { dx_batcher_free(&w->vb); dx_shard_close(&w->valid); }
    dx_event_buf_free(&w->tr.buf);
    free(w->h_in);
    free(w->h_tg);
    free(w->h_logits);
    free(w);
}

/* Creates the backend (local to the rank). */
static int create_backend(dx_worker *w, const dx_config *c)
{
    const char *device = c->device;
    if (!strcmp(device, "auto")) device = dx_cuda_devices() > 0 ? "cuda" : "cpu";
    if (!strcmp(device, "cpu")) {
        w->be = dx_backend_cpu_create(dx_default_threads());
    } else {
#if defined(DX_HAVE_CUDA) && defined(DX_HAVE_NCCL)
        int n = dx_cuda_devices();
        if (n <= 0) return dx_fail("key 'device': \"cuda\" but no CUDA device is visible");
        w->be = dx_backend_cuda_create(dx_local_rank() % n, dx_default_threads());
        if (w->be && c->trace_path[0] && c->trace_level != DX_TRACE_STEP && dx_cuda_enable_marks(w->be))
            return -1;
#else
        return dx_fail("key 'device': \"cuda\" is not available in this build (built without CUDA and NCCL)");
#endif
    }
    if (!w->be) return -1;
    w->tr.be = w->be;
    return 0;
}

/* Opens the data and builds the model (local to the rank). */
static int open_data_and_model(dx_worker *w, const dx_config *c)
{
    const int T = c->seq_length, B = c->micro_batch, V = c->model.vocab_size;
    if (c->train_path[0]) {
        if (dx_shard_open(&w->train, c->train_path, V)) return -1;
        w->have_train = 1;
        if (dx_batcher_init(&w->tb, &w->train, T, c->seed)) return -1;
    }
    if (c->valid_path[0]) {
        if (dx_shard_open(&w->valid, c->valid_path, V)) return -1;
        w->have_valid = 1;
        /* a fixed validation order, independent of the training seed */
        if (dx_batcher_init(&w->vb, &w->valid, T, 0)) return -1;
    }
    /* this rank's part: its pipeline stage's layers (one chunk, or the interleaved schedule's
     * chunks: virtual stage c * pp + stage holds layers [that x per-chunk, ...)), its TP slice */
    const dx_grid *g = &w->grid;
    int v = c->pp_schedule == DX_PP_INTERLEAVED ? c->model.num_hidden_layers / (c->pp * c->layers_per_virtual_stage) : 1;
    dx_model_part part = {.tp = g->tp, .tp_rank = g->tp_rank, .sequence_parallel = c->sequence_parallel,
                          .tp_comm = g->tp > 1 ? g->tp_dev : NULL, .nchunks = v, .slots = 1,
                          .recompute = c->recompute, .recompute_method = c->recompute_method,
                          .recompute_num_layers = c->recompute_num_layers, .lora_r = c->lora_r,
                          .lora_scale = c->lora_r > 0 ? (float)(c->lora_alpha / c->lora_r) : 0.0f,
                          .lora_targets = c->lora_targets, .lora_dropout = (float)c->lora_dropout};
    if (v > 1) {
        for (int k = 0; k < v; k++) {
            part.num_layers[k] = c->layers_per_virtual_stage;
            part.first_layer[k] = (k * c->pp + g->pp_rank) * c->layers_per_virtual_stage;
        }
    } else {
        part.num_layers[0] = dx_stage_layers(c, g->pp_rank, &part.first_layer[0]);
    }
    if (g->pp > 1) {
        dx_pp_links links = {g->act_next_dev, g->act_prev_dev, g->grad_next_dev, g->grad_prev_dev};
        w->pipe = dx_pipeline_create(&links, g->pp, g->pp_rank, c->pp_schedule, c->grad_accum, v);
        if (!w->pipe) return -1;
        part.slots = dx_pipeline_slots(w->pipe);
    }
    w->model = dx_model_create_part(&c->model, w->be, B, T, &part);
    if (!w->model) return -1;
    w->first_stage = dx_model_chunk_has_embedding(w->model, 0);
    w->last_stage = dx_model_chunk_has_head(w->model, v - 1);
    if (w->pipe) dx_pipeline_set_model(w->pipe, w->model, &w->tr);
    /* without a pipeline a step's micro-batches are uploaded at once (dx_worker_train_step) */
    size_t n = (size_t)B * T * (size_t)(w->pipe ? 1 : c->grad_accum);
    const char *ms = getenv("DX_MICRO_SYNC");
    w->micro_sync = ms && atoi(ms) != 0;
    const char *pc = getenv("DX_POWER_COUNTERS");
    w->power_on = w->be->power_counters && c->trace_path[0] && !(pc && strcmp(pc, "0") == 0);
    w->h_in = malloc(n * sizeof(int32_t));
    w->h_tg = malloc(n * sizeof(int32_t));
    w->h_logits = malloc((size_t)V * sizeof(float));
    w->d_in = w->be->alloc(w->be, n * sizeof(int32_t), DX_MEM_OTHER);
    w->d_tg = w->be->alloc(w->be, n * sizeof(int32_t), DX_MEM_OTHER);
    w->d_loss = w->be->alloc(w->be, dx_dtype_size(w->be->acc), DX_MEM_OTHER);
    if (!w->h_in || !w->h_tg || !w->h_logits || !w->d_in || !w->d_tg || !w->d_loss)
        return dx_fail("out of memory for batch buffers");
    return 0;
}

/* The pipeline's last backward action on a one-chunk rank: ZeRO-0/1's reductions in it. */
static int arm_reduce(void *zero)
{
    dx_zero_arm_reduce(zero);
    return 0;
}

#if defined(DX_HAVE_NCCL)
static dx_comm *make_nccl(dx_comm *host, void *be) { return dx_comm_nccl_create(host, be); }
#endif

dx_worker *dx_worker_create(const dx_config *c, dx_comm *world, int *rc)
{
    dx_worker *w = calloc(1, sizeof *w);
    *rc = w ? 0 : dx_fail("out of memory");
    if (w) {
        w->cfg = *c;
        w->world = world;
        /* events are recorded only when a trace file is written */
        w->tr.level = c->trace_path[0] ? (int)c->trace_level : 0;
        w->tr.rank = world->rank;
        w->tr.micro = -1;
        *rc = create_backend(w, c);
    }
    /* every collective step below is preceded by an agreement, so one rank's failure stops all */
    if ((*rc = dx_comm_agree(world, *rc))) goto fail;
    if ((*rc = dx_comm_agree(world, dx_grid_create(&w->grid, world, c->tp, c->pp)))) goto fail;
    w->have_grid = 1;
    /* the interleaved schedule's last virtual stage sends back to stage 0: a ring of links */
    if ((*rc = dx_comm_agree(world, dx_grid_create_links(&w->grid, c->pp_schedule == DX_PP_INTERLEAVED))))
        goto fail;
    w->dp = w->grid.dp_host;
    w->tr.pp = (int16_t)w->grid.pp_rank;
    w->tr.dp = (int16_t)w->grid.dp_rank;
    w->tr.tp = (int16_t)w->grid.tp_rank;
#if defined(DX_HAVE_NCCL)
    if (dx_cuda_stream(w->be) && dx_grid_set_device(&w->grid, make_nccl, w->be)) { /* device buffers: NCCL */
        *rc = -1;
        goto fail;
    }
#endif
    *rc = open_data_and_model(w, c);
    if ((*rc = dx_comm_agree(world, *rc))) goto fail;
    int offload = (c->offload_optimizer ? DX_ZERO_OFFLOAD_OPTIMIZER : 0) |
                  (c->offload_optimizer && c->offload_pin_memory ? DX_ZERO_OFFLOAD_PIN : 0) |
                  (c->offload_param ? DX_ZERO_OFFLOAD_PARAM : 0) |
                  (c->offload_param && c->offload_param_pin_memory ? DX_ZERO_OFFLOAD_PARAM_PIN : 0) |
                  (c->quantize_nf4 ? DX_ZERO_QUANTIZE_NF4 : 0);
    w->zero = dx_zero_create(w->model, w->be, w->grid.dp_dev, w->dp, c->zero_stage, offload, c->seed, rc);
    if (*rc) goto fail;
    dx_zero_grid zg = {.tp_dev = w->grid.tp > 1 ? w->grid.tp_dev : NULL, .tp_rank = w->grid.tp_rank,
                       .norm_host = world};
    dx_zero_set_grid(w->zero, &zg);
    if (w->pipe) {
        dx_pipeline_set_last_backward_hook(w->pipe, arm_reduce, w->zero);
        dx_pipeline_set_comm_clock(w->pipe, take_phase_comm, w);
    }
    /* Hugging Face import: the initial weights from the safetensors of c->hf_model (every rank
     * reads them and keeps its shard; collective, with its own agreement) */
    if (c->hf_model[0] && dx_hf_load_weights(c->hf_model, w->model, w->zero, w->dp)) {
        *rc = -1;
        goto fail;
    }
    dx_model_set_tracer(w->model, &w->tr);
    dx_zero_set_tracer(w->zero, &w->tr);
    return w;
fail:
    if (*rc == -1) dx_fail_prefix("rank %d", world->rank);
    dx_worker_destroy(w);
    return NULL;
}

void dx_worker_set_data_position(dx_worker *w, long step0, uint64_t consumed)
{
    w->data_step0 = step0;
    w->data_consumed0 = consumed;
}

static int upload_batch(dx_worker *w, dx_batcher *b, uint64_t g0, int n)
{
    size_t bytes = (size_t)n * w->cfg.seq_length * sizeof(int32_t);
    uint64_t t0 = dx_now_ns();
    dx_batcher_fill(b, g0, n, w->h_in, w->h_tg);
    int rc = w->be->upload(w->be, w->d_in, w->h_in, bytes);
    if (!rc) rc = w->be->upload(w->be, w->d_tg, w->h_tg, bytes);
    if (dx_tr_on(&w->tr, 2))
        dx_tr_record(&w->tr, t0, dx_now_ns(), DX_MOD_DATA, -1, DX_OP_MEMCPY, DX_STREAM_HOST,
                     (int64_t)(4 * bytes), 0);
    return rc;
}

/* The micro-batch loader of the pipeline: micro-batch k of this DP rank's share of the step. */
typedef struct {
    dx_worker *w;
    dx_batcher *b;
    uint64_t g0; /* global index of the first sequence of micro-batch 0 */
} load_ctx;

static int load_micro(void *ctx, int k, const int32_t **ids, const int32_t **targets)
{
    load_ctx *l = ctx;
    const int B = l->w->cfg.micro_batch;
    if (upload_batch(l->w, l->b, l->g0 + (uint64_t)k * B, B)) return -1;
    *ids = l->w->d_in;
    *targets = l->w->d_tg;
    return 0;
}

/* Sums a loss over the grid: each micro-batch's loss is counted once, on TP rank 0 of the last
 * stage of its DP replica (every TP rank of it computed the whole loss). */
static int reduce_loss(dx_worker *w, double *loss_sum, double *comm_s)
{
    if (!(w->last_stage && w->grid.tp_rank == 0)) *loss_sum = 0;
    uint64_t t0 = dx_now_ns();
    if (w->world->size > 1 && w->world->all_reduce_sum(w->world, loss_sum, 1, DX_F64)) return -1;
    uint64_t t1 = dx_now_ns();
    if (comm_s) *comm_s = (double)(t1 - t0) * 1e-9;
    if (w->world->size > 1 && dx_tr_on(&w->tr, 1))
        dx_tr_record_comm(&w->tr, DX_GROUP_WORLD, NULL, t0, t1, DX_MOD_LOSS, -1, DX_OP_ALL_REDUCE, 8);
    return 0;
}

/* Resolves the tracer's marks (dx_tr_resolve) and records the span of the step dx_worker_train_step
 * left in w->span, if any: from the step's first host time or event to its last host time or the
 * end of its last event on the compute stream or the host (the span covers every op of the step:
 * device timestamps mapped to the host clock can sit a few microseconds outside the host's reads;
 * AdamW beside the next forward and collectives that overlap it are left out, as the report
 * counts them). */
static int finish_step_span(dx_worker *w, int wait_all)
{
    dx_tracer *tr = &w->tr;
    if (dx_tr_resolve(tr, wait_all)) return -1;
    if (!w->span.on) return 0;
    w->span.on = 0;
    if (!dx_tr_on(tr, 1)) return 0;
    const int32_t step = (int32_t)w->span.step;
    uint64_t lo = w->span.t_step, hi = w->span.t_end;
    for (size_t i = 0; !tr->failed && i < tr->buf.n; i++) {
        const dx_event *e = &tr->buf.ev[i];
        if (e->step != step || dx_tr_pending(e) || e->op == DX_OP_STEP) continue;
        if ((uint64_t)e->start_ns < lo) lo = (uint64_t)e->start_ns;
        if ((e->stream == DX_STREAM_COMPUTE || e->stream == DX_STREAM_HOST) && (uint64_t)e->end_ns > hi)
            hi = (uint64_t)e->end_ns;
    }
    const int32_t s0 = tr->step;
    const int16_t m0 = tr->micro;
    const uint8_t p0 = tr->phase;
    tr->step = step;
    tr->micro = -1;
    tr->phase = DX_PH_STEP;
    dx_tr_record(tr, lo, hi, DX_MOD_STEP, -1, DX_OP_STEP, DX_STREAM_HOST, 0, 0);
    tr->step = s0;
    tr->micro = m0;
    tr->phase = p0;
    return 0;
}

int dx_worker_trace_flush(dx_worker *w) { return finish_step_span(w, 1); }

/* The power counters failed (the first time: NVML missing or without them on this device): the
 * steps' energy_j and power_capped_s are NaN from now on. Training goes on. */
static void power_off(dx_worker *w)
{
    fprintf(stderr, "dissect: warning: rank %d: %s; the trace's energy_j and power_capped_s are not recorded\n",
            w->world->rank, dx_last_error());
    w->power_on = 0;
}

/* The host time of the ZeRO / DP collectives called since the last take (dx_zero's comm clock:
 * ZeRO-2/3's hooks, the gradient reduction started in the last backward), added to
 * w->phase_comm: a host-timed forward or backward phase subtracts it, so that /steps' forward_s,
 * backward_s, optimizer_s and comm_s do not count it twice (optimizer_s leaves its collectives
 * out the same way). Returns it, in seconds. */
static double take_phase_comm(void *ctx)
{
    dx_worker *w = ctx;
    double c = dx_zero_take_comm_seconds(w->zero);
    w->phase_comm += c;
    return c;
}

/* Waits for the compute stream, adds the host time since *t less the collectives' host time
 * meanwhile (take_phase_comm) to *sum (seconds) and moves *t on. */
static int phase_time(dx_worker *w, uint64_t *t, double *sum)
{
    w->be->sync(w->be);
    uint64_t now = dx_now_ns();
    *sum += (double)(now - *t) * 1e-9 - take_phase_comm(w);
    *t = now;
    return 0;
}

int dx_worker_train_step(dx_worker *w, long step, dx_step_stats *st)
{
    const dx_config *c = &w->cfg;
    dx_backend *be = w->be;
    const int B = c->micro_batch, T = c->seq_length, A = c->grad_accum;
    const uint64_t G = (uint64_t)B * (uint64_t)A * (uint64_t)w->dp->size;
    const double global_tokens = (double)G * T;
    if (!w->have_train) return dx_fail("rank %d: no training data (key 'data.train')", w->world->rank);

    memset(st, 0, sizeof *st);
    dx_tracer *tr = &w->tr;
    tr->step = (int32_t)step;
    tr->micro = -1;
    tr->phase = DX_PH_FORWARD;
    double e0 = NAN, c0 = NAN; /* the power counters where the step begins */
    if (w->power_on && be->power_counters(be, &e0, &c0)) power_off(w);
    uint64_t t_step = dx_now_ns();
    dx_zero_take_comm_seconds(w->zero);
    w->phase_comm = 0;
    DX_TRACE_OP(tr, DX_MOD_OPTIMIZER, -1, DX_OP_MEMSET, 0, 0, dx_zero_zero_grad(w->zero));
    be->zero(be, w->d_loss, dx_dtype_size(be->acc));

    /* the step's AdamW hyper-parameters (an early update needs them in the last backward) */
    const dx_adamw_hparams hp = {.lr = dx_lr_at(c, step), .beta1 = c->beta1, .beta2 = c->beta2,
                                 .eps = c->adam_eps, .weight_decay = c->weight_decay, .step = step};
    load_ctx lc = {w, &w->tb, w->data_consumed0 + (uint64_t)(step - 1 - w->data_step0) * G +
                                  (uint64_t)w->dp->rank * B * A};
    /* LoRA dropout's keys: the step, and each micro-batch's first global sequence */
    dx_model_set_dropout_seed(w->model, dx_mix64(c->seed ^ 0x6c6f7261u) + (uint64_t)step);
    if (w->pipe) { /* the pipeline schedule over the step's micro-batches */
        if (finish_step_span(w, 0)) return -1; /* the last step's (the schedule waits anyway) */
        dx_pipeline_set_first_sequence(w->pipe, lc.g0);
        if (dx_pipeline_train(w->pipe, B, T, w->d_loss, (float)(1.0 / global_tokens), load_micro, &lc,
                              &st->forward_s, &st->backward_s))
            return -1;
    } else {
        /* The step's micro-batches go up in one upload, while the compute stream is idle at the
         * step's start, and micro-batch j reads rows [j B, (j + 1) B) of d_in / d_tg. The loop
         * then queues every forward and backward without waiting for the GPU in between (as
         * Megatron-LM's and DeepSpeed's loops do): stream order keeps the micro-batches apart.
         * The phase times come from the backend's stopwatch, slot 2j before micro-batch j's
         * forward, 2j + 1 after it, 2j + 2 after its backward; where there is none (CPU: ops
         * finish before returning) or with DX_MICRO_SYNC=1, from the host clock after a sync. */
        if (upload_batch(w, &w->tb, lc.g0, B * A)) return -1;
        const size_t rows = (size_t)B * T;
        const int sw = be->stamp && be->stamp_seconds && !w->micro_sync;
        uint64_t th = dx_now_ns();
        if (sw && be->stamp(be, 0)) return -1;
        for (int j = 0; j < A; j++) {
            tr->micro = (int16_t)j;
            tr->phase = DX_PH_FORWARD;
            if (dx_model_set_micro_sequence(w->model, 0, 0, lc.g0 + (uint64_t)j * B)) return -1;
            if (dx_model_forward(w->model, w->d_in + j * rows, w->d_tg + j * rows, B, T, w->d_loss, 1,
                                 (float)(1.0 / global_tokens)))
                return -1;
            if (sw ? be->stamp(be, 2 * j + 1) : phase_time(w, &th, &st->forward_s)) return -1;
            /* the last step's marks, converted while the GPU runs this forward */
            if (j == 0 && w->span.on && finish_step_span(w, 0)) return -1;
            tr->phase = DX_PH_BACKWARD;
            if (j == A - 1 && dx_zero_begin_last_backward(w->zero, &hp, c->grad_clip) < 0) return -1;
            if (dx_model_backward(w->model)) return -1;
            if (sw ? be->stamp(be, 2 * j + 2) : phase_time(w, &th, &st->backward_s)) return -1;
        }
        if (sw) {
            be->sync(be);
            for (int j = 0; j < A; j++) {
                double f, b;
                if (be->stamp_seconds(be, 2 * j, 2 * j + 1, &f) || be->stamp_seconds(be, 2 * j + 1, 2 * j + 2, &b))
                    return dx_fail("rank %d: timing micro-batch %d of step %ld", w->world->rank, j, step);
                st->forward_s += f;
                st->backward_s += b;
            }
        }
    }
    /* ZeRO / DP collectives called in the forward and backward: where those phases are
     * host-timed, already taken out of them (phase_comm); with the backend's stopwatch (GPU
     * stamps), their calls only queue them, on their own stream */
    double hook_comm = w->phase_comm + dx_zero_take_comm_seconds(w->zero);
    tr->micro = -1;

    if (dx_zero_reduce_grads(w->zero)) return -1;
    double loss_sum = 0, loss_comm = 0;
    if (w->last_stage && dx_read_acc_scalar(be, w->d_loss, &loss_sum)) return -1;
    if (reduce_loss(w, &loss_sum, &loss_comm)) return -1;
    tr->phase = DX_PH_OPTIMIZER;
    double reduce_comm = dx_zero_take_comm_seconds(w->zero);

    uint64_t t_o = dx_now_ns();
    double norm;
    /* the optimizer as a module span (trace level module has no kernel events to show it) */
    const int64_t mod_o = dx_tr_on(tr, 1) ? dx_tr_begin(tr) : 0;
    if (dx_zero_step(w->zero, &hp, c->grad_clip, &norm)) return -1;
    if (dx_tr_on(tr, 1)) dx_tr_end(tr, mod_o, DX_MOD_OPTIMIZER, -1, DX_OP_MODULE, DX_STREAM_COMPUTE, 0, 0);
    be->sync(be);
    uint64_t t_end = dx_now_ns();
    double e1 = NAN, c1 = NAN;
    if (w->power_on && be->power_counters(be, &e1, &c1)) power_off(w);
    double opt_comm = dx_zero_take_comm_seconds(w->zero);

    st->loss = loss_sum / global_tokens;
    st->grad_norm = norm;
    st->lr = hp.lr;
    st->tokens = (int64_t)global_tokens;
    st->comm_s = hook_comm + reduce_comm + loss_comm + opt_comm;
    st->optimizer_s = (double)(t_end - t_o) * 1e-9 - opt_comm;
    st->step_s = (double)(t_end - t_step) * 1e-9;
    st->energy_j = w->power_on ? e1 - e0 : NAN;
    st->power_capped_s = w->power_on ? c1 - c0 : NAN;
    st->mem = be->mem;
    /* GPU marks -> host times; collectives still running (ZeRO-1/2's parameter all-gathers,
     * which overlap the next forward) are resolved at a later step, not waited for. With CUDA
     * marks the reference is taken now and the conversion waits until the next step's first
     * forward is queued (finish_step_span): at trace level op it takes milliseconds of host time
     * (thousands of marks), which the GPU would otherwise spend idle between the steps. */
    w->span = (step_span){.on = 1, .step = step, .t_step = t_step, .t_end = t_end};
    if (be->anchor_marks ? be->anchor_marks(be) : finish_step_span(w, 0)) return -1;
    tr->step = 0;
    return 0;
}

int dx_worker_forward_backward(dx_worker *w, double *loss, int32_t *inputs, int32_t *targets,
                               float *logits)
{
    const dx_config *c = &w->cfg;
    dx_backend *be = w->be;
    const int B = c->micro_batch, T = c->seq_length;
    const size_t N = (size_t)B * T;
    if (!w->have_train) return dx_fail("rank %d: no training data (key 'data.train')", w->dp->rank);
    if (w->grid.tp * w->grid.pp > 1)
        return dx_fail("dump: one forward + backward of the whole model needs "
                       "tensor_model_parallel_size = pipeline_model_parallel_size = 1");
    if (dx_zero_zero_grad(w->zero)) return -1;
    if (upload_batch(w, &w->tb, (uint64_t)w->dp->rank * B, B)) return -1;
    if (inputs) memcpy(inputs, w->h_in, N * sizeof *inputs);
    if (targets) memcpy(targets, w->h_tg, N * sizeof *targets);
    double sum;
    be->zero(be, w->d_loss, dx_dtype_size(be->acc));
    if (dx_model_forward(w->model, w->d_in, w->d_tg, B, T, w->d_loss, 0, 0.0f)) return -1;
    if (dx_read_acc_scalar(be, w->d_loss, &sum)) return -1;
    *loss = sum / (double)N;
    if (logits && be->download_f32(be, logits, dx_model_logits(w->model), be->act,
                                   N * (size_t)c->model.vocab_size))
        return -1;
    be->zero(be, w->d_loss, dx_dtype_size(be->acc));
    if (dx_model_forward(w->model, w->d_in, w->d_tg, B, T, w->d_loss, 1, (float)(1.0 / (double)N)))
        return -1;
    /* (dx_zero_reduce_grads: one rank, so only the zeroing of a gradient no backward wrote) */
    if (dx_model_backward(w->model) || dx_zero_reduce_grads(w->zero)) return -1;
    be->sync(be);
    return 0;
}

/* Forward of one micro-batch through this rank's part (the pipeline when there is one). */
static int forward_only(dx_worker *w, load_ctx *lc, int B, int T, void *loss_sum)
{
    if (w->pipe) return dx_pipeline_forward(w->pipe, 1, B, T, loss_sum, load_micro, lc);
    const int32_t *ids, *tg;
    if (load_micro(lc, 0, &ids, &tg)) return -1;
    return dx_model_forward(w->model, ids, loss_sum ? tg : NULL, B, T, loss_sum, 0, 0.0f);
}

int dx_worker_eval(dx_worker *w, double *val_loss)
{
    const dx_config *c = &w->cfg;
    dx_backend *be = w->be;
    if (!w->have_valid) { *val_loss = NAN; return 0; }
    const int B = c->micro_batch, T = c->seq_length, P = w->dp->size;
    int level = w->tr.level;
    w->tr.level = 0; /* evaluation is outside the steps' spans: not traced */
    be->zero(be, w->d_loss, dx_dtype_size(be->acc));
    for (long i = 0; i < c->eval_iters; i++) {
        load_ctx lc = {w, &w->vb, (uint64_t)i * B * P + (uint64_t)w->dp->rank * B};
        if (forward_only(w, &lc, B, T, w->d_loss)) return -1;
    }
    double s = 0;
    if (w->last_stage && dx_read_acc_scalar(be, w->d_loss, &s)) return -1;
    if (reduce_loss(w, &s, NULL)) return -1;
    *val_loss = s / ((double)c->eval_iters * B * P * T);
    w->tr.level = level;
    return 0;
}

/* The sampling loader: the ids already uploaded to d_in, no targets. */
static int load_uploaded(void *ctx, int k, const int32_t **ids, const int32_t **targets)
{
    (void)k;
    *ids = ((dx_worker *)ctx)->d_in;
    *targets = NULL;
    return 0;
}

int dx_worker_sample(dx_worker *w, int n, double temperature, uint64_t seed, int32_t *ids)
{
    dx_backend *be = w->be;
    const dx_grid *g = &w->grid;
    const int T = w->cfg.seq_length, V = w->cfg.model.vocab_size;
    size_t xs = dx_dtype_size(be->act); /* the logits' dtype */
    w->tr.level = 0; /* sampling is not traced */
    ids[0] = 1; /* BOS */
    int v0, Vl = w->model ? dx_model_vocab_slice(w->model, &v0) : V;
    int32_t *buf = malloc(((size_t)T + (size_t)g->tp) * sizeof *buf);
    if (!buf) return dx_fail("rank %d: out of memory for sampling", w->world->rank);
    int rc = 0;
    for (int i = 1; i <= n && !rc; i++) {
        int start = i > T ? i - T : 0, len = i - start;
        /* sequence parallelism splits the tokens over TP: pad on the right (causal attention:
         * later tokens change no earlier logits) to a multiple of tp, within the allocation */
        int lenp = w->cfg.sequence_parallel ? (len + g->tp - 1) / g->tp * g->tp : len;
        if (lenp > T) { start += lenp - T; len = T; lenp = T; }
        memcpy(buf, ids + start, (size_t)len * sizeof *buf);
        for (int j = len; j < lenp; j++) buf[j] = 0;
        rc = be->upload(be, w->d_in, buf, (size_t)lenp * sizeof(int32_t));
        if (!rc) rc = w->pipe ? dx_pipeline_forward(w->pipe, 1, 1, lenp, NULL, load_uploaded, w)
                              : dx_model_forward(w->model, w->d_in, NULL, 1, lenp, NULL, 0, 0.0f);
        int32_t pick = V - 1;
        if (!rc && w->last_stage) {
            /* this rank's vocabulary slice of the row, gathered over TP to TP rank 0 */
            const char *row = (const char *)dx_model_logits(w->model) + (size_t)(len - 1) * Vl * xs;
            rc = be->download_f32(be, w->h_logits + (g->tp_rank == 0 ? 0 : v0), row, be->act, (size_t)Vl);
            if (!rc && g->tp > 1)
                rc = g->tp_host->gather(g->tp_host, w->h_logits + (g->tp_rank == 0 ? 0 : v0),
                                        w->h_logits, (size_t)Vl * sizeof(float), 0);
            if (!rc && g->tp_rank == 0) {
                double mx = -INFINITY, sum = 0;
                for (int v = 0; v < V; v++) mx = w->h_logits[v] > mx ? w->h_logits[v] : mx;
                for (int v = 0; v < V; v++) sum += exp((w->h_logits[v] - mx) / temperature);
                double u = dx_uniform(seed, 0x5a3d1e, (uint64_t)i) * sum, acc = 0;
                for (int v = 0; v < V; v++) {
                    acc += exp((w->h_logits[v] - mx) / temperature);
                    if (acc >= u) { pick = v; break; }
                }
            }
            if (!rc && g->tp > 1) rc = g->tp_host->broadcast(g->tp_host, &pick, sizeof pick, 0);
        }
        /* the last stage tells the others */
        if (!rc && g->pp > 1) rc = g->pp_host->broadcast(g->pp_host, &pick, sizeof pick, g->pp - 1);
        ids[i] = pick;
    }
    free(buf);
    return rc;
}
