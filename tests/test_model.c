/* Whole-model checks on the float64 CPU backend:
 *  - every parameter tensor's gradient against float64 central finite differences of the loss,
 *    with the Q, K and V projections as two GEMMs (the default at this shape) and as one;
 *  - gradient accumulation: two micro-batches of 1 sequence == one micro-batch of 2;
 *  - ignored targets (< 0) add no loss;
 *  - the learning-rate schedule (warm-up, cosine decay, floor).
 * Prints one line per check and "N passed, M failed". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "config/config.h"
#include "kernels.h"
#include "model/model.h"
#include "worker/worker.h"

static int passed, failed;

static void check(int ok, const char *what, double value, double bound)
{
    printf("%s %-58s %.3e (bound %.1e)\n", ok ? "ok  " : "FAIL", what, value, bound);
    if (ok) passed++;
    else failed++;
}

static dx_model_config tiny_cfg(void)
{
    dx_model_config m = {0};
    strcpy(m.preset, "test");
    m.vocab_size = 23;
    m.hidden_size = 16;
    m.intermediate_size = 20;
    m.num_hidden_layers = 2;
    m.num_attention_heads = 4;
    m.num_key_value_heads = 2;
    m.max_position_embeddings = 64;
    m.rms_norm_eps = 1e-5;
    m.rope_theta = 10000.0;
    m.initializer_range = 0.3; /* large enough that every path carries gradient */
    return m;
}

typedef struct {
    dx_backend *be;
    dx_model *m;
    double **work, **grad;
    int B, T;
    int32_t *ids, *tg;
    double *loss;
} rig;

static void rig_init(rig *r, int B, int T, uint64_t seed)
{
    dx_model_config cfg = tiny_cfg();
    r->be = dx_backend_cpu64_create(1);
    r->m = dx_model_create(&cfg, r->be, B, T);
    if (!r->m) { fprintf(stderr, "%s\n", dx_last_error()); exit(2); }
    r->B = B;
    r->T = T;
    int ng = dx_model_num_groups(r->m);
    r->work = calloc((size_t)ng, sizeof *r->work);
    r->grad = calloc((size_t)ng, sizeof *r->grad);
    for (int g = 0; g < ng; g++) {
        dx_group *G = dx_model_group(r->m, g);
        r->work[g] = malloc(G->numel * sizeof(double));
        r->grad[g] = calloc(G->numel, sizeof(double));
        float *tmp = malloc(G->numel * sizeof(float));
        dx_model_init_values(r->m, g, 0, G->numel, 7, tmp);
        for (size_t i = 0; i < G->numel; i++)
            r->work[g][i] = tmp[i] + (tmp[i] == 1.0f ? 0.2 * dx_normal(99, (uint64_t)g, i) : 0.0);
        free(tmp);
        G->work = r->work[g];
        G->grad = r->grad[g];
    }
    r->ids = malloc((size_t)B * T * sizeof(int32_t));
    r->tg = malloc((size_t)B * T * sizeof(int32_t));
    for (int i = 0; i < B * T; i++) {
        r->ids[i] = (int32_t)(dx_hash64(seed * 1000 + (uint64_t)i) % (uint64_t)cfg.vocab_size);
        r->tg[i] = (int32_t)(dx_hash64(seed * 7777 + (uint64_t)i) % (uint64_t)cfg.vocab_size);
    }
    r->loss = calloc(1, sizeof(double));
}

static void rig_free(rig *r)
{
    int ng = dx_model_num_groups(r->m);
    for (int g = 0; g < ng; g++) { free(r->work[g]); free(r->grad[g]); }
    free(r->work);
    free(r->grad);
    dx_model_destroy(r->m);
    r->be->destroy(r->be);
    free(r->ids);
    free(r->tg);
    free(r->loss);
}

static double mean_loss(rig *r)
{
    *r->loss = 0;
    if (dx_model_forward(r->m, r->ids, r->tg, r->B, r->T, r->loss, 0, 0.0f)) exit(2);
    return *r->loss / (r->B * r->T);
}

static void test_gradients(const char *tag)
{
    rig r;
    rig_init(&r, 2, 7, 1);
    int N = r.B * r.T;
    *r.loss = 0;
    if (dx_model_forward(r.m, r.ids, r.tg, r.B, r.T, r.loss, 1, (float)(1.0 / N)) ||
        dx_model_backward(r.m)) {
        fprintf(stderr, "%s\n", dx_last_error());
        exit(2);
    }
    check(fabs(*r.loss / N - mean_loss(&r)) < 1e-12, "forward with and without grad agree",
          fabs(*r.loss / N - mean_loss(&r)), 1e-12);
    /* central differences on a sample of elements of every parameter tensor */
    const double h = 1e-5;
    for (int pi = 0; pi < dx_model_num_params_table(r.m); pi++) {
        const dx_param *p = dx_model_param(r.m, pi);
        double num = 0, den = 0;
        int samples = p->numel < 12 ? (int)p->numel : 12;
        for (int s = 0; s < samples; s++) {
            size_t e = p->offset + (p->numel < 12 ? (size_t)s : dx_hash64((uint64_t)pi * 131 + (uint64_t)s) % p->numel);
            double *w = &r.work[p->group][e], w0 = *w;
            *w = w0 + h;
            double lp = mean_loss(&r);
            *w = w0 - h;
            double lm = mean_loss(&r);
            *w = w0;
            double fd = (lp - lm) / (2 * h), an = r.grad[p->group][e];
            num += (fd - an) * (fd - an);
            den += fd * fd;
        }
        char what[160];
        snprintf(what, sizeof what, "grad vs f64 finite diff%s: %s", tag, p->name);
        double rel = sqrt(num / (den > 1e-30 ? den : 1e-30));
        check(rel < 1e-6 && den > 1e-20, what, rel, 1e-6);
    }
    rig_free(&r);
}

