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

int dx_peft_save(const char *dir, dx_model *m, dx_zero *z, const dx_config *c, dx_comm *dp /* host */)
{
    const int np = dx_model_num_params_table(m), writer = !dp || dp->rank == 0;
    size_t total = 0;
    for (int i = 0; i < np; i++)
        if (dx_model_param(m, i)->init) total += dx_model_param(m, i)->numel;
    int rc = total ? 0 : dx_fail("PEFT adapters: the model has no LoRA adapters (lora.r is 0)");
    float *data = rc ? NULL : malloc(total * sizeof(float));
    if (!rc && !data) rc = dx_fail("PEFT adapters: out of memory for %zu floats", total);
    if (dp) rc = dx_comm_agree(dp, rc);
    /* the master weights, gathered (collective over DP), in table order */
    size_t off = 0;
    for (int i = 0; !rc && i < np; i++) {
        const dx_param *p = dx_model_param(m, i);
        if (!p->init) continue;
        rc = dx_zero_get_master(z, p->group, p->offset, p->numel, data + off);
        off += p->numel;
    }
    char cpath[1100], spath[1100];
    snprintf(cpath, sizeof cpath, "%s/adapter_config.json", dir);
    snprintf(spath, sizeof spath, "%s/adapter_model.safetensors", dir);
    if (!rc && writer) {
        if (mkdir(dir, 0777) && errno != EEXIST) rc = dx_fail("%s: cannot create: %s", dir, strerror(errno));
        int n = 0;
        for (int i = 0; i < np; i++) n += dx_model_param(m, i)->init != 0;
        dx_st_spec *t = rc ? NULL : calloc((size_t)n, sizeof *t);
        char(*names)[160] = rc ? NULL : calloc((size_t)n, sizeof *names);
        adapters a = {data, calloc((size_t)n + 1, sizeof(size_t))};
        if (!rc && (!t || !names || !a.off)) rc = dx_fail("PEFT adapters: out of memory");
        for (int i = 0, k = 0; !rc && i < np; i++) {
            const dx_param *p = dx_model_param(m, i);
            if (!p->init) continue;
            snprintf(names[k], sizeof names[k], PEFT_PREFIX "%s", p->name);
            t[k] = (dx_st_spec){names[k], 2, {p->rows, p->cols}};
            a.off[k + 1] = a.off[k] + p->numel;
            k++;
        }
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
    if (dp && dp->size > 1) {
        int worst = 0;
        if (dp->max_int(dp, rc ? 1 : 0, &worst) || worst) {
            if (!rc) rc = dx_fail("PEFT adapters: rank 0 could not write %s", dir);
        }
    }
    return rc;
}
