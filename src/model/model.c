/* Llama-2 forward and backward over flat parameter groups; see model.h. */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "trace/tracer.h"

typedef struct {
    void *xn1, *rstd1, *q, *k, *v, *att, *lse, *h, *xn2, *rstd2, *g, *u, *a;
} layer_acts;

struct dx_model {
    dx_model_config cfg;
    dx_backend *be;
    int L, D, H, Hkv, Dh, I, V, maxB, maxT;
    size_t xs, as; /* element sizes of act and acc */

    int ngroups;
    dx_group *groups;
    int nparams;
    dx_param *params;

    /* element offsets inside a decoder layer's group, and inside the head group */
    size_t o_ln1, o_q, o_k, o_v, o_o, o_ln2, o_gate, o_up, o_down, layer_numel;
    size_t o_normf, o_head;

    dx_group_hook hook;
    void *hook_ctx;
    dx_tracer *tr;

    /* activations */
    void **x; /* L+1 residual-stream buffers X[N,D]: x[l] is layer l's input */
    layer_acts *acts;
    void *xnf, *rstdf, *logits, *dlogits;
    /* backward scratch */
    void *dres, *dxn, *dq, *dk, *dv, *datt, *dg, *du, *da;
    size_t act_bytes;

    /* the last forward's inputs, for backward */
    const int32_t *ids;
    int B, T, grad_ready;
};

static void *at(const void *p, size_t elems, size_t es) { return (char *)p + elems * es; }

