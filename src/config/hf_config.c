/* Hugging Face config.json reader (dx_hf_load_config, declared in config.h). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "config.h"

/* ------------------------------------------------------------------------------------------ */
/* config.json                                                                                 */

static int cfg_int(const cJSON *root, const char *path, const char *key, int required, int dflt,
                   int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) {
        if (required) return dx_fail("%s: key '%s': missing", path, key);
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || !(v->valuedouble >= 1) ||
        v->valuedouble > 2147483647.0)
        return dx_fail("%s: key '%s': expected a positive integer", path, key);
    *out = (int)v->valuedouble;
    return 0;
}

static int cfg_num(const cJSON *root, const char *path, const char *key, double dflt, int positive,
                   double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) {
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) ||
        (positive ? !(v->valuedouble > 0) : !(v->valuedouble >= 0)))
        return dx_fail("%s: key '%s': expected a %s number", path, key, positive ? "positive" : "non-negative");
    *out = v->valuedouble;
    return 0;
}

/* A boolean key that dissect supports only as false (absent and null mean false). */
static int cfg_false(const cJSON *root, const char *path, const char *key, const char *why)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) return 0;
    if (cJSON_IsTrue(v)) return dx_fail("%s: key '%s': true is not supported (%s)", path, key, why);
    return dx_fail("%s: key '%s': expected true or false", path, key);
}

/* rope_scaling (4.x) / rope_parameters (5.x): null, or plain RoPE {"rope_type": "default",
 * "rope_theta": x} ("type" is the older spelling of "rope_type"). Sets *theta if given. */
static int cfg_rope(const cJSON *root, const char *path, const char *key, double *theta)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsObject(v))
        return dx_fail("%s: key '%s': expected null or an object, got another JSON type", path, key);
    for (const cJSON *e = v->child; e; e = e->next) {
        if (!strcmp(e->string, "rope_type") || !strcmp(e->string, "type")) {
            if (!cJSON_IsString(e) || strcmp(e->valuestring, "default"))
                return dx_fail("%s: key '%s.%s': RoPE scaling %s%s%s is not supported (dissect "
                               "implements plain RoPE: null or \"default\")",
                               path, key, e->string, cJSON_IsString(e) ? "'" : "",
                               cJSON_IsString(e) ? e->valuestring : "of this type",
                               cJSON_IsString(e) ? "'" : "");
        } else if (!strcmp(e->string, "rope_theta")) {
            if (!cJSON_IsNumber(e) || !(e->valuedouble > 0) || !isfinite(e->valuedouble))
                return dx_fail("%s: key '%s.rope_theta': expected a positive number", path, key);
            *theta = e->valuedouble;
        } else {
            return dx_fail("%s: key '%s.%s': RoPE scaling parameters are not supported (dissect "
                           "implements plain RoPE)",
                           path, key, e->string);
        }
    }
    return 0;
}

int dx_hf_load_config(const char *dir, dx_model_config *out)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text = dx_read_file(path, NULL);
    if (!text) return -1;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t pos = at && at >= text ? (size_t)(at - text) : 0;
        free(text);
        return dx_fail("%s: malformed JSON near byte %zu", path, pos);
    }
    free(text);
    dx_model_config m;
    memset(&m, 0, sizeof m);
    int rc = 0;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
    if (!cJSON_IsObject(root)) {
        rc = dx_fail("%s: expected a JSON object", path);
    } else if (!cJSON_IsString(mt)) {
        rc = dx_fail("%s: key 'model_type': missing (expected \"llama\")", path);
    } else if (strcmp(mt->valuestring, "llama")) {
        rc = dx_fail("%s: key 'model_type': \"%s\" is not supported (expected \"llama\")", path,
                     mt->valuestring);
    } else if (act && !cJSON_IsNull(act) && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu"))) {
        rc = dx_fail("%s: key 'hidden_act': %s%s%s is not supported (expected \"silu\")", path,
                     cJSON_IsString(act) ? "\"" : "", cJSON_IsString(act) ? act->valuestring : "this value",
                     cJSON_IsString(act) ? "\"" : "");
    }
    if (!rc)
        rc = cfg_false(root, path, "tie_word_embeddings",
                       "dissect's LM head lm_head.weight is separate from model.embed_tokens.weight");
    if (!rc) rc = cfg_false(root, path, "attention_bias", "dissect's attention projections have no bias");
    if (!rc) rc = cfg_false(root, path, "mlp_bias", "dissect's MLP projections have no bias");
    if (!rc) rc = cfg_int(root, path, "vocab_size", 1, 0, &m.vocab_size);
    if (!rc) rc = cfg_int(root, path, "hidden_size", 1, 0, &m.hidden_size);
    if (!rc) rc = cfg_int(root, path, "intermediate_size", 1, 0, &m.intermediate_size);
    if (!rc) rc = cfg_int(root, path, "num_hidden_layers", 1, 0, &m.num_hidden_layers);
    if (!rc) rc = cfg_int(root, path, "num_attention_heads", 1, 0, &m.num_attention_heads);
    if (!rc) rc = cfg_int(root, path, "num_key_value_heads", 0, m.num_attention_heads, &m.num_key_value_heads);
    if (!rc) rc = cfg_int(root, path, "max_position_embeddings", 0, 2048, &m.max_position_embeddings);
    if (!rc) rc = cfg_num(root, path, "rms_norm_eps", 1e-6, 1, &m.rms_norm_eps);
    if (!rc) rc = cfg_num(root, path, "initializer_range", 0.02, 0, &m.initializer_range);
    if (!rc) rc = cfg_num(root, path, "rope_theta", 10000.0, 1, &m.rope_theta);
    if (!rc) rc = cfg_rope(root, path, "rope_scaling", &m.rope_theta);
    if (!rc) rc = cfg_rope(root, path, "rope_parameters", &m.rope_theta);
    if (!rc) {
        double prf;
        rc = cfg_num(root, path, "partial_rotary_factor", 1.0, 1, &prf);
        if (!rc && prf != 1.0)
            rc = dx_fail("%s: key 'partial_rotary_factor': %g is not supported (expected 1)", path, prf);
    }
    if (!rc && m.hidden_size % m.num_attention_heads)
        rc = dx_fail("%s: key 'hidden_size': %d is not divisible by num_attention_heads (%d)", path,
                     m.hidden_size, m.num_attention_heads);
    if (!rc && m.num_attention_heads % m.num_key_value_heads)
        rc = dx_fail("%s: key 'num_key_value_heads': %d does not divide num_attention_heads (%d)",
                     path, m.num_key_value_heads, m.num_attention_heads);
    if (!rc) {
        int hd, dh = m.hidden_size / m.num_attention_heads;
        rc = cfg_int(root, path, "head_dim", 0, dh, &hd);
        if (!rc && hd != dh)
            rc = dx_fail("%s: key 'head_dim': %d is not supported (dissect uses hidden_size / "
                         "num_attention_heads = %d)",
                         path, hd, dh);
        if (!rc && dh % 2)
            rc = dx_fail("%s: key 'hidden_size': head dimension %d must be even (rotary embeddings)",
                         path, dh);
    }
    cJSON_Delete(root);
    if (rc) return -1;
    *out = m;
    return 0;
}

