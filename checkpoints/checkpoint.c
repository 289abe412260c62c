/* Parallel HDF5 checkpoints; see checkpoint.h. */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "comm/watchdog.h"
#include "common/common.h"
#include "trace/h5util.h"

#define FORMAT_VERSION 2

static const char *const state_group[3] = {"params", "optimizer/exp_avg", "optimizer/exp_avg_sq"};

/* A logical tensor, for the collective creation of its datasets. */
typedef struct {
    char name[96];
    int32_t full_rows, full_cols; /* full_cols = 0: a vector */
} tensor_hdr;

/* One hyperslab of a logical tensor holding elements [off, off + rows * cols) of a flat range. */
typedef struct {
    hsize_t start[2], count[2];
    size_t off;
} piece;

/* Elements [a, b) of parameter p's local (TP-sliced, row-major) values as at most three
 * hyperslabs of the logical tensor: a partial first row, whole rows, a partial last row. */
static int pieces_of(const dx_param *p, size_t a, size_t b, piece out[3])
{
    if (b <= a) return 0;
    if (!p->cols) {
        out[0] = (piece){{(hsize_t)p->row0 + a, 0}, {b - a, 1}, 0};
        return 1;
    }
    const size_t c = (size_t)p->cols;
    int n = 0;
    for (size_t i = a; i < b;) {
        size_t r = i / c, c0 = i % c, take;
        if (c0 || b - i < c) {
            take = c - c0 < b - i ? c - c0 : b - i;
            out[n++] = (piece){{(hsize_t)(p->row0 + r), (hsize_t)(p->col0 + c0)}, {1, take}, i - a};
        } else {
            size_t nr = (b - i) / c;
            take = nr * c;
            out[n++] = (piece){{(hsize_t)(p->row0 + r), (hsize_t)p->col0}, {nr, c}, i - a};
        }
        i += take;
    }
    return n;
}

/* Reads or writes the pieces of buf (a flat range) from/to dataset d. */
static int io_pieces(hid_t d, const dx_param *p, const piece *pc, int n, float *buf, int write)
{
    const int rank = p->cols ? 2 : 1;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        hid_t fs = H5Dget_space(d), ms = H5Screate_simple(rank, pc[i].count, NULL);
        if (fs < 0 || ms < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, pc[i].start, NULL, pc[i].count, NULL) < 0)
            rc = -1;
        else if (write) rc = H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf + pc[i].off) < 0 ? -1 : 0;
        else rc = H5Dread(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf + pc[i].off) < 0 ? -1 : 0;
        if (ms >= 0) H5Sclose(ms);
        if (fs >= 0) H5Sclose(fs);
    }
    return rc;
}

/* ---- checksums (checkpoint.h: /checksums) ---- */

/* MurmurHash3's 64-bit finalizer (Appleby, fmix64): every input bit flips each output bit with
 * probability ~1/2. */