static int add_param(dx_model *m, int cap, const char *name, int group, size_t *off, int rows,
                     int cols, int is_norm)
{
    if (m->nparams >= cap) return dx_fail("model: parameter table overflow");
    dx_param *p = &m->params[m->nparams++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->group = group;
    p->offset = *off;
    p->rows = rows;
    p->cols = cols;
    p->numel = (size_t)rows * (size_t)(cols ? cols : 1);
    p->is_norm = is_norm;
    p->decay = !is_norm;
    *off += p->numel;
    return 0;
}

static void *act_alloc(dx_model *m, size_t elems, size_t es, int *fail)
{
    if (*fail) return NULL;
    void *p = m->be->alloc(m->be, elems * es, DX_MEM_ACTIVATIONS);
    if (!p) *fail = 1;
    else m->act_bytes += elems * es;
    return p;
}

dx_model *dx_model_create(const dx_model_config *cfg, dx_backend *be, int max_B, int max_T)
{
    if (cfg->hidden_size <= 0 || cfg->num_attention_heads <= 0 || cfg->num_key_value_heads <= 0 ||
        cfg->hidden_size % cfg->num_attention_heads ||
        cfg->num_attention_heads % cfg->num_key_value_heads ||
        (cfg->hidden_size / cfg->num_attention_heads) % 2 || cfg->num_hidden_layers <= 0 ||
        cfg->vocab_size <= 0 || cfg->intermediate_size <= 0 || max_B <= 0 || max_T <= 0) {
        dx_fail("model: inconsistent shape (hidden %d, heads %d, kv heads %d, layers %d)",
                cfg->hidden_size, cfg->num_attention_heads, cfg->num_key_value_heads,
                cfg->num_hidden_layers);
        return NULL;
    }
    dx_model *m = calloc(1, sizeof *m);
    if (!m) { dx_fail("model: out of memory"); return NULL; }
    m->cfg = *cfg;
    m->be = be;
    m->L = cfg->num_hidden_layers;
    m->D = cfg->hidden_size;
    m->H = cfg->num_attention_heads;
    m->Hkv = cfg->num_key_value_heads;
    m->Dh = m->D / m->H;
    m->I = cfg->intermediate_size;
    m->V = cfg->vocab_size;
    m->maxB = max_B;
    m->maxT = max_T;
    m->xs = dx_dtype_size(be->act);
    m->as = dx_dtype_size(be->acc);

    const int L = m->L, D = m->D, I = m->I, V = m->V;
    const int HD = m->H * m->Dh, KD = m->Hkv * m->Dh;
    m->ngroups = L + 2;
    int cap = 2 + 9 * L + 2;
    m->groups = calloc((size_t)m->ngroups, sizeof *m->groups);
    m->params = calloc((size_t)cap, sizeof *m->params);
    if (!m->groups || !m->params) { dx_model_destroy(m); dx_fail("model: out of memory"); return NULL; }

    char name[96];
    size_t off = 0;
    if (add_param(m, cap, "model.embed_tokens.weight", 0, &off, V, D, 0)) goto fail;
    m->groups[0].numel = off;
    for (int l = 0; l < L; l++) {
        off = 0;
        int g = l + 1;
#define P(suffix, rows, cols, norm, field)                                                   \
    snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix);                            \
    if (l == 0) m->field = off;                                                               \
    if (add_param(m, cap, name, g, &off, rows, cols, norm)) goto fail;
        P("input_layernorm.weight", D, 0, 1, o_ln1)
        P("self_attn.q_proj.weight", HD, D, 0, o_q)
        P("self_attn.k_proj.weight", KD, D, 0, o_k)
        P("self_attn.v_proj.weight", KD, D, 0, o_v)
        P("self_attn.o_proj.weight", D, HD, 0, o_o)
        P("post_attention_layernorm.weight", D, 0, 1, o_ln2)
        P("mlp.gate_proj.weight", I, D, 0, o_gate)
        P("mlp.up_proj.weight", I, D, 0, o_up)
        P("mlp.down_proj.weight", D, I, 0, o_down)
#undef P
        m->groups[g].numel = off;
        m->layer_numel = off;
    }
    off = 0;
    m->o_normf = off;
    if (add_param(m, cap, "model.norm.weight", L + 1, &off, D, 0, 1)) goto fail;
    m->o_head = off;
    if (add_param(m, cap, "lm_head.weight", L + 1, &off, V, D, 0)) goto fail;
    m->groups[L + 1].numel = off;
    for (int g = 1; g < m->ngroups; g++) m->groups[g].backward_reads_work = 1;

    /* activations */
    size_t N = (size_t)max_B * (size_t)max_T;
    int f = 0;
    size_t xs = m->xs, as = m->as;
    m->x = calloc((size_t)L + 1, sizeof *m->x);
    m->acts = calloc((size_t)L, sizeof *m->acts);
    if (!m->x || !m->acts) { dx_fail("model: out of memory"); goto fail; }
    for (int l = 0; l <= L; l++) m->x[l] = act_alloc(m, N * D, xs, &f);
    for (int l = 0; l < L; l++) {
        layer_acts *a = &m->acts[l];
        a->xn1 = act_alloc(m, N * D, xs, &f);
        a->rstd1 = act_alloc(m, N, as, &f);
        a->q = act_alloc(m, N * HD, xs, &f);
        a->k = act_alloc(m, N * KD, xs, &f);
        a->v = act_alloc(m, N * KD, xs, &f);
        a->att = act_alloc(m, N * HD, xs, &f);
        a->lse = act_alloc(m, N * m->H, as, &f);
        a->h = act_alloc(m, N * D, xs, &f);
        a->xn2 = act_alloc(m, N * D, xs, &f);
        a->rstd2 = act_alloc(m, N, as, &f);
        a->g = act_alloc(m, N * I, xs, &f);
        a->u = act_alloc(m, N * I, xs, &f);
        a->a = act_alloc(m, N * I, xs, &f);
    }
    m->xnf = act_alloc(m, N * D, xs, &f);
    m->rstdf = act_alloc(m, N, as, &f);
    m->logits = act_alloc(m, N * V, as, &f);
    m->dlogits = be->act == be->acc ? m->logits : act_alloc(m, N * V, xs, &f);
    m->dres = act_alloc(m, N * D, xs, &f);
    m->dxn = act_alloc(m, N * D, xs, &f);
    m->dq = act_alloc(m, N * HD, xs, &f);
    m->dk = act_alloc(m, N * KD, xs, &f);
    m->dv = act_alloc(m, N * KD, xs, &f);
    m->datt = act_alloc(m, N * HD, xs, &f);
    m->dg = act_alloc(m, N * I, xs, &f);
    m->du = act_alloc(m, N * I, xs, &f);
    m->da = act_alloc(m, N * I, xs, &f);
    if (f) { dx_fail_prefix("model: activations for micro-batch %d x seq %d", max_B, max_T); goto fail; }
    return m;
fail:
    dx_model_destroy(m);
    return NULL;
}

