/* dissect report: text summary (and Chrome trace-event JSON) of a dissect HDF5 trace.
 * Usage and definitions: report.h. Layout of the trace: trace.h.
 *
 * Everything is read and computed before the first line is printed, so a file that turns out to
 * be unreadable half-way gives one error line and no partial report.
 */
#include "report.h"

#include "common/common.h"
#include "config/config.h"
#include "trace/h5util.h"
#include "trace/events.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <hdf5.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define READ_CHUNK 65536           /* /events rows per read */
#define MAX_STEP_ROWS_PRINTED 20   /* per-step rows in the breakdown and idle tables */
/* Event times beyond +-2^61 ns (73 years from the run's start) are damage: the differences and
 * sums of times in range never overflow int64. */
#define TIME_LIMIT_NS ((int64_t)1 << 61)

typedef struct {
    const char *path;
    hid_t file;
    int world;
    char trace_level[64];
    char environment[1024]; /* /metadata environment (DX_*, NCCL_*, OMP_* switches; "" = none) */

    /* the process grid (/metadata; traces written before the grid: tp = pp = 1, dp = world,
     * schedule "none", rank r at (0, r, 0)) */
    int has_grid_meta;
    int tp, pp, dp, sequence_parallel, chunks, micro_batches; /* micro_batches <= 0: not recorded */
    char schedule[32];
    double bubble_theory; /* NaN: not recorded */
    int32_t *grid;        /* [world * 3]: (pp, dp, tp) of each rank */
    int ev_has_coords;    /* /events has the pp, dp, tp fields */

    /* /steps (per-rank arrays are [row * world + rank], NULL when the field is absent) */
    size_t n_rows;
    int64_t *step, *tokens;
    double *step_time_s;
    double *fwd, *bwd, *opt, *comm;
    double *energy, *capped; /* /steps energy_j, power_capped_s (NULL: traces before 2026-11-28) */
    int64_t *peak;
    int64_t *host_peak; /* /steps host_peak_bytes (NULL: not recorded, older traces) */

    /* the selected steps (sorted, distinct) and their /steps row (SIZE_MAX: none) */
    int64_t *sel;
    size_t n_sel, *sel_row;
    int64_t range_lo, range_hi;
    int explicit_range, warmup_excluded;

    /* /events */
    int has_events;
    unsigned long long n_events_total, n_invalid;
    dx_event *ev; /* the events of the selected steps, ranks 0..world-1 */
    size_t n_ev, cap_ev;
    int has_ops, has_modules; /* among the selected events; ops = non-collective kernels */
    int has_comm_ops;         /* collectives or pipeline send / recv among them */

    /* model FLOPs per token (/metadata config_json; NaN: not known, flops_why says why) */
    double flops_per_token;
    int64_t flops_params, flops_layers, flops_hidden, flops_seq;
    char flops_why[96];
    double peak_tflops; /* --peak-tflops (0: not given) */
    /* from /metadata/device_peak_tflops and device_names (traces from 2026-11-26 on): the ranks'
     * summed dense bf16 peak (0: absent, or a rank's device has no known peak) and rank 0's device */
    double device_peak_sum;
    char device_name[96];
    int devices_alike; /* every rank's device_names entry equals rank 0's */
} report;

/* Per (step, rank) numbers in ns (from /events). */
typedef struct {
    int has, has_span;
    double span, fwd, bwd, opt, exposed, idle, compute, comm;
    /* pipeline: compute-stream time of forward / backward units (busy), pipeline recv spans
     * (all phases; forward + backward only), send spans, bytes sent */
    double busy, recv, recv_fb, send, send_bytes;
    double rec; /* compute in phase "recompute" (activation recomputation, inside backward) */
    /* optimizer offload: host AdamW, device -> host and host -> device copies (stream "copy"),
     * host time spent waiting for a copy */
    double hadam, d2h, h2d, cwait;
    double hadam_bwd; /* host AdamW inside the backward (early update) */
    double hredo;     /* host AdamW redone (a speculative early update whose norm clipped) */
    int redo_step;    /* the step had a redo */
    double side;      /* GPU AdamW on stream "optimizer" (beside the next forward), unclipped */
    double aux;       /* ops on stream "aux" (RMSNorm's backward beside a weight gradient), */
    size_t aux_n;     /* unclipped, and their count */
} group_stats;

/* ------------------------------------------------------------------------------------------ */
/* small helpers */

static const char *name_of(const char *const *names, int count, unsigned v)
{
    return v < (unsigned)count ? names[v] : "unknown";
}

static int is_collective(unsigned op)
{
    return op == DX_OP_ALL_REDUCE || op == DX_OP_REDUCE_SCATTER || op == DX_OP_ALL_GATHER ||
           op == DX_OP_BROADCAST || op == DX_OP_SEND || op == DX_OP_RECV;
}

static int valid_event(const dx_event *e)
{
    return e->phase < DX_PH_COUNT && e->module < DX_MOD_COUNT && e->op < DX_OP_COUNT &&
           e->stream < DX_STREAM_COUNT && e->group < DX_GROUP_COUNT && e->end_ns >= e->start_ns &&
           e->start_ns >= -TIME_LIMIT_NS && e->end_ns <= TIME_LIMIT_NS;
}

/* A trace of a DP-only job (no tensor or pipeline parallelism): the grid adds nothing. */
static int is_dp_only(const report *r)
{
    return r->pp == 1 && r->tp == 1;
}

static void report_free(report *r)
{
    free(r->step);
    free(r->tokens);
    free(r->step_time_s);
    free(r->fwd);
    free(r->bwd);
    free(r->opt);
    free(r->comm);
    free(r->energy);
    free(r->capped);
    free(r->peak);
    free(r->host_peak);
    free(r->sel);
    free(r->sel_row);
    free(r->ev);
    free(r->grid);
    if (r->file >= 0) H5Fclose(r->file);
    r->file = -1;
}

/* ------------------------------------------------------------------------------------------ */
/* validation and /steps */

/* Reads a string attribute (fixed or variable length) into buf; 1 = absent, -1 = unreadable. */
static int read_str_attr(hid_t obj, const char *name, char *buf, size_t cap)
{
    htri_t ex = H5Aexists(obj, name);
    if (ex == 0) return 1;
    if (ex < 0) return -1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) return -1;
    hid_t ft = H5Aget_type(a);
    int rc = -1;
    if (ft >= 0 && H5Tget_class(ft) == H5T_STRING) {
        if (H5Tis_variable_str(ft) > 0) {
            hid_t mt = H5Tcopy(H5T_C_S1);
            H5Tset_size(mt, H5T_VARIABLE);
            H5Tset_cset(mt, H5Tget_cset(ft));
            char *s = NULL;
            if (H5Aread(a, mt, &s) >= 0 && s) {
                snprintf(buf, cap, "%s", s);
                H5free_memory(s);
                rc = 0;
            }
            H5Tclose(mt);
        } else {
            size_t n = H5Tget_size(ft);
            char *s = calloc(n + 1, 1);
            hid_t mt = H5Tcopy(H5T_C_S1);
            H5Tset_size(mt, n + 1);
            if (s && H5Aread(a, mt, s) >= 0) {
                snprintf(buf, cap, "%s", s);
                rc = 0;
            }
            H5Tclose(mt);
            free(s);
        }
    } else if (ft >= 0) {
        rc = -2; /* not a string */
    }
    if (ft >= 0) H5Tclose(ft);
    H5Aclose(a);
    return rc;
}

static int read_int_attr(hid_t obj, const char *name, long long *v)
{
    return dx_h5_read_scalar_attr(obj, name, H5T_NATIVE_LLONG, v);
}

static int read_f64_attr(hid_t obj, const char *name, double *v)
{
    return dx_h5_read_scalar_attr(obj, name, H5T_NATIVE_DOUBLE, v);
}

/* Model FLOPs per token of the run's model from /metadata config_json, the count behind MFU in
 * PaLM (Chowdhery et al. 2022, appendix B) and Megatron-LM: 6 N + 12 L D T, N the parameters
 * without the token embedding (the LM head included), L layers, D hidden size, T the sequence
 * length; the 6 N is a forward (2 N) and a backward (4 N) GEMM pass over every weight, the 12 L D T
 * the attention scores and their product with V over full (not causal) T x T. Recomputation is not
 * counted (model FLOPs, not hardware FLOPs). Unknown (NaN, with the reason in flops_why) when the
 * trace has no config, or one that does not parse (a newer dissect's keys), or for a LoRA run
 * (whose frozen weights get no weight gradient). Never an error: the rest of the report stands. */
static void model_flops(report *r, hid_t g)
{
    r->flops_per_token = NAN;
    snprintf(r->flops_why, sizeof r->flops_why, "no model config in /metadata");
    char *js = dx_h5_read_vlen_str_attr(g, "config_json");
    if (!js) return;
    cJSON *root = cJSON_Parse(js);
    int whole = root && cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(root, "model")) &&
                cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(root, "seq_length"));
    cJSON_Delete(root);
    if (!whole) {
        free(js);
        return;
    }
    dx_config c;
    dx_config_defaults(&c);
    if (dx_config_parse(&c, js, "/metadata config_json")) {
        snprintf(r->flops_why, sizeof r->flops_why, "/metadata config_json does not parse here");
        free(js);
        return;
    }
    free(js);
    if (c.lora_r > 0) {
        snprintf(r->flops_why, sizeof r->flops_why, "a LoRA run: not counted");
        return;
    }
    const dx_model_config *m = &c.model;
    const double f = dx_model_flops_per_token(&c); /* sizes are positive: dx_config_parse checks them */
    if (isnan(f)) {
        snprintf(r->flops_why, sizeof r->flops_why, "/metadata config_json: a parameter count past int64");
        return;
    }
    r->flops_params = dx_model_num_params_nonembed(m);
    r->flops_layers = m->num_hidden_layers;
    r->flops_hidden = m->hidden_size;
    r->flops_seq = c.seq_length;
    r->flops_per_token = f;
    r->flops_why[0] = 0;
}

/* The ranks' devices from /metadata/device_names and device_peak_tflops (written since
 * 2026-11-26): rank 0's name, whether all ranks name the same device, and the summed peak when
 * every rank's is known. Absent or unreadable datasets leave device_peak_sum 0 (the MFU line then
 * asks for --peak-tflops); never an error. */
static void device_peaks(report *r, hid_t g)
{
    r->device_peak_sum = 0;
    r->device_name[0] = 0;
    r->devices_alike = 0;
    const size_t W = (size_t)r->world;
    if (H5Lexists(g, "device_names", H5P_DEFAULT) > 0) {
        hid_t d = H5Dopen2(g, "device_names", H5P_DEFAULT);
        hid_t sp = d >= 0 ? H5Dget_space(d) : -1;
        hid_t t = dx_h5_vlen_str_type();
        hsize_t n = 0;
        char **v = NULL;
        if (sp >= 0 && t >= 0 && H5Sget_simple_extent_ndims(sp) == 1 && H5Sget_simple_extent_dims(sp, &n, NULL) == 1 &&
            n == W && (v = calloc(W, sizeof *v)) && H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0) {
            if (v[0]) snprintf(r->device_name, sizeof r->device_name, "%s", v[0]);
            r->devices_alike = 1;
            for (size_t i = 1; i < W; i++)
                if (!v[i] || !v[0] || strcmp(v[i], v[0])) r->devices_alike = 0;
            H5Dvlen_reclaim(t, sp, H5P_DEFAULT, v);
        }
        free(v);
        if (t >= 0) H5Tclose(t);
        if (sp >= 0) H5Sclose(sp);
        if (d >= 0) H5Dclose(d);
    }
    if (H5Lexists(g, "device_peak_tflops", H5P_DEFAULT) > 0) {
        hid_t d = H5Dopen2(g, "device_peak_tflops", H5P_DEFAULT);
        hid_t sp = d >= 0 ? H5Dget_space(d) : -1;
        hsize_t n = 0;
        double *v = NULL;
        if (sp >= 0 && H5Sget_simple_extent_ndims(sp) == 1 && H5Sget_simple_extent_dims(sp, &n, NULL) == 1 && n == W &&
            (v = malloc(W * sizeof *v)) && H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0) {
            r->device_peak_sum = dx_peak_tflops_sum(v, W);
        }
        free(v);
        if (sp >= 0) H5Sclose(sp);
        if (d >= 0) H5Dclose(d);
    }
}

