/* HDF5 checkpoint writer; see checkpoint.h. */
#include "checkpoint.h"

#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "trace/h5util.h"

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
        if (!rc && (g < 0 || dx_h5_write_str_attr(f, "format", "dissect-checkpoint") ||
                    dx_h5_write_i64_attr(f, "format_version", 1) || dx_h5_write_i64_attr(f, "step", step) ||
                    dx_h5_write_str_attr(f, "config_json", config_json ? config_json : "{}")))
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
