/* Fuzz harness: loading a checkpoint (checkpoints/checkpoint.c: dx_checkpoint_load into the tiny
 * model of rig.h, ZeRO stage 1, one MPI rank), structure-aware.
 *
 * As for traces, the input bytes drive a generator that writes a well-formed HDF5 file with
 * adversarial content: the root attributes (format, format_version, step, consumed_samples,
 * seed: missing, of other types, extreme), /params and /optimizer/{exp_avg,exp_avg_sq} (missing,
 * datasets instead of groups), each tensor's dataset (missing, another shape or rank, float64 or
 * int32 (converted by HDF5), strings (not convertible), a group in its place, an extent of 2^40
 * and more elements never written), extra entries in /params (tensors of another model, a group,
 * a dangling link, a name longer than 255 bytes), /checksums (none, right, a wrong value, another
 * shape, strings) with each tensor's checksum_column (missing or out of range for one), and now
 * and then a file cut short. The 0
 * choice of every decision (and the empty input) is a valid checkpoint of the model.
 *
 * Checked: dx_checkpoint_load returns 0 or -1; -1 names the checkpoint; 0 means the file is one
 * the model can take (every tensor present in its shape, /params of the model's size) and then
 * the master weights and both AdamW moments hold the file's values (converted to float) and the
 * state its step, consumed_samples and seed; no HDF5 identifier is left open. */
#include "fuzz_util.h"
#include "h5gen.h"
#include "rig.h"

#include "checkpoints/checkpoint.h"

static const char *const groups[3] = {"params", "optimizer/exp_avg", "optimizer/exp_avg_sq"};

/* How a tensor's dataset was written. */
enum { T_F32, T_F64, T_I32, T_MISSING, T_BAD };

/* The value written at element i of state s of parameter p (exact in float and int32). */
static float value_of(unsigned salt, int s, int p, size_t i)
{
    return (float)((salt + (unsigned)s * 7u + (unsigned)p * 13u + (unsigned)i) % 97u) * 0.25f - 12.0f;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    h5g_init();
    rig_setup(argc, argv, 1);
    return 0;
}

/* An int64 attribute (or missing / another type); *expect = the value when written as an
 * integer, *ok = 0 when the load cannot read it. */