static inline uint64_t ck_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* The XOR of the keys of n values v[j] at logical flat indices e + j (checkpoint.h): the loop the
 * compiler vectorises, built with GCC also for x86-64-v4 (AVX-512's 64-bit multiplies: ~2.7x the
 * baseline's speed) and AVX2 (~1.8x), the variant picked when the program loads. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
static uint64_t ck_span(const float *v, size_t n, uint64_t e)
{
    uint64_t acc = 0;
    for (size_t j = 0; j < n; j++) {
        uint32_t b;
        memcpy(&b, &v[j], sizeof b);
        const uint64_t x = e + j;
        acc ^= ck_mix(((x << 32) | (x >> 32)) ^ b);
    }
    return acc;
}

/* ck_span; par: over OpenMP's threads in chunks when n is large. */
static uint64_t ck_run(const float *v, size_t n, uint64_t e, int par)
{
    const size_t chunk = (size_t)1 << 16;
    if (!par || n < 4 * chunk) return ck_span(v, n, e);
    uint64_t acc = 0;
    const size_t nc = (n + chunk - 1) / chunk;
#pragma omp parallel for reduction(^ : acc) schedule(static)
    for (size_t c = 0; c < nc; c++) {
        const size_t a = c * chunk;
        acc ^= ck_span(v + a, n - a < chunk ? n - a : chunk, e + a);
    }
    return acc;
}

/* The XOR of the keys of parameter p's local elements [a, b), held in buf[0 .. b - a); par: over
 * OpenMP's threads (0 in the asynchronous save's writer, beside the training's threads). */
static uint64_t ck_local(const dx_param *p, const float *buf, size_t a, size_t b, int par)
{
    piece pc[3];
    const int n = pieces_of(p, a, b, pc);
    uint64_t acc = 0;
    for (int k = 0; k < n; k++) {
        if (!p->cols) {
            acc ^= ck_run(buf + pc[k].off, pc[k].count[0], pc[k].start[0], par);
            continue;
        }
        const size_t rows = pc[k].count[0], cols = pc[k].count[1];
        const uint64_t full = (uint64_t)p->full_cols;
        uint64_t part = 0;
#pragma omp parallel for reduction(^ : part) schedule(static) if (par && rows * cols >= ((size_t)1 << 18))
        for (size_t r = 0; r < rows; r++)
            part ^= ck_span(buf + pc[k].off + r * cols, cols, (pc[k].start[0] + r) * full + pc[k].start[1]);
        acc ^= part;
    }
    return acc;
}

/* sums[0 .. n) XORed over the world's ranks, in place on every rank (gather to rank 0, broadcast). */
static int ck_reduce(dx_comm *world, uint64_t *sums, size_t n)
{
    const size_t bytes = n * sizeof *sums;
    uint64_t *all = world->rank == 0 ? malloc(bytes * (size_t)world->size + 1) : NULL;
    int rc = world->rank == 0 && !all ? dx_fail("checkpoint: out of memory") : 0;
    if ((rc = dx_comm_agree(world, rc))) return rc;
    if (world->gather(world, sums, all, bytes, 0)) rc = -1;
    if (!rc && world->rank == 0)
        for (int r = 1; r < world->size; r++)
            for (size_t i = 0; i < n; i++) sums[i] ^= all[(size_t)r * n + i];
    free(all);
    if (world->broadcast(world, sums, bytes, 0)) rc = -1;
    return rc;
}

/* The part [a, b) (parameter coordinates; a == b: none) of parameter p this rank's ZeRO shard owns. */
static void owned_range(dx_zero *z, const dx_param *p, size_t *a, size_t *b)
{
    size_t lo, hi;
    dx_zero_owned(z, p->group, &lo, &hi);
    size_t s = p->offset > lo ? p->offset : lo, e = p->offset + p->numel < hi ? p->offset + p->numel : hi;
    *a = s - p->offset;
    *b = e > s ? e - p->offset : *a;
}

/* owned_range, and whether this rank writes it (stage 0: DP rank 0; TP-replicated: TP rank 0). */
static int owned_part(dx_zero *z, const dx_param *p, int dp_rank, int tp_rank, size_t *a, size_t *b)
{
    owned_range(z, p, a, b);
    if (dx_zero_stage(z) == 0 && dp_rank != 0) return 0;
    if (p->tp_replicated && tp_rank != 0) return 0;
    return *b > *a;
}

/* Every logical tensor of the model over the world (ranks hold different stages): gathered to
 * rank 0, duplicates (TP slices, DP replicas) dropped, broadcast. *out: malloc'ed, *n entries. */
static int all_tensors(dx_model *m, dx_comm *world, tensor_hdr **out, int *n)
{
    const int np = dx_model_num_params_table(m), root = world->rank == 0;
    tensor_hdr *mine = calloc((size_t)np + 1, sizeof *mine);
    int *counts = calloc((size_t)world->size, sizeof *counts);
    size_t *bytes = calloc((size_t)world->size, sizeof *bytes);
    tensor_hdr *all = NULL;
    int total = 0, rc = !mine || !counts || !bytes ? dx_fail("checkpoint: out of memory") : 0;
    int nmine = 0; /* the trained parameters: a frozen base (LoRA) is not in checkpoints */
    for (int i = 0; mine && i < np; i++) {
        const dx_param *p = dx_model_param(m, i);
        if (dx_model_group(m, p->group)->frozen) continue;
        snprintf(mine[nmine].name, sizeof mine[nmine].name, "%s", p->name);
        mine[nmine].full_rows = p->full_rows;
        mine[nmine].full_cols = p->cols ? p->full_cols : 0;
        nmine++;
    }
    if (!rc && world->gather(world, &nmine, counts, sizeof nmine, 0)) rc = -1;
    if (!rc && root) {
        for (int r = 0; r < world->size; r++) {
            bytes[r] = (size_t)counts[r] * sizeof(tensor_hdr);
            total += counts[r];
        }
        all = calloc((size_t)total + 1, sizeof *all);
        if (!all) rc = dx_fail("checkpoint: out of memory");
    }
    if (world->gatherv(world, mine, (size_t)nmine * sizeof *mine, all, bytes, 0)) rc = -1;
    if (root && !rc) { /* dedupe, keeping the first occurrence's order */
        int k = 0;
        for (int i = 0; i < total; i++) {
            int dup = 0;
            for (int j = 0; j < k && !dup; j++) dup = !strcmp(all[j].name, all[i].name);
            if (!dup) all[k++] = all[i];
        }
        total = k;
    }
    if (world->broadcast(world, &total, sizeof total, 0)) rc = -1;
    if (!rc && !root && !(all = calloc((size_t)total + 1, sizeof *all))) rc = dx_fail("checkpoint: out of memory");
    if (world->broadcast(world, all ? (void *)all : (void *)mine, all ? (size_t)total * sizeof *all : 0, 0)) rc = -1;
    free(mine);
    free(counts);
    free(bytes);
    if (rc) { free(all); return -1; }
    *out = all;
    *n = total;
    return 0;
}

/* The index of tensor `name` in t[n], or -1. */
static int tensor_index(const tensor_hdr *t, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return i;
    return -1;
}

/* Creates the groups and every dataset (collective: the same calls on every rank). */
static int create_layout(hid_t f, const tensor_hdr *t, int n)
{
    hid_t g = H5Gcreate2(f, "params", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), go = -1, gs[3] = {-1, -1, -1};
    if (g >= 0) go = H5Gcreate2(f, "optimizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    gs[0] = g;
    if (go >= 0) gs[1] = H5Gcreate2(go, "exp_avg", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (go >= 0) gs[2] = H5Gcreate2(go, "exp_avg_sq", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = g < 0 || go < 0 || gs[1] < 0 || gs[2] < 0 ? -1 : 0;
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    /* contiguous, allocated at creation (as parallel HDF5 does anyway): every dataset has its
     * file offset from the start, which the asynchronous save writes to directly */
    if (dcpl < 0 || H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) < 0 ||
        H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY) < 0)
        rc = -1;
    for (int s = 0; s < 3 && !rc; s++)
        for (int i = 0; i < n && !rc; i++) {
            hsize_t dims[2] = {(hsize_t)t[i].full_rows, (hsize_t)t[i].full_cols};
            hid_t sp = H5Screate_simple(t[i].full_cols ? 2 : 1, dims, NULL);
            hid_t d = sp < 0 ? -1 : H5Dcreate2(gs[s], t[i].name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
            if (d < 0 || dx_h5_write_i64_attr(d, "checksum_column", i))
                rc = dx_fail("cannot create dataset %s/%s", state_group[s], t[i].name);
            if (d >= 0) H5Dclose(d);
            if (sp >= 0) H5Sclose(sp);
        }
    if (!rc) { /* /checksums [3, n], written last (by rank 0) */
        hsize_t dims[2] = {3, (hsize_t)(n > 0 ? n : 0)};
        hid_t sp = H5Screate_simple(2, dims, NULL);
        hid_t d = sp < 0 ? -1 : H5Dcreate2(f, "checksums", H5T_STD_U64LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        if (d < 0) rc = dx_fail("cannot create dataset checksums");
        else H5Dclose(d);
        if (sp >= 0) H5Sclose(sp);
    }
    if (dcpl >= 0) H5Pclose(dcpl);
    for (int s = 2; s >= 0; s--)
        if (gs[s] >= 0) H5Gclose(gs[s]);
    if (go >= 0) H5Gclose(go);
    return rc;
}

/* The attributes and the layout of a checkpoint file. */
static int write_header(hid_t f, const char *path, const dx_ckpt_state *st, double grad_norm,
                        const char *config_json, const tensor_hdr *t, int nt)
{
    if (dx_h5_write_str_attr(f, "format", "dissect-checkpoint") || dx_h5_write_i64_attr(f, "format_version", FORMAT_VERSION) ||
        dx_h5_write_i64_attr(f, "step", st->step) || dx_h5_write_i64_attr(f, "consumed_samples", st->consumed_samples) ||
        dx_h5_write_i64_attr(f, "seed", (int64_t)st->seed) ||
        dx_h5_write_scalar_attr(f, "grad_norm", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &grad_norm) ||
        dx_h5_write_str_attr(f, "config_json", config_json ? config_json : "{}"))
        return dx_fail("checkpoint '%s': cannot write its attributes", path);
    if (create_layout(f, t, nt)) return dx_fail_prefix("checkpoint '%s'", path), -1;
    return 0;
}

uint64_t dx_checkpoint_file_bytes(int64_t total_params)
{
    return 12 * (uint64_t)(total_params > 0 ? total_params : 0) + ((uint64_t)1 << 20);
}

/* Room for `bytes` at tmp (then removed): fallocate, or statvfs where the file system has no
 * fallocate (glibc's posix_fallocate would write zeros through the whole file instead). */
static int reserve(const char *path, const char *tmp, uint64_t bytes)
{
    int fd = open(tmp, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) return dx_fail("checkpoint '%s': cannot create %s: %s", path, tmp, strerror(errno));
    int rc = 0, e = fallocate(fd, 0, 0, (off_t)bytes) ? errno : 0;
    close(fd);
    remove(tmp);
    if (e == EOPNOTSUPP || e == ENOSYS) {
        struct statvfs fs;
        char dir[1100];
        if (!statvfs(dx_path_dir(tmp, dir, sizeof dir), &fs) && (uint64_t)fs.f_bavail * fs.f_frsize < bytes) e = ENOSPC;
        else e = 0;
    }
    if (e)
        rc = dx_fail("checkpoint '%s' not written: no room for its %.1f MiB: %s (the checkpoints written before "
                     "are kept)", path, (double)bytes / (1 << 20), strerror(e));
    return rc;
}

int dx_checkpoint_save(const char *path, dx_model *m, dx_zero *z, dx_comm *world, dx_comm *dp,
                       int tp_rank, const dx_ckpt_state *st, const char *config_json)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    MPI_Comm comm;
    tensor_hdr *t = NULL;
    int nt = 0, rc = dx_comm_mpi_handle(world, &comm);
    if (!rc) rc = all_tensors(m, world, &t, &nt);
    if (!rc && world->rank == 0) {
        int64_t total = 0;
        for (int i = 0; i < nt; i++) total += (int64_t)t[i].full_rows * (t[i].full_cols ? t[i].full_cols : 1);
        rc = reserve(path, tmp, dx_checkpoint_file_bytes(total));
    }
    /* every rank opens the file in the collective create below: one that cannot reach its
     * directory (another working directory, a file system not mounted there) fails here, where
     * the others learn of it, instead of inside the create, where they would wait for it */
    if (!rc) {
        char dir[1100];
        if (access(dx_path_dir(tmp, dir, sizeof dir), W_OK))
            rc = dx_fail("rank %d: checkpoint '%s': cannot write to directory '%s' from this rank: %s (every rank "
                         "writes its part: the directory must be reachable from all of them)",
                         world->rank, path, dir, strerror(errno));
    }
    if ((rc = dx_comm_agree(world, rc))) {
        free(t);
        return rc;
    }
    /* the file, collectively (MPI-IO): from the create to the close every rank waits on every
     * other inside HDF5, so the span is marked for the watchdog like a collective (a rank that
     * dies during a save is then reported and timed out, not waited for forever) */
    dx_watch_begin_io("checkpoint write (mpi-io)", world);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), f = -1;
    if (fapl >= 0 && H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL) >= 0)
        f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    if (f < 0) rc = dx_fail("checkpoint '%s': cannot create %s: %s", path, tmp, errno ? strerror(errno) : "HDF5 error");
    if ((rc = dx_comm_agree(world, rc))) {
        dx_watch_end();
        free(t);
        return rc;
    }
    /* metadata and datasets: the same calls on every rank */
    rc = write_header(f, path, st, dx_zero_last_grad_norm(z), config_json, t, nt);
    uint64_t *sums = calloc((size_t)3 * (size_t)nt + 1, sizeof *sums);
    if (!rc && !sums) rc = dx_fail("checkpoint: out of memory");
    /* every rank its own pieces (independent I/O) */
    const int np = dx_model_num_params_table(m);
    float *buf = NULL;
    size_t cap = 0;
    for (int i = 0; i < np && !rc; i++) {
        const dx_param *p = dx_model_param(m, i);
        size_t a, b;
        if (!owned_part(z, p, dp->rank, tp_rank, &a, &b)) continue;
        if (b - a > cap) {
            free(buf);
            cap = b - a;
            if (!(buf = malloc(cap * sizeof *buf))) { rc = dx_fail("checkpoint: out of memory for %s", p->name); break; }
        }
        piece pc[3];
        int npc = pieces_of(p, a, b, pc);
        const int ti = tensor_index(t, nt, p->name);
        if (ti < 0) { rc = dx_fail("checkpoint: tensor %s missing from the layout", p->name); break; }
        for (int s = 0; s < 3 && !rc; s++) {
            char name[160];
            snprintf(name, sizeof name, "%s/%s", state_group[s], p->name);
            if (dx_zero_read_state(z, p->group, s, p->offset + a, p->offset + b, buf)) { rc = -1; break; }
            hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
            if (d < 0 || io_pieces(d, p, pc, npc, buf, 1))
                rc = dx_fail("checkpoint '%s': cannot write %s", path, name);
            if (d >= 0) H5Dclose(d);
            sums[(size_t)s * nt + ti] ^= ck_local(p, buf, a, b, 1);
        }
    }
    free(buf);
    free(t);
    int any = dx_comm_agree(world, rc); /* before the collective close */
    if (!any) { /* the checksums: XORed over the ranks' pieces, written by rank 0 */
        rc = ck_reduce(world, sums, (size_t)3 * nt);
        if (!rc && world->rank == 0) {
            hid_t d = H5Dopen2(f, "checksums", H5P_DEFAULT);
            if (d < 0 || H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, sums) < 0)
                rc = dx_fail("checkpoint '%s': cannot write /checksums", path);
            if (d >= 0) H5Dclose(d);
        }
        any = dx_comm_agree(world, rc);
    }
    free(sums);
    if (H5Fclose(f) < 0 && !any) rc = dx_fail("checkpoint '%s': cannot close %s", path, tmp);
    any = dx_comm_agree(world, any ? any : rc);
    dx_watch_end();
    if (world->rank == 0) {
        if (!any && rename(tmp, path)) rc = dx_fail("checkpoint '%s': cannot rename %s: %s", path, tmp, strerror(errno));
        if (any || rc) remove(tmp);
    }
    return dx_comm_agree(world, any ? any : rc);
}

