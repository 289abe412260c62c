/* dissect dump: one forward + backward written to HDF5; see dump.h. */
#include "dump.h"

#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/checkpoint.h"
#include "common/common.h"
#include "comm/grid.h"
#include "trace/h5util.h"
#include "run.h"
#include "model/model.h"
#include "worker/worker.h"

static int write_dataset(hid_t loc, const char *name, hid_t file_type, hid_t mem_type, int rank,
                         const hsize_t *dims, const void *data)
{
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t d = H5Dcreate2(loc, name, file_type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = (d < 0 || H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) ? -1 : 0;
    if (d >= 0) H5Dclose(d);
    H5Sclose(sp);
    return rc;
}

/* Writes the dump of worker w (after dx_worker_forward_backward) to path. Rank 0 only. */
static int write_dump(const char *path, const dx_config *c, dx_worker *w, double loss,
                      const int32_t *inputs, const int32_t *targets, const float *logits)
{
    const int B = c->micro_batch, T = c->seq_length, V = c->model.vocab_size;
    dx_backend *be = dx_worker_backend(w);
    dx_model *m = dx_worker_model(w);
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) return dx_fail("dump '%s': cannot create %s: %s", path, tmp, strerror(errno));
    int rc = 0;
    char *json = dx_config_to_json(c);
    const int64_t version = 1;
    if (dx_h5_write_str_attr(f, "format", "dissect-dump") ||
        dx_h5_write_scalar_attr(f, "format_version", H5T_STD_I64LE, H5T_NATIVE_INT64, &version) ||
        dx_h5_write_scalar_attr(f, "loss", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &loss) ||
        dx_h5_write_str_attr(f, "backend", be->name) || dx_h5_write_str_attr(f, "act_dtype", dx_dtype_name(be->act)) ||
        dx_h5_write_str_attr(f, "config_json", json ? json : "{}"))
        rc = dx_fail("dump '%s': cannot write attributes", path);
    free(json);
    hsize_t bt[3] = {(hsize_t)B, (hsize_t)T, (hsize_t)V};
    if (!rc && (write_dataset(f, "inputs", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, bt, inputs) ||
                write_dataset(f, "targets", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, bt, targets) ||
                write_dataset(f, "logits", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 3, bt, logits)))
        rc = dx_fail("dump '%s': cannot write inputs, targets or logits", path);

    hid_t g = rc ? -1 : H5Gcreate2(f, "grads", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (!rc && g < 0) rc = dx_fail("dump '%s': cannot create group /grads", path);
    const size_t as = dx_dtype_size(be->acc);
    for (int i = 0; !rc && i < dx_model_num_params_table(m); i++) {
        const dx_param *p = dx_model_param(m, i);
        if (!dx_model_group(m, p->group)->grad) continue; /* frozen (LoRA's base): no gradient */
        float *buf = malloc(p->numel * sizeof *buf);
        if (!buf) {
            rc = dx_fail("dump: out of memory for the gradient of %s", p->name);
            break;
        }
        /* ZeRO stage 0: the model group's gradient buffer is the full, local gradient */
        const char *grad = (const char *)dx_model_group(m, p->group)->grad;
        rc = be->download_f32(be, buf, grad + p->offset * as, be->acc, p->numel);
        hsize_t dims[2] = {(hsize_t)p->rows, (hsize_t)p->cols};
        if (!rc && write_dataset(g, p->name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, p->cols ? 2 : 1, dims, buf))
            rc = dx_fail("dump '%s': cannot write /grads/%s", path, p->name);
        free(buf);
    }
    if (g >= 0) H5Gclose(g);
    if (H5Fclose(f) < 0 && !rc) rc = dx_fail("dump '%s': cannot close %s", path, tmp);
    if (!rc && rename(tmp, path)) rc = dx_fail("dump '%s': cannot rename %s: %s", path, tmp, strerror(errno));
    if (rc) remove(tmp);
    return rc;
}

int dx_dump_run(const dx_config *c, dx_comm *world, const char *out_path)
{
    int rc = 0;
    if (world->size != 1)
        rc = dx_fail("dump: runs on one rank (mpirun -np 1), got %d ranks", world->size);
    else if (c->zero_stage != 0)
        rc = dx_fail("dump: needs key 'zero_optimization.stage' = 0 (full gradients on the rank), got %d",
                     c->zero_stage);
    else if (!c->train_path[0])
        rc = dx_fail("dump: needs a training shard (key 'data.train', flag --train-data)");
    else if (!strcmp(c->resume, "auto"))
        rc = dx_fail("dump: key 'resume' must name a checkpoint file here, not \"auto\"");
    if (dx_agree_and_report(world, rc)) return -1;

    dx_worker *w = dx_worker_create(c, world, &rc);
    if (dx_agree_and_report(world, rc)) {
        dx_worker_destroy(w);
        return -1;
    }
    if (c->resume[0]) { /* the checkpoint's weights (LoRA: its adapters); the batch stays the first */
        dx_ckpt_state st;
        rc = dx_checkpoint_load(c->resume, dx_worker_model(w), dx_worker_zero(w), world, dx_worker_grid(w)->dp_host,
                                dx_worker_grid(w)->tp_rank, dx_num_trainable_params(c), &st);
        if (!dx_agree_and_report(world, rc))
            printf("dump: weights of %s (step %lld)\n", c->resume, (long long)st.step);
        else {
            dx_worker_destroy(w);
            return -1;
        }
    }
    const size_t N = (size_t)c->micro_batch * c->seq_length;
    int32_t *inputs = malloc(N * sizeof *inputs), *targets = malloc(N * sizeof *targets);
    float *logits = malloc(N * (size_t)c->model.vocab_size * sizeof *logits);
    double loss = 0;
    if (!inputs || !targets || !logits) rc = dx_fail("dump: out of memory for %zu tokens of logits", N);
    if (!rc) rc = dx_worker_forward_backward(w, &loss, inputs, targets, logits);
    if (!rc) rc = write_dump(out_path, c, w, loss, inputs, targets, logits);
    if (!dx_agree_and_report(world, rc))
        printf("dump written to %s: %d x %d tokens, loss %.6f, %d parameter gradients (%s)\n", out_path,
               c->micro_batch, c->seq_length, loss, dx_model_num_params_table(dx_worker_model(w)),
               dx_worker_backend(w)->name);
    else
        rc = -1;
    free(inputs);
    free(targets);
    free(logits);
    dx_worker_destroy(w);
    return rc;
}
