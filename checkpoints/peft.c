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
        cJSON *h = rc ? NULL : cJSON_CreateObject();
        if (!rc && !h) rc = dx_fail("PEFT adapters: out of memory");
        size_t begin = 0;
        for (int i = 0; !rc && i < np; i++) {
            const dx_param *p = dx_model_param(m, i);
            if (!p->init) continue;
            char name[160];
            snprintf(name, sizeof name, PEFT_PREFIX "%s", p->name);
            cJSON *t = cJSON_CreateObject();
            const double shape[2] = {p->rows, p->cols};
            const double offs[2] = {(double)begin, (double)(begin + p->numel * sizeof(float))};
            if (!t || !cJSON_AddStringToObject(t, "dtype", "F32") ||
                !cJSON_AddItemToObject(t, "shape", cJSON_CreateDoubleArray(shape, 2)) ||
                !cJSON_AddItemToObject(t, "data_offsets", cJSON_CreateDoubleArray(offs, 2)) ||
                !cJSON_AddItemToObject(h, name, t)) {
                cJSON_Delete(t);
                rc = dx_fail("PEFT adapters: out of memory");
            }
            begin += p->numel * sizeof(float);
        }
        cJSON *meta = rc ? NULL : cJSON_AddObjectToObject(h, "__metadata__");
        if (!rc && (!meta || !cJSON_AddStringToObject(meta, "format", "pt"))) rc = dx_fail("PEFT adapters: out of memory");
        char *hs = rc ? NULL : cJSON_PrintUnformatted(h);
        cJSON_Delete(h);
        if (!rc && !hs) rc = dx_fail("PEFT adapters: out of memory");
        if (!rc) {
            size_t hn = strlen(hs), padded = (hn + 7) / 8 * 8;
            char *hb = malloc(8 + padded);
            if (!hb) {
                rc = dx_fail("PEFT adapters: out of memory");
            } else {
                uint64_t n = padded;
                for (int b = 0; b < 8; b++) hb[b] = (char)((n >> (8 * b)) & 0xFF); /* little endian */
                memcpy(hb + 8, hs, hn);
                memset(hb + 8 + hn, ' ', padded - hn);
                /* the tensors' bytes: fp32 little endian (the host's order on x86-64 and arm64) */
                rc = write_file(spath, hb, 8 + padded, data, total * sizeof(float), NULL, 0);
                free(hb);
            }
        }
        free(hs);
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