/* Checks that the file is a format-2 dissect checkpoint holding every tensor of this rank's
 * part in its logical shape. */
static int check_file(hid_t f, const char *path, dx_model *m, dx_ckpt_state *st)
{
    int64_t ver = 0, step = 0, consumed = 0, seed = 0;
    if (H5Aexists(f, "format") <= 0 || dx_h5_read_scalar_attr(f, "format_version", H5T_NATIVE_INT64, &ver))
        return dx_fail("checkpoint '%s': not a dissect checkpoint (no format attributes)", path);
    if (ver < FORMAT_VERSION)
        return dx_fail("checkpoint '%s': format_version %lld holds the weights only (no optimizer states, step or "
                       "data position): it cannot resume a run (use it as initial weights)", path, (long long)ver);
    if (ver > FORMAT_VERSION)
        return dx_fail("checkpoint '%s': format_version %lld is newer than this dissect's (%d)", path, (long long)ver, FORMAT_VERSION);
    if (dx_h5_read_scalar_attr(f, "step", H5T_NATIVE_INT64, &step) ||
        dx_h5_read_scalar_attr(f, "consumed_samples", H5T_NATIVE_INT64, &consumed) ||
        dx_h5_read_scalar_attr(f, "seed", H5T_NATIVE_INT64, &seed))
        return dx_fail("checkpoint '%s': missing attribute step, consumed_samples or seed", path);
    st->step = step;
    st->consumed_samples = consumed;
    st->seed = (uint64_t)seed;
    st->grad_norm = -1; /* (written since the speculative offload update; older files: unknown) */
    if (H5Aexists(f, "grad_norm") > 0 && dx_h5_read_scalar_attr(f, "grad_norm", H5T_NATIVE_DOUBLE, &st->grad_norm))
        return dx_fail("checkpoint '%s': attribute grad_norm unreadable", path);
    for (int i = 0; i < dx_model_num_params_table(m); i++) {
        const dx_param *p = dx_model_param(m, i);
        if (dx_model_group(m, p->group)->frozen) continue; /* LoRA's base: from hf_model, not here */
        for (int s = 0; s < 3; s++) {
            char name[160];
            snprintf(name, sizeof name, "%s/%s", state_group[s], p->name);
            if (H5Lexists(f, state_group[s], H5P_DEFAULT) <= 0 || H5Lexists(f, name, H5P_DEFAULT) <= 0)
                return dx_fail("checkpoint '%s': tensor %s missing", path, name);
            hid_t d = H5Dopen2(f, name, H5P_DEFAULT), sp = d < 0 ? -1 : H5Dget_space(d);
            hsize_t dims[2] = {0, 0};
            int nd = sp < 0 ? -1 : H5Sget_simple_extent_dims(sp, dims, NULL);
            if (sp >= 0) H5Sclose(sp);
            if (d >= 0) H5Dclose(d);
            const int want = p->cols ? 2 : 1;
            if (nd != want || dims[0] != (hsize_t)p->full_rows || (want == 2 && dims[1] != (hsize_t)p->full_cols))
                return dx_fail("checkpoint '%s': tensor %s has shape [%llu%s%llu], the model's is [%d%s%d]", path, name,
                               (unsigned long long)dims[0], nd == 2 ? ", " : "", nd == 2 ? (unsigned long long)dims[1] : 0ULL,
                               p->full_rows, want == 2 ? ", " : "", want == 2 ? p->full_cols : 0);
        }
    }
    return 0;
}