void dx_model_destroy(dx_model *m)
{
    if (!m) return;
    dx_backend *be = m->be;
    if (m->x)
        for (int l = 0; l <= m->L; l++) be->free(be, m->x[l]);
    if (m->acts)
        for (int l = 0; l < m->L; l++) {
            layer_acts *a = &m->acts[l];
            void *ps[] = {a->xn1, a->rstd1, a->q, a->k, a->v, a->att, a->lse,
                          a->h, a->xn2, a->rstd2, a->g, a->u, a->a};
            for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) be->free(be, ps[i]);
        }
    if (m->dlogits != m->logits) be->free(be, m->dlogits);
    void *ps[] = {m->xnf, m->rstdf, m->logits, m->dres, m->dxn, m->dq, m->dk,
                  m->dv, m->datt, m->dg, m->du, m->da};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) be->free(be, ps[i]);
    free(m->x);
    free(m->acts);
    free(m->groups);
    free(m->params);
    free(m);
}

int dx_model_num_groups(const dx_model *m) { return m->ngroups; }
dx_group *dx_model_group(dx_model *m, int g) { return &m->groups[g]; }
int dx_model_num_params_table(const dx_model *m) { return m->nparams; }
const dx_param *dx_model_param(const dx_model *m, int i) { return &m->params[i]; }
const void *dx_model_logits(const dx_model *m) { return m->logits; }
size_t dx_model_activation_bytes(const dx_model *m) { return m->act_bytes; }

int dx_model_find_param(const dx_model *m, const char *name)
{
    for (int i = 0; i < m->nparams; i++)
        if (!strcmp(m->params[i].name, name)) return i;
    return -1;
}

void dx_model_set_hook(dx_model *m, dx_group_hook hook, void *ctx)
{
    m->hook = hook;
    m->hook_ctx = ctx;
}

void dx_model_init_values(const dx_model *m, int g, size_t start, size_t count, uint64_t seed,
                          float *out)
{
    size_t end = start + count;
    for (int i = 0; i < m->nparams; i++) {
        const dx_param *p = &m->params[i];
        if (p->group != g) continue;
        size_t lo = p->offset > start ? p->offset : start;
        size_t hi = p->offset + p->numel < end ? p->offset + p->numel : end;
        for (size_t e = lo; e < hi; e++) {
            out[e - start] = p->is_norm ? 1.0f
                                        : (float)(m->cfg.initializer_range *
                                                  dx_normal(seed, (uint64_t)i, e - p->offset));
        }
    }
}

void dx_model_set_tracer(dx_model *m, dx_tracer *tr) { m->tr = tr; }

static int hook(dx_model *m, int g, dx_hook_kind k)
{
    return m->hook ? m->hook(m->hook_ctx, g, k) : 0;
}

/* Module spans (trace.level module or op). */
#define MOD_BEGIN(m) int64_t mod_t0_ = dx_tr_on((m)->tr, 1) ? dx_tr_begin((m)->tr) : 0
#define MOD_END(m, module, layer)                                                               \
    do {                                                                                        \
        if (dx_tr_on((m)->tr, 1))                                                               \
            dx_tr_end((m)->tr, mod_t0_, (module), (layer), DX_OP_MODULE, DX_STREAM_COMPUTE, 0, 0); \
    } while (0)
