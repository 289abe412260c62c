/* Small HDF5 helpers shared by the trace writer and reader, checkpoints and dumps. */
#ifndef DX_H5UTIL_H
#define DX_H5UTIL_H

#include <hdf5.h>
#include <stdint.h>

/* A variable-length UTF-8 string type (h5py reads it as str). Close with H5Tclose; -1 on error. */
hid_t dx_h5_vlen_str_type(void);
/* Writes scalar attribute `name` on obj: a UTF-8 string (NULL = ""), or a value of mem_type stored
 * as file_type (e.g. H5T_STD_I64LE / H5T_NATIVE_INT64). Return 0 or -1 (HDF5 error). */
int dx_h5_write_str_attr(hid_t obj, const char *name, const char *value);
int dx_h5_write_scalar_attr(hid_t obj, const char *name, hid_t file_type, hid_t mem_type, const void *v);
/* Reads scalar attribute `name` of obj into *v as mem_type (e.g. H5T_NATIVE_INT64). Returns 0, or -1
 * when it is missing or unreadable. */
int dx_h5_read_scalar_attr(hid_t obj, const char *name, hid_t mem_type, void *v);
/* Adds the elements of every dataset directly in group `name` of loc to *total (products of the
 * dims checked against int64 overflow). 0, or -1 (no such group, an unreadable member, or a sum
 * past INT64_MAX). */
int dx_h5_count_elems(hid_t loc, const char *name, int64_t *total);
/* A variable-length string attribute `name` of obj, as a malloc'ed copy (free it); NULL when it is
 * missing, of another type or unreadable. */
char *dx_h5_read_vlen_str_attr(hid_t obj, const char *name);
static inline int dx_h5_write_i64_attr(hid_t obj, const char *name, int64_t v)
{
    return dx_h5_write_scalar_attr(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}

/* An HDF5 enum over uint8 with names[0..n-1] = values 0..n-1 (-1 on error). */
hid_t dx_h5_enum_type(const char *const *names, int n);
/* The /events compound (events.h's dx_event, phase/module/op/stream as HDF5 enums): the in-memory
 * layout with padding (file = 0) or the packed little-endian file layout (file = 1). */
hid_t dx_h5_event_type(int file);

#endif