/* Reads the grid attributes and /metadata/grid of the open group g (absent ones keep the
 * DP-only defaults set by load_grid). Returns 0 or -1 + dx_fail. */
static int read_grid_meta(report *r, hid_t g)
{
    static const char *const names[6] = {"tensor_model_parallel_size", "pipeline_model_parallel_size",
                                         "data_parallel_size", "sequence_parallel",
                                         "num_model_chunks", "num_micro_batches"};
    int *dst[6] = {&r->tp, &r->pp, &r->dp, &r->sequence_parallel, &r->chunks, &r->micro_batches};
    for (int i = 0; i < 6; i++) {
        long long v;
        if (read_int_attr(g, names[i], &v) != 0) continue;
        if (v < 0 || v > INT_MAX)
            return dx_fail("%s: /metadata attribute %s = %lld is out of range", r->path, names[i], v);
        *dst[i] = (int)v;
        r->has_grid_meta = 1;
    }
    int rc = read_str_attr(g, "pipeline_schedule", r->schedule, sizeof r->schedule);
    if (rc < 0) return dx_fail("%s: cannot read /metadata pipeline_schedule", r->path);
    double th;
    if (read_f64_attr(g, "pipeline_bubble_theory", &th) == 0) r->bubble_theory = th;
    /* TP x PP (two ints) fits in long long; it is checked against the world size before the
     * third factor, so TP x PP x DP cannot overflow either */
    if (r->tp < 1 || r->pp < 1 || r->dp < 1 || (long long)r->tp * r->pp > r->world ||
        (long long)r->tp * r->pp * r->dp != r->world)
        return dx_fail("%s: /metadata grid sizes TP %d x PP %d x DP %d do not multiply to the world "
                       "size %d", r->path, r->tp, r->pp, r->dp, r->world);
    htri_t ex = H5Lexists(g, "grid", H5P_DEFAULT);
    if (ex < 0) return dx_fail("%s: cannot read /metadata (truncated or corrupt file?)", r->path);
    if (ex == 0) return 0;
    hid_t d = H5Dopen2(g, "grid", H5P_DEFAULT);
    hid_t sp = d >= 0 ? H5Dget_space(d) : -1;
    hsize_t dims[2] = {0, 0};
    int ok = sp >= 0 && H5Sget_simple_extent_ndims(sp) == 2 &&
             H5Sget_simple_extent_dims(sp, dims, NULL) >= 0 && dims[0] == (hsize_t)r->world &&
             dims[1] == 3;
    if (ok) ok = H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, r->grid) >= 0;
    if (sp >= 0) H5Sclose(sp);
    if (d >= 0) H5Dclose(d);
    if (!ok)
        return dx_fail("%s: /metadata/grid is not a readable int [world_size = %d, 3] dataset",
                       r->path, r->world);
    for (int p = 0; p < r->world; p++) {
        const int32_t *c = &r->grid[3 * p];
        if (c[0] < 0 || c[0] >= r->pp || c[1] < 0 || c[1] >= r->dp || c[2] < 0 || c[2] >= r->tp)
            return dx_fail("%s: /metadata/grid: rank %d at (pp %d, dp %d, tp %d) is outside the "
                           "PP %d x DP %d x TP %d grid", r->path, p, c[0], c[1], c[2], r->pp,
                           r->dp, r->tp);
    }
    return 0;
}

/* Checks that the rows of the 1-D dataset d (n in its extent, of file type ftype) are stored in
 * the file: a chunked dataset's allocated chunks can hold them (the writer extends a dataset and
 * writes the new rows together, leaving no gap), a contiguous one's storage holds them. An
 * extent past the stored rows -- a file cut short or forged -- would read as that many rows of
 * fill values: 2^60 rows (exabytes, a read without end) from a file of a few KiB.
 * Returns 0 or -1 + dx_fail naming the dataset. */
static int check_stored_rows(report *r, hid_t d, hid_t ftype, hsize_t n, const char *name)
{
    if (n == 0) return 0;
    hid_t dcpl = H5Dget_create_plist(d);
    if (dcpl < 0) return dx_fail("%s: cannot read the layout of /%s (truncated or corrupt file?)", r->path, name);
    hsize_t cap = n; /* rows the storage holds: compact and virtual datasets are taken as they are */
    int ok = 1;
    H5D_layout_t layout = H5Pget_layout(dcpl);
    if (layout == H5D_CHUNKED) {
        hsize_t chunk[1] = {0}, nchunks = 0;
        hid_t sp = H5Dget_space(d);
        ok = sp >= 0 && H5Pget_chunk(dcpl, 1, chunk) == 1 && chunk[0] > 0 && H5Dget_num_chunks(d, sp, &nchunks) >= 0;
        if (sp >= 0) H5Sclose(sp);
        cap = ok && nchunks <= (hsize_t)-1 / chunk[0] ? nchunks * chunk[0] : (hsize_t)-1;
    } else if (layout == H5D_CONTIGUOUS) {
        size_t row = H5Tget_size(ftype);
        ok = row > 0;
        cap = ok ? H5Dget_storage_size(d) / row : 0;
    } else if (layout < 0) {
        ok = 0;
    }
    H5Pclose(dcpl);
    if (!ok) return dx_fail("%s: cannot read the layout of /%s (truncated or corrupt file?)", r->path, name);
    if (n > cap)
        return dx_fail("%s: /%s has %llu rows but the file stores at most %llu of them (truncated or corrupt "
                       "file?)", r->path, name, (unsigned long long)n, (unsigned long long)cap);
    return 0;
}

/* Reads /steps field `name` (a scalar, or an array of `width` -- per-rank fields are arrays even
 * when the world has one rank) as `base`.
 * Returns 0, 1 if the field is absent (allowed unless required), -1 + dx_fail. */
static int read_steps_field(report *r, hid_t d, hid_t ftype, const char *name, hid_t base,
                            size_t width, void **out, int required)
{
    *out = NULL;
    if (H5Tget_member_index(ftype, name) < 0) {
        if (required) return dx_fail("%s: /steps has no field '%s'", r->path, name);
        return 1;
    }
    size_t esz = H5Tget_size(base), rows = r->n_rows ? r->n_rows : 1;
    hsize_t dims[1] = {width};
    hid_t ft = H5Tget_member_type(ftype, (unsigned)H5Tget_member_index(ftype, name));
    int is_array = ft >= 0 && H5Tget_class(ft) == H5T_ARRAY;
    if (ft >= 0) H5Tclose(ft);
    /* a per-rank field of a single value would leave the other ranks' values unset */
    if (width > 1 && !is_array)
        return dx_fail("%s: /steps field '%s' is not an array of world_size = %zu values", r->path, name, width);
    if (rows > SIZE_MAX / width / esz)
        return dx_fail("%s: out of memory reading /steps field '%s' (%zu rows)", r->path, name, r->n_rows);
    void *buf = calloc(rows * width, esz);
    if (!buf) return dx_fail("%s: out of memory reading /steps", r->path);
    hid_t member = is_array ? H5Tarray_create2(base, 1, dims) : H5Tcopy(base);
    hid_t mt = H5Tcreate(H5T_COMPOUND, esz * width);
    int ok = member >= 0 && mt >= 0 && H5Tinsert(mt, name, 0, member) >= 0;
    if (ok && r->n_rows > 0) ok = H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0;
    if (member >= 0) H5Tclose(member);
    if (mt >= 0) H5Tclose(mt);
    if (!ok) {
        free(buf);
        return dx_fail("%s: cannot read /steps field '%s' (truncated or corrupt file?)", r->path,
                       name);
    }
    *out = buf;
    return 0;
}

static int open_trace(report *r)
{
    struct stat st;
    if (stat(r->path, &st) != 0) return dx_fail("%s: %s", r->path, strerror(errno));
    if (S_ISDIR(st.st_mode)) return dx_fail("%s: is a directory, not a trace file", r->path);
    FILE *f = fopen(r->path, "rb");
    if (!f) return dx_fail("%s: %s", r->path, strerror(errno));
    fclose(f);
    htri_t is = H5Fis_hdf5(r->path);
    if (is <= 0) return dx_fail("%s: not an HDF5 file (expected a dissect trace)", r->path);
    r->file = H5Fopen(r->path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (r->file < 0)
        return dx_fail("%s: cannot open the HDF5 file (truncated or corrupt?)", r->path);

    char fmt[64] = "";
    int rc = read_str_attr(r->file, "format", fmt, sizeof fmt);
    if (rc == 1) return dx_fail("%s: not a dissect trace (no root attribute 'format')", r->path);
    if (rc != 0 || strcmp(fmt, "dissect-trace") != 0)
        return dx_fail("%s: not a dissect trace (root attribute format is %s%s%s, not "
                       "'dissect-trace')", r->path, rc ? "unreadable" : "'", rc ? "" : fmt,
                       rc ? "" : "'");
    long long world = 0;
    if (read_int_attr(r->file, "world_size", &world) != 0 || world < 1 || world > 1 << 20)
        return dx_fail("%s: dissect trace without a valid root attribute 'world_size'", r->path);
    r->world = (int)world;
    snprintf(r->trace_level, sizeof r->trace_level, "unknown");
    /* the grid's defaults: a DP-only job */
    r->tp = r->pp = 1;
    r->dp = r->world;
    r->sequence_parallel = 0;
    r->chunks = 1;
    r->micro_batches = -1;
    r->bubble_theory = NAN;
    snprintf(r->schedule, sizeof r->schedule, "none");
    r->grid = malloc((size_t)r->world * 3 * sizeof *r->grid);
    if (!r->grid) return dx_fail("%s: out of memory", r->path);
    for (int p = 0; p < r->world; p++) {
        r->grid[3 * p] = r->grid[3 * p + 2] = 0;
        r->grid[3 * p + 1] = p;
    }
    if (H5Lexists(r->file, "metadata", H5P_DEFAULT) > 0) {
        hid_t g = H5Gopen2(r->file, "metadata", H5P_DEFAULT);
        if (g < 0) return dx_fail("%s: cannot open /metadata (truncated or corrupt file?)", r->path);
        rc = read_str_attr(g, "trace_level", r->trace_level, sizeof r->trace_level);
        if (rc == 1) snprintf(r->trace_level, sizeof r->trace_level, "unknown");
        if (rc < 0) {
            H5Gclose(g);
            return dx_fail("%s: cannot read /metadata trace_level", r->path);
        }
        if (read_str_attr(g, "environment", r->environment, sizeof r->environment)) r->environment[0] = 0;
        for (char *c = r->environment; *c; c++)
            if (*c == '\n') *c = ' ';
        rc = read_grid_meta(r, g);
        if (!rc) model_flops(r, g);
        if (!rc) device_peaks(r, g);
        H5Gclose(g);
        if (rc) return -1;
    }
    return 0;
}

static int load_steps(report *r)
{
    if (H5Lexists(r->file, "steps", H5P_DEFAULT) <= 0)
        return dx_fail("%s: dissect trace without /steps", r->path);
    hid_t d = H5Dopen2(r->file, "steps", H5P_DEFAULT);
    if (d < 0) return dx_fail("%s: cannot open /steps (truncated or corrupt file?)", r->path);
    hid_t ft = H5Dget_type(d);
    hid_t sp = H5Dget_space(d);
    hsize_t n = 0;
    int rc = 0;
    if (ft < 0 || sp < 0 || H5Tget_class(ft) != H5T_COMPOUND ||
        H5Sget_simple_extent_ndims(sp) != 1 || H5Sget_simple_extent_dims(sp, &n, NULL) < 0)
        rc = dx_fail("%s: /steps is not a 1-D compound dataset", r->path);
    if (!rc) rc = check_stored_rows(r, d, ft, n, "steps");
    r->n_rows = rc ? 0 : (size_t)n;
    size_t W = (size_t)r->world;
    void *p;
    if (!rc && (rc = read_steps_field(r, d, ft, "step", H5T_NATIVE_INT64, 1, &p, 1)) == 0)
        r->step = p;
    if (!rc && (rc = read_steps_field(r, d, ft, "step_time_s", H5T_NATIVE_DOUBLE, 1, &p, 1)) == 0)
        r->step_time_s = p;
    if (!rc && (rc = read_steps_field(r, d, ft, "tokens", H5T_NATIVE_INT64, 1, &p, 0)) >= 0) {
        r->tokens = p;
        rc = 0;
    }
    double **per_rank[6] = {&r->fwd, &r->bwd, &r->opt, &r->comm, &r->energy, &r->capped};
    const char *names[6] = {"forward_s", "backward_s", "optimizer_s", "comm_s", "energy_j", "power_capped_s"};
    for (int k = 0; !rc && k < 6; k++)
        if ((rc = read_steps_field(r, d, ft, names[k], H5T_NATIVE_DOUBLE, W, &p, 0)) >= 0) {
            *per_rank[k] = p;
            rc = 0;
        }
    if (!rc && (rc = read_steps_field(r, d, ft, "peak_mem_bytes", H5T_NATIVE_INT64, W, &p, 0)) >= 0) {
        r->peak = p;
        rc = 0;
    }
    if (!rc && (rc = read_steps_field(r, d, ft, "host_peak_bytes", H5T_NATIVE_INT64, W, &p, 0)) >= 0) {
        r->host_peak = p;
        rc = 0;
    }
    if (sp >= 0) H5Sclose(sp);
    if (ft >= 0) H5Tclose(ft);
    H5Dclose(d);
    return rc ? -1 : 0;
}

/* ------------------------------------------------------------------------------------------ */
/* /events */

typedef int (*event_fn)(report *r, const dx_event *ev, size_t n, void *ctx);

/* Calls fn on successive blocks of /events (in file order). */
static int for_each_events(report *r, event_fn fn, void *ctx)
{
    hid_t d = H5Dopen2(r->file, "events", H5P_DEFAULT);
    if (d < 0) return dx_fail("%s: cannot open /events (truncated or corrupt file?)", r->path);
    hid_t ft = H5Dget_type(d), fs = H5Dget_space(d), mt = dx_h5_event_type(0);
    hsize_t n = 0;
    int rc = 0;
    if (ft < 0 || fs < 0 || mt < 0 || H5Tget_class(ft) != H5T_COMPOUND ||
        H5Sget_simple_extent_ndims(fs) != 1 || H5Sget_simple_extent_dims(fs, &n, NULL) < 0)
        rc = dx_fail("%s: /events is not a 1-D compound dataset", r->path);
    if (!rc) rc = check_stored_rows(r, d, ft, n, "events");
    static const char *const fields[] = {"start_ns", "end_ns", "bytes", "flops", "rank", "step",
                                         "micro", "layer", "phase", "module", "op", "stream"};
    for (size_t i = 0; !rc && i < sizeof fields / sizeof fields[0]; i++)
        if (H5Tget_member_index(ft, fields[i]) < 0)
            rc = dx_fail("%s: /events has no field '%s'", r->path, fields[i]);
    /* traces written before the process grid have no pp, dp, tp: a DP-only job */
    r->ev_has_coords = !rc && H5Tget_member_index(ft, "pp") >= 0 &&
                       H5Tget_member_index(ft, "dp") >= 0 && H5Tget_member_index(ft, "tp") >= 0;
    r->n_events_total = (unsigned long long)n;
    dx_event *buf = rc ? NULL : malloc(READ_CHUNK * sizeof *buf);
    if (!rc && !buf) rc = dx_fail("%s: out of memory reading /events", r->path);
    for (hsize_t off = 0; !rc && off < n; off += READ_CHUNK) {
        hsize_t cnt[1] = {n - off < READ_CHUNK ? n - off : READ_CHUNK}, start[1] = {off};
        memset(buf, 0, (size_t)cnt[0] * sizeof *buf);
        hid_t ms = H5Screate_simple(1, cnt, NULL);
        int ok = ms >= 0 && H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL) >= 0 &&
                 H5Dread(d, mt, ms, fs, H5P_DEFAULT, buf) >= 0;
        if (ms >= 0) H5Sclose(ms);
        if (!ok)
            rc = dx_fail("%s: cannot read /events rows %llu..%llu (truncated or corrupt file?)",
                         r->path, (unsigned long long)off, (unsigned long long)(off + cnt[0] - 1));
        else {
            if (!r->ev_has_coords)
                for (size_t i = 0; i < (size_t)cnt[0]; i++) {
                    buf[i].pp = buf[i].tp = 0;
                    buf[i].dp = (int16_t)buf[i].rank;
                }
            rc = fn(r, buf, (size_t)cnt[0], ctx);
        }
    }
    free(buf);
    if (mt >= 0) H5Tclose(mt);
    if (fs >= 0) H5Sclose(fs);
    if (ft >= 0) H5Tclose(ft);
    H5Dclose(d);
    return rc ? -1 : 0;
}

