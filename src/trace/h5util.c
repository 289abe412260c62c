#include "h5util.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "events.h"

hid_t dx_h5_vlen_str_type(void)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0) return -1;
    if (H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0) {
        H5Tclose(t);
        return -1;
    }
    return t;
}

int dx_h5_write_str_attr(hid_t obj, const char *name, const char *value)
{
    const char *v = value ? value : "";
    hid_t t = dx_h5_vlen_str_type();
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = (t >= 0 && sp >= 0) ? H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT) : -1;
    int rc = (a >= 0 && H5Awrite(a, t, &v) >= 0) ? 0 : -1;
    if (a >= 0) H5Aclose(a);
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    return rc;
}

int dx_h5_write_scalar_attr(hid_t obj, const char *name, hid_t file_type, hid_t mem_type, const void *v)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = sp >= 0 ? H5Acreate2(obj, name, file_type, sp, H5P_DEFAULT, H5P_DEFAULT) : -1;
    int rc = (a >= 0 && H5Awrite(a, mem_type, v) >= 0) ? 0 : -1;
    if (a >= 0) H5Aclose(a);
    if (sp >= 0) H5Sclose(sp);
    return rc;
}

/* Elements of all datasets directly in group g into *total. */
static int count_elems(hid_t g, int64_t *total)
{
    H5G_info_t gi;
    if (H5Gget_info(g, &gi) < 0) return -1;
    for (hsize_t i = 0; i < gi.nlinks; i++) {
        /* by index, not by name: a name longer than any buffer here still opens its own object */
        hid_t d = H5Oopen_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, H5P_DEFAULT);
        if (d < 0) return -1;
        hid_t sp = H5Iget_type(d) == H5I_DATASET ? H5Dget_space(d) : -1;
        /* the product of the dims, checked: HDF5's own count wraps (2^62 x 2^62 elements: 0) */
        hsize_t dims[H5S_MAX_RANK];
        int nd = sp < 0 ? -1 : H5Sget_simple_extent_dims(sp, dims, NULL);
        int64_t n = nd < 0 ? -1 : 1;
        for (int k = 0; k < nd && n > 0; k++)
            n = dims[k] > (hsize_t)(INT64_MAX / n) ? -1 : n * (int64_t)dims[k];
        if (sp >= 0) H5Sclose(sp);
        H5Oclose(d);
        if (n < 0 || n > INT64_MAX - *total) return -1; /* no count or sum past int64 */
        *total += n;
    }
    return 0;
}

int dx_h5_count_elems(hid_t loc, const char *name, int64_t *total)
{
    hid_t g = H5Gopen2(loc, name, H5P_DEFAULT);
    if (g < 0) return -1;
    int rc = count_elems(g, total);
    H5Gclose(g);
    return rc;
}

char *dx_h5_read_vlen_str_attr(hid_t obj, const char *name)
{
    if (H5Aexists(obj, name) <= 0) return NULL;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT), ft = a < 0 ? -1 : H5Aget_type(a);
    char *out = NULL;
    if (ft >= 0 && H5Tget_class(ft) == H5T_STRING && H5Tis_variable_str(ft) > 0) {
        hid_t mt = dx_h5_vlen_str_type();
        char *s = NULL;
        if (mt >= 0 && H5Aread(a, mt, &s) >= 0 && s) {
            out = strdup(s);
            H5free_memory(s);
        }
        if (mt >= 0) H5Tclose(mt);
    }
    if (ft >= 0) H5Tclose(ft);
    if (a >= 0) H5Aclose(a);
    return out;
}

int dx_h5_read_scalar_attr(hid_t obj, const char *name, hid_t mem_type, void *v)
{
    if (H5Aexists(obj, name) <= 0) return -1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) return -1;
    int rc = H5Aread(a, mem_type, v) >= 0 ? 0 : -1;
    H5Aclose(a);
    return rc;
}

hid_t dx_h5_enum_type(const char *const *names, int n)
{
    hid_t t = H5Tenum_create(H5T_NATIVE_UINT8);
    if (t < 0) return -1;
    for (int i = 0; i < n; i++) {
        uint8_t v = (uint8_t)i;
        if (H5Tenum_insert(t, names[i], &v) < 0) {
            H5Tclose(t);
            return -1;
        }
    }
    return t;
}

hid_t dx_h5_event_type(int file)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(dx_event));
    if (t < 0) return -1;
    hid_t i64 = file ? H5T_STD_I64LE : H5T_NATIVE_INT64;
    hid_t i32 = file ? H5T_STD_I32LE : H5T_NATIVE_INT32;
    hid_t i16 = file ? H5T_STD_I16LE : H5T_NATIVE_INT16;
    hid_t ph = dx_h5_enum_type(dx_phase_names, DX_PH_COUNT);
    hid_t mod = dx_h5_enum_type(dx_module_names, DX_MOD_COUNT);
    hid_t op = dx_h5_enum_type(dx_op_names, DX_OP_COUNT);
    hid_t st = dx_h5_enum_type(dx_stream_names, DX_STREAM_COUNT);
    hid_t gr = dx_h5_enum_type(dx_group_names, DX_GROUP_COUNT);
    int ok = ph >= 0 && mod >= 0 && op >= 0 && st >= 0 && gr >= 0;
    ok = ok && H5Tinsert(t, "start_ns", offsetof(dx_event, start_ns), i64) >= 0;
    ok = ok && H5Tinsert(t, "end_ns", offsetof(dx_event, end_ns), i64) >= 0;
    ok = ok && H5Tinsert(t, "bytes", offsetof(dx_event, bytes), i64) >= 0;
    ok = ok && H5Tinsert(t, "flops", offsetof(dx_event, flops), i64) >= 0;
    ok = ok && H5Tinsert(t, "rank", offsetof(dx_event, rank), i32) >= 0;
    ok = ok && H5Tinsert(t, "step", offsetof(dx_event, step), i32) >= 0;
    ok = ok && H5Tinsert(t, "micro", offsetof(dx_event, micro), i16) >= 0;
    ok = ok && H5Tinsert(t, "layer", offsetof(dx_event, layer), i16) >= 0;
    ok = ok && H5Tinsert(t, "phase", offsetof(dx_event, phase), ph) >= 0;
    ok = ok && H5Tinsert(t, "module", offsetof(dx_event, module), mod) >= 0;
    ok = ok && H5Tinsert(t, "op", offsetof(dx_event, op), op) >= 0;
    ok = ok && H5Tinsert(t, "stream", offsetof(dx_event, stream), st) >= 0;
    ok = ok && H5Tinsert(t, "pp", offsetof(dx_event, pp), i16) >= 0;
    ok = ok && H5Tinsert(t, "dp", offsetof(dx_event, dp), i16) >= 0;
    ok = ok && H5Tinsert(t, "tp", offsetof(dx_event, tp), i16) >= 0;
    ok = ok && H5Tinsert(t, "group", offsetof(dx_event, group), gr) >= 0;
    if (ok && file) ok = H5Tpack(t) >= 0; /* drop the padding bytes on disk */
    if (ph >= 0) H5Tclose(ph);
    if (mod >= 0) H5Tclose(mod);
    if (op >= 0) H5Tclose(op);
    if (st >= 0) H5Tclose(st);
    if (gr >= 0) H5Tclose(gr);
    if (!ok) {
        H5Tclose(t);
        return -1;
    }
    return t;
}
