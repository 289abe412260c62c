/* dissect trace file writer (HDF5 C API, serial access; rank 0 only). Layout: see trace.h.
 *
 * Strings (attributes and /metadata/hosts) are variable-length UTF-8, which h5py reads as str
 * (attributes) or via .asstr() (datasets). /steps is a 1-D compound dataset, extendible
 * (H5S_UNLIMITED), chunked 64 rows, shuffle + deflate. Rows are buffered in memory and written
 * by dx_trace_flush (or when 64 are pending), followed by H5Fflush, so a crashed run's file
 * holds every flushed step. NULL per-rank arrays in a row are stored as NaN (times) and -1
 * (byte counts).
 *
 * /events (dx_trace_append_events) is created on first use: a 1-D packed compound (48 bytes a
 * row; the in-memory dx_event carries padding), chunked EVENTS_CHUNK rows, shuffle +
 * deflate. The four uint8 fields are HDF5 enum types named from common/events.c. Events are
 * buffered up to one chunk and written whole chunks at a time, the rest at flush/close.
 */
#include "trace.h"

#include "common/common.h"
#include "trace/h5util.h"

#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <mpi.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DX_TRACE_FORMAT_VERSION 1
#define STEPS_CHUNK 64
#define EVENTS_CHUNK 16384
#define N_PER_RANK 12

/* OpenBLAS's configuration string; weak so that linking against another BLAS still works.
 * (With --as-needed, a binary that links -lopenblas but calls no BLAS routine does not load it,
 * and the attribute then says "unknown (not OpenBLAS)".) */
#if defined(__GNUC__)
char *openblas_get_config(void) __attribute__((weak));
#else
char *openblas_get_config(void);
#endif

struct dx_trace_writer {
    char *path;
    int world;
    hid_t file, steps;
    hid_t mem_type, file_type;
    size_t row_bytes;
    hsize_t rows_written;
    unsigned char *pending; /* STEPS_CHUNK rows */
    size_t n_pending;
    /* /events: created by the first dx_trace_append_events */
    hid_t events, ev_mem_type, ev_file_type;
    hsize_t events_written;
    dx_event *ev_pending; /* EVENTS_CHUNK events */
    size_t n_ev_pending;
};

/* Row memory layout: all members 8 bytes wide, so a packed layout is also naturally aligned. */
enum {
    OFF_STEP = 0,
    OFF_LOSS = 8,
    OFF_GRAD_NORM = 16,
    OFF_LR = 24,
    OFF_TOKENS = 32,
    OFF_STEP_TIME = 40,
    OFF_TOKENS_PER_S = 48,
    OFF_VAL_LOSS = 56,
    OFF_PER_RANK = 64, /* per_rank_names[k] at OFF_PER_RANK + k * 8 * world */
};

/* the first 4 are f64 arrays, the rest int64 arrays */
#define N_PER_RANK_F64 6
static const char *const per_rank_names[N_PER_RANK] = {
    "forward_s",      "backward_s",   "optimizer_s", "comm_s",           "energy_j",
    "power_capped_s", "peak_mem_bytes", "params_bytes", "grads_bytes",   "optim_bytes",
    "activations_bytes", "host_peak_bytes"};

/* ------------------------------------------------------------------------------------------ */

/* Is environment entry e ("NAME=value") a switch a trace records: dissect's own DX_* (tuning and
 * fallbacks, e.g. DX_CUDA_ATT_FWD, DX_NCCL_CE_ALLGATHER), NCCL_* or OMP_*? */
static int is_switch(const char *e)
{
    return !strncmp(e, "DX_", 3) || !strncmp(e, "NCCL_", 5) || !strncmp(e, "OMP_", 4);
}

/* The environment switches rank 0 ran with (is_switch), one "NAME=value" per line, so a trace
 * says how it was made. Returns a malloc'd string ("" when none is set), NULL when out of memory. */
static char *switch_environment(void)
{
    size_t len = 1;
    for (char **e = environ; e && *e; e++)
        if (is_switch(*e)) len += strlen(*e) + 1;
    char *out = malloc(len), *at = out;
    if (!out) return NULL;
    *at = 0;
    for (char **e = environ; e && *e; e++)
        if (is_switch(*e)) at += sprintf(at, "%s%s", at == out ? "" : "\n", *e);
    return out;
}

