/* dissect trace file: the coordinator's HDF5 writer (rank 0 only).
 *
 * Layout of a trace file (all names stable; units in attribute or field names):
 *   /                       attributes: format = "dissect-trace", format_version = 1,
 *                           dissect_version, world_size, created_unix_ns
 *   /metadata               attributes: config_json (the resolved config), mpi_version,
 *                           hdf5_version, blas, device, trace_level, environment (the DX_*,
 *                           NCCL_* and OMP_* variables rank 0 ran with, "NAME=value" lines)
 *   /metadata               grid attributes: tensor_model_parallel_size,
 *                           pipeline_model_parallel_size, data_parallel_size (int32),
 *                           sequence_parallel (int32 0/1), pipeline_schedule (string),
 *                           num_model_chunks (per pipeline rank), num_micro_batches (per step),
 *                           pipeline_bubble_theory (f64: the schedule's (p-1)/(v m + p-1))
 *   /metadata/grid          int32 dataset [world_size, 3]: (pp, dp, tp) of each rank
 *   /metadata/plan_bytes    int64 dataset [world_size, 7]: the memory plan of each rank (src/plan:
 *                           params, grads, optimizer states, activations, other, peak on the
 *                           compute device, host bytes of offloaded optimizer states), beside
 *                           the measured /steps peak_mem_bytes
 *   /metadata/hosts         string dataset [world_size]: host name of each rank
 *   /metadata/device_names  string dataset [world_size]: each rank's compute device as its
 *                           backend names it (dx_backend.device_name: "NVIDIA H100 80GB HBM3",
 *                           a CPU's model name); absent in traces of dissect before 2026-11-26
 *   /metadata/device_peak_tflops  f64 dataset [world_size]: each rank's device's dense bf16
 *                           peak in TFLOP/s (dx_peak_tflops; 0 = unknown), for MFU
 *   /metadata/clock_offset_ns  int64 dataset [world_size] (dx_trace_set_clock_offsets): the
 *                           offset added to each rank's clock to get rank 0's
 *   /steps                  extendible chunked compound dataset, one row per step:
 *       step (int64), loss (f64, mean over the global batch), grad_norm (f64, before clipping),
 *       lr (f64), tokens (int64, global tokens this step), step_time_s (f64, rank 0's wall time),
 *       tokens_per_s (f64), val_loss (f64, NaN when not evaluated this step),
 *       forward_s, backward_s, optimizer_s, comm_s (f64[world_size]: per-rank times; NaN = n/a;
 *       dx_step_stats in worker/worker.h: comm_s is the host time of the DP / ZeRO collectives,
 *       left out of the other three where those are host-timed, e.g. on the CPU; since
 *       2026-11-29: before, host-timed forward_s / backward_s included the collectives called
 *       in them, ZeRO-2/3's hooks and the reduction started in the last backward),
 *       energy_j (f64[world_size]: each rank's device's energy over the step, J: the difference
 *       of NVML's energy counter between the step's start and end, as sampled every 20 ms by a
 *       helper thread, so each end is up to ~25 ms late; NaN = not recorded: a CPU, no NVML, or
 *       a trace before 2026-11-28, which lacks the field), power_capped_s (f64[world_size]: the
 *       part of the step, s, in which the power limit held that device's clocks down, NVML's
 *       power violation time, sampled alike; NaN as energy_j),
 *       peak_mem_bytes (int64[world_size]: per-rank allocator high-water mark),
 *       params_bytes, grads_bytes, optim_bytes, activations_bytes (int64[world_size]: allocator
 *       bytes held per category at the end of the step; -1 = not recorded),
 *       host_peak_bytes (int64[world_size]: each rank's host resident-set high-water mark since
 *       its start, getrusage ru_maxrss: offloaded optimizer states, staging and every other
 *       host allocation in use; -1 = not recorded)
 *   /events                 (only once dx_trace_append_events was called) extendible compound
 *                           dataset, chunked 16384 rows, shuffle + deflate, one row per
 *                           dx_event (common/events.h) in the order appended:
 *       start_ns, end_ns, bytes, flops (int64), rank, step (int32), micro, layer (int16),
 *       phase, module, op, stream (HDF5 enums over uint8 named by dx_phase_names,
 *       dx_module_names, dx_op_names, dx_stream_names; the values are the C enum values),
 *       pp, dp, tp (int16: the recording rank's grid coordinates), group (HDF5 enum over uint8
 *       named by dx_group_names: the process group of a collective or transfer, "none" for
 *       everything else; absent in traces before 2026-11-29)
 */
#ifndef DX_TRACE_H
#define DX_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "trace/events.h"

typedef struct dx_trace_writer dx_trace_writer;

/* One /steps row. Arrays have world_size entries (owned by the caller). */
typedef struct {
    int64_t step;
    double loss, grad_norm, lr;
    int64_t tokens;
    double step_time_s, tokens_per_s, val_loss;
    const double *forward_s, *backward_s, *optimizer_s, *comm_s;
    /* the device's energy over the step (J) and the time in it its clocks were held down by the
     * power limit (s), per rank; NULL -> stored as NaN (not recorded) */
    const double *energy_j, *power_capped_s;
    const int64_t *peak_mem_bytes;
    /* allocator bytes held at the end of the step, per category (NULL -> stored as -1) */
    const int64_t *params_bytes, *grads_bytes, *optim_bytes, *activations_bytes;
    const int64_t *host_peak_bytes; /* host resident-set high-water mark (NULL -> -1) */
} dx_step_row;

typedef struct {
    const char *config_json;
    int world_size;
    const char *const *hosts; /* world_size host names */
    const char *device;
    const char *const *device_names; /* world_size device models (NULL: not written) */
    const double *device_peak_tflops; /* world_size peaks in TFLOP/s, 0 = unknown (NULL: not written) */
    const char *trace_level;
    /* the process grid */
    int tp, pp, dp, sequence_parallel, num_model_chunks, num_micro_batches;
    const char *pipeline_schedule;
    double pipeline_bubble_theory;
    const int32_t *grid; /* [world_size][3]: (pp, dp, tp) of each rank */
    const int64_t *plan; /* [world_size][7]: the memory plan (NULL: not written) */
} dx_trace_meta;

/* Creates (truncates) the trace file at `path` and writes the metadata; rows are flushed by
 * dx_trace_flush so a crashed run's file still holds the steps flushed so far.
 * Returns NULL + dx_fail naming the path if it cannot be created. */
dx_trace_writer *dx_trace_create(const char *path, const dx_trace_meta *meta);
/* Appends one /steps row. */
int dx_trace_append_step(dx_trace_writer *w, const dx_step_row *row);
/* Appends n events to /events (created on the first call, even with n == 0), in the order
 * given. Events are buffered and written in whole chunks; dx_trace_flush / dx_trace_close write
 * the rest. Rows are stored as given (no sorting, no validation of ranks or steps). */
int dx_trace_append_events(dx_trace_writer *w, const dx_event *ev, size_t n);
/* Writes /metadata/clock_offset_ns[world] (world must equal the trace's world_size; a second
 * call overwrites the values). */
int dx_trace_set_clock_offsets(dx_trace_writer *w, const int64_t *offset_ns, int world);
/* Flushes to disk (called every few steps). */
int dx_trace_flush(dx_trace_writer *w);
/* Flushes and closes (NULL is a no-op). Returns -1 + dx_fail on I/O errors. */
int dx_trace_close(dx_trace_writer *w);

#endif