static void gen_i64_attr(fz_bytes *b, hid_t f, const char *name, int64_t v, int64_t *expect, int *ok)
{
    *expect = v;
    switch (fz_below(b, 16)) {
    case 12: *ok = 0; break; /* missing */
    case 13: h5g_attr_str(f, name, "12", 0); *ok = 0; break;
    case 14: h5g_attr_f64(f, name, (double)(v & 0xffff)); *expect = v & 0xffff; break;
    case 15: h5g_attr_i32(f, name, (int32_t)v); *expect = (int32_t)v; break;
    default: h5g_attr_i64(f, name, v); break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_bytes b = {data, size};
    char path[300];
    fz_path(path, sizeof path, "ckpt.h5");
    const int np = dx_model_num_params_table(rig.m);

    h5g_ids ids0;
    h5g_count_ids(&ids0);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5G_OK(f);
    int loadable = 1; /* the file as generated is one the load must accept */

    /* root attributes */
    switch (fz_below(&b, 16)) {
    case 13: loadable = 0; break;
    case 14: h5g_attr_i64(f, "format", 2); break; /* only its presence is checked */
    case 15: h5g_attr_str(f, "format", "dissect-checkpoint", 1); break;
    default: h5g_attr_str(f, "format", "dissect-checkpoint", 0); break;
    }
    switch (fz_below(&b, 16)) {
    case 10: loadable = 0; break;
    case 11: h5g_attr_i64(f, "format_version", 1); loadable = 0; break;
    case 12: h5g_attr_i64(f, "format_version", 3); loadable = 0; break;
    case 13: {
        int64_t v = fz_i64_wild(&b);
        h5g_attr_i64(f, "format_version", v);
        if (v != 2) loadable = 0;
        break;
    }
    case 14: h5g_attr_str(f, "format_version", "2", 0); loadable = 0; break;
    case 15: h5g_attr_f64(f, "format_version", 2.0); break;
    default: h5g_attr_i64(f, "format_version", 2); break;
    }
    int64_t want_step, want_consumed, want_seed;
    gen_i64_attr(&b, f, "step", fz_i64_wild(&b), &want_step, &loadable);
    gen_i64_attr(&b, f, "consumed_samples", fz_i64_wild(&b), &want_consumed, &loadable);
    gen_i64_attr(&b, f, "seed", fz_i64_wild(&b), &want_seed, &loadable);
    h5g_attr_str(f, "config_json", "{}", 0);

    /* the groups */
    hid_t g[3] = {-1, -1, -1}, opt = -1;
    unsigned gk = fz_below(&b, 32);
    if (gk == 30) { /* /params a dataset */
        hsize_t d1[1] = {1};
        float v = 0;
        h5g_dataset(f, "params", H5T_NATIVE_FLOAT, 1, d1, &v, 0, 0);
        loadable = 0;
    } else if (gk != 31) {
        g[0] = H5Gcreate2(f, "params", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5G_OK(g[0]);
    } else {
        loadable = 0;
    }
    unsigned ok_ = fz_below(&b, 32);
    if (ok_ < 30) {
        opt = H5Gcreate2(f, "optimizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5G_OK(opt);
        for (int s = 1; s < 3; s++) {
            if (ok_ == 27u + (unsigned)s) { /* 28, 29: one moment group missing */
                loadable = 0;
                continue;
            }
            g[s] = H5Gcreate2(opt, s == 1 ? "exp_avg" : "exp_avg_sq", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            H5G_OK(g[s]);
        }
    } else {
        loadable = 0;
    }

    /* the tensors */
    unsigned salt = fz_u8(&b);
    int kind[3][64];
    size_t maxn = 1;
    for (int p = 0; p < np; p++) maxn = dx_model_param(rig.m, p)->numel > maxn ? dx_model_param(rig.m, p)->numel : maxn;
    double *buf = malloc(maxn * sizeof *buf);
    if (!buf) abort();
    for (int s = 0; s < 3; s++)
        for (int p = 0; p < np && p < 64; p++) {
            const dx_param *pr = dx_model_param(rig.m, p);
            kind[s][p] = T_MISSING;
            if (g[s] < 0) continue;
            unsigned c = fz_below(&b, 64);
            int rank = pr->cols ? 2 : 1;
            hsize_t dims[2] = {(hsize_t)pr->full_rows, (hsize_t)pr->full_cols};
            for (size_t i = 0; i < pr->numel; i++) buf[i] = value_of(salt, s, p, i);
            hid_t t = H5T_NATIVE_FLOAT;
            kind[s][p] = T_F32;
            if (c == 50) {
                kind[s][p] = T_F64;
            } else if (c == 51) {
                kind[s][p] = T_I32;
            } else if (c == 52) { /* missing */
                kind[s][p] = T_MISSING;
                loadable = 0;
                continue;
            } else if (c == 53) { /* another shape */
                dims[fz_below(&b, (unsigned)rank)] += 1 + fz_below(&b, 3);
                kind[s][p] = T_BAD;
            } else if (c == 54) { /* another rank */
                rank = rank == 2 ? 1 : 2;
                dims[0] = (hsize_t)pr->numel;
                dims[1] = 1;
                kind[s][p] = T_BAD;
            } else if (c == 55) { /* the shape transposed */
                if (rank == 2 && dims[0] != dims[1]) {
                    hsize_t x = dims[0];
                    dims[0] = dims[1];
                    dims[1] = x;
                    kind[s][p] = T_BAD;
                }
            } else if (c == 56) { /* strings: not convertible to float */
                hid_t st = H5Tcopy(H5T_C_S1);
                H5G_OK(H5Tset_size(st, 4));
                char *sv = calloc(pr->numel, 4);
                if (!sv) abort();
                h5g_dataset(g[s], pr->name, st, rank, dims, sv, 0, 0);
                free(sv);
                H5Tclose(st);
                kind[s][p] = T_BAD;
                loadable = 0;
                continue;
            } else if (c == 57) { /* a group */
                hid_t sub = H5Gcreate2(g[s], pr->name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
                H5G_OK(sub);
                H5Gclose(sub);
                kind[s][p] = T_BAD;
                loadable = 0;
                continue;
            } else if (c == 58) { /* 2^40 and more elements, none written */
                dims[0] = (hsize_t)1 << (40 + fz_below(&b, 22));
                h5g_dataset(g[s], pr->name, H5T_NATIVE_FLOAT, rank, dims, NULL, 1, 0);
                kind[s][p] = T_BAD;
                loadable = 0;
                continue;
            }
            if (kind[s][p] == T_BAD) loadable = 0;
            hsize_t n = dims[0] * (rank == 2 ? dims[1] : 1);
            if (kind[s][p] == T_I32) {
                int32_t *iv = malloc((size_t)n * sizeof *iv);
                if (!iv) abort();
                for (hsize_t i = 0; i < n; i++) iv[i] = i < pr->numel ? (int32_t)buf[i] : 0;
                h5g_dataset(g[s], pr->name, H5T_NATIVE_INT32, rank, dims, iv, c & 1, 0);
                free(iv);
            } else {
                double *dv = calloc((size_t)n, sizeof *dv);
                if (!dv) abort();
                memcpy(dv, buf, (size_t)(n < pr->numel ? n : pr->numel) * sizeof *dv);
                /* stored as float32 or float64; HDF5 converts from the doubles */
                hid_t ft = kind[s][p] == T_F64 ? H5T_IEEE_F64LE : H5T_IEEE_F32LE;
                hid_t sp = H5Screate_simple(rank, dims, NULL);
                hid_t d = H5Dcreate2(g[s], pr->name, ft, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
                H5G_OK(d);
                H5G_OK(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, dv));
                H5Dclose(d);
                H5Sclose(sp);
                free(dv);
            }
            (void)t;
        }
    free(buf);

    /* extra entries in /params */
    if (g[0] >= 0) {
        switch (fz_below(&b, 32)) {
        case 27: { /* a tensor of another model */
            hsize_t d1[1] = {1 + fz_below(&b, 64)};
            float v[64] = {0};
            h5g_dataset(g[0], "model.layers.9.extra.weight", H5T_NATIVE_FLOAT, 1, d1, v, 0, 0);
            loadable = 0;
            break;
        }
        case 28: {
            hid_t sub = H5Gcreate2(g[0], "model.layers.9", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            H5G_OK(sub);
            H5Gclose(sub);
            loadable = 0;
            break;
        }
        case 29:
            H5G_OK(H5Lcreate_soft("/nowhere", g[0], "model.dangling", H5P_DEFAULT, H5P_DEFAULT));
            loadable = 0;
            break;
        case 30: { /* a name longer than the reader's 256-byte buffer */
            char name[400];
            memset(name, 'x', sizeof name - 1);
            name[sizeof name - 1] = '\0';
            hsize_t d1[1] = {0};
            h5g_dataset(g[0], name, H5T_NATIVE_FLOAT, 1, d1, NULL, 0, 0);
            break;
        }
        case 31: { /* a huge empty extent: the element count must not overflow */
            hsize_t d2[2] = {(hsize_t)1 << 62, (hsize_t)1 << 62};
            h5g_dataset(g[0], "model.huge", H5T_NATIVE_FLOAT, 2, d2, NULL, 1, 0);
            loadable = 0;
            break;
        }
        default: break;
        }
    }
    /* /checksums and the tensors' checksum_column: none (the 0 choice: loaded unchecked), right
     * (the file's float32 values hashed by dx_checkpoint_checksum), or damaged */
    unsigned ck = fz_below(&b, 16);
    if (ck >= 8 && np <= 64) {
        uint64_t flat[3 * 64]; /* [3, np] */
        float *fv = malloc(maxn * sizeof *fv);
        if (!fv) abort();
        for (int s = 0; s < 3; s++)
            for (int p = 0; p < np && p < 64; p++) {
                const dx_param *pr = dx_model_param(rig.m, p);
                for (size_t i = 0; i < pr->numel; i++) {
                    float want = value_of(salt, s, p, i);
                    fv[i] = kind[s][p] == T_I32 ? (float)(int32_t)want : want;
                }
                flat[(size_t)s * np + p] = dx_checkpoint_checksum(fv, pr->numel);
                if (g[s] < 0 || kind[s][p] == T_MISSING) continue;
                hid_t d = H5Dopen2(g[s], pr->name, H5P_DEFAULT); /* (fails for a group in its place) */
                if (d < 0) continue;
                int64_t col = p;
                if (ck == 13 && s == 2 && p == 0) { /* one column missing or out of range */
                    loadable = 0;
                    if (fz_below(&b, 2)) col = np + (int64_t)fz_below(&b, 1000);
                    else col = -1;
                }
                if (col >= 0) h5g_attr_i64(d, "checksum_column", col);
                H5Dclose(d);
            }
        free(fv);
        hsize_t dims[2] = {3, (hsize_t)np};
        if (ck == 12) { /* a wrong value */
            flat[fz_below(&b, 3u * (unsigned)np)] ^= (uint64_t)1 << fz_below(&b, 64);
            loadable = 0;
        }
        if (ck == 14) { /* another shape */
            dims[0] = 2;
            loadable = 0;
        }
        if (ck == 15) { /* strings */
            hid_t st = H5Tcopy(H5T_C_S1);
            H5G_OK(H5Tset_size(st, 8));
            h5g_dataset(f, "checksums", st, 2, dims, flat, 0, 0);
            H5Tclose(st);
            loadable = 0;
        } else {
            h5g_dataset(f, "checksums", H5T_NATIVE_UINT64, 2, dims, flat, 0, 0);
        }
    }
    for (int s = 0; s < 3; s++)
        if (g[s] >= 0) H5Gclose(g[s]);
    if (opt >= 0) H5Gclose(opt);
    H5G_OK(H5Fclose(f));
    if (fz_rare(&b, 4)) {
        h5g_truncate(path, 1 + (long)fz_below(&b, 255) * 64);
        loadable = -1; /* may or may not still load */
    }

    dx_ckpt_state st = {.step = -1, .consumed_samples = -1, .seed = 0, .grad_norm = 0};
    dx_fail("%s", "");
    fz_quiet(1);
    int rc = dx_checkpoint_load(path, rig.m, rig.z, rig.world, rig.world, 0, rig.total_params, &st);
    fz_quiet(0);
    h5g_check_closed(&ids0, "dx_checkpoint_load");
    FZ_CHECK(rc == 0 || rc == -1, "dx_checkpoint_load returned %d", rc);
    if (rc != 0) {
        FZ_CHECK(loadable != 1, "a valid checkpoint was refused: %s", dx_last_error());
        FZ_CHECK(strstr(dx_last_error(), path) != NULL, "the error does not name the checkpoint: %s", dx_last_error());
        return 0;
    }
    FZ_CHECK(loadable != 0, "a checkpoint the model cannot take was accepted");
    if (loadable < 0) return 0; /* cut short but still readable: its values are whatever HDF5 read */
    FZ_CHECK(st.step == want_step && st.consumed_samples == want_consumed && st.seed == (uint64_t)want_seed,
             "state (%lld, %lld, %llu), written (%lld, %lld, %lld)", (long long)st.step,
             (long long)st.consumed_samples, (unsigned long long)st.seed, (long long)want_step,
             (long long)want_consumed, (long long)want_seed);
    /* every value as written (converted to float) */
    float *v = NULL;
    size_t cap = 0;
    for (int p = 0; p < np && p < 64; p++) {
        const dx_param *pr = dx_model_param(rig.m, p);
        if (pr->numel > cap) {
            free(v);
            cap = pr->numel;
            v = malloc(cap * sizeof *v);
            if (!v) abort();
        }
        for (int s = 0; s < 3; s++) {
            if (s == 0) {
                if (dx_zero_get_master(rig.z, pr->group, pr->offset, pr->numel, v)) abort();
            } else if (dx_zero_read_state(rig.z, pr->group, s, pr->offset, pr->offset + pr->numel, v)) {
                abort();
            }
            for (size_t i = 0; i < pr->numel; i++) {
                float want = value_of(salt, s, p, i);
                if (kind[s][p] == T_I32) want = (float)(int32_t)want;
                FZ_CHECK(v[i] == want, "%s/%s[%zu] = %g, the file holds %g", groups[s], pr->name, i, (double)v[i],
                         (double)want);
            }
        }
    }
    free(v);
    return 0;
}