#define OP(module, layer, op, flops, bytes, call) DX_TRACE_OP(m->tr, module, layer, op, flops, bytes, call)

/* FLOPs and bytes of C[M,N] = A[M,K] B[K,N] (+ beta C). */
static int64_t gemm_flops(int M, int N, int K) { return 2 * (int64_t)M * N * K; }
static int64_t gemm_bytes(const dx_model *m, int M, int N, int K, int c_acc, int beta)
{
    int64_t cs = (int64_t)(c_acc ? m->as : m->xs);
    return ((int64_t)M * K + (int64_t)K * N) * (int64_t)m->xs + (int64_t)M * N * cs * (beta ? 2 : 1);
}

/* y[N,out] (= or +=, beta) x[N,in] W[out,in]^T */
static void linear_fwd(dx_model *m, int module, int layer, void *y, const void *x, const void *W,
                       int N, int in, int out, float beta)
{
    dx_backend *be = m->be;
    OP(module, layer, DX_OP_GEMM, gemm_flops(N, out, in), gemm_bytes(m, N, out, in, 0, beta != 0),
       be->gemm(be, 0, 1, N, out, in, 1.0f, x, in, W, in, beta, y, out, 0));
}

/* dx[N,in] (beta) = dy[N,out] W[out,in];  dW[out,in] += dy^T x */
static void linear_bwd(dx_model *m, int module, int layer, void *dx, void *dW, const void *dy,
                       const void *x, const void *W, int N, int in, int out, float beta)
{
    dx_backend *be = m->be;
    OP(module, layer, DX_OP_GEMM, gemm_flops(N, in, out), gemm_bytes(m, N, in, out, 0, beta != 0),
       be->gemm(be, 0, 0, N, in, out, 1.0f, dy, out, W, in, beta, dx, in, 0));
    OP(module, layer, DX_OP_GEMM, gemm_flops(out, in, N), gemm_bytes(m, out, in, N, 1, 1),
       be->gemm(be, 1, 0, out, in, N, 1.0f, dy, out, x, in, 1.0f, dW, in, 1));
}