/* /checksums [3, *ncol] of f into a malloc'ed *out (every rank reads it); *out NULL and 0 when
 * the file has none (written before checksums). */
static int read_checksums(hid_t f, const char *path, uint64_t **out, int *ncol)
{
    *out = NULL;
    *ncol = 0;
    if (H5Lexists(f, "checksums", H5P_DEFAULT) <= 0) return 0;
    hid_t d = H5Dopen2(f, "checksums", H5P_DEFAULT), sp = d < 0 ? -1 : H5Dget_space(d);
    hsize_t dims[2] = {0, 0};
    int rc = sp < 0 || H5Sget_simple_extent_ndims(sp) != 2 || H5Sget_simple_extent_dims(sp, dims, NULL) < 0 ||
             dims[0] != 3 || dims[1] > (hsize_t)1 << 24;
    uint64_t *v = rc ? NULL : malloc((size_t)(3 * dims[1]) * sizeof *v + 1);
    if (!rc && (!v || H5Dread(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0)) rc = 1;
    if (sp >= 0) H5Sclose(sp);
    if (d >= 0) H5Dclose(d);
    if (rc) {
        free(v);
        return dx_fail("checkpoint '%s': /checksums unreadable or not of shape [3, tensors] (the file is damaged)", path);
    }
    *out = v;
    *ncol = (int)dims[1];
    return 0;
}

/* Dataset d's checksum column (< ncol), or -1 + dx_fail naming it. */
static int checksum_column(hid_t d, const char *path, const char *name, int ncol)
{
    int64_t col = -1;
    if (dx_h5_read_scalar_attr(d, "checksum_column", H5T_NATIVE_INT64, &col) || col < 0 || col >= ncol)
        return dx_fail("checkpoint '%s': %s has no valid checksum_column attribute (the file is damaged)", path, name);
    return (int)col;
}

int dx_checkpoint_load(const char *path, dx_model *m, dx_zero *z, dx_comm *world, dx_comm *dp, int tp_rank,
                       int64_t total_params, dx_ckpt_state *st)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    int rc = f < 0 ? dx_fail("checkpoint '%s': cannot open (missing, unreadable or not HDF5)", path) : 0;
    if (!rc) rc = check_file(f, path, m, st);
    int64_t held = 0;
    if (!rc) {
        if (dx_h5_count_elems(f, "params", &held)) rc = dx_fail("checkpoint '%s': cannot list /params", path);
        if (!rc && held != total_params)
            rc = dx_fail("checkpoint '%s': holds %.2fM parameters, this model has %.2fM (another model shape: "
                         "check model.num_hidden_layers, hidden_size, intermediate_size, vocab_size)",
                         path, (double)held / 1e6, (double)total_params / 1e6);
    }
    const int np = dx_model_num_params_table(m);
    size_t cap = 0;
    for (int i = 0; i < np; i++)
        if (!dx_model_group(m, dx_model_param(m, i)->group)->frozen && dx_model_param(m, i)->numel > cap)
            cap = dx_model_param(m, i)->numel;
    float *buf = rc ? NULL : malloc((cap ? cap : 1) * sizeof *buf);
    if (!rc && !buf) rc = dx_fail("checkpoint '%s': out of memory", path);
    uint64_t *want = NULL, *sums = NULL; /* /checksums, and this rank's part of each */
    int ncol = 0;
    if (!rc) rc = read_checksums(f, path, &want, &ncol);
    if (!rc && want && !(sums = calloc((size_t)3 * (size_t)ncol + 1, sizeof *sums)))
        rc = dx_fail("checkpoint '%s': out of memory", path);
    /* every rank goes on to the collective master updates, or none */
    if ((rc = dx_comm_agree(world, rc))) {
        free(buf);
        free(want);
        free(sums);
        if (f >= 0) H5Fclose(f);
        return rc;
    }
    int *colof = want ? malloc((size_t)np * sizeof *colof + 1) : NULL; /* each parameter's column */
    if (want && !colof) rc = dx_fail("checkpoint '%s': out of memory", path);
    for (int i = 0; colof && i < np; i++) colof[i] = -1;
    for (int i = 0; i < np; i++) {
        const dx_param *p = dx_model_param(m, i);
        if (dx_model_group(m, p->group)->frozen) continue; /* LoRA's base: from hf_model, not here */
        char name[160];
        /* master weights: this rank's TP slice, set on the DP group (collective) */
        snprintf(name, sizeof name, "params/%s", p->name);
        piece pc[3];
        int npc = pieces_of(p, 0, p->numel, pc);
        /* checksums: over the part this rank would write (owned_part, a partition of every
         * tensor over the world), in whatever layout it loads */
        size_t oa = 0, ob = 0;
        const int mine = owned_part(z, p, dp->rank, tp_rank, &oa, &ob);
        hid_t d = rc ? -1 : H5Dopen2(f, name, H5P_DEFAULT);
        int col = -1;
        if (rc) { /* (a moment of the parameter before, or colof: the DP group learns of it below) */
        } else if (d < 0 || io_pieces(d, p, pc, npc, buf, 0)) {
            rc = dx_fail("checkpoint '%s': cannot read %s", path, name);
        } else if (want && (col = checksum_column(d, path, name, ncol)) < 0) {
            rc = -1;
        }
        if (d >= 0) H5Dclose(d);
        if (!rc && want) colof[i] = col;
        if (!rc && want && mine) sums[col] ^= ck_local(p, buf + oa, oa, ob, 1);
        if ((rc = dx_comm_agree(dp, rc))) break;
        if ((rc = dx_zero_set_master(z, p->group, p->offset, p->numel, buf))) break;
        /* the moments: the owned part */
        size_t a, b;
        owned_range(z, p, &a, &b);
        if (b <= a) continue;
        npc = pieces_of(p, a, b, pc);
        for (int s = 1; s < 3 && !rc; s++) {
            snprintf(name, sizeof name, "%s/%s", state_group[s], p->name);
            d = H5Dopen2(f, name, H5P_DEFAULT);
            if (d < 0 || io_pieces(d, p, pc, npc, buf, 0)) rc = dx_fail("checkpoint '%s': cannot read %s", path, name);
            else if (want && checksum_column(d, path, name, ncol) != col)
                rc = dx_fail("checkpoint '%s': %s's checksum_column differs from its weights' (the file is damaged)",
                             path, name);
            if (d >= 0) H5Dclose(d);
            if (!rc && want && mine) sums[(size_t)s * ncol + col] ^= ck_local(p, buf + (oa - a), oa, ob, 1);
            if (!rc) rc = dx_zero_write_state(z, p->group, s, p->offset + a, p->offset + b, buf);
        }
        /* (a failure here reaches the DP group at the next parameter's agreement, or the world's
         * below: breaking now would leave the group waiting in that agreement) */
    }
    free(buf);
    H5Fclose(f);
    if (!(rc = dx_comm_agree(world, rc)) && want) { /* every tensor's checksum, over the world */
        rc = ck_reduce(world, sums, (size_t)3 * ncol);
        for (int i = 0; !rc && i < np; i++) /* this rank's tensors (every tensor is some rank's) */
            for (int s = 0; !rc && colof[i] >= 0 && s < 3; s++)
                if (sums[(size_t)s * ncol + colof[i]] != want[(size_t)s * ncol + colof[i]])
                    rc = dx_fail("checkpoint '%s': %s/%s does not match the checksum saved with it: the file was "
                                 "damaged or changed after it was written (resume from another checkpoint)",
                                 path, state_group[s], dx_model_param(m, i)->name);
        rc = dx_comm_agree(world, rc);
    }
    free(want);
    free(sums);
    free(colof);
    if (rc) return rc;
    dx_zero_set_last_grad_norm(z, st->grad_norm); /* the speculative offload update's guess */
    return 0;
}