/* A string dataset [world] named `name` in `group` (NULL entries written as ""). */
static int write_rank_strings(hid_t group, const char *name, int world, const char *const *strs)
{
    const char **v = malloc((size_t)world * sizeof *v);
    if (!v) return -1;
    for (int i = 0; i < world; i++) v[i] = (strs && strs[i]) ? strs[i] : "";
    hsize_t dims[1] = {(hsize_t)world};
    hid_t t = dx_h5_vlen_str_type();
    hid_t sp = H5Screate_simple(1, dims, NULL);
    hid_t d = (t >= 0 && sp >= 0)
                  ? H5Dcreate2(group, name, t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)
                  : -1;
    int rc = (d >= 0 && H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0) ? 0 : -1;
    if (d >= 0) H5Dclose(d);
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    free(v);
    return rc;
}

/* An f64 dataset [world] named `name` in `group`. */
static int write_rank_f64(hid_t group, const char *name, int world, const double *vals)
{
    hsize_t dims[1] = {(hsize_t)world};
    hid_t sp = H5Screate_simple(1, dims, NULL);
    hid_t d = sp >= 0 ? H5Dcreate2(group, name, H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) : -1;
    int rc = (d >= 0 && H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, vals) >= 0) ? 0 : -1;
    if (d >= 0) H5Dclose(d);
    if (sp >= 0) H5Sclose(sp);
    return rc;
}

/* The /steps compound type: native (memory) or little-endian standard (file). */
static hid_t steps_type(int world, int file)
{
    hid_t i64 = file ? H5T_STD_I64LE : H5T_NATIVE_INT64;
    hid_t f64 = file ? H5T_IEEE_F64LE : H5T_NATIVE_DOUBLE;
    hsize_t n = (hsize_t)world;
    size_t size = OFF_PER_RANK + N_PER_RANK * 8 * (size_t)world;
    hid_t t = H5Tcreate(H5T_COMPOUND, size);
    if (t < 0) return -1;
    hid_t arr_f64 = H5Tarray_create2(f64, 1, &n);
    hid_t arr_i64 = H5Tarray_create2(i64, 1, &n);
    int ok = arr_f64 >= 0 && arr_i64 >= 0;
    ok = ok && H5Tinsert(t, "step", OFF_STEP, i64) >= 0;
    ok = ok && H5Tinsert(t, "loss", OFF_LOSS, f64) >= 0;
    ok = ok && H5Tinsert(t, "grad_norm", OFF_GRAD_NORM, f64) >= 0;
    ok = ok && H5Tinsert(t, "lr", OFF_LR, f64) >= 0;
    ok = ok && H5Tinsert(t, "tokens", OFF_TOKENS, i64) >= 0;
    ok = ok && H5Tinsert(t, "step_time_s", OFF_STEP_TIME, f64) >= 0;
    ok = ok && H5Tinsert(t, "tokens_per_s", OFF_TOKENS_PER_S, f64) >= 0;
    ok = ok && H5Tinsert(t, "val_loss", OFF_VAL_LOSS, f64) >= 0;
    for (int k = 0; ok && k < N_PER_RANK; k++)
        ok = H5Tinsert(t, per_rank_names[k], OFF_PER_RANK + (size_t)k * 8 * (size_t)world,
                       k < N_PER_RANK_F64 ? arr_f64 : arr_i64) >= 0;
    if (arr_f64 >= 0) H5Tclose(arr_f64);
    if (arr_i64 >= 0) H5Tclose(arr_i64);
    if (!ok) {
        H5Tclose(t);
        return -1;
    }
    return t;
}

/* An empty, extendible 1-D dataset `name` of file_type rows, chunks of `chunk` rows, deflated
 * (with shuffle) when the deflate filter is available. -1 on error. */
static hid_t create_rows(hid_t file, const char *name, hid_t file_type, hsize_t chunk_rows)
{
    hsize_t dims[1] = {0}, maxdims[1] = {H5S_UNLIMITED}, chunk[1] = {chunk_rows};
    hid_t sp = H5Screate_simple(1, dims, maxdims);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t d = -1;
    if (sp >= 0 && dcpl >= 0 && H5Pset_chunk(dcpl, 1, chunk) >= 0) {
        if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0) {
            H5Pset_shuffle(dcpl);
            H5Pset_deflate(dcpl, 4);
        }
        d = H5Dcreate2(file, name, file_type, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    }
    if (dcpl >= 0) H5Pclose(dcpl);
    if (sp >= 0) H5Sclose(sp);
    return d;
}

