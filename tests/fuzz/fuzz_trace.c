/* Fuzz harness: the trace reader of `dissect report` (src/report/report.c: dx_report_main,
 * with --steps, --top and --chrome), structure-aware.
 *
 * Mutating the raw bytes of an HDF5 file mostly exercises HDF5's own parser, not dissect's. So
 * the input bytes drive a generator that writes a well-formed HDF5 file with adversarial
 * content, the trace layout of src/trace/trace.h bent in the ways a damaged, foreign or hostile
 * trace could be: the root attributes (format, world_size: missing, wrong type, 0, negative,
 * huge), /metadata (grid sizes that do not multiply to the world, /metadata/grid of the wrong
 * shape or type or with ranks outside the grid, the string attributes as fixed-length or
 * numbers), /steps (absent, not a compound, fields missing or of other types, per-rank arrays of
 * the wrong width, duplicate / negative / extreme steps, NaN times, extents far past the data
 * written), /events (absent, old layout without pp/dp/tp, fields missing or of other types,
 * ranks and steps out of range, enum values past the names, end < start, extreme times and
 * layers, deflated chunks) and now and then a file cut short. Every choice reads bytes from the
 * input, and 0 (also past the input's end) is the ordinary choice: the empty input is a valid
 * 2-rank trace.
 *
 * Checked: dx_report_main returns 0, or 1 with a message naming the trace (or the --chrome
 * file); it leaves no HDF5 identifier open; an accepted --chrome output is valid JSON with the
 * trace's ranks as processes, and no OUT.json.tmp is left behind. */
#include "fuzz_util.h"
#include "h5gen.h"

#include <cjson/cJSON.h>
#include <math.h>

#include "report/report.h"
#include "trace/events.h"
#include "trace/h5util.h"

#define MAX_STEPS 64

typedef struct {
    fz_bytes *b;
    int world; /* the world the content is shaped for (not necessarily the attribute's) */
    int tp, pp, dp;
    int64_t steps[MAX_STEPS]; /* step numbers written to /steps (for /events and --steps) */
    int n_steps;
} gen;

/* tp x pp x dp = world, tp and pp chosen among the divisors. */
static void pick_grid(gen *g)
{
    int div[32], n = 0;
    for (int d = 1; d <= g->world && n < 32; d++)
        if (g->world % d == 0) div[n++] = d;
    g->tp = div[fz_below(g->b, (unsigned)n)];
    int rest = g->world / g->tp;
    n = 0;
    for (int d = 1; d <= rest && n < 32; d++)
        if (rest % d == 0) div[n++] = d;
    g->pp = div[fz_below(g->b, (unsigned)n)];
    g->dp = rest / g->pp;
}

/* A string attribute, or (rarely) the same as fixed-length, a number, or absent. */
static void gen_str_attr(gen *g, hid_t obj, const char *name, const char *value)
{
    switch (fz_below(g->b, 8)) {
    case 5: h5g_attr_str(obj, name, value, 1); break;
    case 6: h5g_attr_i64(obj, name, 7); break;
    case 7: break; /* absent */
    default: h5g_attr_str(obj, name, value, 0); break;
    }
}

/* An integer attribute: v, or absent, a wild value, a double, a string. */
static void gen_int_attr(gen *g, hid_t obj, const char *name, int64_t v)
{
    switch (fz_below(g->b, 16)) {
    case 11: break;
    case 12: h5g_attr_i64(obj, name, fz_i64_wild(g->b)); break;
    case 13: h5g_attr_f64(obj, name, (double)v + 0.5); break;
    case 14: h5g_attr_str(obj, name, "2", 0); break;
    case 15: h5g_attr_i32(obj, name, (int32_t)fz_i64_wild(g->b)); break;
    default: h5g_attr_i32(obj, name, (int32_t)v); break;
    }
}