static size_t sel_index(const report *r, int64_t step);

static int step_selected(const report *r, int64_t step)
{
    size_t i = sel_index(r, step);
    return i < r->n_sel && r->sel[i] == step;
}

static int keep_events(report *r, const dx_event *ev, size_t n, void *ctx)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++) {
        const dx_event *e = &ev[i];
        if (e->rank < 0 || e->rank >= r->world || !step_selected(r, e->step)) continue;
        if (!valid_event(e)) {
            r->n_invalid++;
            continue;
        }
        if (r->n_ev == r->cap_ev) {
            size_t cap = r->cap_ev ? 2 * r->cap_ev : 65536;
            dx_event *p = realloc(r->ev, cap * sizeof *p);
            if (!p) return dx_fail("%s: out of memory for %zu events", r->path, cap);
            r->ev = p;
            r->cap_ev = cap;
        }
        r->ev[r->n_ev++] = *e;
        if (e->op == DX_OP_MODULE)
            r->has_modules = 1;
        else if (is_collective(e->op))
            r->has_comm_ops = 1;
        else if (e->op != DX_OP_STEP)
            r->has_ops = 1;
    }
    return 0;
}

/* Step numbers seen in /events (used when /steps is empty). */
typedef struct {
    int64_t *v;
    size_t n, cap;
} i64_list;