static void library_versions(char *mpi, size_t mpi_cap, char *hdf5, size_t hdf5_cap, char *blas,
                             size_t blas_cap)
{
    char buf[MPI_MAX_LIBRARY_VERSION_STRING + 1];
    int len = 0;
    if (MPI_Get_library_version(buf, &len) == MPI_SUCCESS) {
        if (len < 0) len = 0;
        if (len > MPI_MAX_LIBRARY_VERSION_STRING) len = MPI_MAX_LIBRARY_VERSION_STRING;
        buf[len] = 0;
        while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == ' ' || buf[len - 1] == '\0'))
            buf[--len] = 0;
        snprintf(mpi, mpi_cap, "%s", buf);
    } else {
        snprintf(mpi, mpi_cap, "unknown");
    }
    unsigned maj = 0, min = 0, rel = 0;
    if (H5get_libversion(&maj, &min, &rel) >= 0)
        snprintf(hdf5, hdf5_cap, "%u.%u.%u", maj, min, rel);
    else
        snprintf(hdf5, hdf5_cap, "unknown");
    const char *cfg = openblas_get_config ? openblas_get_config() : NULL;
    if (cfg) {
        /* the string normally starts with "OpenBLAS 0.3.x ..." already */
        snprintf(blas, blas_cap, "%s%s", strncmp(cfg, "OpenBLAS", 8) == 0 ? "" : "OpenBLAS ", cfg);
        size_t n = strlen(blas);
        while (n > 0 && (blas[n - 1] == ' ' || blas[n - 1] == '\n')) blas[--n] = 0;
    } else {
        snprintf(blas, blas_cap, "unknown (not OpenBLAS)");
    }
}

static void close_handles(dx_trace_writer *w)
{
    if (w->steps >= 0) H5Dclose(w->steps);
    if (w->events >= 0) H5Dclose(w->events);
    if (w->mem_type >= 0) H5Tclose(w->mem_type);
    if (w->file_type >= 0) H5Tclose(w->file_type);
    if (w->ev_mem_type >= 0) H5Tclose(w->ev_mem_type);
    if (w->ev_file_type >= 0) H5Tclose(w->ev_file_type);
    if (w->file >= 0) H5Fclose(w->file);
    w->steps = w->events = w->mem_type = w->file_type = w->file = -1;
    w->ev_mem_type = w->ev_file_type = -1;
}

static void free_writer(dx_trace_writer *w)
{
    free(w->ev_pending);
    free(w->pending);
    free(w->path);
    free(w);
}