int dx_model_forward(dx_model *m, const int32_t *ids, const int32_t *targets, int B, int T,
                     void *loss_sum, int want_grad, float dscale)
{
    dx_backend *be = m->be;
    const int L = m->L, D = m->D, H = m->H, Hkv = m->Hkv, Dh = m->Dh, I = m->I, V = m->V;
    const int HD = H * Dh, KD = Hkv * Dh, N = B * T;
    const size_t xs = m->xs;
    const float eps = (float)m->cfg.rms_norm_eps, theta = (float)m->cfg.rope_theta;
    if (B > m->maxB || T > m->maxT || B <= 0 || T <= 0)
        return dx_fail("model: batch %d x %d exceeds the allocated %d x %d", B, T, m->maxB, m->maxT);
    if (!targets) want_grad = 0;
    m->ids = ids;
    m->B = B;
    m->T = T;
    m->grad_ready = want_grad;

    /* ---- forward ---- */
    const int64_t xsz = (int64_t)xs, asz = (int64_t)m->as, ND = (int64_t)N * D, NI = (int64_t)N * I;
    const int64_t att_flops = 4 * (int64_t)B * H * Dh * ((int64_t)T * (T + 1) / 2);
    const int64_t att_bytes = ((int64_t)N * (2 * HD + 2 * KD)) * xsz + (int64_t)N * H * asz;
    if (hook(m, 0, DX_HOOK_PRE_FORWARD)) return -1;
    {
        MOD_BEGIN(m);
        OP(DX_MOD_EMBEDDING, -1, DX_OP_EMBEDDING, 0, 2 * ND * xsz + (int64_t)N * 4,
           be->embedding_fwd(be, m->x[0], ids, m->groups[0].work, N, D));
        MOD_END(m, DX_MOD_EMBEDDING, -1);
    }
    if (hook(m, 0, DX_HOOK_POST_FORWARD)) return -1;

    for (int l = 0; l < L; l++) {
        if (hook(m, l + 1, DX_HOOK_PRE_FORWARD)) return -1;
        const void *W = m->groups[l + 1].work;
        layer_acts *a = &m->acts[l];
        {
            MOD_BEGIN(m);
            OP(DX_MOD_ATTENTION, l, DX_OP_RMSNORM, 4 * ND, 2 * ND * xsz,
               be->rmsnorm_fwd(be, a->xn1, a->rstd1, m->x[l], at(W, m->o_ln1, xs), N, D, eps));
            linear_fwd(m, DX_MOD_ATTENTION, l, a->q, a->xn1, at(W, m->o_q, xs), N, D, HD, 0.0f);
            linear_fwd(m, DX_MOD_ATTENTION, l, a->k, a->xn1, at(W, m->o_k, xs), N, D, KD, 0.0f);
            linear_fwd(m, DX_MOD_ATTENTION, l, a->v, a->xn1, at(W, m->o_v, xs), N, D, KD, 0.0f);
            OP(DX_MOD_ATTENTION, l, DX_OP_ROPE, 6 * (int64_t)N * (HD + KD), 2 * (int64_t)N * (HD + KD) * xsz,
               be->rope_fwd(be, a->q, B, T, H, Dh, theta); be->rope_fwd(be, a->k, B, T, Hkv, Dh, theta));
            OP(DX_MOD_ATTENTION, l, DX_OP_ATTENTION, att_flops, att_bytes,
               be->attention_fwd(be, a->att, a->lse, a->q, a->k, a->v, B, T, H, Hkv, Dh));
            OP(DX_MOD_ATTENTION, l, DX_OP_MEMCPY, 0, 2 * ND * xsz,
               be->copy(be, a->h, m->x[l], (size_t)N * D * xs));
            linear_fwd(m, DX_MOD_ATTENTION, l, a->h, a->att, at(W, m->o_o, xs), N, HD, D, 1.0f);
            MOD_END(m, DX_MOD_ATTENTION, l);
        }
        {
            MOD_BEGIN(m);
            OP(DX_MOD_MLP, l, DX_OP_RMSNORM, 4 * ND, 2 * ND * xsz,
               be->rmsnorm_fwd(be, a->xn2, a->rstd2, a->h, at(W, m->o_ln2, xs), N, D, eps));
            linear_fwd(m, DX_MOD_MLP, l, a->g, a->xn2, at(W, m->o_gate, xs), N, D, I, 0.0f);
            linear_fwd(m, DX_MOD_MLP, l, a->u, a->xn2, at(W, m->o_up, xs), N, D, I, 0.0f);
            OP(DX_MOD_MLP, l, DX_OP_SWIGLU, 6 * NI, 3 * NI * xsz,
               be->swiglu_fwd(be, a->a, a->g, a->u, (size_t)N * I));
            OP(DX_MOD_MLP, l, DX_OP_MEMCPY, 0, 2 * ND * xsz,
               be->copy(be, m->x[l + 1], a->h, (size_t)N * D * xs));
            linear_fwd(m, DX_MOD_MLP, l, m->x[l + 1], a->a, at(W, m->o_down, xs), N, I, D, 1.0f);
            MOD_END(m, DX_MOD_MLP, l);
        }
        if (hook(m, l + 1, DX_HOOK_POST_FORWARD)) return -1;
    }

    const int gh = L + 1;
    if (hook(m, gh, DX_HOOK_PRE_FORWARD)) return -1;
    const void *Wh = m->groups[gh].work;
    {
        MOD_BEGIN(m);
        OP(DX_MOD_RMSNORM, -1, DX_OP_RMSNORM, 4 * ND, 2 * ND * xsz,
           be->rmsnorm_fwd(be, m->xnf, m->rstdf, m->x[L], at(Wh, m->o_normf, xs), N, D, eps));
        MOD_END(m, DX_MOD_RMSNORM, -1);
    }
    {
        MOD_BEGIN(m);
        OP(DX_MOD_LM_HEAD, -1, DX_OP_GEMM, gemm_flops(N, V, D), gemm_bytes(m, N, V, D, 1, 0),
           be->gemm(be, 0, 1, N, V, D, 1.0f, m->xnf, D, at(Wh, m->o_head, xs), D, 0.0f, m->logits, V, 1));
        MOD_END(m, DX_MOD_LM_HEAD, -1);
    }
    if (targets) {
        MOD_BEGIN(m);
        OP(DX_MOD_LOSS, -1, DX_OP_CROSS_ENTROPY, 5 * (int64_t)N * V,
           (int64_t)N * V * (asz + (want_grad ? xsz : 0)),
           be->cross_entropy(be, loss_sum, want_grad ? m->dlogits : NULL, m->logits, targets, N, V, dscale));
        MOD_END(m, DX_MOD_LOSS, -1);
    }
    return hook(m, gh, DX_HOOK_POST_FORWARD);
}

