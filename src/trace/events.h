/* dissect trace events: the cheap records a worker keeps for every kernel call and collective
 * (trace.level "op"), every module (trace.level "module"), and every step span (all levels).
 *
 * A worker appends to a local dx_event_buf; the coordinator gathers the buffers over MPI every few
 * steps and appends them to the HDF5 trace (/events). Times are nanoseconds on the recording
 * rank's CLOCK_MONOTONIC converted to rank 0's clock by the offset measured at start-up, minus the
 * run's start time (so events start near 0). The enums are stored as HDF5 enum types, so their
 * names below are the names users see in h5dump, h5py and `dissect report`.
 */
#ifndef DX_EVENTS_H
#define DX_EVENTS_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    DX_PH_FORWARD = 0,
    DX_PH_BACKWARD,
    DX_PH_OPTIMIZER,
    DX_PH_STEP, /* the whole step's span on a rank (op = step) */
    DX_PH_EVAL,
    DX_PH_RECOMPUTE, /* activations recomputed in backward (activation recomputation) */
    DX_PH_COUNT
} dx_phase;

typedef enum {
    DX_MOD_EMBEDDING = 0,
    DX_MOD_ATTENTION,
    DX_MOD_MLP,
    DX_MOD_RMSNORM,   /* the final norm (per-layer norms belong to attention / mlp) */
    DX_MOD_LM_HEAD,
    DX_MOD_LOSS,
    DX_MOD_OPTIMIZER,
    DX_MOD_LAYER,     /* a whole decoder layer's parameter group (ZeRO collectives) */
    DX_MOD_DATA,      /* batch loading and copies to the device */
    DX_MOD_STEP,      /* the step span */
    DX_MOD_PIPELINE,  /* point-to-point transfers between pipeline stages */
    DX_MOD_COUNT
} dx_module;

typedef enum {
    DX_OP_GEMM = 0,
    DX_OP_ATTENTION,
    DX_OP_RMSNORM,
    DX_OP_ROPE,
    DX_OP_SWIGLU,
    DX_OP_CROSS_ENTROPY,
    DX_OP_ADAMW,
    DX_OP_ALL_REDUCE,
    DX_OP_REDUCE_SCATTER,
    DX_OP_ALL_GATHER,
    DX_OP_BROADCAST,
    DX_OP_SEND,
    DX_OP_RECV,
    DX_OP_MEMCPY,
    DX_OP_EMBEDDING,
    DX_OP_ADD,
    DX_OP_MEMSET,
    DX_OP_GRAD_NORM,  /* sum of squares for the global gradient norm */
    DX_OP_MODULE,     /* a module-level span (trace.level "module") */
    DX_OP_STEP,       /* the step span */
    DX_OP_MEMCPY_D2H, /* optimizer offload: gradient chunk device -> host (stream "copy") */
    DX_OP_MEMCPY_H2D, /* optimizer offload: updated parameters host -> device (stream "copy") */
    DX_OP_LORA_GEMM,  /* a LoRA adapter's GEMM (x A^T, t B^T and their gradients) */
    DX_OP_DEQUANTIZE, /* QLoRA: a frozen layer's NF4 weights dequantized before its use */
    DX_OP_ADAMW_REDO, /* optimizer offload: a speculative host AdamW undone and redone (stream "host") */
    DX_OP_COUNT
} dx_op;

/* Streams: on CPU everything runs on the host thread (compute); on GPU, compute and
 * communication kernels run on separate streams; "copy" is the device <-> host copies of CPU
 * offload (their own copy streams), "host" the host thread's own work (data, host AdamW),
 * "optimizer" the GPU AdamW updates that run beside the next forward (the backend's side
 * stream; zero.h, dx_zero_step), "aux" the RMSNorm backward that runs on a few SMs beside a
 * weight-gradient GEMM (the backend's overlap stream; kernels.h overlap_begin). */
typedef enum {
    DX_STREAM_COMPUTE = 0,
    DX_STREAM_COMM,
    DX_STREAM_HOST,
    DX_STREAM_COPY,
    DX_STREAM_OPTIMIZER,
    DX_STREAM_AUX,
    DX_STREAM_COUNT
} dx_stream;

/* The process group a collective or transfer ran on (field "group" of /events, since
 * 2026-11-29): none (not a collective: kernels, copies, spans), the whole job (world: the loss's
 * and the gradient norm's scalars), the rank's DP, TP or PP group. */
typedef enum {
    DX_GROUP_NONE = 0,
    DX_GROUP_WORLD,
    DX_GROUP_DP,
    DX_GROUP_TP,
    DX_GROUP_PP,
    DX_GROUP_COUNT
} dx_group_kind;

extern const char *const dx_phase_names[DX_PH_COUNT];
extern const char *const dx_module_names[DX_MOD_COUNT];
extern const char *const dx_op_names[DX_OP_COUNT];
extern const char *const dx_stream_names[DX_STREAM_COUNT];
extern const char *const dx_group_names[DX_GROUP_COUNT];

/* One event. 64 bytes, no padding holes but the 3 bytes after group (stored as an HDF5 compound
 * with these field names, packed: pad is not stored). */
typedef struct {
    int64_t start_ns; /* rank 0 clock, ns since the run's start */
    int64_t end_ns;
    int64_t bytes;    /* bytes read + written by the op (collectives: bytes sent by this rank) */
    int64_t flops;    /* floating-point operations (0 where not meaningful) */
    int32_t rank;
    int32_t step;     /* 1-based training step; 0 for events outside steps */
    int16_t micro;    /* micro-batch index within the step (-1: not in a micro-batch) */
    int16_t layer;    /* decoder layer index (-1: not a layer) */
    uint8_t phase, module, op, stream;
    int16_t pp, dp, tp; /* the rank's coordinates in the PP x DP x TP grid */
    uint8_t pad[6];     /* pad[0]: the tracer's pending-mark flag (never set in files) */
    uint8_t group;      /* dx_group_kind: the process group of a collective or transfer */
} dx_event;

typedef struct {
    dx_event *ev;
    size_t n, cap;
} dx_event_buf;

/* Appends one event (grows the buffer; returns -1 + dx_fail on out of memory). */
int dx_event_push(dx_event_buf *b, const dx_event *e);
void dx_event_buf_free(dx_event_buf *b);

#endif