static int collect_steps(report *r, const dx_event *ev, size_t n, void *ctx)
{
    i64_list *l = ctx;
    for (size_t i = 0; i < n; i++) {
        if (ev[i].step <= 0) continue;
        if (l->n && l->v[l->n - 1] == ev[i].step) continue;
        if (l->n == l->cap) {
            size_t cap = l->cap ? 2 * l->cap : 1024;
            int64_t *p = realloc(l->v, cap * sizeof *p);
            if (!p) return dx_fail("%s: out of memory", r->path);
            l->v = p;
            l->cap = cap;
        }
        l->v[l->n++] = ev[i].step;
    }
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_event(const void *a, const void *b)
{
    const dx_event *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    if (x->start_ns != y->start_ns) return x->start_ns < y->start_ns ? -1 : 1;
    return (x->end_ns < y->end_ns) - (x->end_ns > y->end_ns);
}

/* A /steps row by step number. */
typedef struct {
    int64_t step;
    size_t row;
} row_ref;

static int cmp_row_ref(const void *a, const void *b)
{
    const row_ref *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return (x->row > y->row) - (x->row < y->row);
}

/* Chooses the steps: all /steps rows (or the steps seen in /events when /steps is empty) in
 * [lo, hi]; without an explicit range every step but the first when there are >= 2. */
static int select_steps(report *r)
{
    int64_t *all = NULL;
    size_t n_all = 0;
    if (r->n_rows > 0) {
        all = malloc(r->n_rows * sizeof *all);
        if (!all) return dx_fail("%s: out of memory", r->path);
        memcpy(all, r->step, r->n_rows * sizeof *all);
        n_all = r->n_rows;
    } else if (r->has_events) {
        i64_list l = {0};
        if (for_each_events(r, collect_steps, &l)) {
            free(l.v);
            return -1;
        }
        all = l.v;
        n_all = l.n;
    }
    if (n_all == 0) {
        free(all);
        return dx_fail("%s: the trace holds no steps (did the run stop before the first flush?)",
                       r->path);
    }
    qsort(all, n_all, sizeof *all, cmp_i64);
    size_t m = 0;
    for (size_t i = 0; i < n_all; i++)
        if (m == 0 || all[m - 1] != all[i]) all[m++] = all[i];
    n_all = m;
    int64_t first = all[0], last = all[n_all - 1];
    if (!r->explicit_range) {
        r->range_lo = first;
        r->range_hi = last;
        if (n_all >= 2) {
            r->range_lo = all[1];
            r->warmup_excluded = 1;
        }
    }
    r->sel = malloc(n_all * sizeof *r->sel);
    r->sel_row = malloc(n_all * sizeof *r->sel_row);
    if (!r->sel || !r->sel_row) {
        free(all);
        return dx_fail("%s: out of memory", r->path);
    }
    for (size_t i = 0; i < n_all; i++)
        if (all[i] >= r->range_lo && all[i] <= r->range_hi) r->sel[r->n_sel++] = all[i];
    free(all);
    if (r->n_sel == 0)
        return dx_fail("%s: no steps in --steps %lld:%lld (the trace has steps %lld..%lld)", r->path,
                       (long long)r->range_lo, (long long)r->range_hi, (long long)first,
                       (long long)last);
    /* each selected step's /steps row (the last row of that step), by a merge of the sorted
     * selection with the rows sorted by (step, row): n log n for traces of many steps */
    for (size_t i = 0; i < r->n_sel; i++) r->sel_row[i] = SIZE_MAX;
    if (r->n_rows == 0) return 0;
    row_ref *rows = malloc(r->n_rows * sizeof *rows);
    if (!rows) return dx_fail("%s: out of memory", r->path);
    for (size_t k = 0; k < r->n_rows; k++) rows[k] = (row_ref){r->step[k], k};
    qsort(rows, r->n_rows, sizeof *rows, cmp_row_ref);
    for (size_t i = 0, k = 0; i < r->n_sel; i++) {
        while (k < r->n_rows && rows[k].step < r->sel[i]) k++;
        while (k < r->n_rows && rows[k].step == r->sel[i]) r->sel_row[i] = rows[k++].row;
    }
    free(rows);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* interval arithmetic */

typedef struct {
    int64_t s, e;
} ival;

static int cmp_ival(const void *a, const void *b)
{
    const ival *x = a, *y = b;
    return (x->s > y->s) - (x->s < y->s);
}

/* Sorts and merges in place; returns the number of disjoint intervals. */
static size_t merge(ival *v, size_t n)
{
    if (n == 0) return 0;
    qsort(v, n, sizeof *v, cmp_ival);
    size_t m = 0;
    for (size_t i = 1; i < n; i++) {
        if (v[i].s <= v[m].e) {
            if (v[i].e > v[m].e) v[m].e = v[i].e;
        } else {
            v[++m] = v[i];
        }
    }
    return m + 1;
}

static int64_t total_len(const ival *v, size_t n)
{
    int64_t t = 0;
    for (size_t i = 0; i < n; i++) t += v[i].e - v[i].s;
    return t;
}

/* Length of the intersection of two merged lists. */
static int64_t overlap_len(const ival *a, size_t na, const ival *b, size_t nb)
{
    int64_t t = 0;
    size_t i = 0, j = 0;
    while (i < na && j < nb) {
        int64_t s = a[i].s > b[j].s ? a[i].s : b[j].s;
        int64_t e = a[i].e < b[j].e ? a[i].e : b[j].e;
        if (e > s) t += e - s;
        if (a[i].e < b[j].e)
            i++;
        else
            j++;
    }
    return t;
}

/* Length of x covered by the sorted, disjoint intervals b[0..nb). */
static int64_t overlap_one(ival x, const ival *b, size_t nb)
{
    size_t lo = 0, hi = nb;
    while (lo < hi) { /* first interval ending after x.s */
        size_t mid = (lo + hi) / 2;
        if (b[mid].e <= x.s)
            lo = mid + 1;
        else
            hi = mid;
    }
    int64_t t = 0;
    for (size_t j = lo; j < nb && b[j].s < x.e; j++) {
        int64_t s = b[j].s > x.s ? b[j].s : x.s, e = b[j].e < x.e ? b[j].e : x.e;
        if (e > s) t += e - s;
    }
    return t;
}

/* ------------------------------------------------------------------------------------------ */
/* analysis */

typedef struct {
    group_stats *g;          /* [sel index * world + rank] */
    double op_ns[DX_OP_COUNT][DX_MOD_COUNT], op_flops[DX_OP_COUNT][DX_MOD_COUNT],
        op_bytes[DX_OP_COUNT][DX_MOD_COUNT];
    long long op_count[DX_OP_COUNT][DX_MOD_COUNT];
    /* communication units by op, module and phase: time (clipped to the step) and the part of
     * it not covered by compute-stream or host ops (exposed) */
    double comm_ns[DX_OP_COUNT][DX_MOD_COUNT][DX_PH_COUNT], exp_ns[DX_OP_COUNT][DX_MOD_COUNT][DX_PH_COUNT];
    long long comm_count[DX_OP_COUNT][DX_MOD_COUNT][DX_PH_COUNT];
    double *layer_ns;        /* [(max_layer + 2) * DX_MOD_COUNT]; row max_layer + 1 = other */
    double *layer_exp_ns;    /* [max_layer + 2]: exposed communication of each layer's collectives */
    int any_comm;
    int max_layer;
    int module_used[DX_MOD_COUNT];
    double span_sum;         /* summed step spans over all (step, rank) */
    size_t missing_spans, groups;
    int from_modules;        /* the units are module spans and collectives (no kernel events) */
    /* tensor-parallel collectives of compute modules (tp_row): [row * TP_OPS + k], k = tp_op_index;
     * summed over steps and ranks; tp_ranks[row * world + rank] = 1 if the rank has the row */
    double *tp_ns, *tp_exp_ns;
    long long *tp_count;
    unsigned char *tp_ranks;
    int tp_rows, any_tp;
} analysis;

#define TP_OPS 3 /* all_reduce, all_gather, reduce_scatter */

/* Column of a TP collective op (-1: not one). */
static int tp_op_index(unsigned op)
{
    return op == DX_OP_ALL_REDUCE ? 0 : op == DX_OP_ALL_GATHER ? 1 : op == DX_OP_REDUCE_SCATTER ? 2 : -1;
}

/* Is e a tensor-parallel collective of a compute module in the forward or backward (not the
 * optimizer's, the loss's, a parameter group's gradient reduction or the pipeline's)? Traces
 * since 2026-11-29 say which group a collective ran on (field group: tp); in older ones (group
 * none) the module decides, which counts the DP gradient reductions of the embedding's and the
 * head's parameter groups (modules embedding and lm_head) as well. */
static int is_tp_collective(const dx_event *e)
{
    if (tp_op_index(e->op) < 0) return 0;
    if (e->phase != DX_PH_FORWARD && e->phase != DX_PH_BACKWARD) return 0;
    if (e->group != DX_GROUP_NONE) return e->group == DX_GROUP_TP;
    return e->module == DX_MOD_EMBEDDING || e->module == DX_MOD_ATTENTION ||
           e->module == DX_MOD_MLP || e->module == DX_MOD_RMSNORM || e->module == DX_MOD_LM_HEAD;
}

/* Row of the TP table: the layer, or max_layer + 1 + module for events outside layers. */
static int tp_row(const analysis *a, const dx_event *e)
{
    return e->layer >= 0 ? e->layer : a->max_layer + 1 + e->module;
}

/* Index of the first selected step >= step (binary search over the sorted selection). */
static size_t sel_index(const report *r, int64_t step)
{
    size_t lo = 0, hi = r->n_sel;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (r->sel[mid] < step)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Is e one of the events the breakdown is made of? Kernel ops and collectives; without kernel
 * events (trace level module), module spans and collectives. */
static int is_unit(const analysis *a, const dx_event *e)
{
    if (e->op == DX_OP_STEP) return 0;
    return a->from_modules ? e->op == DX_OP_MODULE || is_collective(e->op) : e->op != DX_OP_MODULE;
}

static int is_comm_unit(const dx_event *e)
{
    return is_collective(e->op) || (e->op == DX_OP_MODULE && e->stream == DX_STREAM_COMM);
}

static int analyse(report *r, analysis *a)
{
    memset(a, 0, sizeof *a);
    a->from_modules = !r->has_ops && r->has_modules;
    size_t W = (size_t)r->world;
    a->g = calloc(r->n_sel * W, sizeof *a->g);
    a->max_layer = -1;
    for (size_t i = 0; i < r->n_ev; i++)
        if (is_unit(a, &r->ev[i]) && r->ev[i].layer > a->max_layer) a->max_layer = r->ev[i].layer;
    a->layer_ns = calloc((size_t)(a->max_layer + 2) * DX_MOD_COUNT, sizeof *a->layer_ns);
    a->layer_exp_ns = calloc((size_t)(a->max_layer + 2), sizeof *a->layer_exp_ns);
    a->tp_rows = a->max_layer + 1 + DX_MOD_COUNT;
    size_t tpn = (size_t)a->tp_rows * TP_OPS;
    a->tp_ns = calloc(tpn, sizeof *a->tp_ns);
    a->tp_exp_ns = calloc(tpn, sizeof *a->tp_exp_ns);
    a->tp_count = calloc(tpn, sizeof *a->tp_count);
    a->tp_ranks = calloc((size_t)a->tp_rows * W, 1);
    ival *all = malloc((r->n_ev + 1) * sizeof *all), *cmp = malloc((r->n_ev + 1) * sizeof *cmp),
         *com = malloc((r->n_ev + 1) * sizeof *com);
    if (!a->g || !a->layer_ns || !a->layer_exp_ns || !a->tp_ns || !a->tp_exp_ns || !a->tp_count ||
        !a->tp_ranks || !all || !cmp || !com) {
        free(all);
        free(cmp);
        free(com);
        return dx_fail("%s: out of memory analysing %zu events", r->path, r->n_ev);
    }
    if (r->n_ev) qsort(r->ev, r->n_ev, sizeof *r->ev, cmp_event); /* r->ev is NULL without events */
    for (size_t b = 0; b < r->n_ev;) {
        size_t e = b;
        while (e < r->n_ev && r->ev[e].rank == r->ev[b].rank && r->ev[e].step == r->ev[b].step) e++;
        group_stats *g = &a->g[sel_index(r, r->ev[b].step) * W + (size_t)r->ev[b].rank];
        g->has = 1;
        a->groups++;
        /* the step span (several: their hull) */
        int64_t s0 = INT64_MAX, s1 = INT64_MIN, x0 = INT64_MAX, x1 = INT64_MIN;
        for (size_t i = b; i < e; i++) {
            const dx_event *ev = &r->ev[i];
            if (ev->op == DX_OP_STEP) {
                if (ev->start_ns < s0) s0 = ev->start_ns;
                if (ev->end_ns > s1) s1 = ev->end_ns;
            }
            if (ev->start_ns < x0) x0 = ev->start_ns;
            if (ev->end_ns > x1) x1 = ev->end_ns;
        }
        g->has_span = s0 <= s1;
        if (!g->has_span) { /* fall back to the extent of the events */
            s0 = x0;
            s1 = x1;
            a->missing_spans++;
        }
        size_t na = 0, nc = 0, nm = 0;
        for (size_t i = b; i < e; i++) {
            const dx_event *ev = &r->ev[i];
            if (!is_unit(a, ev)) continue;
            int64_t s = ev->start_ns < s0 ? s0 : ev->start_ns, t = ev->end_ns > s1 ? s1 : ev->end_ns;
            double dur = (double)(ev->end_ns - ev->start_ns);
            /* ops on stream "aux" run on a few SMs beside the compute stream's GEMMs: their own
             * line (below), not the operator and module tables, whose shares are of step time */
            if (ev->stream == DX_STREAM_AUX) {
                g->aux += dur;
                g->aux_n++;
                continue;
            }
            /* whole-run sums use the unclipped durations */
            a->op_ns[ev->op][ev->module] += dur;
            a->op_flops[ev->op][ev->module] += (double)ev->flops;
            a->op_bytes[ev->op][ev->module] += (double)ev->bytes;
            a->op_count[ev->op][ev->module]++;
            int layer = ev->layer >= 0 ? ev->layer : a->max_layer + 1;
            /* module spans already hold the collectives their modules run (TP; the loss
             * module's forward; the loss all-reduce for logging comes after the backward) */
            int nested = ev->module <= DX_MOD_LM_HEAD ? ev->phase == DX_PH_FORWARD || ev->phase == DX_PH_BACKWARD ||
                                                            ev->phase == DX_PH_RECOMPUTE
                         : ev->module == DX_MOD_LOSS && ev->phase == DX_PH_FORWARD;
            if (!(a->from_modules && is_collective(ev->op) && nested)) {
                a->layer_ns[(size_t)layer * DX_MOD_COUNT + ev->module] += dur;
                a->module_used[ev->module] = 1;
            }
            if (ev->stream == DX_STREAM_OPTIMIZER) g->side += dur; /* (runs past the span) */
            if (t <= s) continue;
            if (ev->stream == DX_STREAM_HOST && (ev->op == DX_OP_ADAMW || ev->op == DX_OP_ADAMW_REDO)) {
                g->hadam += (double)(t - s);
                if (ev->phase == DX_PH_BACKWARD) g->hadam_bwd += (double)(t - s);
                if (ev->op == DX_OP_ADAMW_REDO) g->hredo += (double)(t - s), g->redo_step = 1;
            }
            if (ev->stream == DX_STREAM_HOST && ev->op == DX_OP_MEMCPY && ev->module == DX_MOD_OPTIMIZER)
                g->cwait += (double)(t - s);
            if (ev->op == DX_OP_MEMCPY_D2H) g->d2h += (double)(t - s);
            if (ev->op == DX_OP_MEMCPY_H2D) g->h2d += (double)(t - s);
            all[na++] = (ival){s, t};
            int comm = is_comm_unit(ev);
            if (comm) {
                com[nm++] = (ival){s, t};
                continue;
            }
            /* what covers a collective: compute-stream ops and host work (the offloaded AdamW,
             * which ZeRO-2's parameter all-gathers run beside), as check_events.py counts them */
            if (ev->stream == DX_STREAM_COMPUTE || ev->stream == DX_STREAM_HOST) {
                cmp[nc++] = (ival){s, t};
                double d = (double)(t - s);
                g->compute += d;
                if (ev->phase == DX_PH_FORWARD) g->fwd += d;
                if (ev->phase == DX_PH_BACKWARD) g->bwd += d;
                if (ev->phase == DX_PH_OPTIMIZER) g->opt += d;
                if (ev->phase == DX_PH_RECOMPUTE) g->rec += d;
                if (ev->stream == DX_STREAM_COMPUTE &&
                    (ev->phase == DX_PH_FORWARD || ev->phase == DX_PH_BACKWARD || ev->phase == DX_PH_RECOMPUTE))
                    g->busy += d;
            }
        }
        na = merge(all, na);
        nc = merge(cmp, nc);
        nm = merge(com, nm);
        g->span = (double)(s1 - s0);
        g->idle = g->span - (double)total_len(all, na);
        g->comm = (double)total_len(com, nm);
        g->exposed = g->comm - (double)overlap_len(com, nm, cmp, nc);
        /* the same, per communication event (events of one rank may overlap each other, so
         * these sum to at least the step's exposed time) */
        for (size_t i = b; i < e; i++) {
            const dx_event *ev = &r->ev[i];
            if (!is_unit(a, ev) || !is_comm_unit(ev)) continue;
            ival x = {ev->start_ns < s0 ? s0 : ev->start_ns, ev->end_ns > s1 ? s1 : ev->end_ns};
            if (ev->module == DX_MOD_PIPELINE && ev->op == DX_OP_SEND)
                g->send_bytes += (double)ev->bytes;
            size_t tpk = SIZE_MAX;
            if (is_tp_collective(ev)) { /* counted even when clipped away */
                tpk = (size_t)tp_row(a, ev) * TP_OPS + (size_t)tp_op_index(ev->op);
                a->tp_count[tpk]++;
                a->tp_ranks[(size_t)tp_row(a, ev) * W + (size_t)ev->rank] = 1;
                a->any_tp = 1;
            }
            if (x.e <= x.s) continue;
            a->comm_ns[ev->op][ev->module][ev->phase] += (double)(x.e - x.s);
            double xe = (double)(x.e - x.s - overlap_one(x, cmp, nc));
            if (ev->module == DX_MOD_PIPELINE && ev->op == DX_OP_RECV) {
                g->recv += (double)(x.e - x.s);
                if (ev->phase == DX_PH_FORWARD || ev->phase == DX_PH_BACKWARD)
                    g->recv_fb += (double)(x.e - x.s);
            }
            if (ev->module == DX_MOD_PIPELINE && ev->op == DX_OP_SEND) g->send += (double)(x.e - x.s);
            if (tpk != SIZE_MAX) {
                a->tp_ns[tpk] += (double)(x.e - x.s);
                a->tp_exp_ns[tpk] += xe;
            }
            a->exp_ns[ev->op][ev->module][ev->phase] += xe;
            a->comm_count[ev->op][ev->module][ev->phase]++;
            a->layer_exp_ns[ev->layer >= 0 ? ev->layer : a->max_layer + 1] += xe;
            a->any_comm = 1;
        }
        a->span_sum += g->span;
        b = e;
    }
    free(all);
    free(cmp);
    free(com);
    return 0;
}

static void analysis_free(analysis *a)
{
    free(a->g);
    free(a->layer_ns);
    free(a->layer_exp_ns);
    free(a->tp_ns);
    free(a->tp_exp_ns);
    free(a->tp_count);
    free(a->tp_ranks);
}

/* ------------------------------------------------------------------------------------------ */
/* Chrome trace-event JSON */

typedef struct {
    FILE *f;
    int only_range;
    int first;
} chrome_ctx;

static int write_chrome_events(report *r, const dx_event *ev, size_t n, void *ctx)
{
    chrome_ctx *c = ctx;
    for (size_t i = 0; i < n; i++) {
        const dx_event *e = &ev[i];
        if (c->only_range && !step_selected(r, e->step)) continue;
        /* the events the report skips (see keep_events) stay out of the Chrome file too */
        if (e->rank < 0 || e->rank >= r->world || !valid_event(e)) continue;
        const char *name = e->op == DX_OP_MODULE ? name_of(dx_module_names, DX_MOD_COUNT, e->module)
                                                 : name_of(dx_op_names, DX_OP_COUNT, e->op);
        fprintf(c->f,
                "%s\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,"
                "\"pid\":%d,\"tid\":%u,\"args\":{\"step\":%d,\"micro\":%d,\"layer\":%d,"
                "\"phase\":\"%s\",\"bytes\":%lld,\"flops\":%lld%s%s%s}}",
                c->first ? "" : ",", name, name_of(dx_module_names, DX_MOD_COUNT, e->module),
                (double)e->start_ns / 1e3, (double)(e->end_ns - e->start_ns) / 1e3, (int)e->rank,
                (unsigned)e->stream, (int)e->step, (int)e->micro, (int)e->layer,
                name_of(dx_phase_names, DX_PH_COUNT, e->phase), (long long)e->bytes,
                (long long)e->flops, e->group ? ",\"group\":\"" : "",
                e->group ? name_of(dx_group_names, DX_GROUP_COUNT, e->group) : "", e->group ? "\"" : "");
        c->first = 0;
    }
    if (ferror(c->f)) return dx_fail("write error");
    return 0;
}

/* A compute-stream forward or backward event of a micro-batch (the micro-batch track). */
typedef struct {
    int64_t s, e;
    int32_t rank, step;
    int16_t micro;
    uint8_t phase;
} mb_span;

typedef struct {
    mb_span *v;
    size_t n, cap;
    int only_range;
} mb_list;

static int collect_micro(report *r, const dx_event *ev, size_t n, void *ctx)
{
    mb_list *l = ctx;
    for (size_t i = 0; i < n; i++) {
        const dx_event *e = &ev[i];
        if (l->only_range && !step_selected(r, e->step)) continue;
        if (e->stream != DX_STREAM_COMPUTE || e->micro < 0 || e->op == DX_OP_STEP ||
            (e->phase != DX_PH_FORWARD && e->phase != DX_PH_BACKWARD && e->phase != DX_PH_RECOMPUTE) ||
            !valid_event(e) || e->rank < 0 || e->rank >= r->world)
            continue;
        if (l->n == l->cap) {
            size_t cap = l->cap ? 2 * l->cap : 4096;
            mb_span *p = realloc(l->v, cap * sizeof *p);
            if (!p) return dx_fail("%s: out of memory", r->path);
            l->v = p;
            l->cap = cap;
        }
        /* a micro-batch's recomputation is part of its backward */
        l->v[l->n++] = (mb_span){e->start_ns, e->end_ns, e->rank, e->step, e->micro,
                                 e->phase == DX_PH_RECOMPUTE ? (uint8_t)DX_PH_BACKWARD : e->phase};
    }
    return 0;
}

static int cmp_mb(const void *a, const void *b)
{
    const mb_span *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    if (x->s != y->s) return x->s < y->s ? -1 : 1;
    return (x->e > y->e) - (x->e < y->e);
}

/* The micro-batch track (tid DX_STREAM_COUNT) of each rank: one span "F<k>" / "B<k>" per run of
 * consecutive compute-stream events of one step, phase and micro-batch k, from the run's first
 * start to its last end, so a pipeline schedule (1F1B's staircase) reads at a glance. */
static int write_micro_track(report *r, chrome_ctx *c)
{
    mb_list l = {NULL, 0, 0, c->only_range};
    int rc = for_each_events(r, collect_micro, &l);
    if (!rc && l.n) qsort(l.v, l.n, sizeof *l.v, cmp_mb);
    for (size_t b = 0; !rc && b < l.n;) {
        size_t e = b + 1;
        int64_t end = l.v[b].e;
        while (e < l.n && l.v[e].rank == l.v[b].rank && l.v[e].step == l.v[b].step &&
               l.v[e].phase == l.v[b].phase && l.v[e].micro == l.v[b].micro) {
            if (l.v[e].e > end) end = l.v[e].e;
            e++;
        }
        const mb_span *x = &l.v[b];
        fprintf(c->f,
                "%s\n{\"name\":\"%c%d\",\"cat\":\"micro-batch\",\"ph\":\"X\",\"ts\":%.3f,"
                "\"dur\":%.3f,\"pid\":%d,\"tid\":%d,\"args\":{\"step\":%d,\"micro\":%d,"
                "\"phase\":\"%s\"}}",
                c->first ? "" : ",", x->phase == DX_PH_FORWARD ? 'F' : 'B', (int)x->micro,
                (double)x->s / 1e3, (double)(end - x->s) / 1e3, (int)x->rank, DX_STREAM_COUNT,
                (int)x->step, (int)x->micro, dx_phase_names[x->phase]);
        c->first = 0;
        b = e;
    }
    free(l.v);
    if (!rc && ferror(c->f)) rc = dx_fail("write error");
    return rc;
}

static int write_chrome(report *r, const char *out)
{
    size_t len = strlen(out);
    char *tmp = malloc(len + 5);
    if (!tmp) return dx_fail("%s: out of memory", out);
    memcpy(tmp, out, len);
    memcpy(tmp + len, ".tmp", 5);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        int e = errno;
        free(tmp);
        return dx_fail("--chrome %s: cannot create %s.tmp: %s", out, out, strerror(e));
    }
    chrome_ctx c = {f, r->explicit_range, 1};
    fprintf(f, "{\"traceEvents\":[");
    /* one process per rank, in rank order, named with its grid coordinates (unless DP only);
     * a thread per stream, and with pipeline parallelism a micro-batch track on top */
    int micro_track = r->pp > 1 && r->has_events;
    for (int p = 0; p < r->world; p++) {
        const int32_t *g = &r->grid[3 * p];
        if (is_dp_only(r))
            fprintf(f, "%s\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                       "\"args\":{\"name\":\"rank %d\"}}", c.first ? "" : ",", p, p);
        else
            fprintf(f, "%s\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                       "\"args\":{\"name\":\"rank %d (pp %d, dp %d, tp %d)\"}}",
                    c.first ? "" : ",", p, p, (int)g[0], (int)g[1], (int)g[2]);
        c.first = 0;
        fprintf(f, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                   "\"args\":{\"sort_index\":%d}}", p, p);
        for (int s = 0; s < DX_STREAM_COUNT; s++) {
            fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                       "\"args\":{\"name\":\"%s\"}}", p, s, dx_stream_names[s]);
            fprintf(f, ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                       "\"args\":{\"sort_index\":%d}}", p, s, s + 1);
        }
        if (micro_track)
            fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                       "\"args\":{\"name\":\"micro-batches\"}},"
                       "\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                       "\"args\":{\"sort_index\":0}}", p, DX_STREAM_COUNT, p, DX_STREAM_COUNT);
    }
    int rc = r->has_events ? for_each_events(r, write_chrome_events, &c) : 0;
    if (rc == 0 && micro_track) rc = write_micro_track(r, &c);
    if (rc == 0) fprintf(f, "\n],\"displayTimeUnit\":\"ms\"}\n");
    if (rc == 0 && ferror(f)) rc = dx_fail("write error");
    if (fclose(f) != 0 && rc == 0) rc = dx_fail("write error");
    if (rc == 0 && rename(tmp, out) != 0) rc = dx_fail("cannot rename to %s: %s", out, strerror(errno));
    if (rc != 0) {
        remove(tmp);
        const char *why = dx_last_error();
        char msg[512];
        snprintf(msg, sizeof msg, "%s", why);
        /* messages from reading /events already name the trace */
        if (strstr(msg, r->path) == msg)
            dx_fail("%s", msg);
        else
            dx_fail("--chrome %s: %s", out, msg);
    }
    free(tmp);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* printing */

/* The largest non-negative value of rank p's per-step field f[rows][W] over the selected steps;
 * NaN when f is NULL (not in this trace) or no step recorded one (-1). */
static double max_over_sel(const report *r, const int64_t *f, size_t p)
{
    double m = NAN;
    for (size_t i = 0; f && i < r->n_sel; i++) {
        size_t row = r->sel_row[i];
        if (row == SIZE_MAX) continue;
        double v = (double)f[row * (size_t)r->world + p];
        if (v >= 0 && (isnan(m) || v > m)) m = v;
    }
    return m;
}

/* bytes as MiB in a column of `width` ("-" for NaN) */
static void print_mib(double bytes, int width)
{
    if (isnan(bytes))
        printf(" %*s", width, "-");
    else
        printf(" %*.1f", width, bytes / (1024.0 * 1024.0));
}

static void print_ms(double ns, int width)
{
    if (isnan(ns))
        printf(" %*s", width, "-");
    else
        printf(" %*.3f", width, ns / 1e6);
}

/* One breakdown row: fields in ns (NaN = missing). */
static void breakdown_row(const char *step, const char *who, const double v[6])
{
    printf("  %6s  %-6s", step, who);
    static const int w[6] = {10, 11, 12, 15, 10, 10};
    for (int k = 0; k < 6; k++) print_ms(v[k], w[k]);
    printf("\n");
}

static void breakdown_header(void)
{
    printf("  %6s  %-6s %10s %11s %12s %15s %10s %10s\n", "step", "ranks", "forward ms",
           "backward ms", "optimizer ms", "exposed comm ms", "idle ms", "step ms");
}

/* Values of group g for the breakdown columns. */
static void group_values(const group_stats *g, double v[6])
{
    if (!g || !g->has) {
        for (int k = 0; k < 6; k++) v[k] = NAN;
        return;
    }
    v[0] = g->fwd;
    v[1] = g->bwd;
    v[2] = g->opt;
    v[3] = g->exposed;
    v[4] = g->idle;
    v[5] = g->span;
}

/* mean / min / max over the selected steps of column values vals[i*6 + k] (NaN skipped) */
static void stats_rows(const char *who, const double *vals, size_t n)
{
    double mean[6], mn[6], mx[6];
    for (int k = 0; k < 6; k++) {
        double s = 0;
        size_t c = 0;
        mn[k] = INFINITY;
        mx[k] = -INFINITY;
        for (size_t i = 0; i < n; i++) {
            double x = vals[i * 6 + (size_t)k];
            if (isnan(x)) continue;
            s += x;
            c++;
            if (x < mn[k]) mn[k] = x;
            if (x > mx[k]) mx[k] = x;
        }
        mean[k] = c ? s / (double)c : NAN;
        if (!c) mn[k] = mx[k] = NAN;
    }
    breakdown_row("mean", who, mean);
    breakdown_row("min", who, mn);
    breakdown_row("max", who, mx);
}

static double steps_value(const report *r, const double *arr, size_t row, int rank)
{
    if (!arr || row == SIZE_MAX) return NAN;
    return arr[row * (size_t)r->world + (size_t)rank] * 1e9; /* s -> ns */
}

/* The summary's model FLOPs lines: FLOPs per token (model_flops), model TFLOP/s per rank =
 * tokens/s x FLOPs per token / world size, and MFU = that / --peak-tflops, or without it the
 * trace's own peaks: tokens/s x FLOPs per token / the ranks' summed device peak. */
static void print_mfu(const report *r, double tok_per_s)
{
    if (isnan(r->flops_per_token)) {
        printf("  %-22s - (%s)\n", "model FLOPs per token", r->flops_why);
        return;
    }
    printf("  %-22s %.6g (6 x %lld parameters + 12 x %lld layers x %lld hidden x %lld seq; "
           "recomputed passes not counted)\n",
           "model FLOPs per token", r->flops_per_token, (long long)r->flops_params,
           (long long)r->flops_layers, (long long)r->flops_hidden, (long long)r->flops_seq);
    if (isnan(tok_per_s)) return;
    double tf = tok_per_s * r->flops_per_token / r->world / 1e12;
    printf("  %-22s %.4g\n", "model TFLOP/s per rank", tf);
    if (r->peak_tflops > 0)
        printf("  %-22s %.4f (of --peak-tflops %g)\n", "MFU", tf / r->peak_tflops, r->peak_tflops);
    else if (r->device_peak_sum > 0 && r->devices_alike)
        printf("  %-22s %.4f (of %g TFLOP/s, the %s's dense bf16 peak)\n", "MFU", tf * r->world / r->device_peak_sum,
               r->device_peak_sum / r->world, r->device_name);
    else if (r->device_peak_sum > 0)
        printf("  %-22s %.4f (of the ranks' dense bf16 peaks, %g TFLOP/s summed%s%s)\n", "MFU",
               tf * r->world / r->device_peak_sum, r->device_peak_sum, r->device_name[0] ? "; rank 0: " : "",
               r->device_name);
    else
        printf("  %-22s - (%s%s%sgive --peak-tflops: a rank's device peak, e.g. 989 for an H100 SXM's dense bf16)\n",
               "MFU", r->device_name[0] ? "no known peak for " : "", r->device_name,
               r->device_name[0] ? "; " : "");
}

/* The summary's device-energy lines (only where the selected steps recorded it: CUDA with NVML):
 * over the selected steps whose every rank has a finite energy_j, the energy of all ranks per
 * step, the mean power per rank (energy / (step time x ranks)), the energy per token, and the
 * share of the ranks' step time in which the power limit held the clocks down (power_capped_s,
 * shown at most 100%: the counters are samples up to ~25 ms old, so a step's window and theirs
 * differ a little, and short runs read coarse). */
static void print_energy(const report *r)
{
    if (!r->energy) return;
    double e = 0, cap = 0, t = 0, tok = 0;
    size_t n = 0, ncap = 0;
    const size_t W = (size_t)r->world;
    for (size_t i = 0; i < r->n_sel; i++) {
        const size_t row = r->sel_row[i];
        if (row == SIZE_MAX) continue;
        double es = 0, cs = 0;
        int ok = 1, okc = r->capped != NULL;
        for (size_t k = 0; k < W; k++) {
            const double v = r->energy[row * W + k], c = okc ? r->capped[row * W + k] : NAN;
            ok = ok && isfinite(v);
            okc = okc && isfinite(c);
            es += v;
            cs += c;
        }
        if (!ok) continue;
        e += es;
        t += r->step_time_s[row];
        if (r->tokens) tok += (double)r->tokens[row];
        n++;
        if (okc) {
            cap += cs;
            ncap++;
        }
    }
    if (!n || !(t > 0)) return;
    printf("  %-22s %.1f J per step (all ranks), %.0f W per rank", "device energy", e / (double)n, e / (t * (double)W));
    if (tok > 0) printf(", %.4g J per token", e / tok);
    printf("\n");
    if (ncap == n)
        printf("  %-22s %.0f%% of the step time (the power limit held the clocks down; NVML)\n", "power-capped",
               fmin(100.0, 100.0 * cap / (t * (double)W)));
}

static void print_summary(const report *r, const analysis *a)
{
    double st = 0, tok = 0;
    size_t n = 0;
    int have_tok = r->tokens != NULL;
    for (size_t i = 0; i < r->n_sel; i++) {
        size_t row = r->sel_row[i];
        if (row == SIZE_MAX) continue;
        st += r->step_time_s[row];
        if (have_tok) tok += (double)r->tokens[row];
        n++;
    }
    printf("dissect report: %s\n\nRun summary\n", r->path);
    printf("  %-22s %d\n", "world size (ranks)", r->world);
    if (r->device_name[0])
        printf("  %-22s %s%s\n", "devices", r->device_name,
               r->devices_alike ? (r->world > 1 ? " (every rank)" : "") : " (rank 0; the ranks' differ)");
    printf("  %-22s %s\n", "trace level", r->trace_level);
    if (r->environment[0]) printf("  %-22s %s\n", "switches (environment)", r->environment);
    printf("  %-22s %d x %d x %d%s\n", "grid (PP x DP x TP)", r->pp, r->dp, r->tp,
           r->has_grid_meta ? "" : " (not recorded: a data-parallel job)");
    printf("  %-22s %s\n", "sequence parallel", r->sequence_parallel ? "yes" : "no");
    printf("  %-22s %s (%d model chunk%s per rank", "pipeline schedule", r->schedule, r->chunks,
           r->chunks == 1 ? "" : "s");
    if (r->pp > 1 && !isnan(r->bubble_theory))
        printf("; bubble in theory %.3f", r->bubble_theory);
    printf(")\n");
    if (r->micro_batches > 0)
        printf("  %-22s %d\n", "micro-batches per step", r->micro_batches);
    else
        printf("  %-22s - (not recorded)\n", "micro-batches per step");
    printf("  %-22s %zu (steps %lld..%lld of %lld..%lld%s)\n", "steps in range", r->n_sel,
           (long long)r->sel[0], (long long)r->sel[r->n_sel - 1],
           (long long)(r->n_rows ? r->step[0] : r->sel[0]),
           (long long)(r->n_rows ? r->step[r->n_rows - 1] : r->sel[r->n_sel - 1]),
           r->warmup_excluded ? "; the first step is left out as warm-up" : "");
    if (n) {
        printf("  %-22s %.3f\n", "mean step time (ms)", st / (double)n * 1e3);
        if (have_tok && st > 0)
            printf("  %-22s %.1f\n", "tokens/s", tok / st);
        else
            printf("  %-22s -\n", "tokens/s");
        print_mfu(r, have_tok && st > 0 ? tok / st : NAN);
        print_energy(r);
    } else {
        printf("  %-22s - (no /steps rows for these steps)\n", "mean step time (ms)");
    }
    if (r->has_events)
        printf("  %-22s %zu in range (%llu in the trace)%s\n", "events", r->n_ev,
               r->n_events_total, a->from_modules ? "; no op events, using module spans" : "");
    else
        printf("  %-22s none (no /events in this trace)\n", "events");
    if (r->n_invalid)
        printf("  %-22s %llu events with unknown enum values, end < start or times past +-2^61 ns "
               "were skipped\n",
               "warning", r->n_invalid);
    if (a->missing_spans)
        printf("  %-22s %zu (rank, step) groups have no step span; their extent is used\n",
               "warning", a->missing_spans);
    printf("\n");
}

static int use_events(const report *r, const analysis *a)
{
    (void)a;
    return r->has_events && (r->has_ops || r->has_modules || r->has_comm_ops);
}

static void print_breakdown(const report *r, const analysis *a)
{
    size_t W = (size_t)r->world, n = r->n_sel;
    double *v0 = malloc(n * 6 * sizeof *v0), *vm = malloc(n * 6 * sizeof *vm);
    if (!v0 || !vm) {
        free(v0);
        free(vm);
        return;
    }
    int ev = use_events(r, a);
    if (ev)
        printf("Step breakdown (from /events%s; rank 0 and the max over ranks of each column)\n",
               a->from_modules ? " module spans" : "");
    else
        printf("Step breakdown (from /steps: the trace has no op or module events; 'exposed comm' "
               "is comm_s, the collectives' host time, outside the other columns where they are "
               "host-timed (CPU); idle = step - the other columns, 0 if negative)\n");
    for (size_t i = 0; i < n; i++) {
        for (int k = 0; k < 6; k++) vm[i * 6 + (size_t)k] = NAN;
        if (ev) {
            group_values(&a->g[i * W], &v0[i * 6]);
            for (size_t p = 0; p < W; p++) {
                double v[6];
                group_values(&a->g[i * W + p], v);
                for (int k = 0; k < 6; k++) {
                    double *m = &vm[i * 6 + (size_t)k];
                    if (!isnan(v[k]) && (isnan(*m) || v[k] > *m)) *m = v[k];
                }
            }
        } else {
            size_t row = r->sel_row[i];
            for (size_t p = 0; p < W; p++) {
                double v[6];
                v[0] = steps_value(r, r->fwd, row, (int)p);
                v[1] = steps_value(r, r->bwd, row, (int)p);
                v[2] = steps_value(r, r->opt, row, (int)p);
                v[3] = steps_value(r, r->comm, row, (int)p);
                v[5] = row == SIZE_MAX ? NAN : r->step_time_s[row] * 1e9;
                v[4] = v[5] - v[0] - v[1] - v[2] - v[3];
                if (v[4] < 0) v[4] = 0;
                for (int k = 0; k < 6; k++) {
                    if (p == 0) v0[i * 6 + (size_t)k] = v[k];
                    double *m = &vm[i * 6 + (size_t)k];
                    if (!isnan(v[k]) && (isnan(*m) || v[k] > *m)) *m = v[k];
                }
            }
        }
    }
    breakdown_header();
    if (n > 1 && n <= MAX_STEP_ROWS_PRINTED) {
        for (size_t i = 0; i < n; i++) {
            char s[32];
            snprintf(s, sizeof s, "%lld", (long long)r->sel[i]);
            breakdown_row(s, "rank 0", &v0[i * 6]);
            breakdown_row(s, "max", &vm[i * 6]);
        }
    }
    stats_rows("rank 0", v0, n);
    stats_rows("max", vm, n);
    if (ev) { /* activation recomputation: compute the backward ran again */
        double rec0 = 0, recm = 0, span0 = 0;
        for (size_t i = 0; i < n; i++) {
            double mx = 0;
            for (size_t p = 0; p < W; p++) mx = a->g[i * W + p].rec > mx ? a->g[i * W + p].rec : mx;
            rec0 += a->g[i * W].rec;
            recm += mx;
            span0 += a->g[i * W].span;
        }
        if (recm > 0)
            printf("  recomputation (phase 'recompute', inside backward): %.3f ms per step on rank 0 "
                   "(%.1f%% of its step), %.3f ms max over ranks\n",
                   rec0 / (double)n * 1e-6, span0 > 0 ? 100.0 * rec0 / span0 : 0.0, recm / (double)n * 1e-6);
        /* AdamW beside the next forward (rank 0, mean per step) */
        double side0 = 0;
        for (size_t i = 0; i < n; i++) side0 += a->g[i * W].side;
        if (side0 > 0)
            printf("  AdamW beside the next forward (stream 'optimizer', rank 0): %.3f ms of kernels per step, in no\n"
                   "    column: they run during the next step's forward, whose column includes the time they slow it\n"
                   "    and its waits for them (DX_OPT_OVERLAP=0 runs them in the optimizer column instead)\n",
                   side0 / (double)n * 1e-6);
        /* ops beside the weight gradients (rank 0, mean per step) */
        double aux0 = 0;
        size_t auxn = 0;
        for (size_t i = 0; i < n; i++) aux0 += a->g[i * W].aux, auxn += a->g[i * W].aux_n;
        if (auxn > 0)
            printf("  RMSNorm's backward beside the gate|up weight gradients (stream 'aux', rank 0): %.3f ms of\n"
                   "    kernels per step (%.1f calls of %.1f us), on a few SMs while the GEMMs run on the rest: in no\n"
                   "    column and not in the tables below (DX_NORM_OVERLAP=0 runs them on the compute stream)\n",
                   aux0 / (double)n * 1e-6, (double)auxn / (double)n, aux0 / (double)auxn * 1e-3);
        /* optimizer offload (rank 0, mean per step) */
        double o[6] = {0, 0, 0, 0, 0, 0};
        int nredo = 0;
        for (size_t i = 0; i < n; i++) {
            const group_stats *g = &a->g[i * W];
            o[0] += g->hadam;
            o[1] += g->d2h;
            o[2] += g->h2d;
            o[3] += g->cwait;
            o[4] += g->hadam_bwd;
            o[5] += g->hredo;
            nredo += g->redo_step;
        }
        if (o[0] + o[1] + o[2] > 0)
            printf("  optimizer offload (rank 0, per step): host AdamW %.3f ms, copies device->host %.3f ms and "
                   "host->device %.3f ms (copy streams), host waiting for copies %.3f ms (%.1f%% of its step)\n",
                   o[0] / (double)n * 1e-6, o[1] / (double)n * 1e-6, o[2] / (double)n * 1e-6, o[3] / (double)n * 1e-6,
                   span0 > 0 ? 100.0 * o[3] / span0 : 0.0);
        if (o[4] > 0)
            printf("    of the host AdamW, %.3f ms ran inside the backward (early update%s)\n", o[4] / (double)n * 1e-6,
                   nredo ? ", speculative with clipping" : "");
        if (nredo)
            printf("    and %.3f ms redid speculative updates in %d of %zu steps (the norm clipped: op adamw_redo)\n",
                   o[5] / (double)n * 1e-6, nredo, n);
    }
    printf("\n");
    free(v0);
    free(vm);
}

/* A table row: op, module and (exposed-communication table) phase, sorted by ns descending. */
typedef struct {
    int op, module, phase;
    double ns;
} op_row;

static int cmp_op_row(const void *a, const void *b)
{
    const op_row *x = a, *y = b;
    if (x->ns != y->ns) return x->ns < y->ns ? 1 : -1;
    if (x->op != y->op) return x->op - y->op;
    if (x->module != y->module) return x->module - y->module;
    return x->phase - y->phase;
}

static void print_top(const report *r, const analysis *a, int top)
{
    if (!use_events(r, a)) {
        printf("Top operators: not available (no op or module events in this trace)\n\n");
        return;
    }
    op_row rows[DX_OP_COUNT * DX_MOD_COUNT];
    int n = 0;
    for (int o = 0; o < DX_OP_COUNT; o++)
        for (int m = 0; m < DX_MOD_COUNT; m++)
            if (a->op_count[o][m] > 0) rows[n++] = (op_row){o, m, 0, a->op_ns[o][m]};
    qsort(rows, (size_t)n, sizeof rows[0], cmp_op_row);
    printf("Top operators (by op and module, all ranks; share = %% of the summed step time of "
           "all ranks; %d of %d shown)\n", n < top ? n : top, n);
    printf("  %-16s %-10s %8s %12s %12s %8s %10s %9s\n", "op", "module", "count", "total ms",
           "mean us", "share %", "GFLOP/s", "GB/s");
    for (int i = 0; i < n && i < top; i++) {
        int o = rows[i].op, m = rows[i].module;
        double ns = a->op_ns[o][m];
        long long c = a->op_count[o][m];
        printf("  %-16s %-10s %8lld %12.3f %12.3f", o == DX_OP_MODULE ? "(module span)" : dx_op_names[o],
               dx_module_names[m], c, ns / 1e6, c ? ns / (double)c / 1e3 : 0.0);
        if (a->span_sum > 0)
            printf(" %8.2f", 100.0 * ns / a->span_sum);
        else
            printf(" %8s", "-");
        if (ns > 0 && a->op_flops[o][m] > 0)
            printf(" %10.2f", a->op_flops[o][m] / ns);
        else
            printf(" %10s", "-");
        if (ns > 0 && a->op_bytes[o][m] > 0)
            printf(" %9.2f", a->op_bytes[o][m] / ns);
        else
            printf(" %9s", "-");
        printf("\n");
    }
    printf("\n");
}

/* Where the exposed communication is: collectives by op, module and phase, with the part of
 * their time that no compute-stream or host op covers. */
static void print_exposed(const report *r, const analysis *a)
{
    if (!use_events(r, a)) return;
    op_row rows[DX_OP_COUNT * DX_MOD_COUNT * DX_PH_COUNT];
    int n = 0;
    for (int o = 0; o < DX_OP_COUNT; o++)
        for (int m = 0; m < DX_MOD_COUNT; m++)
            for (int ph = 0; ph < DX_PH_COUNT; ph++)
                if (a->comm_count[o][m][ph] > 0) rows[n++] = (op_row){o, m, ph, a->exp_ns[o][m][ph]};
    if (!n) return;
    qsort(rows, (size_t)n, sizeof rows[0], cmp_op_row);
    double per = (double)r->n_sel * (double)r->world; /* (step, rank) groups */
    printf("Exposed communication (per step, mean over ranks; exposed = time of the collective "
           "not covered by any compute-stream or host op)\n");
    printf("  %-16s %-10s %-10s %8s %10s %12s %10s\n", "op", "module", "phase", "count", "comm ms",
           "exposed ms", "exposed %");
    double tc = 0, te = 0;
    for (int i = 0; i < n; i++) {
        int o = rows[i].op, m = rows[i].module, ph = rows[i].phase;
        double c = a->comm_ns[o][m][ph], x = a->exp_ns[o][m][ph];
        tc += c;
        te += x;
        printf("  %-16s %-10s %-10s %8.1f %10.3f %12.3f %10.1f\n",
               o == DX_OP_MODULE ? "(module span)" : dx_op_names[o], dx_module_names[m],
               dx_phase_names[ph], (double)a->comm_count[o][m][ph] / per, c / per / 1e6,
               x / per / 1e6, c > 0 ? 100.0 * x / c : 0.0);
    }
    printf("  %-16s %-10s %-10s %8s %10.3f %12.3f %10.1f\n\n", "total", "", "", "", tc / per / 1e6,
           te / per / 1e6, tc > 0 ? 100.0 * te / tc : 0.0);
}

/* Pipeline stages (pp > 1): per stage, the mean over its ranks and the selected steps of the step
 * span, busy time, pipeline recv / send time, idle time (the step span covered by no op) and
 * bytes sent; measured bubble = (recv wait in the forward and backward phases + idle) / step span
 * (sums over the stage's (step, rank) groups), next to the schedule's theoretical
 * (p-1)/(v m + p-1). A stage waits for its neighbour either inside a recv span (a blocking
 * receive: the CPU backend) or before it, with no op running (the GPU, where the host issues the
 * receive once the schedule's previous action is done): the bubble counts both. */
static void print_pipeline(const report *r, const analysis *a)
{
    if (r->pp <= 1) return;
    if (!use_events(r, a)) {
        printf("Pipeline (per stage): not available (no op or module events in this trace)\n\n");
        return;
    }
    size_t W = (size_t)r->world;
    printf("Pipeline (per stage; ms per step, mean over the stage's ranks; busy = compute-stream "
           "forward/backward time, recv wait = pipeline recv spans, idle = step span covered by no "
           "op, bubble = (recv wait in forward/backward + idle) / step; theory = (p-1)/(v m + p-1))\n");
    printf("  %5s %5s %10s %10s %13s %9s %9s %13s %8s %8s\n", "stage", "ranks", "step ms", "busy ms",
           "recv wait ms", "send ms", "idle ms", "sent MiB", "bubble", "theory");
    double tot_bytes = 0, all_span = 0, all_fb = 0;
    for (int st = 0; st < r->pp; st++) {
        int nr = 0;
        for (size_t p = 0; p < W; p++) nr += r->grid[3 * p] == st;
        double sum[6] = {0}, bytes = 0;
        size_t c = 0;
        for (size_t i = 0; i < r->n_sel; i++)
            for (size_t p = 0; p < W; p++) {
                const group_stats *g = &a->g[i * W + p];
                if (r->grid[3 * p] != st || !g->has) continue;
                sum[0] += g->span;
                sum[1] += g->busy;
                sum[2] += g->recv;
                sum[3] += g->send;
                sum[4] += g->recv_fb;
                sum[5] += g->idle;
                bytes += g->send_bytes;
                c++;
            }
        printf("  %5d %5d", st, nr);
        if (!c) {
            printf(" %10s %10s %13s %9s %9s %13s %8s", "-", "-", "-", "-", "-", "-", "-");
        } else {
            print_ms(sum[0] / (double)c, 10);
            print_ms(sum[1] / (double)c, 10);
            print_ms(sum[2] / (double)c, 13);
            print_ms(sum[3] / (double)c, 9);
            print_ms(sum[5] / (double)c, 9);
            /* bytes sent per step by the stage's ranks together */
            printf(" %13.3f", bytes / (double)r->n_sel / (1024.0 * 1024.0));
            if (sum[0] > 0)
                printf(" %8.3f", (sum[4] + sum[5]) / sum[0]);
            else
                printf(" %8s", "-");
        }
        if (isnan(r->bubble_theory))
            printf(" %8s\n", "-");
        else
            printf(" %8.3f\n", r->bubble_theory);
        tot_bytes += bytes;
        all_span += sum[0];
        all_fb += sum[4] + sum[5];
    }
    printf("  %-11s %55s %13.3f", "all stages", "", tot_bytes / (double)r->n_sel / (1024.0 * 1024.0));
    if (all_span > 0)
        printf(" %8.3f", all_fb / all_span);
    else
        printf(" %8s", "-");
    if (isnan(r->bubble_theory))
        printf(" %8s\n", "-");
    else
        printf(" %8.3f\n", r->bubble_theory);
    printf("  bytes sent between stages per step (all ranks): %.0f\n\n", tot_bytes / (double)r->n_sel);
}

/* One row of the TP table (skipped when the row has no collectives); adds to the run totals. */
static void print_tp_row(const report *r, const analysis *a, int row, double tot[2])
{
    size_t W = (size_t)r->world;
    long long calls = 0;
    for (int k = 0; k < TP_OPS; k++) calls += a->tp_count[(size_t)row * TP_OPS + (size_t)k];
    if (!calls) return;
    int nr = 0;
    for (size_t p = 0; p < W; p++) nr += a->tp_ranks[(size_t)row * W + p];
    double per = (double)r->n_sel * (double)(nr ? nr : 1);
    if (row <= a->max_layer)
        printf("  %-10d %5d", row, nr);
    else
        printf("  %-10s %5d", dx_module_names[row - a->max_layer - 1], nr);
    double ns = 0, xs = 0;
    for (int k = 0; k < TP_OPS; k++) {
        size_t j = (size_t)row * TP_OPS + (size_t)k;
        printf(" %7.1f %9.3f", (double)a->tp_count[j] / per, a->tp_ns[j] / per / 1e6);
        ns += a->tp_ns[j];
        xs += a->tp_exp_ns[j];
    }
    printf(" %10.3f %11.3f\n", ns / per / 1e6, xs / per / 1e6);
    tot[0] += ns;
    tot[1] += xs;
}

/* Tensor-parallel collectives (tp > 1) of compute modules per layer (rows outside layers named by
 * module: embedding first, then the layers, the final rmsnorm and lm_head): calls and ms per
 * step, mean over the ranks that recorded the row, and the part of that time not covered by
 * compute-stream or host ops (exposed). The last row is the mean over all ranks of their whole TP time. */
static void print_tp(const report *r, const analysis *a)
{
    if (r->tp <= 1) return;
    if (!use_events(r, a) || !a->any_tp) {
        printf("Tensor-parallel collectives per layer: not available (no TP collectives among the "
               "events of this trace)\n\n");
        return;
    }
    printf("Tensor-parallel collectives per layer (per step, mean over the ranks that hold the "
           "layer; AR = all_reduce, AG = all_gather, RS = reduce_scatter; n = calls; exposed = not "
           "covered by compute-stream or host ops)\n");
    printf("  %-10s %5s %7s %9s %7s %9s %7s %9s %10s %11s\n", "layer", "ranks", "AR n", "AR ms",
           "AG n", "AG ms", "RS n", "RS ms", "total ms", "exposed ms");
    double tot[2] = {0, 0};
    const int emb = a->max_layer + 1 + DX_MOD_EMBEDDING;
    print_tp_row(r, a, emb, tot);
    for (int row = 0; row < a->tp_rows; row++)
        if (row != emb) print_tp_row(r, a, row, tot);
    double per = (double)r->n_sel * (double)r->world;
    printf("  %-16s %53s %10.3f %11.3f\n\n", "all (rank mean)", "", tot[0] / per / 1e6,
           tot[1] / per / 1e6);
}

static int col_width(const char *name)
{
    size_t n = strlen(name);
    return n > 9 ? (int)n : 9;
}

static void print_layers(const report *r, const analysis *a)
{
    if (!use_events(r, a)) {
        printf("Per-layer modules: not available (no op or module events in this trace)\n\n");
        return;
    }
    double denom = (double)r->n_sel * (double)r->world * 1e6; /* -> ms per step per rank */
    printf("Per-layer modules (ms per step, mean over ranks; %s summed per module and layer%s)\n",
           a->from_modules ? "module spans" : "ops",
           a->any_comm ? "; exposed = the layer's collectives' time not covered by compute" : "");
    printf("  %-6s", "layer");
    for (int m = 0; m < DX_MOD_COUNT; m++)
        if (a->module_used[m]) printf(" %*s", col_width(dx_module_names[m]), dx_module_names[m]);
    printf(" %10s", "total");
    if (a->any_comm) printf(" %9s", "exposed");
    printf("\n");
    for (int l = 0; l <= a->max_layer + 1; l++) {
        double row = 0;
        int any = 0;
        for (int m = 0; m < DX_MOD_COUNT; m++) {
            row += a->layer_ns[(size_t)l * DX_MOD_COUNT + (size_t)m];
            if (a->layer_ns[(size_t)l * DX_MOD_COUNT + (size_t)m] > 0) any = 1;
        }
        if (!any) continue;
        if (l == a->max_layer + 1)
            printf("  %-6s", "other");
        else
            printf("  %-6d", l);
        for (int m = 0; m < DX_MOD_COUNT; m++) {
            if (!a->module_used[m]) continue;
            int w = col_width(dx_module_names[m]);
            double v = a->layer_ns[(size_t)l * DX_MOD_COUNT + (size_t)m];
            if (v > 0)
                printf(" %*.3f", w, v / denom);
            else
                printf(" %*s", w, "-");
        }
        printf(" %10.3f", row / denom);
        if (a->any_comm) {
            if (a->layer_exp_ns[l] > 0)
                printf(" %9.3f", a->layer_exp_ns[l] / denom);
            else
                printf(" %9s", "-");
        }
        printf("\n");
    }
    printf("\n");
}

static void print_ranks(const report *r, const analysis *a)
{
    size_t W = (size_t)r->world;
    int ev = use_events(r, a);
    printf("Ranks (ms per step, mean over the steps in range; %s)\n",
           ev ? "compute = compute/host ops, comm = time covered by collectives"
              : "from /steps: step = rank 0's step time, compute = forward + backward + optimizer");
    int coords = !is_dp_only(r);
    printf("  %5s %10s %11s %10s %16s %10s %13s %14s%s\n", "rank", "step ms", "compute ms", "comm ms",
           "exposed comm ms", "idle ms", "peak mem MiB", "host peak MiB", coords ? "  pp dp tp" : "");
    int slow = -1, fast = -1;
    double slow_v = 0, fast_v = 0;
    for (size_t p = 0; p < W; p++) {
        double sum[5] = {0};
        size_t c = 0, cs[5] = {0};
        for (size_t i = 0; i < r->n_sel; i++) {
            if (ev) {
                const group_stats *g = &a->g[i * W + p];
                if (!g->has) continue;
                sum[0] += g->span;
                sum[1] += g->compute;
                sum[2] += g->comm;
                sum[3] += g->exposed;
                sum[4] += g->idle;
                c++;
            } else {
                size_t row = r->sel_row[i];
                if (row == SIZE_MAX) continue;
                double f = steps_value(r, r->fwd, row, (int)p), b = steps_value(r, r->bwd, row, (int)p),
                       o = steps_value(r, r->opt, row, (int)p), m = steps_value(r, r->comm, row, (int)p);
                sum[0] += r->step_time_s[row] * 1e9;
                c++;
                if (!isnan(f + b + o)) {
                    sum[1] += f + b + o;
                    cs[1]++;
                }
                if (!isnan(m)) {
                    sum[2] += m;
                    cs[2]++;
                }
            }
        }
        const double peak = max_over_sel(r, r->peak, p), host_peak = max_over_sel(r, r->host_peak, p);
        double mean[5];
        for (int k = 0; k < 5; k++) {
            size_t cnt = ev ? c : (k == 0 ? c : cs[k]);
            mean[k] = cnt && (ev || k < 3) ? sum[k] / (double)cnt : NAN;
        }
        printf("  %5zu", p);
        print_ms(mean[0], 10);
        print_ms(mean[1], 11);
        print_ms(mean[2], 10);
        print_ms(mean[3], 16);
        print_ms(mean[4], 10);
        print_mib(peak, 13);
        print_mib(host_peak, 14);
        if (coords)
            printf("  %2d %2d %2d", (int)r->grid[3 * p], (int)r->grid[3 * p + 1], (int)r->grid[3 * p + 2]);
        printf("\n");
        if (!isnan(mean[1])) {
            if (slow < 0 || mean[1] > slow_v) slow = (int)p, slow_v = mean[1];
            if (fast < 0 || mean[1] < fast_v) fast = (int)p, fast_v = mean[1];
        }
    }
    if (slow >= 0 && fast_v > 0)
        printf("  straggler: slowest rank %d (compute %.3f ms/step), fastest rank %d (%.3f ms/step), "
               "ratio %.3f\n", slow, slow_v / 1e6, fast, fast_v / 1e6, slow_v / fast_v);
    printf("\n");
}

static void print_idle(const report *r, const analysis *a)
{
    if (!use_events(r, a)) {
        printf("Idle: not available (no op or module events in this trace)\n");
        return;
    }
    size_t W = (size_t)r->world;
    printf("Idle (step span not covered by any op; %% of the step span; max = the idlest rank)\n");
    printf("  %6s %12s %9s %10s %9s %9s\n", "step", "rank 0 ms", "rank 0 %", "max ms", "max %",
           "max rank");
    double s0 = 0, sp0 = 0, sm = 0, spm = 0;
    size_t n0 = 0, nm = 0;
    for (size_t i = 0; i < r->n_sel; i++) {
        const group_stats *g0 = &a->g[i * W];
        int mr = -1;
        for (size_t p = 0; p < W; p++) {
            const group_stats *g = &a->g[i * W + p];
            if (g->has && (mr < 0 || g->idle > a->g[i * W + (size_t)mr].idle)) mr = (int)p;
        }
        const group_stats *gm = mr >= 0 ? &a->g[i * W + (size_t)mr] : NULL;
        if (g0->has) {
            s0 += g0->idle;
            sp0 += g0->span;
            n0++;
        }
        if (gm) {
            sm += gm->idle;
            spm += gm->span;
            nm++;
        }
        if (r->n_sel > MAX_STEP_ROWS_PRINTED) continue;
        printf("  %6lld", (long long)r->sel[i]);
        print_ms(g0->has ? g0->idle : NAN, 12);
        if (g0->has && g0->span > 0)
            printf(" %9.2f", 100.0 * g0->idle / g0->span);
        else
            printf(" %9s", "-");
        print_ms(gm ? gm->idle : NAN, 10);
        if (gm && gm->span > 0)
            printf(" %9.2f %9d\n", 100.0 * gm->idle / gm->span, mr);
        else
            printf(" %9s %9s\n", "-", "-");
    }
    printf("  %6s", "mean");
    print_ms(n0 ? s0 / (double)n0 : NAN, 12);
    if (sp0 > 0)
        printf(" %9.2f", 100.0 * s0 / sp0);
    else
        printf(" %9s", "-");
    print_ms(nm ? sm / (double)nm : NAN, 10);
    if (spm > 0)
        printf(" %9.2f %9s\n", 100.0 * sm / spm, "");
    else
        printf(" %9s %9s\n", "-", "");
}

/* ------------------------------------------------------------------------------------------ */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dissect report RUN.h5 [--steps A:B] [--top N] [--chrome OUT.json]\n"
            "                              [--peak-tflops P]\n\n"
            "Summarises a dissect trace: run summary (with the PP x DP x TP grid), step breakdown\n"
            "(forward, backward, optimizer, exposed communication, idle), pipeline stages (PP > 1),\n"
            "top operators, exposed communication by collective, tensor-parallel collectives per\n"
            "layer (TP > 1), per-layer modules, ranks, idle.\n\n"
            "  --steps A:B        steps A..B inclusive (A:, :B and A also work); default: all but\n"
            "                     the first (warm-up) step\n"
            "  --top N            operators listed (default 15)\n"
            "  --peak-tflops P    a rank's peak TFLOP/s (e.g. 989 for an H100 SXM in dense bf16):\n"
            "                     the summary then gives MFU = model TFLOP/s per rank / P\n"
            "                     (default: the GPUs' dense bf16 peaks the trace records, where\n"
            "                     dissect knows them: Hopper GPUs)\n"
            "  --chrome OUT.json  also write a Chrome trace-event file (Perfetto, chrome://tracing)\n"
            "                     with every event (with --steps: the events of those steps): a\n"
            "                     process per rank, a thread per stream and, with PP > 1, a\n"
            "                     micro-batch track\n");
}