dx_trace_writer *dx_trace_create(const char *path, const dx_trace_meta *meta)
{
    if (!path || !*path) {
        dx_fail("trace file: empty path");
        return NULL;
    }
    if (!meta || meta->world_size < 1) {
        dx_fail("trace file '%s': world_size must be >= 1", path);
        return NULL;
    }
    /* Our messages replace HDF5's automatic error stack printing. */
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);

    dx_trace_writer *w = calloc(1, sizeof *w);
    if (!w) {
        dx_fail("trace file '%s': out of memory", path);
        return NULL;
    }
    w->file = w->steps = w->mem_type = w->file_type = -1;
    w->events = w->ev_mem_type = w->ev_file_type = -1;
    w->world = meta->world_size;
    w->path = dx_strdup(path);
    w->row_bytes = OFF_PER_RANK + N_PER_RANK * 8 * (size_t)w->world;
    w->pending = malloc(STEPS_CHUNK * w->row_bytes);
    if (!w->path || !w->pending) {
        free_writer(w);
        dx_fail("trace file '%s': out of memory", path);
        return NULL;
    }

    errno = 0;
    w->file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (w->file < 0) {
        int e = errno;
        free_writer(w);
        if (e)
            dx_fail("trace file '%s': cannot create: %s", path, strerror(e));
        else
            dx_fail("trace file '%s': cannot create", path);
        return NULL;
    }

    const char *what = "root attributes";
    int ok = dx_h5_write_str_attr(w->file, "format", "dissect-trace") == 0 &&
             dx_h5_write_scalar_attr(w->file, "format_version", H5T_STD_I32LE, H5T_NATIVE_INT32, &(int32_t){DX_TRACE_FORMAT_VERSION}) == 0 &&
             dx_h5_write_str_attr(w->file, "dissect_version", DX_VERSION) == 0 &&
             dx_h5_write_scalar_attr(w->file, "world_size", H5T_STD_I32LE, H5T_NATIVE_INT32, &(int32_t){w->world}) == 0 &&
             dx_h5_write_i64_attr(w->file, "created_unix_ns", (int64_t)dx_wall_ns()) == 0;
    if (ok) {
        what = "/metadata";
        char mpi[MPI_MAX_LIBRARY_VERSION_STRING + 1], hdf5[64], blas[512];
        library_versions(mpi, sizeof mpi, hdf5, sizeof hdf5, blas, sizeof blas);
        hid_t g = H5Gcreate2(w->file, "metadata", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        ok = g >= 0 && dx_h5_write_str_attr(g, "config_json", meta->config_json) == 0 &&
             dx_h5_write_str_attr(g, "mpi_version", mpi) == 0 &&
             dx_h5_write_str_attr(g, "hdf5_version", hdf5) == 0 &&
             dx_h5_write_str_attr(g, "blas", blas) == 0 &&
             dx_h5_write_str_attr(g, "device", meta->device) == 0 &&
             dx_h5_write_str_attr(g, "trace_level", meta->trace_level) == 0;
        if (ok) {
            char *env = switch_environment();
            ok = env && dx_h5_write_str_attr(g, "environment", env) == 0;
            free(env);
        }
        if (ok) {
            what = "/metadata/hosts";
            ok = write_rank_strings(g, "hosts", w->world, meta->hosts) == 0;
        }
        if (ok && meta->device_names) {
            what = "/metadata/device_names";
            ok = write_rank_strings(g, "device_names", w->world, meta->device_names) == 0;
        }
        if (ok && meta->device_peak_tflops) {
            what = "/metadata/device_peak_tflops";
            ok = write_rank_f64(g, "device_peak_tflops", w->world, meta->device_peak_tflops) == 0;
        }
        if (ok) {
            what = "/metadata grid";
            int32_t sizes[6] = {meta->tp ? meta->tp : 1, meta->pp ? meta->pp : 1,
                                meta->dp ? meta->dp : w->world, meta->sequence_parallel,
                                meta->num_model_chunks ? meta->num_model_chunks : 1,
                                meta->num_micro_batches};
            const char *names[6] = {"tensor_model_parallel_size", "pipeline_model_parallel_size",
                                    "data_parallel_size", "sequence_parallel", "num_model_chunks",
                                    "num_micro_batches"};
            for (int i = 0; ok && i < 6; i++)
                ok = dx_h5_write_scalar_attr(g, names[i], H5T_STD_I32LE, H5T_NATIVE_INT32, &sizes[i]) == 0;
            ok = ok && dx_h5_write_str_attr(g, "pipeline_schedule",
                                            meta->pipeline_schedule ? meta->pipeline_schedule : "none") == 0;
            ok = ok && dx_h5_write_scalar_attr(g, "pipeline_bubble_theory", H5T_IEEE_F64LE,
                                               H5T_NATIVE_DOUBLE, &meta->pipeline_bubble_theory) == 0;
            if (ok) {
                hsize_t dims[2] = {(hsize_t)w->world, 3};
                int32_t *gv = calloc((size_t)w->world * 3, sizeof *gv);
                for (int r = 0; gv && r < w->world; r++) {
                    if (meta->grid) memcpy(gv + 3 * r, meta->grid + 3 * r, 3 * sizeof *gv);
                    else gv[3 * r + 1] = r; /* a DP-only job */
                }
                hid_t sp = H5Screate_simple(2, dims, NULL);
                hid_t d = gv && sp >= 0 ? H5Dcreate2(g, "grid", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) : -1;
                ok = d >= 0 && H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, gv) >= 0;
                if (d >= 0) H5Dclose(d);
                if (sp >= 0) H5Sclose(sp);
                free(gv);
            }
            if (ok && meta->plan) {
                what = "/metadata/plan_bytes";
                hsize_t dims[2] = {(hsize_t)w->world, 7};
                hid_t sp = H5Screate_simple(2, dims, NULL);
                hid_t d = sp >= 0 ? H5Dcreate2(g, "plan_bytes", H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) : -1;
                ok = d >= 0 && H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, meta->plan) >= 0;
                if (d >= 0) H5Dclose(d);
                if (sp >= 0) H5Sclose(sp);
            }
        }
        if (g >= 0) H5Gclose(g);
    }
    if (ok) {
        what = "/steps";
        w->mem_type = steps_type(w->world, 0);
        w->file_type = steps_type(w->world, 1);
        ok = w->mem_type >= 0 && w->file_type >= 0 &&
             (w->steps = create_rows(w->file, "steps", w->file_type, STEPS_CHUNK)) >= 0;
    }
    if (ok) {
        what = "flush";
        ok = H5Fflush(w->file, H5F_SCOPE_LOCAL) >= 0;
    }
    if (!ok) {
        close_handles(w);
        free_writer(w);
        dx_fail("trace file '%s': cannot write %s", path, what);
        return NULL;
    }
    return w;
}