int dx_model_backward(dx_model *m)
{
    dx_backend *be = m->be;
    const int L = m->L, D = m->D, H = m->H, Hkv = m->Hkv, Dh = m->Dh, I = m->I, V = m->V;
    const int B = m->B, T = m->T, HD = H * Dh, KD = Hkv * Dh, N = B * T;
    const size_t xs = m->xs;
    const float theta = (float)m->cfg.rope_theta;
    const int32_t *ids = m->ids;
    const int gh = L + 1;
    (void)V;
    if (!m->grad_ready) return dx_fail("model: backward without a forward that kept dL/dlogits");
    m->grad_ready = 0;

    const size_t as = m->as;
    const int64_t xsz = (int64_t)xs, asz = (int64_t)as, ND = (int64_t)N * D, NI = (int64_t)N * I;
    const int64_t att_flops = 10 * (int64_t)B * H * Dh * ((int64_t)T * (T + 1) / 2);
    const int64_t att_bytes = ((int64_t)N * (4 * HD + 4 * KD)) * xsz + (int64_t)N * H * asz;

    if (hook(m, gh, DX_HOOK_PRE_BACKWARD)) return -1;
    const void *Wh = m->groups[gh].work;
    void *Gh = m->groups[gh].grad;
    {
        MOD_BEGIN(m);
        linear_bwd(m, DX_MOD_LM_HEAD, -1, m->dxn, at(Gh, m->o_head, as), m->dlogits, m->xnf,
                   at(Wh, m->o_head, xs), N, D, V, 0.0f);
        MOD_END(m, DX_MOD_LM_HEAD, -1);
    }
    {
        MOD_BEGIN(m);
        OP(DX_MOD_RMSNORM, -1, DX_OP_MEMSET, 0, ND * xsz, be->zero(be, m->dres, (size_t)N * D * xs));
        OP(DX_MOD_RMSNORM, -1, DX_OP_RMSNORM, 8 * ND, 4 * ND * xsz,
           be->rmsnorm_bwd(be, m->dres, at(Gh, m->o_normf, as), m->dxn, m->x[L], at(Wh, m->o_normf, xs),
                           m->rstdf, N, D));
        MOD_END(m, DX_MOD_RMSNORM, -1);
    }
    if (hook(m, gh, DX_HOOK_POST_BACKWARD)) return -1;

    for (int l = L - 1; l >= 0; l--) {
        if (hook(m, l + 1, DX_HOOK_PRE_BACKWARD)) return -1;
        const void *W = m->groups[l + 1].work;
        void *G = m->groups[l + 1].grad;
        layer_acts *a = &m->acts[l];
        { /* MLP: dres = dL/dx[l+1] */
            MOD_BEGIN(m);
            linear_bwd(m, DX_MOD_MLP, l, m->da, at(G, m->o_down, as), m->dres, a->a,
                       at(W, m->o_down, xs), N, I, D, 0.0f);
            OP(DX_MOD_MLP, l, DX_OP_SWIGLU, 12 * NI, 5 * NI * xsz,
               be->swiglu_bwd(be, m->dg, m->du, m->da, a->g, a->u, (size_t)N * I));
            linear_bwd(m, DX_MOD_MLP, l, m->dxn, at(G, m->o_gate, as), m->dg, a->xn2,
                       at(W, m->o_gate, xs), N, D, I, 0.0f);
            linear_bwd(m, DX_MOD_MLP, l, m->dxn, at(G, m->o_up, as), m->du, a->xn2,
                       at(W, m->o_up, xs), N, D, I, 1.0f);
            OP(DX_MOD_MLP, l, DX_OP_RMSNORM, 8 * ND, 4 * ND * xsz,
               be->rmsnorm_bwd(be, m->dres, at(G, m->o_ln2, as), m->dxn, a->h, at(W, m->o_ln2, xs),
                               a->rstd2, N, D));
            MOD_END(m, DX_MOD_MLP, l);
        }
        { /* attention: dres = dL/dh */
            MOD_BEGIN(m);
            linear_bwd(m, DX_MOD_ATTENTION, l, m->datt, at(G, m->o_o, as), m->dres, a->att,
                       at(W, m->o_o, xs), N, HD, D, 0.0f);
            OP(DX_MOD_ATTENTION, l, DX_OP_ATTENTION, att_flops, att_bytes,
               be->attention_bwd(be, m->dq, m->dk, m->dv, m->datt, a->q, a->k, a->v, a->att, a->lse,
                                 B, T, H, Hkv, Dh));
            OP(DX_MOD_ATTENTION, l, DX_OP_ROPE, 6 * (int64_t)N * (HD + KD), 2 * (int64_t)N * (HD + KD) * xsz,
               be->rope_bwd(be, m->dq, B, T, H, Dh, theta); be->rope_bwd(be, m->dk, B, T, Hkv, Dh, theta));
            linear_bwd(m, DX_MOD_ATTENTION, l, m->dxn, at(G, m->o_q, as), m->dq, a->xn1,
                       at(W, m->o_q, xs), N, D, HD, 0.0f);
            linear_bwd(m, DX_MOD_ATTENTION, l, m->dxn, at(G, m->o_k, as), m->dk, a->xn1,
                       at(W, m->o_k, xs), N, D, KD, 1.0f);
            linear_bwd(m, DX_MOD_ATTENTION, l, m->dxn, at(G, m->o_v, as), m->dv, a->xn1,
                       at(W, m->o_v, xs), N, D, KD, 1.0f);
            OP(DX_MOD_ATTENTION, l, DX_OP_RMSNORM, 8 * ND, 4 * ND * xsz,
               be->rmsnorm_bwd(be, m->dres, at(G, m->o_ln1, as), m->dxn, m->x[l], at(W, m->o_ln1, xs),
                               a->rstd1, N, D));
            MOD_END(m, DX_MOD_ATTENTION, l);
        }
        if (hook(m, l + 1, DX_HOOK_POST_BACKWARD)) return -1;
    }

    if (hook(m, 0, DX_HOOK_PRE_BACKWARD)) return -1;
    {
        MOD_BEGIN(m);
        OP(DX_MOD_EMBEDDING, -1, DX_OP_EMBEDDING, ND, ND * (xsz + 2 * asz) + (int64_t)N * 4,
           be->embedding_bwd(be, m->groups[0].grad, m->dres, ids, N, D));
        MOD_END(m, DX_MOD_EMBEDDING, -1);
    }
    if (hook(m, 0, DX_HOOK_POST_BACKWARD)) return -1;
    return 0;
}
