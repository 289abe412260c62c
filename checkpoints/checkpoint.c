/* HDF5 checkpoint writer; see checkpoint.h. */
#include "checkpoint.h"

#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

static int write_str_attr(hid_t obj, const char *name, const char *value)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(value) + 1);
    H5Tset_strpad(t, H5T_STR_NULLTERM);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    int rc = (a < 0 || H5Awrite(a, t, value) < 0) ? -1 : 0;
    if (a >= 0) H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
    return rc;
}

static int write_i64_attr(hid_t obj, const char *name, int64_t v)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, H5T_NATIVE_INT64, sp, H5P_DEFAULT, H5P_DEFAULT);
    int rc = (a < 0 || H5Awrite(a, H5T_NATIVE_INT64, &v) < 0) ? -1 : 0;
    if (a >= 0) H5Aclose(a);
    H5Sclose(sp);
    return rc;
}

int dx_checkpoint_save(const char *path, dx_model *m, dx_zero *z, dx_comm *dp, int64_t step,
                       const char *config_json)
{
    const int root = dp->rank == 0;
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    hid_t f = -1, g = -1;
    int rc = 0;
    if (root) {
        H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
        f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
        if (f < 0) rc = dx_fail("checkpoint '%s': cannot create %s: %s", path, tmp, strerror(errno));
        if (!rc) g = H5Gcreate2(f, "params", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (!rc && (g < 0 || write_str_attr(f, "format", "dissect-checkpoint") ||
                    write_i64_attr(f, "format_version", 1) || write_i64_attr(f, "step", step) ||
                    write_str_attr(f, "config_json", config_json ? config_json : "{}")))
            rc = dx_fail("checkpoint '%s': cannot write metadata", path);
    }
    /* every rank takes part in the gathers, even after a root failure, so none blocks */
    for (int i = 0; i < dx_model_num_params_table(m); i++) {
        const dx_param *p = dx_model_param(m, i);
        float *buf = malloc(p->numel * sizeof(float));
        if (!buf) {
            free(buf);
            return dx_fail("checkpoint: out of memory for %s", p->name);
        }
        if (dx_zero_get_master(z, p->group, p->offset, p->numel, buf)) {
            free(buf);
            return -1;
        }
        if (root && !rc) {
            hsize_t dims[2] = {(hsize_t)p->rows, (hsize_t)p->cols};
            hid_t sp = H5Screate_simple(p->cols ? 2 : 1, dims, NULL);
            hid_t d = H5Dcreate2(g, p->name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            if (d < 0 || H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
                rc = dx_fail("checkpoint '%s': cannot write %s", path, p->name);
            if (d >= 0) H5Dclose(d);
            H5Sclose(sp);
        }
        free(buf);
    }
    if (root) {
        if (g >= 0) H5Gclose(g);
        if (f >= 0 && H5Fclose(f) < 0 && !rc) rc = dx_fail("checkpoint '%s': cannot close %s", path, tmp);
        if (!rc && rename(tmp, path)) rc = dx_fail("checkpoint '%s': cannot rename %s: %s", path, tmp, strerror(errno));
        if (rc) remove(tmp);
    }
    return rc;
}