uint64_t dx_checkpoint_checksum(const float *v, size_t n)
{
    return ck_run(v, n, 0, 1);
}

int dx_checkpoint_check_params(int64_t file, const char *path, const char *name, const float *v, size_t n)
{
    _Static_assert(sizeof(hid_t) == sizeof(int64_t), "hid_t is int64_t (HDF5 >= 1.10)");
    const hid_t f = (hid_t)file;
    uint64_t *want = NULL;
    int ncol = 0;
    if (read_checksums(f, path, &want, &ncol)) return -1;
    if (!want) return 0;
    char dname[200];
    snprintf(dname, sizeof dname, "params/%s", name);
    hid_t d = H5Dopen2(f, dname, H5P_DEFAULT);
    int col = d < 0 ? dx_fail("checkpoint '%s': cannot open %s", path, dname) : checksum_column(d, path, dname, ncol);
    if (d >= 0) H5Dclose(d);
    int rc = col < 0 ? -1 : 0;
    if (!rc && dx_checkpoint_checksum(v, n) != want[col])
        rc = dx_fail("checkpoint '%s': %s does not match the checksum saved with it: the file was damaged or changed "
                     "after it was written", path, dname);
    free(want);
    return rc;
}

void dx_checkpoint_name(char *out, size_t cap, const char *dir, int64_t step)
{
    snprintf(out, cap, "%s/iter_%07lld.h5", dir, (long long)step);
}

