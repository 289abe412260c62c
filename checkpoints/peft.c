/* LoRA adapters as a PEFT directory; see peft.h. */
#include "peft.h"

#include <cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/common.h"
#include "safetensors.h"

#define PEFT_PREFIX "base_model.model."

static int write_file(const char *path, const void *a, size_t na, const void *b, size_t nb,
                      const void *c, size_t nc)
{
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return dx_fail("%s: cannot create: %s", tmp, strerror(errno));
    int ok = (!na || fwrite(a, 1, na, f) == na) && (!nb || fwrite(b, 1, nb, f) == nb) &&
             (!nc || fwrite(c, 1, nc, f) == nc);
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        remove(tmp);
        return dx_fail("%s: cannot write: %s", path, strerror(errno));
    }
    if (rename(tmp, path)) return dx_fail("%s: cannot rename %s: %s", path, tmp, strerror(errno));
    return 0;
}

/* dx_st_write's source: the gathered adapters, tensor k at data[off[k], off[k + 1]) */
typedef struct {
    const float *data;
    size_t *off;
} adapters;

static int copy_adapter(void *ctx, int k, float *out)
{
    const adapters *a = ctx;
    memcpy(out, a->data + a->off[k], (a->off[k + 1] - a->off[k]) * sizeof(float));
    return 0;
}

/* the adapter config; NULL + dx_fail on OOM */
static char *config_json(const dx_config *c)
{
    cJSON *o = cJSON_CreateObject(), *tm = cJSON_CreateArray();
    int ok = o && tm;
    if (ok) {
        for (int t = 0; t < DX_LORA_NTARGETS; t++)
            if (c->lora_targets & (1u << t)) ok &= cJSON_AddItemToArray(tm, cJSON_CreateString(dx_lora_target_names[t]));
        ok &= cJSON_AddItemToObject(o, "target_modules", tm);
        tm = NULL;
        ok &= cJSON_AddStringToObject(o, "peft_type", "LORA") != NULL;
        ok &= cJSON_AddStringToObject(o, "task_type", "CAUSAL_LM") != NULL;
        ok &= cJSON_AddNumberToObject(o, "r", c->lora_r) != NULL;
        ok &= cJSON_AddNumberToObject(o, "lora_alpha", c->lora_alpha) != NULL;
        ok &= cJSON_AddNumberToObject(o, "lora_dropout", c->lora_dropout) != NULL;
        ok &= cJSON_AddStringToObject(o, "bias", "none") != NULL;
        ok &= cJSON_AddFalseToObject(o, "fan_in_fan_out") != NULL;
        ok &= cJSON_AddTrueToObject(o, "inference_mode") != NULL;
        ok &= cJSON_AddTrueToObject(o, "init_lora_weights") != NULL;
        ok &= cJSON_AddNullToObject(o, "modules_to_save") != NULL;
        ok &= (c->hf_model[0] ? cJSON_AddStringToObject(o, "base_model_name_or_path", c->hf_model)
                              : cJSON_AddNullToObject(o, "base_model_name_or_path")) != NULL;
    }
    char *s = ok ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    cJSON_Delete(tm);
    if (!s) dx_fail("PEFT adapter config: out of memory");
    return s;
}

