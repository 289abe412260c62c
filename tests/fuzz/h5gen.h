/* Small HDF5 writers for the structure-aware generators of fuzz_trace.c and fuzz_checkpoint.c:
 * attributes and datasets of a chosen (often wrong) type, and the check that the code under
 * test closed every HDF5 object it opened. Errors of these writers are the generator's, not the
 * code under test's: they abort. Header-only (static), one translation unit per harness. */
#ifndef DX_FUZZ_H5GEN_H
#define DX_FUZZ_H5GEN_H

#include <hdf5.h>

#include "fuzz_util.h"

#define H5G_OK(x)                                                                                  \
    do {                                                                                           \
        if ((x) < 0) {                                                                             \
            fprintf(stderr, "%s:%d: generator: HDF5 call failed: %s\n", __FILE__, __LINE__, #x);   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Once per process: no HDF5 error stack printing (the code under test reports its errors), and
 * no HDF5 free lists, so that memory HDF5 frees goes back at once: an input then allocates and
 * frees as much as it did, and libFuzzer's per-input leak check (run whenever the counts differ,
 * slow) stays rare. */
static inline void h5g_init(void)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (getenv("DX_FUZZ_H5FL_OFF")) H5G_OK(H5set_free_list_limits(0, 0, 0, 0, 0, 0));
}

/* Scalar attribute of file type ft holding *v (memory type mt). */
static inline void h5g_attr(hid_t obj, const char *name, hid_t ft, hid_t mt, const void *v)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    H5G_OK(sp);
    hid_t a = H5Acreate2(obj, name, ft, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5G_OK(a);
    H5G_OK(H5Awrite(a, mt, v));
    H5Aclose(a);
    H5Sclose(sp);
}

static inline void h5g_attr_i64(hid_t obj, const char *name, int64_t v)
{
    h5g_attr(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}

static inline void h5g_attr_i32(hid_t obj, const char *name, int32_t v)
{
    h5g_attr(obj, name, H5T_STD_I32LE, H5T_NATIVE_INT32, &v);
}

static inline void h5g_attr_f64(hid_t obj, const char *name, double v)
{
    h5g_attr(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
}

/* A string attribute: variable-length UTF-8 (fixed = 0) or fixed-length of strlen(s) bytes,
 * null-padded without a terminator (fixed = 1) -- h5py and other writers produce both. */
static inline void h5g_attr_str(hid_t obj, const char *name, const char *s, int fixed)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5G_OK(t);
    if (fixed) {
        H5G_OK(H5Tset_size(t, strlen(s) ? strlen(s) : 1));
        H5G_OK(H5Tset_strpad(t, H5T_STR_NULLPAD));
        h5g_attr(obj, name, t, t, s);
    } else {
        H5G_OK(H5Tset_size(t, H5T_VARIABLE));
        H5G_OK(H5Tset_cset(t, H5T_CSET_UTF8));
        h5g_attr(obj, name, t, t, &s);
    }
    H5Tclose(t);
}

/* A dataset of `rank` dims of memory/file type t holding buf (NULL: never written). chunked:
 * chunks of up to 1024 rows with an unlimited first dimension (large extents cost nothing until
 * written); deflate: with shuffle + deflate, as the trace writer stores /events. */
static inline void h5g_dataset(hid_t loc, const char *name, hid_t t, int rank, const hsize_t *dims,
                        const void *buf, int chunked, int deflate)
{
    hsize_t maxdims[4], chunk[4];
    for (int i = 0; i < rank; i++) {
        maxdims[i] = i == 0 && chunked ? H5S_UNLIMITED : dims[i];
        chunk[i] = dims[i] ? (dims[i] < 1024 ? dims[i] : 1024) : 1;
    }
    hid_t sp = H5Screate_simple(rank, dims, maxdims);
    H5G_OK(sp);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5G_OK(dcpl);
    if (chunked) {
        H5G_OK(H5Pset_chunk(dcpl, rank, chunk));
        if (deflate && H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0) {
            H5G_OK(H5Pset_shuffle(dcpl));
            H5G_OK(H5Pset_deflate(dcpl, 1));
        }
    }
    hid_t d = H5Dcreate2(loc, name, t, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5G_OK(d);
    if (buf) H5G_OK(H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf));
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(sp);
}

/* Cuts the last `cut` bytes of the file at path (a torn write). */
static inline void h5g_truncate(const char *path, long cut)
{
    struct stat st;
    if (stat(path, &st) != 0) abort();
    off_t len = st.st_size > cut ? st.st_size - cut : 0;
    if (truncate(path, len) != 0) abort();
}

/* Open HDF5 identifiers by kind (files, groups, datatypes, dataspaces, datasets, attributes,
 * property lists), to check that the code under test closes every one it opens: a leaked id
 * keeps its file open and its memory held until exit, where HDF5 frees it quietly (so leak
 * sanitizers do not see it). */
#define H5G_ID_KINDS 7
typedef struct {
    hsize_t n[H5G_ID_KINDS];
} h5g_ids;

static const char *const h5g_id_names[H5G_ID_KINDS] = {"files", "groups", "datatypes", "dataspaces",
                                                       "datasets", "attributes", "property lists"};

static inline void h5g_count_ids(h5g_ids *c)
{
    static const H5I_type_t kinds[H5G_ID_KINDS] = {H5I_FILE, H5I_GROUP, H5I_DATATYPE, H5I_DATASPACE,
                                                   H5I_DATASET, H5I_ATTR, H5I_GENPROP_LST};
    for (int i = 0; i < H5G_ID_KINDS; i++)
        if (H5Inmembers(kinds[i], &c->n[i]) < 0) c->n[i] = 0;
}

/* Every id open now was open at `before`. */
static inline void h5g_check_closed(const h5g_ids *before, const char *what)
{
    h5g_ids now;
    h5g_count_ids(&now);
    for (int i = 0; i < H5G_ID_KINDS; i++)
        FZ_CHECK(now.n[i] <= before->n[i], "%s left %llu HDF5 %s open", what,
                 (unsigned long long)(now.n[i] - before->n[i]), h5g_id_names[i]);
}

#endif
