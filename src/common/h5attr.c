#include "h5attr.h"

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
