/* HDF5 checkpoint writer; see checkpoint.h. */
#include "checkpoint.h"

#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "trace/h5util.h"

/* One slice of a logical tensor, as sent to rank 0. */
typedef struct {
    char name[96];
    int32_t full_rows, full_cols, row0, col0, rows, cols; /* cols = 0: a vector */
} slice_hdr;

/* Writes a slice into /params/<name> (created with the full shape on first use). */
static int write_slice(hid_t g, const char *path, const slice_hdr *h, const float *data)
{
    hid_t d;
    int rank = h->cols ? 2 : 1, rc = 0;
    if (H5Lexists(g, h->name, H5P_DEFAULT) > 0) {
        d = H5Dopen2(g, h->name, H5P_DEFAULT);
    } else {
        hsize_t dims[2] = {(hsize_t)h->full_rows, (hsize_t)h->full_cols};
        hid_t sp = H5Screate_simple(rank, dims, NULL);
        d = H5Dcreate2(g, h->name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5Sclose(sp);
    }
    if (d < 0) return dx_fail("checkpoint '%s': cannot create %s", path, h->name);
    hsize_t start[2] = {(hsize_t)h->row0, (hsize_t)h->col0}, count[2] = {(hsize_t)h->rows, (hsize_t)h->cols};
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(rank, count, NULL);
    if (fs < 0 || ms < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
        H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, data) < 0)
        rc = dx_fail("checkpoint '%s': cannot write %s", path, h->name);
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    H5Dclose(d);
    return rc;
}

int dx_checkpoint_save(const char *path, dx_model *m, dx_zero *z, dx_comm *world, dx_comm *dp,
                       int tp_rank, int64_t step, const char *config_json)
{
    const int root = world->rank == 0, writer = dp->rank == 0;
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    hid_t f = -1, g = -1;
    int rc = 0;
    if (root) {
        H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
        f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
        if (f < 0) rc = dx_fail("checkpoint '%s': cannot create %s: %s", path, tmp, strerror(errno));
        if (!rc) g = H5Gcreate2(f, "params", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (!rc && (g < 0 || dx_h5_write_str_attr(f, "format", "dissect-checkpoint") ||
                    dx_h5_write_i64_attr(f, "format_version", 1) || dx_h5_write_i64_attr(f, "step", step) ||
                    dx_h5_write_str_attr(f, "config_json", config_json ? config_json : "{}")))
            rc = dx_fail("checkpoint '%s': cannot write metadata", path);
    }
    /* every rank takes part in its DP group's gathers, even after a root failure, so none blocks;
     * the slices this rank writes (DP rank 0; replicated parameters from TP rank 0 only) are
     * kept for the transfer to rank 0 */
    const int np = dx_model_num_params_table(m);
    slice_hdr *hdr = calloc((size_t)np + 1, sizeof *hdr);
    float **data = calloc((size_t)np + 1, sizeof *data);
    int nmine = 0, lrc = hdr && data ? 0 : dx_fail("checkpoint: out of memory");
    for (int i = 0; i < np && !lrc; i++) {
        const dx_param *p = dx_model_param(m, i);
        float *buf = malloc(p->numel * sizeof(float));
        if (!buf) { lrc = dx_fail("checkpoint: out of memory for %s", p->name); break; }
        if (dx_zero_get_master(z, p->group, p->offset, p->numel, buf)) { free(buf); lrc = -1; break; }
        if (!writer || (p->tp_replicated && tp_rank != 0)) { free(buf); continue; }
        slice_hdr *h = &hdr[nmine];
        snprintf(h->name, sizeof h->name, "%s", p->name);
        h->full_rows = p->full_rows;
        h->full_cols = p->full_cols;
        h->row0 = p->row0;
        h->col0 = p->col0;
        h->rows = p->rows;
        h->cols = p->cols;
        data[nmine++] = buf;
    }
    /* rank 0 learns who sends how many slices (-1: that rank failed), then takes them in rank order */
    int *counts = root ? calloc((size_t)world->size, sizeof *counts) : NULL;
    int mine = lrc ? -1 : nmine;
    if (world->gather(world, &mine, counts, sizeof mine, 0)) lrc = -1;
    if (root && !counts) rc = dx_fail("checkpoint: out of memory");
    for (int i = 0; root && !rc && i < nmine; i++) rc = write_slice(g, path, &hdr[i], data[i]);
    for (int r = 1; root && r < world->size; r++) {
        if (counts && counts[r] < 0 && !rc) rc = dx_fail("checkpoint '%s': rank %d could not gather its tensors", path, r);
        for (int i = 0; counts && i < counts[r]; i++) { /* received even after a failure, so no sender blocks */
            slice_hdr h;
            if (world->recv(world, &h, sizeof h, r, 11)) return -1;
            size_t n = (size_t)h.rows * (size_t)(h.cols ? h.cols : 1);
            float *buf = malloc(n * sizeof(float) + 1);
            if (!buf) return dx_fail("checkpoint: out of memory for %s", h.name);
            if (world->recv(world, buf, n * sizeof(float), r, 12)) { free(buf); return -1; }
            if (!rc) rc = write_slice(g, path, &h, buf);
            free(buf);
        }
    }
    for (int i = 0; !root && mine > 0 && i < nmine; i++) {
        size_t n = (size_t)hdr[i].rows * (size_t)(hdr[i].cols ? hdr[i].cols : 1);
        if (world->send(world, &hdr[i], sizeof hdr[i], 0, 11) ||
            world->send(world, data[i], n * sizeof(float), 0, 12))
            lrc = -1;
    }
    for (int i = 0; i < nmine; i++) free(data[i]);
    free(data);
    free(hdr);
    free(counts);
    if (root) {
        if (g >= 0) H5Gclose(g);
        if (f >= 0 && H5Fclose(f) < 0 && !rc) rc = dx_fail("checkpoint '%s': cannot close %s", path, tmp);
        if (!rc && rename(tmp, path)) rc = dx_fail("checkpoint '%s': cannot rename %s: %s", path, tmp, strerror(errno));
        if (rc) remove(tmp);
    }
    return rc || lrc ? -1 : 0;
}