/* The step of a periodic checkpoint's file name, or -1. */
static int64_t iter_step(const char *name)
{
    long long s;
    int len = 0;
    if (sscanf(name, "iter_%lld.h5%n", &s, &len) != 1 || name[len] != '\0' || s < 0) return -1;
    return (int64_t)s;
}

int dx_checkpoint_latest(const char *dir, char *out, size_t cap, int64_t *step)
{
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return 0;
        return dx_fail("save_dir '%s': cannot read: %s", dir, strerror(errno));
    }
    int64_t best = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t s = iter_step(e->d_name);
        if (s > best) best = s;
    }
    closedir(d);
    if (best < 0) return 0;
    dx_checkpoint_name(out, cap, dir, best);
    *step = best;
    return 1;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int dx_checkpoint_prune(const char *dir, int keep_last)
{
    if (keep_last <= 0) return 0;
    DIR *d = opendir(dir);
    if (!d) return dx_fail("save_dir '%s': cannot read: %s", dir, strerror(errno));
    int64_t *steps = NULL;
    size_t n = 0, capn = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t s = iter_step(e->d_name);
        if (s < 0) continue;
        if (n == capn) {
            int64_t *t = realloc(steps, (capn = capn ? 2 * capn : 16) * sizeof *t);
            if (!t) { free(steps); closedir(d); return dx_fail("out of memory"); }
            steps = t;
        }
        steps[n++] = s;
    }
    closedir(d);
    int removed = 0;
    if (n > (size_t)keep_last) {
        qsort(steps, n, sizeof *steps, cmp_i64);
        for (size_t i = 0; i + (size_t)keep_last < n; i++) {
            char path[1100];
            dx_checkpoint_name(path, sizeof path, dir, steps[i]);
            if (!remove(path)) removed++;
        }
    }
    free(steps);
    return removed;
}

/* ---- asynchronous saves ---- */

/* One contiguous run of the file: bytes [file_off, file_off + len) from snapshot + buf_off. */
typedef struct {
    uint64_t file_off, len, buf_off;
} run;

/* One owned piece of the snapshot to checksum: parameter p's local elements [a, b) of state s,
 * at snapshot + at, into column col. */
typedef struct {
    const dx_param *p;
    size_t a, b, at;
    int s, col;
} ck_job;