/* Appends n rows (memory type mt) at the end of the extendible 1-D dataset d, whose current
 * length is *written; name is for messages. */
static int append_rows(dx_trace_writer *w, hid_t d, hid_t mt, const void *rows, size_t n,
                       hsize_t *written, const char *name)
{
    if (n == 0) return 0;
    hsize_t start[1] = {*written}, count[1] = {(hsize_t)n}, newsize[1] = {*written + n};
    int ok = H5Dset_extent(d, newsize) >= 0;
    hid_t fs = ok ? H5Dget_space(d) : -1;
    hid_t ms = ok ? H5Screate_simple(1, count, NULL) : -1;
    ok = ok && fs >= 0 && ms >= 0 &&
         H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) >= 0 &&
         H5Dwrite(d, mt, ms, fs, H5P_DEFAULT, rows) >= 0;
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (!ok)
        return dx_fail("trace file '%s': cannot write %s rows %llu..%llu", w->path, name,
                       (unsigned long long)*written, (unsigned long long)(*written + n - 1));
    *written += n;
    return 0;
}

/* Writes the pending rows at the end of /steps. */
static int write_pending(dx_trace_writer *w)
{
    if (append_rows(w, w->steps, w->mem_type, w->pending, w->n_pending, &w->rows_written, "/steps"))
        return -1;
    w->n_pending = 0;
    return 0;
}

static void put_f64(unsigned char *row, size_t off, double v) { memcpy(row + off, &v, 8); }
static void put_i64(unsigned char *row, size_t off, int64_t v) { memcpy(row + off, &v, 8); }

int dx_trace_append_step(dx_trace_writer *w, const dx_step_row *r)
{
    if (!w || !r) return dx_fail("trace: append to a NULL writer or row");
    if (w->file < 0) return dx_fail("trace file '%s': already closed", w->path);
    if (w->n_pending == STEPS_CHUNK && write_pending(w) < 0) return -1;
    unsigned char *row = w->pending + w->n_pending * w->row_bytes;
    put_i64(row, OFF_STEP, r->step);
    put_f64(row, OFF_LOSS, r->loss);
    put_f64(row, OFF_GRAD_NORM, r->grad_norm);
    put_f64(row, OFF_LR, r->lr);
    put_i64(row, OFF_TOKENS, r->tokens);
    put_f64(row, OFF_STEP_TIME, r->step_time_s);
    put_f64(row, OFF_TOKENS_PER_S, r->tokens_per_s);
    put_f64(row, OFF_VAL_LOSS, r->val_loss);
    const double *per_rank[N_PER_RANK_F64] = {r->forward_s, r->backward_s, r->optimizer_s, r->comm_s,
                                              r->energy_j,  r->power_capped_s};
    const int64_t *per_rank_i64[N_PER_RANK - N_PER_RANK_F64] = {
        r->peak_mem_bytes, r->params_bytes, r->grads_bytes, r->optim_bytes, r->activations_bytes,
        r->host_peak_bytes};
    size_t W = (size_t)w->world;
    for (int k = 0; k < N_PER_RANK_F64; k++)
        for (size_t i = 0; i < W; i++) /* missing arrays are recorded as NaN */
            put_f64(row, OFF_PER_RANK + ((size_t)k * W + i) * 8, per_rank[k] ? per_rank[k][i] : NAN);
    for (int k = N_PER_RANK_F64; k < N_PER_RANK; k++) {
        const int64_t *v = per_rank_i64[k - N_PER_RANK_F64];
        for (size_t i = 0; i < W; i++) /* missing arrays are recorded as -1 */
            put_i64(row, OFF_PER_RANK + ((size_t)k * W + i) * 8, v ? v[i] : -1);
    }
    w->n_pending++;
    return 0;
}