static void test_accumulation(void)
{
    rig a, b;
    rig_init(&a, 2, 6, 3);
    rig_init(&b, 1, 6, 3);
    int N = 12;
    if (dx_model_forward(a.m, a.ids, a.tg, 2, 6, a.loss, 1, (float)(1.0 / N)) || dx_model_backward(a.m)) exit(2);
    for (int j = 0; j < 2; j++) {
        if (dx_model_forward(b.m, a.ids + 6 * j, a.tg + 6 * j, 1, 6, b.loss, 1, (float)(1.0 / N)) ||
            dx_model_backward(b.m))
            exit(2);
    }
    double num = 0, den = 0;
    for (int g = 0; g < dx_model_num_groups(a.m); g++)
        for (size_t i = 0; i < dx_model_group(a.m, g)->numel; i++) {
            double d = a.grad[g][i] - b.grad[g][i];
            num += d * d;
            den += a.grad[g][i] * a.grad[g][i];
        }
    check(sqrt(num / den) < 1e-12, "2 micro-batches of 1 == 1 micro-batch of 2 (grads)", sqrt(num / den), 1e-12);
    check(fabs(*a.loss - *b.loss) < 1e-12 * fabs(*a.loss), "2 micro-batches of 1 == 1 of 2 (loss sum)",
          fabs(*a.loss - *b.loss), 1e-12);
    /* ignored targets: loss of a batch whose second half is ignored == loss of the first half */
    double full = 0;
    *b.loss = 0;
    if (dx_model_forward(b.m, a.ids, a.tg, 1, 6, b.loss, 0, 0)) exit(2);
    full = *b.loss;
    for (int i = 6; i < 12; i++) a.tg[i] = -1;
    *a.loss = 0;
    if (dx_model_forward(a.m, a.ids, a.tg, 2, 6, a.loss, 0, 0)) exit(2);
    check(fabs(*a.loss - full) < 1e-12 * fabs(full), "targets < 0 add no loss", fabs(*a.loss - full), 1e-12);
    rig_free(&a);
    rig_free(&b);
}

/* A fresh gradient (dx_group.grad_fresh, the buffer full of garbage) is overwritten: the same
 * gradient, bitwise, as accumulating into zeros; the flag is cleared, so a second micro-batch
 * accumulates (x + x = 2x exactly). */
static void test_fresh_gradient(void)
{
    rig a, b;
    rig_init(&a, 2, 6, 5);
    rig_init(&b, 2, 6, 5);
    const int ng = dx_model_num_groups(b.m);
    for (int g = 0; g < ng; g++) {
        for (size_t i = 0; i < dx_model_group(b.m, g)->numel; i++) b.grad[g][i] = NAN;
        dx_model_group(b.m, g)->grad_fresh = 1;
    }
    for (int k = 0; k < 2; k++) {
        if (dx_model_forward(a.m, a.ids, a.tg, 2, 6, a.loss, 1, 0.1f) || dx_model_backward(a.m) ||
            dx_model_forward(b.m, b.ids, b.tg, 2, 6, b.loss, 1, 0.1f) || dx_model_backward(b.m))
            exit(2);
        size_t differ = 0, total = 0, cleared = 0;
        for (int g = 0; g < ng; g++) {
            cleared += dx_model_group(b.m, g)->grad_fresh == 0;
            for (size_t i = 0; i < dx_model_group(a.m, g)->numel; i++, total++)
                differ += !(a.grad[g][i] == b.grad[g][i]); /* (NaN left over: differs) */
        }
        char what[120];
        snprintf(what, sizeof what, "fresh gradients: backward %d == accumulated into zeros, bitwise (%zu elements)",
                 k + 1, total);
        check(differ == 0 && total > 0, what, (double)differ, 0);
        check(cleared == (size_t)ng, "fresh gradients: every group's flag cleared by its backward", (double)(ng - (int)cleared), 0);
    }
    rig_free(&a);
    rig_free(&b);
}

static void test_schedule(void)
{
    dx_config c;
    dx_config_defaults(&c);
    c.lr = 1e-3;
    c.min_lr = 1e-4;
    c.lr_warmup_iters = 10;
    c.train_iters = 110;
    c.lr_decay_iters = 110;
    double e1 = fabs(dx_lr_at(&c, 5) - 5e-4), e2 = fabs(dx_lr_at(&c, 10) - 1e-3);
    double e3 = fabs(dx_lr_at(&c, 60) - (1e-4 + 0.5 * 9e-4)), e4 = fabs(dx_lr_at(&c, 110) - 1e-4);
    double e5 = fabs(dx_lr_at(&c, 200) - 1e-4);
    check(e1 < 1e-15, "lr at half warm-up = lr / 2", e1, 1e-15);
    check(e2 < 1e-15, "lr at end of warm-up = lr", e2, 1e-15);
    check(e3 < 1e-15, "lr at half decay = (lr + min_lr) / 2", e3, 1e-15);
    check(e4 < 1e-15 && e5 < 1e-15, "lr at and after decay end = min_lr", e4 + e5, 1e-15);
}

int main(void)
{
    test_gradients("");
    /* the tiny model (4 heads, 2 KV heads) runs the Q and K|V projections as two GEMMs each in
     * the forward and weight gradient (model.c, qkv_fused); once more as one Q|K|V GEMM */
    setenv("DX_QKV_GEMM", "fused", 1);
    test_gradients(" (Q|K|V fused)");
    unsetenv("DX_QKV_GEMM");
    test_accumulation();
    test_fresh_gradient();
    test_schedule();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