struct dx_ckpt_async {
    dx_backend *be;  /* of the snapshot buffer */
    float *snap;     /* this rank's owned state (page-locked on GPUs), kept between saves */
    size_t snap_cap; /* floats */
    int busy;        /* a save in flight (the same on every rank) */
    char path[1024], tmp[1100];
    run *runs;
    size_t nruns;
    ck_job *jobs;    /* the snapshot's pieces, checksummed by the writer into sums[3 nt] */
    size_t njobs;
    uint64_t *sums;
    int nt;
    uint64_t ck_off; /* /checksums' file offset (rank 0 writes it once every writer is done) */
    pthread_t thread;
    int started;
    atomic_int done; /* the writer finished (rc set) */
    int rc;          /* the writer's result: 0, or an errno */
    uint64_t t0_ns;
};

/* The writer thread: pwrite of every run, fdatasync, close. */
static void *writer_main(void *arg)
{
    dx_ckpt_async *a = arg;
    int fd = open(a->tmp, O_WRONLY), e = fd < 0 ? errno : 0;
    const char *base = (const char *)a->snap;
    for (size_t i = 0; !e && i < a->nruns; i++) {
        uint64_t done = 0;
        while (!e && done < a->runs[i].len) {
            ssize_t w = pwrite(fd, base + a->runs[i].buf_off + done, a->runs[i].len - done,
                               (off_t)(a->runs[i].file_off + done));
            if (w < 0 && errno != EINTR) e = errno;
            else if (w > 0) done += (uint64_t)w;
        }
    }
    if (!e && fd >= 0 && a->nruns && fdatasync(fd)) e = errno;
    if (fd >= 0 && close(fd) && !e) e = errno;
    for (size_t i = 0; !e && i < a->njobs; i++) {
        const ck_job *j = &a->jobs[i];
        a->sums[(size_t)j->s * a->nt + j->col] ^= ck_local(j->p, a->snap + j->at, j->a, j->b, 0);
    }
    a->rc = e;
    atomic_store(&a->done, 1);
    return NULL;
}

dx_ckpt_async *dx_checkpoint_async_create(void)
{
    dx_ckpt_async *a = calloc(1, sizeof *a);
    if (!a) dx_fail("checkpoint: out of memory");
    return a;
}

/* Ends the save in flight on this rank (joins the writer) and forgets it. */
static void async_reset(dx_ckpt_async *a)
{
    if (a->started) pthread_join(a->thread, NULL);
    a->started = 0;
    a->busy = 0;
    free(a->runs);
    a->runs = NULL;
    a->nruns = 0;
    free(a->jobs);
    a->jobs = NULL;
    a->njobs = 0;
    free(a->sums);
    a->sums = NULL;
    atomic_store(&a->done, 0);
    a->rc = 0;
}

void dx_checkpoint_async_destroy(dx_ckpt_async *a)
{
    if (!a) return;
    async_reset(a);
    if (a->snap && a->be) a->be->host_free(a->be, a->snap);
    free(a);
}