/* Writes the pending events at the end of /events. */
static int write_pending_events(dx_trace_writer *w)
{
    if (w->events < 0) return 0;
    if (append_rows(w, w->events, w->ev_mem_type, w->ev_pending, w->n_ev_pending,
                    &w->events_written, "/events"))
        return -1;
    w->n_ev_pending = 0;
    return 0;
}

int dx_trace_append_events(dx_trace_writer *w, const dx_event *ev, size_t n)
{
    if (!w) return dx_fail("trace: append events to a NULL writer");
    if (w->file < 0) return dx_fail("trace file '%s': already closed", w->path);
    if (n > 0 && !ev) return dx_fail("trace file '%s': NULL events (n = %zu)", w->path, n);
    if (w->events < 0) {
        if (!w->ev_pending && !(w->ev_pending = malloc(EVENTS_CHUNK * sizeof *w->ev_pending)))
            return dx_fail("trace file '%s': out of memory for the /events buffer", w->path);
        if (w->ev_mem_type < 0) w->ev_mem_type = dx_h5_event_type(0);
        if (w->ev_file_type < 0) w->ev_file_type = dx_h5_event_type(1);
        if (w->ev_mem_type < 0 || w->ev_file_type < 0 ||
            (w->events = create_rows(w->file, "events", w->ev_file_type, EVENTS_CHUNK)) < 0)
            return dx_fail("trace file '%s': cannot create /events", w->path);
    }
    while (n > 0) {
        size_t k = EVENTS_CHUNK - w->n_ev_pending;
        if (k > n) k = n;
        memcpy(w->ev_pending + w->n_ev_pending, ev, k * sizeof *ev);
        w->n_ev_pending += k;
        ev += k;
        n -= k;
        if (w->n_ev_pending == EVENTS_CHUNK && write_pending_events(w) < 0) return -1;
    }
    return 0;
}

int dx_trace_set_clock_offsets(dx_trace_writer *w, const int64_t *offset_ns, int world)
{
    if (!w) return dx_fail("trace: clock offsets for a NULL writer");
    if (w->file < 0) return dx_fail("trace file '%s': already closed", w->path);
    if (!offset_ns || world != w->world)
        return dx_fail("trace file '%s': /metadata/clock_offset_ns needs %d offsets (got %d%s)",
                       w->path, w->world, world, offset_ns ? "" : ", NULL");
    hsize_t dims[1] = {(hsize_t)world};
    hid_t g = H5Gopen2(w->file, "metadata", H5P_DEFAULT);
    hid_t d = -1;
    if (g >= 0) {
        htri_t exists = H5Lexists(g, "clock_offset_ns", H5P_DEFAULT);
        if (exists > 0) {
            d = H5Dopen2(g, "clock_offset_ns", H5P_DEFAULT);
        } else if (exists == 0) {
            hid_t sp = H5Screate_simple(1, dims, NULL);
            if (sp >= 0)
                d = H5Dcreate2(g, "clock_offset_ns", H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT,
                               H5P_DEFAULT);
            if (sp >= 0) H5Sclose(sp);
        }
    }
    int ok = d >= 0 && H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, offset_ns) >= 0;
    if (d >= 0) H5Dclose(d);
    if (g >= 0) H5Gclose(g);
    if (!ok) return dx_fail("trace file '%s': cannot write /metadata/clock_offset_ns", w->path);
    return 0;
}

int dx_trace_flush(dx_trace_writer *w)
{
    if (!w) return 0;
    if (w->file < 0) return dx_fail("trace file '%s': already closed", w->path);
    if (write_pending(w) < 0) return -1;
    if (write_pending_events(w) < 0) return -1;
    if (H5Fflush(w->file, H5F_SCOPE_LOCAL) < 0)
        return dx_fail("trace file '%s': cannot flush", w->path);
    return 0;
}

int dx_trace_close(dx_trace_writer *w)
{
    if (!w) return 0;
    int rc = 0;
    if (w->file >= 0) {
        rc = dx_trace_flush(w);
        int data_rc = 0;
        if (w->steps >= 0 && H5Dclose(w->steps) < 0) data_rc = -1;
        if (w->events >= 0 && H5Dclose(w->events) < 0) data_rc = -1;
        w->steps = w->events = -1;
        hid_t file = w->file;
        w->file = -1;
        close_handles(w);
        if (H5Fclose(file) < 0 || data_rc < 0) {
            if (rc == 0) rc = dx_fail("trace file '%s': error while closing", w->path);
        }
    }
    free_writer(w);
    return rc;
}