int dx_peft_save(const char *dir, dx_model *m, dx_zero *z, const dx_config *c, dx_comm *world, dx_comm *tp,
                 dx_comm *pp)
{
    const int np = dx_model_num_params_table(m), writer = !world || world->rank == 0;
    const int L = c->model.num_hidden_layers;
    const int r = c->lora_r;
    int64_t lin[DX_LORA_NTARGETS], lout[DX_LORA_NTARGETS];
    for (int t = 0; t < DX_LORA_NTARGETS; t++) dx_lora_target_dims(&c->model, t, &lin[t], &lout[t]);
    /* every layer's adapters at their full shapes (all pipeline stages' and TP slices'): per
     * layer, the targets in order, A [r, in] then B [out, r] (model.c's order), so layer l's
     * start at l x per_layer */
    const size_t total = r > 0 ? (size_t)dx_num_trainable_params(c) : 0, per_layer = L ? total / (size_t)L : 0;
    size_t t_off[DX_LORA_NTARGETS] = {0};
    for (int t = 0, o = 0; t < DX_LORA_NTARGETS; t++) {
        t_off[t] = (size_t)o;
        if ((c->lora_targets >> t) & 1u) o += r * (lin[t] + lout[t]);
    }
    int rc = total ? 0 : dx_fail("PEFT adapters: the model has no LoRA adapters (lora.r is 0)");
    float *data = rc ? NULL : calloc(total, sizeof(float));
    size_t cap = 1;
    for (int i = 0; i < np; i++)
        if (dx_model_param(m, i)->init && dx_model_param(m, i)->numel > cap) cap = dx_model_param(m, i)->numel;
    float *local = rc ? NULL : malloc(cap * sizeof(float));
    if (!rc && (!data || !local)) rc = dx_fail("PEFT adapters: out of memory for %zu floats", total);
    if (world) rc = dx_comm_agree(world, rc);
    const int first = 3 + 9 * L; /* global index of layer 0's first adapter (model.c) */
    /* this rank's pieces, gathered over DP (collective), at their places; a piece every TP
     * rank holds is placed by TP rank 0 only */
    for (int i = 0; !rc && i < np; i++) {
        const dx_param *p = dx_model_param(m, i);
        if (!p->init) continue;
        const int k = p->global_index - first, l = k / (2 * DX_LORA_NTARGETS), t = k % (2 * DX_LORA_NTARGETS) / 2,
                  b = k % 2;
        const size_t base = (size_t)l * per_layer + t_off[t] + (b ? (size_t)r * lin[t] : 0);
        if (k < 0 || l >= L || base + (size_t)p->full_rows * p->full_cols > (size_t)(l + 1) * per_layer) {
            rc = dx_fail("PEFT adapters: %s is not at its place in layer %d's adapters", p->name, l);
            break;
        }
        rc = dx_zero_get_master(z, p->group, p->offset, p->numel, local);
        if (rc || (p->tp_replicated && tp && tp->rank != 0)) continue;
        for (int row = 0; row < p->rows; row++)
            memcpy(data + base + (size_t)(p->row0 + row) * p->full_cols + p->col0, local + (size_t)row * p->cols,
                   (size_t)p->cols * sizeof(float));
    }
    free(local);
    /* the TP slices' and the stages' parts summed (each element placed by one rank; the others
     * add zeros) */
    if (!rc && tp && tp->size > 1 && tp->all_reduce_sum(tp, data, total, DX_F32)) rc = -1;
    if (!rc && pp && pp->size > 1 && pp->all_reduce_sum(pp, data, total, DX_F32)) rc = -1;
    char cpath[1100], spath[1100];
    snprintf(cpath, sizeof cpath, "%s/adapter_config.json", dir);
    snprintf(spath, sizeof spath, "%s/adapter_model.safetensors", dir);
    if (!rc && writer) {
        if (mkdir(dir, 0777) && errno != EEXIST) rc = dx_fail("%s: cannot create: %s", dir, strerror(errno));
        int nt = 0;
        for (int t = 0; t < DX_LORA_NTARGETS; t++) nt += (c->lora_targets >> t) & 1u;
        const int n = 2 * nt * L;
        dx_st_spec *t = rc ? NULL : calloc((size_t)n, sizeof *t);
        char(*names)[160] = rc ? NULL : calloc((size_t)n, sizeof *names);
        adapters a = {data, calloc((size_t)n + 1, sizeof(size_t))};
        if (!rc && (!t || !names || !a.off)) rc = dx_fail("PEFT adapters: out of memory");
        for (int l = 0, k = 0; !rc && l < L; l++)
            for (int tg = 0; tg < DX_LORA_NTARGETS; tg++) {
                if (!((c->lora_targets >> tg) & 1u)) continue;
                for (int ab = 0; ab < 2; ab++, k++) {
                    snprintf(names[k], sizeof names[k], PEFT_PREFIX "model.layers.%d.%s.%s.lora_%c.weight", l,
                             dx_lora_target_modules[tg], dx_lora_target_names[tg], ab ? 'B' : 'A');
                    const int64_t rows = ab ? lout[tg] : c->lora_r, cols = ab ? c->lora_r : lin[tg];
                    t[k] = (dx_st_spec){names[k], 2, {rows, cols}};
                    a.off[k + 1] = a.off[k] + (size_t)(rows * cols);
                }
            }
        if (!rc && a.off[n] != total) rc = dx_fail("PEFT adapters: %zu values for %zu parameters", a.off[n], total);
        if (!rc) rc = dx_st_write(spath, t, n, 0, copy_adapter, &a);
        free(t);
        free(names);
        free(a.off);
        char *cj = rc ? NULL : config_json(c);
        if (!rc && !cj) rc = -1;
        if (!rc) rc = write_file(cpath, cj, strlen(cj), "\n", 1, NULL, 0);
        free(cj);
    }
    free(data);
    /* every rank learns the writer's result (its message stays on the writer) */
    if (world && world->size > 1) {
        int worst = 0;
        if (world->max_int(world, rc ? 1 : 0, &worst) || worst) {
            if (!rc) rc = dx_fail("PEFT adapters: rank 0 could not write %s", dir);
        }
    }
    return rc;
}