static int parse_range(report *r, const char *s)
{
    char *end;
    const char *colon = strchr(s, ':');
    r->range_lo = LLONG_MIN;
    r->range_hi = LLONG_MAX;
    if (!colon) {
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (errno || end == s || *end) return -1;
        r->range_lo = r->range_hi = v;
        return 0;
    }
    if (colon != s) {
        errno = 0;
        r->range_lo = strtoll(s, &end, 10);
        if (errno || end != colon) return -1;
    }
    if (colon[1]) {
        errno = 0;
        r->range_hi = strtoll(colon + 1, &end, 10);
        if (errno || *end) return -1;
    }
    return r->range_lo <= r->range_hi ? 0 : -1;
}

int dx_report_main(int argc, char **argv)
{
    static const struct option opts[] = {{"steps", required_argument, NULL, 's'},
                                         {"top", required_argument, NULL, 't'},
                                         {"chrome", required_argument, NULL, 'c'},
                                         {"peak-tflops", required_argument, NULL, 'p'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    report r;
    memset(&r, 0, sizeof r);
    r.file = -1;
    r.flops_per_token = NAN;
    snprintf(r.flops_why, sizeof r.flops_why, "no /metadata in the trace");
    const char *chrome = NULL;
    int top = 15, o;
    opterr = 0;
    optind = 0;
    while ((o = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (o) {
        case 's':
            if (parse_range(&r, optarg)) {
                fprintf(stderr, "dissect: error: report: --steps '%s': expected A:B with A <= B\n", optarg);
                return 2;
            }
            r.explicit_range = 1;
            break;
        case 't': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (end == optarg || *end || v < 1 || v > 100000) {
                fprintf(stderr, "dissect: error: report: --top '%s': expected a count >= 1\n", optarg);
                return 2;
            }
            top = (int)v;
            break;
        }
        case 'c':
            chrome = optarg;
            break;
        case 'p': {
            char *end;
            errno = 0;
            double v = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(v > 0) || !isfinite(v)) {
                fprintf(stderr, "dissect: error: report: --peak-tflops '%s': expected a positive number "
                        "of TFLOP/s\n", optarg);
                return 2;
            }
            r.peak_tflops = v;
            break;
        }
        case 'h':
            usage(stdout);
            return 0;
        case ':':
            fprintf(stderr, "dissect: error: report: flag '%s' needs a value\n", argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, "dissect: error: report: unknown flag '%s'\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (argc - optind != 1) {
        fprintf(stderr, "dissect: error: report: %s\n",
                argc - optind < 1 ? "missing trace file" : "more than one trace file");
        usage(stderr);
        return 2;
    }
    r.path = argv[optind];

    /* our messages replace HDF5's error stack printing */
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    analysis a;
    memset(&a, 0, sizeof a);
    int rc = open_trace(&r);
    if (!rc) rc = load_steps(&r);
    if (!rc) {
        htri_t ex = H5Lexists(r.file, "events", H5P_DEFAULT);
        if (ex < 0) rc = dx_fail("%s: cannot read the root group (truncated or corrupt file?)", r.path);
        r.has_events = ex > 0;
    }
    if (!rc) rc = select_steps(&r);
    if (!rc && r.has_events) rc = for_each_events(&r, keep_events, NULL);
    if (!rc) rc = analyse(&r, &a);
    if (!rc && chrome) rc = write_chrome(&r, chrome);
    if (!rc) {
        print_summary(&r, &a);
        print_breakdown(&r, &a);
        print_pipeline(&r, &a);
        print_top(&r, &a, top);
        print_exposed(&r, &a);
        print_tp(&r, &a);
        print_layers(&r, &a);
        print_ranks(&r, &a);
        print_idle(&r, &a);
        if (chrome) printf("\nChrome trace written to %s\n", chrome);
        if (fflush(stdout) != 0) rc = dx_fail("report: cannot write to stdout");
    }
    analysis_free(&a);
    report_free(&r);
    if (rc) {
        fprintf(stderr, "dissect: error: %s\n", dx_last_error());
        return 1;
    }
    return 0;
}