int dx_checkpoint_save_start(dx_ckpt_async *a, const char *path, dx_model *m, dx_zero *z, dx_comm *world,
                             dx_comm *dp, int tp_rank, const dx_ckpt_state *st, const char *config_json)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (a->busy) return dx_fail("checkpoint '%s': a background save is still in flight", path);
    tensor_hdr *t = NULL;
    int nt = 0, rc = 0;
    snprintf(a->path, sizeof a->path, "%s", path);
    snprintf(a->tmp, sizeof a->tmp, "%s.tmp", path);
    a->t0_ns = dx_now_ns();
    rc = all_tensors(m, world, &t, &nt);
    int64_t *offs = rc ? NULL : calloc((size_t)3 * (size_t)nt + 1, sizeof *offs); /* [3 nt]: /checksums */
    if (!rc && !offs) rc = dx_fail("checkpoint: out of memory");
    /* rank 0: room, then the file's header and layout (serial HDF5), and each dataset's offset */
    if (!rc && world->rank == 0) {
        int64_t total = 0;
        for (int i = 0; i < nt; i++) total += (int64_t)t[i].full_rows * (t[i].full_cols ? t[i].full_cols : 1);
        rc = reserve(path, a->tmp, dx_checkpoint_file_bytes(total));
        hid_t f = rc ? -1 : H5Fcreate(a->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
        if (!rc && f < 0) rc = dx_fail("checkpoint '%s': cannot create %s", path, a->tmp);
        if (!rc) rc = write_header(f, path, st, dx_zero_last_grad_norm(z), config_json, t, nt);
        for (int s = 0; s < 3 && !rc; s++)
            for (int i = 0; i < nt && !rc; i++) {
                char name[160];
                snprintf(name, sizeof name, "%s/%s", state_group[s], t[i].name);
                hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
                haddr_t off = d < 0 ? HADDR_UNDEF : H5Dget_offset(d);
                if (off == HADDR_UNDEF) rc = dx_fail("checkpoint '%s': no file offset for %s", path, name);
                else offs[s * nt + i] = (int64_t)off;
                if (d >= 0) H5Dclose(d);
            }
        if (!rc) {
            hid_t d = H5Dopen2(f, "checksums", H5P_DEFAULT);
            haddr_t off = d < 0 ? HADDR_UNDEF : H5Dget_offset(d);
            if (off == HADDR_UNDEF) rc = dx_fail("checkpoint '%s': no file offset for /checksums", path);
            else offs[3 * nt] = (int64_t)off;
            if (d >= 0) H5Dclose(d);
        }
        if (f >= 0 && H5Fclose(f) < 0 && !rc) rc = dx_fail("checkpoint '%s': cannot close %s", path, a->tmp);
        if (rc) remove(a->tmp);
    }
    if ((rc = dx_comm_agree(world, rc)) == 0 &&
        world->broadcast(world, offs, ((size_t)3 * (size_t)nt + 1) * sizeof *offs, 0))
        rc = -1;
    /* this rank's owned pieces: how many floats and file runs */
    const int np = dx_model_num_params_table(m);
    size_t elems = 0, nruns = 0;
    for (int i = 0; !rc && i < np; i++) {
        const dx_param *p = dx_model_param(m, i);
        size_t lo, hi;
        if (!owned_part(z, p, dp->rank, tp_rank, &lo, &hi)) continue;
        piece pc[3];
        const int npc = pieces_of(p, lo, hi, pc);
        const hsize_t full_cols = p->cols ? (hsize_t)p->full_cols : 1;
        elems += 3 * (hi - lo);
        for (int k = 0; k < npc; k++) nruns += 3 * (pc[k].count[1] == full_cols ? 1 : pc[k].count[0]);
    }
    /* the snapshot buffer: page-locked, kept for the next save (grown when needed) */
    if (!rc && elems > a->snap_cap) {
        if (a->snap) a->be->host_free(a->be, a->snap);
        a->be = dx_model_backend(m);
        a->snap = a->be->host_alloc(a->be, elems * sizeof(float));
        a->snap_cap = a->snap ? elems : 0;
        if (!a->snap) dx_fail_prefix("rank %d: checkpoint snapshot", world->rank), rc = -1;
    }
    if (!rc && !(a->runs = malloc(nruns * sizeof *a->runs + 1))) rc = dx_fail("checkpoint: out of memory");
    if (!rc && (!(a->jobs = malloc((size_t)3 * (size_t)np * sizeof *a->jobs + 1)) ||
                !(a->sums = calloc((size_t)3 * (size_t)nt + 1, sizeof *a->sums))))
        rc = dx_fail("checkpoint: out of memory");
    if (!rc) {
        a->nt = nt;
        a->ck_off = (uint64_t)offs[3 * nt];
    }
    size_t at = 0;
    for (int i = 0; !rc && i < np; i++) {
        const dx_param *p = dx_model_param(m, i);
        size_t lo, hi;
        if (!owned_part(z, p, dp->rank, tp_rank, &lo, &hi)) continue;
        const int ti = tensor_index(t, nt, p->name);
        if (ti < 0) { rc = dx_fail("checkpoint: tensor %s missing from the layout", p->name); break; }
        piece pc[3];
        const int npc = pieces_of(p, lo, hi, pc);
        const uint64_t full_cols = p->cols ? (uint64_t)p->full_cols : 1;
        for (int s = 0; s < 3 && !rc; s++) {
            if (dx_zero_read_state(z, p->group, s, p->offset + lo, p->offset + hi, a->snap + at)) { rc = -1; break; }
            const uint64_t base = (uint64_t)offs[s * nt + ti];
            a->jobs[a->njobs++] = (ck_job){p, lo, hi, at, s, ti};
            for (int k = 0; k < npc; k++) {
                const uint64_t r0 = pc[k].start[0], c0 = p->cols ? pc[k].start[1] : 0;
                const uint64_t rows = pc[k].count[0], cols = p->cols ? pc[k].count[1] : 1;
                const uint64_t boff = (uint64_t)(at + pc[k].off) * sizeof(float);
                if (cols == full_cols) /* whole rows: one run */
                    a->runs[a->nruns++] = (run){base + (r0 * full_cols) * 4, rows * cols * 4, boff};
                else
                    for (uint64_t r = 0; r < rows; r++)
                        a->runs[a->nruns++] = (run){base + ((r0 + r) * full_cols + c0) * 4, cols * 4, boff + r * cols * 4};
            }
            at += hi - lo;
        }
    }
    free(t);
    free(offs);
    if (!rc) {
        int e = pthread_create(&a->thread, NULL, writer_main, a);
        if (e) rc = dx_fail("rank %d: checkpoint: cannot start the writer thread: %s", world->rank, strerror(e));
        else a->started = 1;
    }
    if (dx_comm_agree(world, rc)) {
        async_reset(a);
        if (world->rank == 0) remove(a->tmp);
        return -1;
    }
    a->busy = 1;
    return 0;
}

int dx_checkpoint_save_poll(dx_ckpt_async *a, dx_comm *world, int wait, double *seconds)
{
    if (!a->busy) return 2;
    if (wait && a->started) {
        pthread_join(a->thread, NULL);
        a->started = 0;
    }
    int busy = !atomic_load(&a->done), any_busy = 1;
    if (world->max_int(world, busy, &any_busy)) return -1;
    if (any_busy) return 0;
    int rc = a->rc ? dx_fail("rank %d: checkpoint '%s': write failed: %s (the checkpoints written before are kept)",
                             world->rank, a->path, strerror(a->rc))
                   : 0;
    rc = dx_comm_agree(world, rc);
    if (!rc) { /* the checksums: XORed over the ranks' pieces, written and synced by rank 0 */
        rc = ck_reduce(world, a->sums, (size_t)3 * a->nt);
        if (!rc && world->rank == 0) {
            const size_t bytes = (size_t)3 * a->nt * sizeof *a->sums;
            int fd = open(a->tmp, O_WRONLY), e = fd < 0 ? errno : 0;
            errno = 0;
            if (!e && pwrite(fd, a->sums, bytes, (off_t)a->ck_off) != (ssize_t)bytes) e = errno ? errno : EIO;
            if (!e && fdatasync(fd)) e = errno;
            if (fd >= 0 && close(fd) && !e) e = errno;
            if (e) rc = dx_fail("checkpoint '%s': cannot write /checksums: %s (the checkpoints written before are kept)",
                                a->path, strerror(e));
        }
        rc = dx_comm_agree(world, rc);
    }
    if (world->rank == 0) {
        if (!rc && rename(a->tmp, a->path)) rc = dx_fail("checkpoint '%s': cannot rename %s: %s", a->path, a->tmp, strerror(errno));
        if (rc) remove(a->tmp);
    }
    rc = dx_comm_agree(world, rc);
    if (seconds) *seconds = (double)(dx_now_ns() - a->t0_ns) * 1e-9;
    async_reset(a);
    return rc ? rc : 1;
}