static void gen_root(gen *g, hid_t f)
{
    switch (fz_below(g->b, 16)) {
    case 11: h5g_attr_str(f, "format", "dissect-trace", 1); break;
    case 12: break;
    case 13: h5g_attr_str(f, "format", "dissect-checkpoint", 0); break;
    case 14: h5g_attr_i64(f, "format", 1); break;
    case 15: h5g_attr_str(f, "format", "dissect-trace-but-much-longer-than-the-buffer-of-64-bytes-that-holds-it", 0); break;
    default: h5g_attr_str(f, "format", "dissect-trace", 0); break;
    }
    h5g_attr_i32(f, "format_version", 1);
    g->world = 1 + (int)fz_below(g->b, 4);
    if (g->world == 1 && fz_rare(g->b, 8)) g->world = 1 + (int)fz_below(g->b, 64);
    gen_int_attr(g, f, "world_size", g->world);
}

static void gen_metadata(gen *g, hid_t f)
{
    pick_grid(g);
    unsigned kind = fz_below(g->b, 16);
    if (kind == 13) return; /* no /metadata: a DP-only job */
    if (kind == 14) {       /* /metadata is a dataset */
        hsize_t d1[1] = {1};
        int32_t v = 0;
        h5g_dataset(f, "metadata", H5T_NATIVE_INT32, 1, d1, &v, 0, 0);
        return;
    }
    hid_t m = H5Gcreate2(f, "metadata", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5G_OK(m);
    if (kind != 15) { /* 15: an empty /metadata (a trace written before the grid) */
        static const char *const levels[] = {"op", "module", "step"};
        static const char *const scheds[] = {"1f1b", "gpipe", "interleaved-1f1b", "none"};
        gen_str_attr(g, m, "trace_level", levels[fz_below(g->b, 3)]);
        gen_int_attr(g, m, "tensor_model_parallel_size", g->tp);
        gen_int_attr(g, m, "pipeline_model_parallel_size", g->pp);
        gen_int_attr(g, m, "data_parallel_size", g->dp);
        gen_int_attr(g, m, "sequence_parallel", fz_below(g->b, 2));
        gen_int_attr(g, m, "num_model_chunks", 1 + fz_below(g->b, 3));
        gen_int_attr(g, m, "num_micro_batches", 1 + fz_below(g->b, 8));
        if (fz_rare(g->b, 16))
            gen_str_attr(g, m, "pipeline_schedule",
                         "a-schedule-name-longer-than-the-32-byte-buffer-of-the-report");
        else
            gen_str_attr(g, m, "pipeline_schedule", scheds[fz_below(g->b, 4)]);
        switch (fz_below(g->b, 8)) {
        case 5: break;
        case 6: h5g_attr_f64(m, "pipeline_bubble_theory", NAN); break;
        case 7: h5g_attr_str(m, "pipeline_bubble_theory", "0.5", 0); break;
        default: h5g_attr_f64(m, "pipeline_bubble_theory", (double)fz_below(g->b, 100) / 100.0); break;
        }
    }
    /* /metadata/grid [world, 3]: (pp, dp, tp) of each rank, TP innermost */
    unsigned gk = fz_below(g->b, 16);
    if (gk < 10 || gk == 15) {
        hsize_t dims[2] = {(hsize_t)g->world, 3};
        if (gk == 15) dims[fz_below(g->b, 2)] += 1;
        int32_t *v = calloc(dims[0] * dims[1], sizeof *v);
        if (!v) abort();
        for (hsize_t r = 0; r < dims[0]; r++) {
            int rr = (int)r;
            v[r * dims[1] + 0] = rr / (g->tp * g->dp) % g->pp;
            v[r * dims[1] + 1] = rr / g->tp % g->dp;
            if (dims[1] > 2) v[r * dims[1] + 2] = rr % g->tp;
        }
        if (fz_rare(g->b, 32)) v[fz_below(g->b, (unsigned)(dims[0] * dims[1]))] = (int32_t)fz_i64_wild(g->b);
        h5g_dataset(m, "grid", H5T_NATIVE_INT32, 2, dims, v, 0, 0);
        free(v);
    } else if (gk == 10) { /* 1-D */
        hsize_t dims[1] = {(hsize_t)g->world * 3};
        int32_t *v = calloc(dims[0], sizeof *v);
        if (!v) abort();
        h5g_dataset(m, "grid", H5T_NATIVE_INT32, 1, dims, v, 0, 0);
        free(v);
    } else if (gk == 11) { /* doubles: converted by HDF5 */
        hsize_t dims[2] = {(hsize_t)g->world, 3};
        double *v = calloc(dims[0] * 3, sizeof *v);
        if (!v) abort();
        for (int r = 0; r < g->world; r++) v[3 * r + 1] = fz_rare(g->b, 16) ? 1e300 : r;
        h5g_dataset(m, "grid", H5T_NATIVE_DOUBLE, 2, dims, v, 0, 0);
        free(v);
    } else if (gk == 12) { /* strings: no conversion */
        hsize_t dims[2] = {(hsize_t)g->world, 3};
        hid_t t = H5Tcopy(H5T_C_S1);
        H5G_OK(H5Tset_size(t, 4));
        char *v = calloc(dims[0] * 3, 4);
        if (!v) abort();
        h5g_dataset(m, "grid", t, 2, dims, v, 0, 0);
        free(v);
        H5Tclose(t);
    } else if (gk == 13) { /* a group */
        hid_t sub = H5Gcreate2(m, "grid", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5G_OK(sub);
        H5Gclose(sub);
    } /* 14: absent */
    H5Gclose(m);
}

/* ------------------------------------------------------------------------------------------ */
/* /steps: a compound of some of the writer's fields, each maybe of another type or width */

typedef struct {
    const char *name;
    int is_int;     /* the writer's type: int64 (1) or double (0) */
    int per_rank;   /* an array of world values */
} step_field;

static const step_field step_fields[] = {
    {"step", 1, 0},         {"loss", 0, 0},         {"tokens", 1, 0},       {"step_time_s", 0, 0},
    {"forward_s", 0, 1},    {"backward_s", 0, 1},   {"optimizer_s", 0, 1},  {"comm_s", 0, 1},
    {"peak_mem_bytes", 1, 1},
};
#define N_STEP_FIELDS (sizeof step_fields / sizeof step_fields[0])

/* A step number: ascending from 1 mostly; repeats, 0, negatives and extremes now and then. */
static int64_t gen_step(gen *g, int row)
{
    switch (fz_below(g->b, 32)) {
    case 28: return row;             /* a repeat of the previous (or 0) */
    case 29: return -(int64_t)fz_below(g->b, 5);
    case 30: return fz_i64_wild(g->b);
    case 31: return (int64_t)INT32_MAX + 1 + row;
    default: return row + 1;
    }
}

static double gen_seconds(gen *g)
{
    switch (fz_below(g->b, 32)) {
    case 28: return NAN;
    case 29: return -1.0;
    case 30: return INFINITY;
    case 31: return 1e300;
    default: return (1 + fz_below(g->b, 200)) * 1e-3;
    }
}

static void gen_steps(gen *g, hid_t f)
{
    unsigned kind = fz_below(g->b, 16);
    if (kind == 12) return; /* absent */
    if (kind == 13 || kind == 14) { /* not a 1-D compound */
        hsize_t dims[2] = {3, 2};
        int64_t v[6] = {1, 2, 3, 4, 5, 6};
        if (kind == 13) h5g_dataset(f, "steps", H5T_NATIVE_INT64, 1, dims, v, 0, 0);
        else {
            hid_t grp = H5Gcreate2(f, "steps", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            H5G_OK(grp);
            H5Gclose(grp);
        }
        return;
    }
    /* the layout: each field present (mostly), as the writer's type or another */
    hid_t ftype[N_STEP_FIELDS];
    size_t off[N_STEP_FIELDS], size = 0;
    hsize_t width[N_STEP_FIELDS];
    for (size_t k = 0; k < N_STEP_FIELDS; k++) {
        const step_field *sf = &step_fields[k];
        unsigned c = fz_below(g->b, 32);
        hid_t base = sf->is_int ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE;
        if (c == 24) base = sf->is_int ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64;
        if (c == 25) base = H5T_NATIVE_INT32;
        if (c == 26) base = H5T_NATIVE_UINT8;
        width[k] = sf->per_rank ? (hsize_t)g->world : 1;
        if (c == 27) width[k] = (hsize_t)g->world + 1 + fz_below(g->b, 3);
        int array = sf->per_rank && c != 28;
        if (c == 28) width[k] = 1;
        if (c >= 29) { /* absent */
            ftype[k] = -1;
            continue;
        }
        ftype[k] = array ? H5Tarray_create2(base, 1, &width[k]) : H5Tcopy(base);
        H5G_OK(ftype[k]);
        off[k] = size;
        size += H5Tget_size(ftype[k]);
    }
    if (!size) { /* every field absent: a compound needs a member */
        ftype[1] = H5Tcopy(H5T_NATIVE_DOUBLE);
        off[1] = 0;
        size = 8;
    }
    hid_t t = H5Tcreate(H5T_COMPOUND, size);
    H5G_OK(t);
    for (size_t k = 0; k < N_STEP_FIELDS; k++)
        if (ftype[k] >= 0) H5G_OK(H5Tinsert(t, step_fields[k].name, off[k], ftype[k]));
    int rows = (int)(fz_below(g->b, 6) + 3) % 6; /* 3 by default */
    if (fz_rare(g->b, 16)) rows = (int)fz_below(g->b, MAX_STEPS + 1);
    g->n_steps = 0;
    uint8_t *buf = calloc((size_t)(rows ? rows : 1), size ? size : 1);
    if (!buf) abort();
    for (int r = 0; r < rows; r++) {
        int64_t step = gen_step(g, r);
        g->steps[g->n_steps++] = step;
        for (size_t k = 0; k < N_STEP_FIELDS; k++) {
            if (ftype[k] < 0) continue;
            hid_t base = H5Tget_class(ftype[k]) == H5T_ARRAY ? H5Tget_super(ftype[k]) : H5Tcopy(ftype[k]);
            size_t esz = H5Tget_size(base);
            int is_float = H5Tget_class(base) == H5T_FLOAT;
            H5Tclose(base);
            size_t n = H5Tget_size(ftype[k]) / esz;
            for (size_t i = 0; i < n; i++) {
                uint8_t *p = buf + (size_t)r * size + off[k] + i * esz;
                double dv = k == 0 ? (double)step : gen_seconds(g);
                int64_t iv = k == 0 ? step : (k == 2 ? 1000 * (int64_t)fz_below(g->b, 100) : (int64_t)fz_below(g->b, 1 << 8) << 20);
                if (k == 8 && fz_rare(g->b, 16)) iv = fz_i64_wild(g->b);
                if (is_float) memcpy(p, &dv, 8);
                else if (esz == 8) memcpy(p, &iv, 8);
                else if (esz == 4) { int32_t v32 = (int32_t)iv; memcpy(p, &v32, 4); }
                else *p = (uint8_t)iv;
            }
        }
    }
    hsize_t dims[1] = {(hsize_t)rows};
    unsigned ext = fz_below(g->b, 64);
    if (ext >= 62) { /* the extent runs past the rows written (a torn or hostile file) */
        h5g_dataset(f, "steps", t, 1, dims, rows ? buf : NULL, 1, 0);
        hid_t d = H5Dopen2(f, "steps", H5P_DEFAULT);
        H5G_OK(d);
        hsize_t big[1] = {ext == 62 ? (hsize_t)rows + 1000 : ((hsize_t)1 << (40 + fz_below(g->b, 24)))};
        H5G_OK(H5Dset_extent(d, big));
        H5Dclose(d);
    } else {
        h5g_dataset(f, "steps", t, 1, dims, rows ? buf : NULL, ext < 32, 0);
    }
    free(buf);
    H5Tclose(t);
    for (size_t k = 0; k < N_STEP_FIELDS; k++)
        if (ftype[k] >= 0) H5Tclose(ftype[k]);
}

/* ------------------------------------------------------------------------------------------ */
/* /events */

static dx_event gen_event(gen *g, int i)
{
    dx_event e;
    memset(&e, 0, sizeof e);
    e.rank = (int32_t)fz_below(g->b, (unsigned)g->world);
    if (fz_rare(g->b, 8)) e.rank = (int32_t)fz_i64_wild(g->b);
    /* a step of /steps (by default round-robin, so events fall in the default range) */
    e.step = g->n_steps ? (int32_t)g->steps[((unsigned)i + fz_below(g->b, (unsigned)g->n_steps)) % (unsigned)g->n_steps]
                        : 1 + (int32_t)fz_below(g->b, 3);
    if (fz_rare(g->b, 8)) e.step = (int32_t)fz_i64_wild(g->b);
    int64_t t0 = (int64_t)e.step * 1000000 + 1000 * (int64_t)fz_below(g->b, 200);
    e.start_ns = t0;
    e.end_ns = t0 + 1000 * (int64_t)fz_below(g->b, 100);
    if (fz_rare(g->b, 8)) e.start_ns = fz_i64_wild(g->b);
    if (fz_rare(g->b, 8)) e.end_ns = fz_i64_wild(g->b);
    e.bytes = (int64_t)fz_below(g->b, 256) << 10;
    e.flops = (int64_t)fz_below(g->b, 256) << 20;
    if (fz_rare(g->b, 4)) e.bytes = fz_i64_wild(g->b);
    if (fz_rare(g->b, 4)) e.flops = fz_i64_wild(g->b);
    e.micro = (int16_t)((int)fz_below(g->b, 5) - 1);
    e.layer = (int16_t)((int)fz_below(g->b, 6) - 1);
    if (fz_rare(g->b, 8)) e.layer = (int16_t)fz_i64_wild(g->b);
    e.phase = (uint8_t)fz_below(g->b, DX_PH_COUNT + (fz_rare(g->b, 8) ? 250 : 0));
    e.module = (uint8_t)fz_below(g->b, DX_MOD_COUNT + (fz_rare(g->b, 8) ? 240 : 0));
    e.op = (uint8_t)fz_below(g->b, DX_OP_COUNT + (fz_rare(g->b, 8) ? 230 : 0));
    e.stream = (uint8_t)fz_below(g->b, DX_STREAM_COUNT + (fz_rare(g->b, 8) ? 250 : 0));
    if (i % 7 == 0 && !fz_rare(g->b, 32)) { /* a step span now and then */
        e.op = DX_OP_STEP;
        e.module = DX_MOD_STEP;
        e.phase = DX_PH_STEP;
        e.stream = DX_STREAM_HOST;
        e.start_ns = (int64_t)e.step * 1000000;
        e.end_ns = e.start_ns + 400000;
    }
    int r = e.rank >= 0 && e.rank < g->world ? e.rank : 0;
    e.pp = (int16_t)(r / (g->tp * g->dp) % g->pp);
    e.dp = (int16_t)(r / g->tp % g->dp);
    e.tp = (int16_t)(r % g->tp);
    if (fz_rare(g->b, 8)) e.pp = (int16_t)fz_i64_wild(g->b);
    return e;
}

static void gen_events(gen *g, hid_t f)
{
    unsigned kind = fz_below(g->b, 16);
    if (kind >= 12) {
        if (kind == 12) { /* a group */
            hid_t grp = H5Gcreate2(f, "events", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            H5G_OK(grp);
            H5Gclose(grp);
        } else if (kind == 13) { /* not a compound */
            hsize_t dims[1] = {4};
            int64_t v[4] = {0, 1, 2, 3};
            h5g_dataset(f, "events", H5T_NATIVE_INT64, 1, dims, v, 0, 0);
        } /* else absent */
        return;
    }
    int n = (int)(fz_below(g->b, 48) + 24) % 48; /* 24 by default */
    if (fz_rare(g->b, 8)) n = (int)fz_below(g->b, 2000);
    dx_event *ev = calloc((size_t)(n ? n : 1), sizeof *ev);
    if (!ev) abort();
    for (int i = 0; i < n; i++) ev[i] = gen_event(g, i);

    /* the file layout: the writer's, or an older / damaged one */
    hid_t t = dx_h5_event_type(0);
    H5G_OK(t);
    unsigned layout = fz_below(g->b, 16);
    hid_t ft = -1;
    if (layout >= 11) {
        /* 11: no "stream", 12: no "rank", 13: no pp / dp / tp (a trace written before the
         * grid), 14: "pp" stored as a float (HDF5 converts it), 15: "layer" as a string (no
         * conversion: the read fails) */
        ft = H5Tcreate(H5T_COMPOUND, 2 * sizeof(dx_event)); /* packed below */
        H5G_OK(ft);
        size_t off = 0;
        int nm = H5Tget_nmembers(t);
        for (int i = 0; i < nm; i++) {
            char *name = H5Tget_member_name(t, (unsigned)i);
            hid_t mt = H5Tget_member_type(t, (unsigned)i);
            int drop = (layout == 11 && !strcmp(name, "stream")) || (layout == 12 && !strcmp(name, "rank")) ||
                       (layout == 13 && (!strcmp(name, "pp") || !strcmp(name, "dp") || !strcmp(name, "tp")));
            if (layout == 14 && !strcmp(name, "pp")) {
                H5Tclose(mt);
                mt = H5Tcopy(H5T_NATIVE_FLOAT);
            }
            if (layout == 15 && !strcmp(name, "layer")) {
                H5Tclose(mt);
                mt = H5Tcopy(H5T_C_S1);
                H5G_OK(H5Tset_size(mt, 2));
            }
            if (!drop) {
                H5G_OK(H5Tinsert(ft, name, off, mt));
                off += H5Tget_size(mt);
            }
            H5Tclose(mt);
            H5free_memory(name);
        }
        H5G_OK(H5Tpack(ft));
        /* the memory buffer is a dx_event array: write through the full type, store ft */
        hsize_t dims[1] = {(hsize_t)n};
        hid_t sp = H5Screate_simple(1, dims, NULL);
        hid_t d = H5Dcreate2(f, "events", ft, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5G_OK(d);
        if (n && layout != 15) H5G_OK(H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, ev));
        H5Dclose(d);
        H5Sclose(sp);
        H5Tclose(ft);
    } else {
        hid_t file_t = dx_h5_event_type(1);
        H5G_OK(file_t);
        hsize_t dims[1] = {(hsize_t)n};
        int chunked = layout < 8;
        hid_t sp = H5Screate_simple(1, dims, (hsize_t[1]){chunked ? H5S_UNLIMITED : (hsize_t)n});
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        if (chunked) {
            H5G_OK(H5Pset_chunk(dcpl, 1, (hsize_t[1]){layout < 2 ? 64 : layout < 4 ? 16384 : 7})); /* the writer: 16384 */
            if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0 && layout < 6) {
                H5G_OK(H5Pset_shuffle(dcpl));
                H5G_OK(H5Pset_deflate(dcpl, 1));
            }
        }
        hid_t d = H5Dcreate2(f, "events", file_t, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        H5G_OK(d);
        if (n) H5G_OK(H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, ev));
        if (chunked && fz_rare(g->b, 4)) { /* the extent runs past the rows written */
            hsize_t big[1] = {(hsize_t)n + (fz_rare(g->b, 128) ? ((hsize_t)1 << (30 + fz_below(g->b, 30))) : 70000)};
            H5G_OK(H5Dset_extent(d, big));
        }
        H5Dclose(d);
        H5Pclose(dcpl);
        H5Sclose(sp);
        H5Tclose(file_t);
    }
    H5Tclose(t);
    free(ev);
}

/* ------------------------------------------------------------------------------------------ */

static void check_chrome(const char *out, int world)
{
    size_t len = 0;
    char *text = dx_read_file(out, &len);
    FZ_CHECK(text != NULL, "--chrome %s: report returned 0 but the file cannot be read", out);
    cJSON *root = cJSON_ParseWithLength(text, len);
    FZ_CHECK(root != NULL, "--chrome %s is not valid JSON near byte %td", out,
             cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - text : (ptrdiff_t)-1);
    const cJSON *evs = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    FZ_CHECK(cJSON_IsArray(evs), "--chrome: no traceEvents array");
    int names = 0;
    for (const cJSON *e = evs->child; e; e = e->next) {
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(e, "ph"), *pid = cJSON_GetObjectItemCaseSensitive(e, "pid");
        FZ_CHECK(cJSON_IsString(ph) && cJSON_IsNumber(pid), "--chrome: an event without ph or pid");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
        if (cJSON_IsString(nm) && !strcmp(nm->valuestring, "process_name")) names++;
        FZ_CHECK(pid->valueint >= 0 && pid->valueint < world, "--chrome: pid %d outside the %d ranks", pid->valueint,
                 world);
    }
    FZ_CHECK(names == world, "--chrome: %d process names for %d ranks", names, world);
    cJSON_Delete(root);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int inited;
    if (!inited) {
        h5g_init();
        inited = 1;
    }
    fz_bytes b = {data, size};
    gen g;
    memset(&g, 0, sizeof g);
    g.b = &b;
    char path[300], out[300], tmp[310];
    fz_path(path, sizeof path, "trace.h5");
    fz_path(out, sizeof out, "chrome.json");
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    remove(out);

    h5g_ids ids0;
    h5g_count_ids(&ids0);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5G_OK(f);
    gen_root(&g, f);
    gen_metadata(&g, f);
    gen_steps(&g, f);
    gen_events(&g, f);
    H5G_OK(H5Fclose(f));
    if (fz_rare(&b, 4)) h5g_truncate(path, 1 + (long)fz_below(&b, 4096));

    /* the command line */
    char steps_arg[80], top_arg[16];
    char *argv[10];
    int argc = 0;
    argv[argc++] = "report";
    unsigned sk = fz_below(&b, 8);
    if (sk >= 4) {
        long long a = g.n_steps ? (long long)g.steps[fz_below(&b, (unsigned)g.n_steps)] : 1;
        long long z = g.n_steps ? (long long)g.steps[fz_below(&b, (unsigned)g.n_steps)] : 3;
        if (sk == 4) snprintf(steps_arg, sizeof steps_arg, "%lld:%lld", a < z ? a : z, a < z ? z : a);
        else if (sk == 5) snprintf(steps_arg, sizeof steps_arg, "%lld", a);
        else if (sk == 6) snprintf(steps_arg, sizeof steps_arg, "%lld:", a);
        else snprintf(steps_arg, sizeof steps_arg, ":%lld", z);
        argv[argc++] = "--steps";
        argv[argc++] = steps_arg;
    }
    if (fz_below(&b, 4) == 3) {
        snprintf(top_arg, sizeof top_arg, "%u", 1 + fz_below(&b, 40));
        argv[argc++] = "--top";
        argv[argc++] = top_arg;
    }
    int chrome = fz_below(&b, 4) >= 2;
    if (chrome) {
        argv[argc++] = "--chrome";
        argv[argc++] = out;
    }
    argv[argc++] = path;
    argv[argc] = NULL;

    dx_fail("%s", "");
    fz_quiet(1);
    int rc = dx_report_main(argc, argv);
    fz_quiet(0);
    FZ_CHECK(rc == 0 || rc == 1, "dx_report_main returned %d", rc);
    if (rc == 1) {
        const char *msg = dx_last_error();
        FZ_CHECK(strstr(msg, path) || (chrome && strstr(msg, out)), "the error names neither the trace nor the "
                 "--chrome file: %s", msg);
    }
    h5g_check_closed(&ids0, "dx_report_main");
    FZ_CHECK(access(tmp, F_OK) != 0, "%s left behind", tmp);
    if (rc == 0 && chrome) {
        /* the world the report used: the root attribute as the generator wrote it */
        hid_t rf = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        long long world = 0;
        H5G_OK(rf);
        H5G_OK(dx_h5_read_scalar_attr(rf, "world_size", H5T_NATIVE_LLONG, &world));
        H5Fclose(rf);
        check_chrome(out, (int)world);
        remove(out);
    } else {
        FZ_CHECK(access(out, F_OK) != 0, "report failed (rc %d) but wrote %s", rc, out);
    }
    return 0;
}
