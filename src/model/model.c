/* Llama-2 forward and backward over flat parameter groups, tensor- and pipeline-parallel;
 * see model.h. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "model/lora.h"
#include "trace/tracer.h"

/* A layer's activations. q, k and v are the three column blocks of one buffer X[N, HDl + 2 KDl]
 * (the Q|K|V projections' output, rows of qkv_ld elements; k = q + HDl, v = k + KDl), g and u
 * those of X[N, 2 Il] (the fused gate|up GEMM's). */
typedef struct {
    void *xn1, *rstd1, *q, *k, *v, *att, *lse, *h, *xn2, *rstd2, *g, *u, *a;
    void *lt[DX_LORA_NTARGETS]; /* LoRA: t = x A^T [N, r] per target (per layer, never shared) */
} layer_acts;

/* One micro-batch's activations of a chunk. */
typedef struct {
    void **x;          /* nl + 1 residual buffers X[Nr, D]: x[l] is local layer l's input */
    layer_acts *acts;  /* [nl] */
    int32_t *ids;      /* embedding chunk: the micro-batch's ids, for the embedding's backward */
    void *xnf, *rstdf, *logits; /* head chunk; dL/dlogits overwrite the logits */
    int B, T, grad_ready;
    uint64_t drop_seq0; /* LoRA dropout: the global sequence index of the micro-batch's first */
} slot_acts;

typedef struct {
    int first_layer, nl; /* global index of the first layer; layer count */
    int *rc;             /* [nl]: the recomputation of each layer (dx_recompute) */
    int g0;              /* group of its first layer */
    int ga0;             /* LoRA: group of its first layer's adapters (-1 without LoRA) */
    int has_emb, has_head;
    slot_acts *slot;     /* [slots] */
} chunk;

struct dx_model {
    dx_model_config cfg;
    dx_backend *be;
    int L, D, H, Hkv, Dh, I, V, maxB, maxT;
    /* tensor parallelism: local sizes */
    int tp, tpr, sp;  /* size, rank, sequence parallel */
    dx_comm *tpc;
    int Hl, KVl;      /* query heads and KV heads computed here */
    int kv_repl;      /* k/v_proj replicated over TP; kv_head: the one KV head used here */
    int kv_head;
    int norm_overlap; /* DX_NORM_OVERLAP = n > 0: the MLP's RMSNorm backward on n SMs beside the
                         gate|up weight gradient (be->overlap_begin; NOTES items 30 and 39; default
                         12); 0: after it */
    int op_stream;    /* the trace stream of OP's events (DX_STREAM_COMPUTE, or DX_STREAM_AUX
                         between overlap_begin and overlap_end) */
    /* Q|K|V: q, k, v (and dq, dk, dv) are column blocks of one buffer, rows qkv_ld = HDl + 2 KDl
     * apart. Unless kv_repl, q_proj|k_proj|v_proj are adjacent rows of the layer group, so the
     * input gradient is one GEMM (K = qkv_ld); qkv_fused: the forward and the weight gradient
     * too (one GEMM with N = qkv_ld, M = qkv_ld), else two each (Q, then K|V) writing the
     * buffer's column blocks. Default: fused where the K|V block is at most half the Q block
     * (grouped-query attention with >= 4 query heads per KV head); DX_QKV_GEMM=fused / split
     * forces either (benchmarks/NOTES.md item 16: fused is faster at TinyLlama's shapes, the
     * forward and weight gradient slower at Llama-2-7B's, where the input gradient still gains) */
    int qkv_ld, qkv_fused;
    int Il, Vl, v0;   /* FFN rows, vocab rows, first vocab id */
    size_t xs, as;    /* element sizes of act and acc */

    int ngroups;
    dx_group *groups;
    int nparams;
    dx_param *params;
    int gemb, ghead;  /* group indices of the embedding and head, -1 if not held */

    /* element offsets inside a decoder layer's group, and inside the head group */
    size_t o_ln1, o_q, o_k, o_v, o_o, o_ln2, o_gate, o_up, o_down, layer_numel;
    size_t o_normf, o_head;

    int nchunks, slots;
    chunk ch[DX_MODEL_MAX_CHUNKS];

    dx_group_hook hook;
    void *hook_ctx;

    /* LoRA (dx_model_part): rank, scale, targets; element offsets of each target's A and B in
     * an adapter group (the same in every one); the base's input/output widths per target */
    int lora_r;
    float lora_scale;
    unsigned lora_targets;
    size_t o_lA[DX_LORA_NTARGETS], o_lB[DX_LORA_NTARGETS];
    void *ldt;   /* X [N, r]: dt scratch of the adapters' backward */
    float lora_p;       /* lora_dropout */
    uint64_t drop_seed; /* this step's dropout seed (dx_model_set_dropout_seed) */
    void *lxd;          /* X [N, max in]: the dropped adapter input / masked input gradient */
    int drop_on;        /* the running forward or backward drops (training) */
    uint64_t drop_row0; /* its micro-batch's first global token */
    void *dwscr; /* A [D]: the frozen norms' weight gradient, computed and dropped */
    float wbeta; /* beta of the weight-gradient GEMMs of the group in backward: 0 on a fresh
                  * gradient (grad_begin), else 1 (accumulate) */
    dx_tracer *tr;

    /* scratch shared by all slots (one forward or backward runs at a time); dq|dk|dv and dg|du
     * are column blocks of one buffer each, like q|k|v and g|u (layer_acts) */
    void *dres, *dxn, *dq, *dk, *dv, *datt, *dg, *du, *da;
    void *full;   /* X[N, D]: sequence parallelism's gathered residual gradient / pre-scatter sums */
    void *shard;  /* X[Nr, D]: sequence parallelism's norm output before its all-gather */
    void *stats, *gstats; /* A[N, 2], A[tp, N, 2]: vocab-parallel cross-entropy */
    /* recomputation: one layer's dropped activations, shared by every recomputed layer of every
     * slot (one backward runs at a time), and a full recomputation's output X[Nr, D] */
    layer_acts rscr;
    void *rx;
    size_t act_bytes;
};

static void *at(const void *p, size_t elems, size_t es) { return (char *)p + elems * es; }

static int add_param(dx_model *m, int cap, const char *name, int group, size_t *off, int rows,
                     int cols, int is_norm, int gindex, int full_rows, int full_cols, int row0,
                     int col0)
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
    p->global_index = gindex;
    p->full_rows = full_rows;
    p->full_cols = full_cols;
    p->row0 = row0;
    p->col0 = col0;
    p->tp_replicated = m->tp > 1 && rows == full_rows && cols == full_cols;
    p->tp_reduce = p->tp_replicated && (is_norm ? m->sp : 1);
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

/* Allocates a layer's activations for N tokens (Nr residual rows): the GEMM outputs, the fused
 * attention's output and log-sum-exp, residual and norm statistics (gemm_out) and the parts
 * selective recomputation drops (dropped: the RMSNorm outputs and the SwiGLU product); the other
 * pointers are left as they are (the shared recomputation scratch). */
static void layer_acts_alloc(dx_model *m, layer_acts *a, int gemm_out, int dropped, size_t N,
                             size_t Nr, int *f)
{
    const size_t D = (size_t)m->D, HDl = (size_t)m->Hl * m->Dh, KDl = (size_t)m->KVl * m->Dh;
    const size_t Il = (size_t)m->Il, xs = m->xs, as = m->as;
    if (dropped) {
        a->xn1 = act_alloc(m, N * D, xs, f);
        a->xn2 = act_alloc(m, N * D, xs, f);
        a->a = act_alloc(m, N * Il, xs, f);
    }
    if (gemm_out) {
        a->rstd1 = act_alloc(m, Nr, as, f);
        a->q = act_alloc(m, N * (HDl + 2 * KDl), xs, f); /* q | k | v */
        a->k = a->q ? at(a->q, HDl, xs) : NULL;
        a->v = a->k ? at(a->k, KDl, xs) : NULL;
        a->att = act_alloc(m, N * HDl, xs, f);
        a->lse = act_alloc(m, N * (size_t)m->Hl, as, f);
        a->h = act_alloc(m, Nr * D, xs, f);
        a->rstd2 = act_alloc(m, Nr, as, f);
        a->g = act_alloc(m, N * 2 * Il, xs, f);
        a->u = a->g ? at(a->g, Il, xs) : NULL;
    }
}

int dx_model_residual_rows(const dx_model *m, int N) { return m->sp ? N / m->tp : N; }
size_t dx_model_residual_bytes(const dx_model *m, int N)
{
    return (size_t)dx_model_residual_rows(m, N) * (size_t)m->D * m->xs;
}
dx_backend *dx_model_backend(const dx_model *m) { return m->be; }

dx_model *dx_model_create(const dx_model_config *cfg, dx_backend *be, int max_B, int max_T)
{
    dx_model_part part = {.tp = 1, .nchunks = 1, .num_layers = {cfg->num_hidden_layers},
                          .slots = 1};
    return dx_model_create_part(cfg, be, max_B, max_T, &part);
}

static int check_part(const dx_model_config *cfg, const dx_model_part *p, int N)
{
    const int tp = p->tp;
    if (tp < 1 || p->tp_rank < 0 || p->tp_rank >= tp || (tp > 1 && !p->tp_comm))
        return dx_fail("model: bad tensor-parallel rank %d of %d", p->tp_rank, tp);
    if (cfg->num_attention_heads % tp || cfg->intermediate_size % tp || cfg->vocab_size % tp ||
        (cfg->num_key_value_heads % tp && tp % cfg->num_key_value_heads))
        return dx_fail("model: tensor-parallel size %d does not split heads %d, KV heads %d, "
                       "FFN %d or vocab %d", tp, cfg->num_attention_heads,
                       cfg->num_key_value_heads, cfg->intermediate_size, cfg->vocab_size);
    if (p->sequence_parallel && tp > 1 && N % tp)
        return dx_fail("model: sequence parallelism needs micro-batch x seq (%d) divisible by "
                       "tensor-parallel size %d", N, tp);
    if (p->nchunks < 1 || p->nchunks > DX_MODEL_MAX_CHUNKS || p->slots < 1)
        return dx_fail("model: %d chunks (1..%d), %d slots", p->nchunks, DX_MODEL_MAX_CHUNKS, p->slots);
    for (int c = 0; c < p->nchunks; c++) {
        int f = p->first_layer[c], n = p->num_layers[c];
        if (f < 0 || n < 1 || f + n > cfg->num_hidden_layers ||
            (c > 0 && f < p->first_layer[c - 1] + p->num_layers[c - 1]))
            return dx_fail("model: chunk %d's layers [%d, %d) outside the model's %d or out of "
                           "order", c, f, f + n, cfg->num_hidden_layers);
    }
    return 0;
}

dx_model *dx_model_create_part(const dx_model_config *cfg, dx_backend *be, int max_B, int max_T,
                               const dx_model_part *part)
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
    if (check_part(cfg, part, max_B * max_T)) return NULL;
    const unsigned kv_targets = (1u << DX_LORA_K) | (1u << DX_LORA_V);
    if (part->lora_r < 0 ||
        (part->lora_r > 0 && (!part->lora_targets ||
                              (cfg->num_key_value_heads % part->tp != 0 && (part->lora_targets & kv_targets))))) {
        dx_fail("model: LoRA rank %d with tensor-parallel size %d and targets 0x%x (needs rank >= 0, at least one "
                "target, and no k_proj / v_proj target when the KV heads are replicated over TP)", part->lora_r,
                part->tp, part->lora_targets);
        return NULL;
    }
    dx_model *m = calloc(1, sizeof *m);
    if (!m) { dx_fail("model: out of memory"); return NULL; }
    m->cfg = *cfg;
    m->be = be;
    m->wbeta = 1.0f; /* (grad_begin sets it per group) */
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
    m->tp = part->tp;
    m->tpr = part->tp_rank;
    m->sp = part->tp > 1 && part->sequence_parallel;
    m->tpc = part->tp > 1 ? part->tp_comm : NULL;
    m->Hl = m->H / m->tp;
    m->kv_repl = m->Hkv % m->tp != 0;
    m->KVl = m->kv_repl ? 1 : m->Hkv / m->tp;
    m->kv_head = m->kv_repl ? (m->tpr * m->Hl) / (m->H / m->Hkv) : 0;
    m->qkv_ld = (m->Hl + 2 * m->KVl) * m->Dh;
    {
        const char *e = getenv("DX_QKV_GEMM");
        m->qkv_fused = !m->kv_repl && (e && !strcmp(e, "fused") ? 1
                                       : e && !strcmp(e, "split") ? 0
                                                                  : 4 * m->KVl <= m->Hl);
    }
    {
        const char *e = getenv("DX_NORM_OVERLAP");
        char *end = NULL;
        enum { NORM_OVERLAP_DEFAULT = 12 };
        long v = e ? strtol(e, &end, 10) : NORM_OVERLAP_DEFAULT;
        if (e && (end == e || *end || v < 0 || v > 1024)) {
            fprintf(stderr, "dissect: warning: DX_NORM_OVERLAP=%s is not a count of SMs (0 .. 1024); %d is used\n", e,
                    NORM_OVERLAP_DEFAULT);
            v = NORM_OVERLAP_DEFAULT;
        }
        m->norm_overlap = (int)v;
    }
    m->Il = m->I / m->tp;
    m->Vl = m->V / m->tp;
    m->v0 = m->tpr * m->Vl;
    m->nchunks = part->nchunks;
    m->slots = part->slots;
    m->gemb = m->ghead = -1;

    const int L = m->L, D = m->D, Dh = m->Dh, I = m->I, V = m->V, tr = m->tpr;
    const int HD = m->H * Dh, KD = m->Hkv * Dh, HDl = m->Hl * Dh, Il = m->Il, Vl = m->Vl;
    /* held k/v rows: this rank's KV heads, or all of them when replicated */
    const int KDh = m->kv_repl ? KD : m->KVl * Dh, kv_row0 = m->kv_repl ? 0 : tr * m->KVl * Dh;
    int held_layers = 0;
    for (int c = 0; c < m->nchunks; c++) held_layers += part->num_layers[c];
    const int has_emb = part->first_layer[0] == 0;
    const int has_head = part->first_layer[m->nchunks - 1] + part->num_layers[m->nchunks - 1] == L;
    m->lora_r = part->lora_r;
    m->lora_scale = part->lora_scale;
    m->lora_p = part->lora_r > 0 ? part->lora_dropout : 0.0f;
    m->lora_targets = part->lora_r > 0 ? part->lora_targets : 0;
    m->ngroups = held_layers + has_emb + has_head + (m->lora_r > 0 ? held_layers : 0);
    int cap = 9 * held_layers + 4 + 2 * DX_LORA_NTARGETS * held_layers;
    m->groups = calloc((size_t)m->ngroups, sizeof *m->groups);
    m->params = calloc((size_t)cap, sizeof *m->params);
    if (!m->groups || !m->params) { dx_model_destroy(m); dx_fail("model: out of memory"); return NULL; }

    char name[96];
    size_t off = 0;
    int g = 0;
    if (has_emb) {
        m->gemb = g;
        if (add_param(m, cap, "model.embed_tokens.weight", g, &off, Vl, D, 0, 0, V, D, m->v0, 0)) goto fail;
        m->groups[g].numel = off;
        m->groups[g].module = DX_MOD_EMBEDDING;
        m->groups[g].layer = -1;
        g++;
    }
    for (int c = 0; c < m->nchunks; c++) {
        chunk *C = &m->ch[c];
        C->first_layer = part->first_layer[c];
        C->nl = part->num_layers[c];
        C->g0 = g;
        C->has_emb = c == 0 && has_emb;
        C->has_head = c == m->nchunks - 1 && has_head;
        for (int li = 0; li < C->nl; li++, g++) {
            const int l = C->first_layer + li;
            int k = 0;
            off = 0;
#define P(suffix, rows, cols, norm, field, frows, fcols, r0, c0)                                \
    snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix);                              \
    m->field = off;                                                                            \
    if (add_param(m, cap, name, g, &off, rows, cols, norm, 1 + 9 * l + k++, frows, fcols, r0, c0)) \
        goto fail;
            P("input_layernorm.weight", D, 0, 1, o_ln1, D, 0, 0, 0)
            P("self_attn.q_proj.weight", HDl, D, 0, o_q, HD, D, tr * HDl, 0)
            P("self_attn.k_proj.weight", KDh, D, 0, o_k, KD, D, kv_row0, 0)
            P("self_attn.v_proj.weight", KDh, D, 0, o_v, KD, D, kv_row0, 0)
            P("self_attn.o_proj.weight", D, HDl, 0, o_o, D, HD, 0, tr * HDl)
            P("post_attention_layernorm.weight", D, 0, 1, o_ln2, D, 0, 0, 0)
            P("mlp.gate_proj.weight", Il, D, 0, o_gate, I, D, tr * Il, 0)
            P("mlp.up_proj.weight", Il, D, 0, o_up, I, D, tr * Il, 0)
            P("mlp.down_proj.weight", D, Il, 0, o_down, D, I, 0, tr * Il)
#undef P
            /* the fused GEMMs read q_proj|k_proj|v_proj and gate_proj|up_proj as one matrix each */
            if ((!m->kv_repl && (m->o_k != m->o_q + (size_t)HDl * D || m->o_v != m->o_k + (size_t)KDh * D)) ||
                m->o_up != m->o_gate + (size_t)Il * D) {
                dx_fail("model: internal error: q/k/v_proj or gate/up_proj not adjacent in the layer group");
                goto fail;
            }
            m->groups[g].numel = off;
            m->groups[g].module = DX_MOD_LAYER;
            m->groups[g].layer = l;
            m->layer_numel = off;
        }
    }
    if (has_head) {
        m->ghead = g;
        off = 0;
        m->o_normf = off;
        if (add_param(m, cap, "model.norm.weight", g, &off, D, 0, 1, 1 + 9 * L, D, 0, 0, 0)) goto fail;
        m->o_head = off;
        if (add_param(m, cap, "lm_head.weight", g, &off, Vl, D, 0, 2 + 9 * L, V, D, m->v0, 0)) goto fail;
        m->groups[g].numel = off;
        m->groups[g].module = DX_MOD_LM_HEAD;
        m->groups[g].layer = -1;
    }
    const int nbase = g + has_head; /* groups so far: the base model's */
    for (int i = 0; i < nbase; i++) m->groups[i].frozen = m->lora_r > 0;
    g = nbase;
    for (int c = 0; c < m->nchunks; c++) m->ch[c].ga0 = -1;
    if (m->lora_r > 0) { /* one adapter group per held layer, after the base groups */
        const int r = m->lora_r;
        /* TP: a column-parallel target (q, k, v, gate, up) keeps A [r, in] whole (every TP rank
         * holds it: its gradient is partial and summed over TP) and this rank's rows of B; a
         * row-parallel one (o, down) this rank's columns of A and B [out, r] whole (partial
         * gradient, summed). No collective of its own: the column targets' input gradient joins
         * the base's before its TP reduction, the row targets' output the base's before its
         * all-reduce or reduce-scatter (row_parallel_fwd). */
        const int lin[DX_LORA_NTARGETS] = {D, D, D, HDl, D, D, Il};   /* in_t, local */
        const int lout[DX_LORA_NTARGETS] = {HDl, KDh, KDh, D, Il, Il, D}; /* out_t, local */
        const int row0[DX_LORA_NTARGETS] = {tr * HDl, kv_row0, kv_row0, 0, tr * Il, tr * Il, 0}; /* of B */
        const int col0[DX_LORA_NTARGETS] = {0, 0, 0, tr * HDl, 0, 0, tr * Il};                 /* of A */
        for (int c = 0; c < m->nchunks; c++) {
            chunk *C = &m->ch[c];
            C->ga0 = g;
            for (int li = 0; li < C->nl; li++, g++) {
                const int l = C->first_layer + li;
                off = 0;
                for (int t = 0; t < DX_LORA_NTARGETS; t++) {
                    if (!(m->lora_targets & (1u << t))) continue;
                    const int gidx = 3 + 9 * L + 2 * DX_LORA_NTARGETS * l + 2 * t;
                    int64_t fin, fout; /* the full widths */
                    dx_lora_target_dims(&m->cfg, t, &fin, &fout);
                    snprintf(name, sizeof name, "model.layers.%d.%s.%s.lora_A.weight", l, dx_lora_target_modules[t],
                             dx_lora_target_names[t]);
                    m->o_lA[t] = off;
                    if (add_param(m, cap, name, g, &off, r, lin[t], 0, gidx, r, (int)fin, 0, col0[t])) goto fail;
                    m->params[m->nparams - 1].init = 1;
                    snprintf(name, sizeof name, "model.layers.%d.%s.%s.lora_B.weight", l, dx_lora_target_modules[t],
                             dx_lora_target_names[t]);
                    m->o_lB[t] = off;
                    if (add_param(m, cap, name, g, &off, lout[t], r, 0, gidx + 1, (int)fout, r, row0[t], 0)) goto fail;
                    m->params[m->nparams - 1].init = 2;
                }
                m->groups[g].numel = off;
                m->groups[g].module = DX_MOD_LAYER;
                m->groups[g].layer = l;
            }
        }
    }
    for (int i = 0; i < m->ngroups; i++) m->groups[i].backward_reads_work = i != m->gemb;

    /* activations */
    const size_t N = (size_t)max_B * (size_t)max_T, Nr = (size_t)dx_model_residual_rows(m, (int)N);
    const size_t KDl = (size_t)m->KVl * Dh;
    int f = 0;
    const size_t xs = m->xs, as = m->as;
    /* recomputation per layer: selective everywhere; full everywhere (uniform) or on the first
     * recompute_num_layers layers of each chunk (block) */
    int any_rc = 0;
    for (int c = 0; c < m->nchunks; c++) {
        chunk *C = &m->ch[c];
        C->rc = calloc((size_t)C->nl, sizeof *C->rc);
        if (!C->rc) { dx_fail("model: out of memory"); goto fail; }
        for (int li = 0; li < C->nl; li++) {
            int r = part->recompute;
            if (r == DX_RECOMPUTE_FULL && part->recompute_method == DX_RECOMPUTE_BLOCK &&
                li >= part->recompute_num_layers)
                r = DX_RECOMPUTE_NONE;
            C->rc[li] = r;
            any_rc |= r != DX_RECOMPUTE_NONE;
        }
    }
    if (any_rc) {
        layer_acts_alloc(m, &m->rscr, 1, 1, N, Nr, &f);
        m->rx = act_alloc(m, Nr * D, xs, &f);
    }
    for (int c = 0; c < m->nchunks && !f; c++) {
        chunk *C = &m->ch[c];
        C->slot = calloc((size_t)m->slots, sizeof *C->slot);
        if (!C->slot) { dx_fail("model: out of memory"); goto fail; }
        for (int s = 0; s < m->slots && !f; s++) {
            slot_acts *S = &C->slot[s];
            S->x = calloc((size_t)C->nl + 1, sizeof *S->x);
            S->acts = calloc((size_t)C->nl, sizeof *S->acts);
            if (!S->x || !S->acts) { dx_fail("model: out of memory"); goto fail; }
            for (int l = 0; l <= C->nl; l++) S->x[l] = act_alloc(m, Nr * D, xs, &f);
            for (int l = 0; l < C->nl; l++) {
                /* what the layer keeps for backward; the rest lives in the shared scratch */
                S->acts[l] = m->rscr;
                layer_acts_alloc(m, &S->acts[l], C->rc[l] != DX_RECOMPUTE_FULL, C->rc[l] == DX_RECOMPUTE_NONE,
                                 N, Nr, &f);
                for (int t = 0; t < DX_LORA_NTARGETS; t++)
                    S->acts[l].lt[t] = m->lora_targets & (1u << t) ? act_alloc(m, N * (size_t)m->lora_r, xs, &f) : NULL;
            }
            if (C->has_emb) S->ids = act_alloc(m, N, sizeof(int32_t), &f);
            if (C->has_head) {
                S->xnf = act_alloc(m, N * D, xs, &f);
                S->rstdf = act_alloc(m, Nr, as, &f);
                S->logits = act_alloc(m, N * Vl, xs, &f); /* X: bf16 on the GPU, as autocast's */
            }
        }
    }
    m->dres = act_alloc(m, Nr * D, xs, &f);
    m->dxn = act_alloc(m, N * D, xs, &f);
    m->dq = act_alloc(m, N * (HDl + 2 * KDl), xs, &f); /* dq | dk | dv */
    m->dk = m->dq ? at(m->dq, HDl, xs) : NULL;
    m->dv = m->dk ? at(m->dk, KDl, xs) : NULL;
    m->datt = act_alloc(m, N * HDl, xs, &f);
    m->dg = act_alloc(m, N * 2 * Il, xs, &f);
    m->du = m->dg ? at(m->dg, Il, xs) : NULL;
    m->da = act_alloc(m, N * Il, xs, &f);
    if (m->lora_r > 0) {
        m->ldt = act_alloc(m, N * (size_t)m->lora_r, xs, &f);
        if (m->lora_p > 0) { /* the widest adapter input */
            int w = D > HDl ? D : HDl;
            if (Il > w) w = Il;
            m->lxd = act_alloc(m, N * (size_t)w, xs, &f);
        }
        m->dwscr = act_alloc(m, (size_t)D, as, &f);
    }
    if (m->sp) {
        m->full = act_alloc(m, N * D, xs, &f);
        m->shard = act_alloc(m, Nr * D, xs, &f);
    }
    if (m->tp > 1 && has_head) {
        m->stats = act_alloc(m, N * 2, as, &f);
        m->gstats = act_alloc(m, (size_t)m->tp * N * 2, as, &f);
    }
    if (f) { dx_fail_prefix("model: activations for %d slot(s) of micro-batch %d x seq %d", m->slots, max_B, max_T); goto fail; }
    return m;
fail:
    dx_model_destroy(m);
    return NULL;
}

void dx_model_destroy(dx_model *m)
{
    if (!m) return;
    dx_backend *be = m->be;
    for (int c = 0; c < m->nchunks; c++) {
        chunk *C = &m->ch[c];
        for (int s = 0; C->slot && s < m->slots; s++) {
            slot_acts *S = &C->slot[s];
            if (S->x)
                for (int l = 0; l <= C->nl; l++) be->free(be, S->x[l]);
            if (S->acts)
                for (int l = 0; l < C->nl; l++) {
                    layer_acts *a = &S->acts[l], *r = &m->rscr;
                    /* k and v point into q's buffer, u into g's */
                    void *ps[] = {a->xn1, a->rstd1, a->q, a->att, a->lse,
                                  a->h, a->xn2, a->rstd2, a->g, a->a};
                    void *sh[] = {r->xn1, r->rstd1, r->q, r->att, r->lse,
                                  r->h, r->xn2, r->rstd2, r->g, r->a};
                    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
                        if (ps[i] != sh[i]) be->free(be, ps[i]); /* the shared scratch: below */
                    for (int t = 0; t < DX_LORA_NTARGETS; t++) be->free(be, a->lt[t]);
                }
            void *ps[] = {S->ids, S->xnf, S->rstdf, S->logits};
            for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) be->free(be, ps[i]);
            free(S->x);
            free(S->acts);
        }
        free(C->slot);
        free(C->rc);
    }
    {
        layer_acts *r = &m->rscr;
        void *sh[] = {r->xn1, r->rstd1, r->q, r->att, r->lse,
                      r->h, r->xn2, r->rstd2, r->g, r->a, m->rx};
        for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) be->free(be, sh[i]);
    }
    void *ps[] = {m->dres, m->dxn, m->dq, m->datt, m->dg, m->da,
                  m->full, m->shard, m->stats, m->gstats, m->ldt, m->dwscr, m->lxd};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) be->free(be, ps[i]);
    free(m->groups);
    free(m->params);
    free(m);
}

int dx_model_num_groups(const dx_model *m) { return m->ngroups; }
dx_group *dx_model_group(dx_model *m, int g) { return &m->groups[g]; }
int dx_model_num_params_table(const dx_model *m) { return m->nparams; }
const dx_param *dx_model_param(const dx_model *m, int i) { return &m->params[i]; }
size_t dx_model_activation_bytes(const dx_model *m) { return m->act_bytes; }
int dx_model_num_chunks(const dx_model *m) { return m->nchunks; }
int dx_model_chunk_has_embedding(const dx_model *m, int c) { return m->ch[c].has_emb; }
int dx_model_chunk_has_head(const dx_model *m, int c) { return m->ch[c].has_head; }
void *dx_model_chunk_input(dx_model *m, int c, int s) { return m->ch[c].slot[s].x[0]; }
void *dx_model_chunk_output(dx_model *m, int c, int s) { return m->ch[c].slot[s].x[m->ch[c].nl]; }
void *dx_model_grad_buffer(dx_model *m) { return m->dres; }

int dx_model_vocab_slice(const dx_model *m, int *v0)
{
    *v0 = m->v0;
    return m->Vl;
}

const void *dx_model_logits(const dx_model *m)
{
    return m->ghead >= 0 ? m->ch[m->nchunks - 1].slot[0].logits : NULL;
}

int dx_model_find_param(const dx_model *m, const char *name)
{
    for (int i = 0; i < m->nparams; i++)
        if (!strcmp(m->params[i].name, name)) return i;
    return -1;
}

int dx_model_is_param_name(const dx_model *m, const char *name)
{
    static const char *const layer_suffix[] = {
        "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
        "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
        "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"};
    if (!strcmp(name, "model.embed_tokens.weight") || !strcmp(name, "model.norm.weight") ||
        !strcmp(name, "lm_head.weight"))
        return 1;
    int l, n = 0;
    if (sscanf(name, "model.layers.%d.%n", &l, &n) != 1 || n == 0 || l < 0 || l >= m->L) return 0;
    char canon[96];
    snprintf(canon, sizeof canon, "model.layers.%d.", l);
    if (strncmp(name, canon, (size_t)n)) return 0; /* no leading zeros or signs */
    for (size_t i = 0; i < sizeof layer_suffix / sizeof layer_suffix[0]; i++)
        if (!strcmp(name + n, layer_suffix[i])) return 1;
    return 0;
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
        const size_t cols = p->cols ? (size_t)p->cols : 1, fcols = p->cols ? (size_t)p->full_cols : 1;
        /* counter-based: each element independent of the others (billions for a 7B model) */
#pragma omp parallel for schedule(static) if (hi - lo >= ((size_t)1 << 16))
        for (size_t e = lo; e < hi; e++) {
            /* the element's index in the logical tensor */
            size_t le = e - p->offset, r = le / cols, c = le % cols;
            size_t ge = ((size_t)p->row0 + r) * fcols + (size_t)p->col0 + c;
            if (p->init == 2) { /* LoRA's B */
                out[e - start] = 0.0f;
            } else if (p->init == 1) { /* LoRA's A: PEFT's kaiming_uniform(a = sqrt 5) */
                const double z = dx_normal(seed, (uint64_t)p->global_index, ge);
                out[e - start] = (float)((erfc(-z / sqrt(2.0)) - 1.0) / sqrt((double)p->full_cols));
            } else {
                out[e - start] = p->is_norm ? 1.0f
                                            : (float)(m->cfg.initializer_range *
                                                      dx_normal(seed, (uint64_t)p->global_index, ge));
            }
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
/* (m->op_stream: the stream name op events get; DX_STREAM_AUX while on the overlap stream) */
#define OP(module, layer, op, flops, bytes, call)                                               \
    DX_TRACE_OP_ON(m->tr, m->op_stream, module, layer, op, flops, bytes, call)

/* Before group gi's gradient is first written in a backward (after its PRE_BACKWARD hook): a
 * fresh gradient (dx_group.grad_fresh) is overwritten instead of accumulated into. A decoder
 * layer's matrices (q|k|v or q and k|v, o, gate|up, down: each one weight-gradient GEMM's whole output,
 * unless k/v are replicated over TP and only one head's rows are written) and the head's lm_head
 * take beta 0 (m->wbeta), their norm weights (accumulated by rmsnorm_bwd) are zeroed; every other
 * group (the embedding's scatter-add, LoRA adapters, replicated k/v) is zeroed whole and
 * accumulated into. Sets m->wbeta for the group's GEMMs and clears the flag. */
static void grad_begin(dx_model *m, int gi)
{
    dx_group *G = &m->groups[gi];
    m->wbeta = 1.0f;
    if (!G->grad || !G->grad_fresh) return;
    G->grad_fresh = 0;
    dx_backend *be = m->be;
    const int layer = G->module == DX_MOD_LAYER && m->lora_r == 0 && !m->kv_repl;
    if (layer || gi == m->ghead) {
        const size_t D = (size_t)m->D;
        const int mod = layer ? DX_MOD_LAYER : DX_MOD_LM_HEAD;
        if (layer) {
            OP(mod, G->layer, DX_OP_MEMSET, 0, (int64_t)(D * m->as), be->zero(be, at(G->grad, m->o_ln1, m->as), D * m->as));
            OP(mod, G->layer, DX_OP_MEMSET, 0, (int64_t)(D * m->as), be->zero(be, at(G->grad, m->o_ln2, m->as), D * m->as));
        } else {
            OP(mod, G->layer, DX_OP_MEMSET, 0, (int64_t)(D * m->as), be->zero(be, at(G->grad, m->o_normf, m->as), D * m->as));
        }
        m->wbeta = 0.0f;
        return;
    }
    OP(G->module, G->layer, DX_OP_MEMSET, 0, (int64_t)(G->numel * m->as), be->zero(be, G->grad, G->numel * m->as));
}

/* ---- TP collectives (over m->tpc, in place or into a separate buffer), traced as the op of
 * module / layer (device marks when the comm leaves some, else the host times). ---- */
static int tp_comm_done(dx_model *m, int module, int layer, int op, int64_t bytes, uint64_t t0, int rc)
{
    uint64_t t1 = dx_now_ns();
    if (!rc && dx_tr_on(m->tr, 1))
        dx_tr_record_comm(m->tr, DX_GROUP_TP, m->tpc->last_mark, t0, t1, module, layer, op, bytes);
    return rc ? -1 : 0;
}
/* buf X[n] summed over TP */
static int tp_all_reduce(dx_model *m, int module, int layer, void *buf, size_t n)
{
    uint64_t t0 = dx_now_ns();
    return tp_comm_done(m, module, layer, DX_OP_ALL_REDUCE, (int64_t)(n * m->xs), t0,
                        m->tpc->all_reduce_sum(m->tpc, buf, n, m->be->act));
}
/* recv X[tp * n] = every TP rank's send X[n] */
static int tp_all_gather(dx_model *m, int module, int layer, const void *send, void *recv, size_t n,
                         dx_dtype dt)
{
    uint64_t t0 = dx_now_ns();
    return tp_comm_done(m, module, layer, DX_OP_ALL_GATHER, (int64_t)(n * m->tp * dx_dtype_size(dt)), t0,
                        m->tpc->all_gather(m->tpc, send, recv, n, dt));
}
/* recv X[n] = sum over TP ranks of send X[tp * n] rows [tr n, (tr + 1) n) */
static int tp_reduce_scatter(dx_model *m, int module, int layer, const void *send, void *recv, size_t n)
{
    uint64_t t0 = dx_now_ns();
    return tp_comm_done(m, module, layer, DX_OP_REDUCE_SCATTER, (int64_t)(n * m->tp * m->xs), t0,
                        m->tpc->reduce_scatter_sum(m->tpc, send, recv, n, m->be->act));
}

/* FLOPs and bytes of C[M,N] = A[M,K] B[K,N] (+ beta C). */
static int64_t gemm_flops(int M, int N, int K) { return 2 * (int64_t)M * N * K; }
static int64_t gemm_bytes(const dx_model *m, int M, int N, int K, int c_acc, int beta)
{
    int64_t cs = (int64_t)(c_acc ? m->as : m->xs);
    return ((int64_t)M * K + (int64_t)K * N) * (int64_t)m->xs + (int64_t)M * N * cs * (beta ? 2 : 1);
}

/* y[N,out] (= or +=, beta) x[N,in] W[out,in]^T; y's rows are ldy elements apart (ldy >= out:
 * y may be a column block of a wider buffer) */
static void linear_fwd_ld(dx_model *m, int module, int layer, void *y, int ldy, const void *x,
                          const void *W, int N, int in, int out, float beta)
{
    dx_backend *be = m->be;
    OP(module, layer, DX_OP_GEMM, gemm_flops(N, out, in), gemm_bytes(m, N, out, in, 0, beta != 0),
       be->gemm(be, 0, 1, N, out, in, 1.0f, x, in, W, in, beta, y, ldy, 0));
}
static void linear_fwd(dx_model *m, int module, int layer, void *y, const void *x, const void *W,
                       int N, int in, int out, float beta)
{
    linear_fwd_ld(m, module, layer, y, out, x, W, N, in, out, beta);
}

/* dx[N,in] (beta) = dy[N,out] W[out,in]; dy's rows are ldy apart */
static void linear_bwd_dx(dx_model *m, int module, int layer, void *dx, const void *dy, int ldy,
                          const void *W, int N, int in, int out, float beta)
{
    dx_backend *be = m->be;
    OP(module, layer, DX_OP_GEMM, gemm_flops(N, in, out), gemm_bytes(m, N, in, out, 0, beta != 0),
       be->gemm(be, 0, 0, N, in, out, 1.0f, dy, ldy, W, in, beta, dx, in, 0));
}
/* dW[out,in] (m->wbeta) = dy^T x; dy's rows are ldy apart; dW NULL (W frozen, LoRA's base): none */
static void linear_bwd_dw(dx_model *m, int module, int layer, void *dW, const void *dy, int ldy,
                          const void *x, int N, int in, int out)
{
    dx_backend *be = m->be;
    if (dW)
        OP(module, layer, DX_OP_GEMM, gemm_flops(out, in, N), gemm_bytes(m, out, in, N, 1, m->wbeta != 0.0f),
           be->gemm(be, 1, 0, out, in, N, 1.0f, dy, ldy, x, in, m->wbeta, dW, in, 1));
}
/* Both: dx[N,in] (beta) = dy[N,out] W[out,in];  dW[out,in] (m->wbeta) = dy^T x */
static void linear_bwd_ld(dx_model *m, int module, int layer, void *dx, void *dW, const void *dy,
                          int ldy, const void *x, const void *W, int N, int in, int out, float beta)
{
    linear_bwd_dx(m, module, layer, dx, dy, ldy, W, N, in, out, beta);
    linear_bwd_dw(m, module, layer, dW, dy, ldy, x, N, in, out);
}

/* Gradient pointer of a parameter at element offset off of a group's gradient G, or NULL when
 * the group is frozen (G NULL). */
static void *gat(void *G, size_t off, size_t as) { return G ? at(G, off, as) : NULL; }
/* A norm weight's gradient: in G, or the scratch that a frozen norm's goes to */
static void *dwat(dx_model *m, void *G, size_t off) { return G ? at(G, off, m->as) : m->dwscr; }

/* The adapter shape of target t of local layer li (chunk C), in and out local; with dropout in
 * training, the mask's stream (seed, layer, target) and coordinates: rows are the micro-batch's
 * global tokens, columns the target's full input width (a row-parallel target's input is this
 * TP rank's column block). */
static dx_lora_shape lora_shape(const dx_model *m, const chunk *C, int li, int t, int in, int out)
{
    dx_lora_shape sh = {in, out, m->lora_r, m->lora_scale, 0.0f, 0, 0, 0, 0, NULL};
    if (m->lora_p > 0 && m->drop_on) {
        const int row_parallel = t == DX_LORA_O || t == DX_LORA_DOWN;
        sh.p = m->lora_p;
        sh.stream = dx_mix64(m->drop_seed ^ (((uint64_t)(C->first_layer + li) + 1) << 8 | (uint64_t)t));
        sh.row0 = m->drop_row0;
        sh.row_len = (uint64_t)in * (row_parallel ? (uint64_t)m->tp : 1u);
        sh.col0 = row_parallel ? (uint64_t)m->tpr * (uint64_t)in : 0u;
        sh.xd = m->lxd;
    }
    return sh;
}

/* LoRA of target t of local layer li (chunk C): y[N, out] (rows ldy apart) += s (x A^T) B^T,
 * keeping x A^T in a->lt[t]; a no-op when t is not a target. */
static void lora_fwd_t(dx_model *m, const chunk *C, layer_acts *a, int li, int t, void *y, int ldy,
                       const void *x, int N, int in, int out)
{
    if (!(m->lora_targets & (1u << t))) return;
    const void *Wa = m->groups[C->ga0 + li].work;
    const dx_lora_shape sh = lora_shape(m, C, li, t, in, out);
    const int r = m->lora_r, module = t <= DX_LORA_O ? DX_MOD_ATTENTION : DX_MOD_MLP;
    OP(module, C->first_layer + li, DX_OP_LORA_GEMM, gemm_flops(N, r, in) + gemm_flops(N, out, r),
       gemm_bytes(m, N, r, in, 0, 0) + gemm_bytes(m, N, out, r, 0, 1),
       dx_lora_fwd(m->be, y, ldy, a->lt[t], x, at(Wa, m->o_lA[t], m->xs), at(Wa, m->o_lB[t], m->xs), N, &sh));
}

/* Its backward: dx[N, in] += the adapter's input gradient; dA, dB (+=) into the adapter group. */
static void lora_bwd_t(dx_model *m, const chunk *C, layer_acts *a, int li, int t, void *dx,
                       const void *dy, int ldy, const void *x, int N, int in, int out)
{
    if (!(m->lora_targets & (1u << t))) return;
    const void *Wa = m->groups[C->ga0 + li].work;
    void *Ga = m->groups[C->ga0 + li].grad;
    const dx_lora_shape sh = lora_shape(m, C, li, t, in, out);
    const int r = m->lora_r, module = t <= DX_LORA_O ? DX_MOD_ATTENTION : DX_MOD_MLP;
    OP(module, C->first_layer + li, DX_OP_LORA_GEMM,
       gemm_flops(out, r, N) + gemm_flops(N, r, out) + gemm_flops(r, in, N) + gemm_flops(N, in, r),
       gemm_bytes(m, out, r, N, 1, 1) + gemm_bytes(m, N, r, out, 0, 0) + gemm_bytes(m, r, in, N, 1, 1) +
           gemm_bytes(m, N, in, r, 0, 1),
       dx_lora_bwd(m->be, dx, at(Ga, m->o_lA[t], m->as), at(Ga, m->o_lB[t], m->as), m->ldt, dy, ldy, x,
                   a->lt[t], at(Wa, m->o_lA[t], m->xs), at(Wa, m->o_lB[t], m->xs), N, &sh));
}
static void linear_bwd(dx_model *m, int module, int layer, void *dx, void *dW, const void *dy,
                       const void *x, const void *W, int N, int in, int out, float beta)
{
    linear_bwd_ld(m, module, layer, dx, dW, dy, out, x, W, N, in, out, beta);
}

/* RMSNorm of the residual rows x[Nr, D] into xn: the full xn[N, D] the column-parallel GEMMs
 * read (sequence parallelism: this rank's rows, then all-gathered over TP). */
static int norm_fwd(dx_model *m, int module, int layer, void *xn, void *rstd, const void *x,
                    const void *w, int N)
{
    dx_backend *be = m->be;
    const int D = m->D, Nr = dx_model_residual_rows(m, N);
    const int64_t ND = (int64_t)Nr * D, xsz = (int64_t)m->xs;
    const float eps = (float)m->cfg.rms_norm_eps;
    void *y = m->sp ? m->shard : xn;
    OP(module, layer, DX_OP_RMSNORM, 4 * ND, 2 * ND * xsz, be->rmsnorm_fwd(be, y, rstd, x, w, Nr, D, eps));
    if (m->sp) return tp_all_gather(m, module, layer, m->shard, xn, (size_t)Nr * D, be->act);
    return 0;
}

/* The row-parallel GEMM's output plus the residual: out[Nr, D] = res + sum over TP of
 * (in[N, K] W[D, K]^T + LoRA target t's s (in A^T) B^T, when it is a target of local layer li of
 * chunk C) (all-reduce; with sequence parallelism a reduce-scatter to this rank's rows). */
static int row_parallel_fwd(dx_model *m, int module, int layer, void *out, const void *res,
                            const void *in, const void *W, int N, int K, const chunk *C, layer_acts *a,
                            int li, int t)
{
    dx_backend *be = m->be;
    const int D = m->D, Nr = dx_model_residual_rows(m, N);
    const size_t xs = m->xs;
    const int64_t ND = (int64_t)Nr * D;
    if (m->sp) { /* full = in W^T, this rank's rows += res, reduce-scatter */
        void *mine = at(m->full, (size_t)m->tpr * Nr * D, xs);
        linear_fwd(m, module, layer, m->full, in, W, N, K, D, 0.0f);
        lora_fwd_t(m, C, a, li, t, m->full, D, in, N, K, D);
        OP(module, layer, DX_OP_ADD, ND, 3 * ND * (int64_t)xs, be->add(be, mine, mine, res, (size_t)ND));
        return tp_reduce_scatter(m, module, layer, m->full, out, (size_t)Nr * D);
    }
    if (m->tpr == 0 && be->gemm_res) { /* the residual is added once, by TP rank 0 */
        OP(module, layer, DX_OP_GEMM, gemm_flops(N, D, K), gemm_bytes(m, N, D, K, 0, 1),
           be->gemm_res(be, 0, 1, N, D, K, in, K, W, K, res, D, out, D));
    } else {
        if (m->tpr == 0)
            OP(module, layer, DX_OP_MEMCPY, 0, 2 * ND * (int64_t)xs, be->copy(be, out, res, (size_t)ND * xs));
        linear_fwd(m, module, layer, out, in, W, N, K, D, m->tpr == 0 ? 1.0f : 0.0f);
    }
    lora_fwd_t(m, C, a, li, t, out, D, in, N, K, D);
    return m->tp > 1 ? tp_all_reduce(m, module, layer, out, (size_t)ND) : 0;
}

/* The gradient of the row-parallel GEMM's output: dres[Nr, D], or its all-gather over TP
 * (sequence parallelism). */
static const void *row_parallel_dy(dx_model *m, int module, int layer, int N, int *rc)
{
    if (!m->sp) return m->dres;
    const int Nr = dx_model_residual_rows(m, N);
    *rc = tp_all_gather(m, module, layer, m->dres, m->full, (size_t)Nr * m->D, m->be->act);
    return m->full;
}

/* Input gradient of the column-parallel GEMMs (m->dxn [N, D], partial on each TP rank) reduced
 * over TP and passed through the RMSNorm's backward into the residual gradient dres (+=). */
static int norm_bwd(dx_model *m, int module, int layer, void *dw, const void *x, const void *w,
                    const void *rstd, int N)
{
    dx_backend *be = m->be;
    const int D = m->D, Nr = dx_model_residual_rows(m, N);
    const int64_t ND = (int64_t)Nr * D, xsz = (int64_t)m->xs;
    const void *dy = m->dxn;
    if (m->sp) {
        if (tp_reduce_scatter(m, module, layer, m->dxn, m->shard, (size_t)Nr * D)) return -1;
        dy = m->shard;
    } else if (m->tp > 1 && tp_all_reduce(m, module, layer, m->dxn, (size_t)N * D)) {
        return -1;
    }
    OP(module, layer, DX_OP_RMSNORM, 8 * ND, 4 * ND * xsz,
       be->rmsnorm_bwd(be, m->dres, dw, dy, x, w, rstd, Nr, D));
    return 0;
}

static chunk *chunk_at(dx_model *m, int c, int s, const char *what)
{
    if (c < 0 || c >= m->nchunks || s < 0 || s >= m->slots) {
        dx_fail("model: %s of chunk %d slot %d (have %d chunks, %d slots)", what, c, s, m->nchunks, m->slots);
        return NULL;
    }
    return &m->ch[c];
}

/* What layer_fwd computes: the whole layer, or only the parts selective recomputation drops
 * (the RMSNorm outputs, the SwiGLU product) from the kept GEMM and attention outputs. The
 * fused attention keeps no T x T scores (the memory-heavy part Korthikanti et al. recompute);
 * its output and log-sum-exp are as small as a GEMM output and costly to recompute (a full
 * attention forward), so selective recomputation keeps them, as Megatron-LM does with flash
 * attention. */
enum { LAYER_ALL = 0, LAYER_DROPPED = 1 };

/* Forward of local layer li of chunk C on slot S: the output (x of the next layer) goes to out. */
static int layer_fwd(dx_model *m, chunk *C, slot_acts *S, int li, void *out, int what)
{
    dx_backend *be = m->be;
    const int D = m->D, Hl = m->Hl, KVl = m->KVl, Dh = m->Dh, Il = m->Il;
    const int B = S->B, T = S->T, HDl = Hl * Dh, KDl = KVl * Dh, N = B * T, QL = m->qkv_ld;
    const size_t xs = m->xs;
    const float theta = (float)m->cfg.rope_theta;
    const int64_t xsz = (int64_t)xs, asz = (int64_t)m->as, NI = (int64_t)N * Il;
    const int64_t att_flops = 4 * (int64_t)B * Hl * Dh * ((int64_t)T * (T + 1) / 2);
    const int64_t att_bytes = ((int64_t)N * (2 * HDl + 2 * KDl)) * xsz + (int64_t)N * Hl * asz;
    const int l = C->first_layer + li, gi = C->g0 + li;
    const void *W = m->groups[gi].work;
    layer_acts *a = &S->acts[li];
    const void *Wk = at(W, m->o_k + (size_t)m->kv_head * Dh * D, xs);
    const void *Wv = at(W, m->o_v + (size_t)m->kv_head * Dh * D, xs);
    const int all = what == LAYER_ALL;
    {
        MOD_BEGIN(m);
        if (norm_fwd(m, DX_MOD_ATTENTION, l, a->xn1, a->rstd1, S->x[li], at(W, m->o_ln1, xs), N)) return -1;
        /* fused Q|K|V without LoRA on q or k: RoPE in the GEMM's epilogue where the backend fuses
         * it (gemm_rope: traced as the GEMM, RoPE's FLOPs included, and no rope op) */
        const int rope_gemm = all && m->qkv_fused && be->gemm_rope &&
                              !(m->lora_targets & (1u << DX_LORA_Q | 1u << DX_LORA_K)) &&
                              be->gemm_rope_fused(be, a->q, a->xn1, at(W, m->o_q, xs), N, QL, D, T, Hl, KVl, Dh);
        if (rope_gemm) {
            OP(DX_MOD_ATTENTION, l, DX_OP_GEMM, gemm_flops(N, QL, D) + 6 * (int64_t)N * (HDl + KDl),
               gemm_bytes(m, N, QL, D, 0, 0),
               be->gemm_rope(be, a->q, a->xn1, at(W, m->o_q, xs), N, QL, D, T, Hl, KVl, Dh, theta));
            lora_fwd_t(m, C, a, li, DX_LORA_V, a->v, QL, a->xn1, N, D, KDl);
        } else if (all) {
            if (m->qkv_fused) { /* q_proj | k_proj | v_proj rows adjacent: one GEMM, N = qkv_ld */
                linear_fwd(m, DX_MOD_ATTENTION, l, a->q, a->xn1, at(W, m->o_q, xs), N, D, QL, 0.0f);
            } else {
                linear_fwd_ld(m, DX_MOD_ATTENTION, l, a->q, QL, a->xn1, at(W, m->o_q, xs), N, D, HDl, 0.0f);
                if (!m->kv_repl) { /* k_proj and v_proj rows are adjacent: one GEMM, N = 2 KDl */
                    linear_fwd_ld(m, DX_MOD_ATTENTION, l, a->k, QL, a->xn1, Wk, N, D, 2 * KDl, 0.0f);
                } else {
                    linear_fwd_ld(m, DX_MOD_ATTENTION, l, a->k, QL, a->xn1, Wk, N, D, KDl, 0.0f);
                    linear_fwd_ld(m, DX_MOD_ATTENTION, l, a->v, QL, a->xn1, Wv, N, D, KDl, 0.0f);
                }
            }
            lora_fwd_t(m, C, a, li, DX_LORA_Q, a->q, QL, a->xn1, N, D, HDl);
            lora_fwd_t(m, C, a, li, DX_LORA_K, a->k, QL, a->xn1, N, D, KDl);
            lora_fwd_t(m, C, a, li, DX_LORA_V, a->v, QL, a->xn1, N, D, KDl);
            OP(DX_MOD_ATTENTION, l, DX_OP_ROPE, 6 * (int64_t)N * (HDl + KDl), 2 * (int64_t)N * (HDl + KDl) * xsz,
               be->rope_fwd(be, a->q, QL, B, T, Hl, Dh, theta); be->rope_fwd(be, a->k, QL, B, T, KVl, Dh, theta));
        }
        if (all)
            OP(DX_MOD_ATTENTION, l, DX_OP_ATTENTION, att_flops, att_bytes,
               be->attention_fwd(be, a->att, a->lse, a->q, a->k, a->v, QL, QL, B, T, Hl, KVl, Dh));
        if (all && row_parallel_fwd(m, DX_MOD_ATTENTION, l, a->h, S->x[li], a->att, at(W, m->o_o, xs), N, HDl,
                                    C, a, li, DX_LORA_O))
            return -1;
        MOD_END(m, DX_MOD_ATTENTION, l);
    }
    {
        MOD_BEGIN(m);
        if (norm_fwd(m, DX_MOD_MLP, l, a->xn2, a->rstd2, a->h, at(W, m->o_ln2, xs), N)) return -1;
        /* gate_proj and up_proj rows are adjacent: one GEMM, N = 2 Il, g | u; without LoRA on
         * them, SwiGLU runs in that GEMM's epilogue where the backend can (gemm_swiglu: traced as
         * the GEMM, its FLOPs and bytes included, and no swiglu op) */
        const int fused = all && be->gemm_swiglu && !(m->lora_targets & (1u << DX_LORA_GATE | 1u << DX_LORA_UP));
        if (fused) {
            OP(DX_MOD_MLP, l, DX_OP_GEMM, gemm_flops(N, 2 * Il, D) + 6 * NI,
               gemm_bytes(m, N, 2 * Il, D, 0, 0) + NI * xsz,
               be->gemm_swiglu(be, a->g, a->a, a->xn2, at(W, m->o_gate, xs), N, Il, D));
        } else if (all) {
            linear_fwd(m, DX_MOD_MLP, l, a->g, a->xn2, at(W, m->o_gate, xs), N, D, 2 * Il, 0.0f);
            lora_fwd_t(m, C, a, li, DX_LORA_GATE, a->g, 2 * Il, a->xn2, N, D, Il);
            lora_fwd_t(m, C, a, li, DX_LORA_UP, a->u, 2 * Il, a->xn2, N, D, Il);
        }
        if (!fused)
            OP(DX_MOD_MLP, l, DX_OP_SWIGLU, 6 * NI, 3 * NI * xsz,
               be->swiglu_fwd(be, a->a, a->g, a->u, N, Il, 2 * Il));
        if (all && row_parallel_fwd(m, DX_MOD_MLP, l, out, a->h, a->a, at(W, m->o_down, xs), N, Il, C, a, li,
                                    DX_LORA_DOWN))
            return -1;
        MOD_END(m, DX_MOD_MLP, l);
    }
    return 0;
}

/* In backward, before local layer li's gradients: what its forward dropped, run again (traced
 * in phase "recompute"). Full: the whole layer from its kept input, its output to scratch (the
 * kept x of the next layer may still be in a send); selective: the dropped parts. */
static int recompute_layer(dx_model *m, chunk *C, slot_acts *S, int li)
{
    const int mode = C->rc[li];
    if (mode == DX_RECOMPUTE_NONE) return 0;
    uint8_t phase = m->tr ? m->tr->phase : 0;
    if (m->tr) m->tr->phase = DX_PH_RECOMPUTE;
    int rc = layer_fwd(m, C, S, li, m->rx, mode == DX_RECOMPUTE_FULL ? LAYER_ALL : LAYER_DROPPED);
    if (m->tr) m->tr->phase = phase;
    return rc;
}

int dx_model_forward_chunk(dx_model *m, int c, int s, const int32_t *ids, const int32_t *targets,
                           int B, int T, void *loss_sum, int want_grad, float dscale)
{
    dx_backend *be = m->be;
    chunk *C = chunk_at(m, c, s, "forward");
    if (!C) return -1;
    slot_acts *S = &C->slot[s];
    const int D = m->D, Vl = m->Vl, N = B * T;
    const size_t xs = m->xs;
    if (B > m->maxB || T > m->maxT || B <= 0 || T <= 0)
        return dx_fail("model: batch %d x %d exceeds the allocated %d x %d", B, T, m->maxB, m->maxT);
    if (m->sp && N % m->tp)
        return dx_fail("model: %d tokens do not split over %d sequence-parallel ranks", N, m->tp);
    if (C->has_head && !targets) want_grad = 0;
    S->B = B;
    S->T = T;
    S->grad_ready = want_grad;
    m->drop_on = want_grad; /* dropout in training only (evaluation and sampling: none) */
    m->drop_row0 = S->drop_seq0 * (uint64_t)T;

    const int64_t xsz = (int64_t)xs;
    if (C->has_emb) {
        if (hook(m, m->gemb, DX_HOOK_PRE_FORWARD)) return -1;
        const void *E = m->groups[m->gemb].work;
        MOD_BEGIN(m);
        OP(DX_MOD_EMBEDDING, -1, DX_OP_MEMCPY, 0, 2 * (int64_t)N * 4,
               be->copy(be, S->ids, ids, (size_t)N * sizeof(int32_t)));
        if (m->tp == 1) {
            OP(DX_MOD_EMBEDDING, -1, DX_OP_EMBEDDING, 0, 2 * (int64_t)N * D * xsz + (int64_t)N * 4,
               be->embedding_fwd(be, S->x[0], ids, E, N, D));
        } else {
            void *out = m->sp ? m->full : S->x[0];
            OP(DX_MOD_EMBEDDING, -1, DX_OP_EMBEDDING, 0, 2 * (int64_t)N * D * xsz + (int64_t)N * 4,
               be->embedding_vp_fwd(be, out, ids, E, N, D, m->v0, Vl));
            int rc = m->sp ? tp_reduce_scatter(m, DX_MOD_EMBEDDING, -1, m->full, S->x[0],
                                               (size_t)dx_model_residual_rows(m, N) * D)
                           : tp_all_reduce(m, DX_MOD_EMBEDDING, -1, S->x[0], (size_t)N * D);
            if (rc) return -1;
        }
        MOD_END(m, DX_MOD_EMBEDDING, -1);
        if (hook(m, m->gemb, DX_HOOK_POST_FORWARD)) return -1;
    }

    for (int li = 0; li < C->nl; li++) {
        const int gi = C->g0 + li, ga = C->ga0 >= 0 ? C->ga0 + li : -1;
        if (hook(m, gi, DX_HOOK_PRE_FORWARD) || (ga >= 0 && hook(m, ga, DX_HOOK_PRE_FORWARD))) return -1;
        if (layer_fwd(m, C, S, li, S->x[li + 1], LAYER_ALL)) return -1;
        if (hook(m, gi, DX_HOOK_POST_FORWARD) || (ga >= 0 && hook(m, ga, DX_HOOK_POST_FORWARD))) return -1;
    }
    if (!C->has_head) return 0;

    const int gh = m->ghead;
    if (hook(m, gh, DX_HOOK_PRE_FORWARD)) return -1;
    const void *Wh = m->groups[gh].work;
    {
        MOD_BEGIN(m);
        if (norm_fwd(m, DX_MOD_RMSNORM, -1, S->xnf, S->rstdf, S->x[C->nl], at(Wh, m->o_normf, xs), N))
            return -1;
        MOD_END(m, DX_MOD_RMSNORM, -1);
    }
    {
        MOD_BEGIN(m);
        OP(DX_MOD_LM_HEAD, -1, DX_OP_GEMM, gemm_flops(N, Vl, D), gemm_bytes(m, N, Vl, D, 0, 0),
           be->gemm(be, 0, 1, N, Vl, D, 1.0f, S->xnf, D, at(Wh, m->o_head, xs), D, 0.0f, S->logits, Vl, 0));
        MOD_END(m, DX_MOD_LM_HEAD, -1);
    }
    if (targets) {
        MOD_BEGIN(m);
        void *dl = want_grad ? S->logits : NULL; /* in place */
        const int64_t ce_bytes = (int64_t)N * Vl * (xsz + (want_grad ? xsz : 0));
        if (m->tp == 1) {
            OP(DX_MOD_LOSS, -1, DX_OP_CROSS_ENTROPY, 5 * (int64_t)N * Vl, ce_bytes,
               be->cross_entropy(be, loss_sum, dl, S->logits, targets, N, Vl, dscale));
        } else { /* vocab-parallel: each rank's row statistics, all-gathered, then the rest */
            OP(DX_MOD_LOSS, -1, DX_OP_CROSS_ENTROPY, 3 * (int64_t)N * Vl, (int64_t)N * Vl * xsz,
               be->ce_vp_stats(be, m->stats, S->logits, targets, N, Vl, m->v0));
            if (tp_all_gather(m, DX_MOD_LOSS, -1, m->stats, m->gstats, (size_t)N * 2, be->acc)) return -1;
            OP(DX_MOD_LOSS, -1, DX_OP_CROSS_ENTROPY, 2 * (int64_t)N * Vl, ce_bytes,
               be->ce_vp_finish(be, loss_sum, dl, S->logits, m->gstats, m->tp, targets, N, Vl, m->v0, dscale));
        }
        MOD_END(m, DX_MOD_LOSS, -1);
    }
    return hook(m, gh, DX_HOOK_POST_FORWARD);
}

int dx_model_backward_chunk(dx_model *m, int c, int s)
{
    dx_backend *be = m->be;
    chunk *C = chunk_at(m, c, s, "backward");
    if (!C) return -1;
    slot_acts *S = &C->slot[s];
    const int D = m->D, Hl = m->Hl, KVl = m->KVl, Dh = m->Dh, Il = m->Il, Vl = m->Vl;
    const int B = S->B, T = S->T, HDl = Hl * Dh, KDl = KVl * Dh, N = B * T, QL = m->qkv_ld;
    const int Nr = dx_model_residual_rows(m, N);
    const size_t xs = m->xs, as = m->as;
    const float theta = (float)m->cfg.rope_theta;
    if (!S->grad_ready) return dx_fail("model: backward of chunk %d slot %d without a forward that kept its gradient path", c, s);
    S->grad_ready = 0;
    m->drop_on = 1; /* the forward's masks again (recomputation, the adapters' backward) */
    m->drop_row0 = S->drop_seq0 * (uint64_t)T;
    int rc = 0;

    const int64_t xsz = (int64_t)xs, asz = (int64_t)as, NI = (int64_t)N * Il;
    const int64_t att_flops = 10 * (int64_t)B * Hl * Dh * ((int64_t)T * (T + 1) / 2);
    const int64_t att_bytes = ((int64_t)N * (4 * HDl + 4 * KDl)) * xsz + (int64_t)N * Hl * asz;

    if (C->has_head) {
        const int gh = m->ghead;
        if (hook(m, gh, DX_HOOK_PRE_BACKWARD)) return -1;
        grad_begin(m, gh);
        const void *Wh = m->groups[gh].work;
        void *Gh = m->groups[gh].grad;
        {
            MOD_BEGIN(m);
            linear_bwd(m, DX_MOD_LM_HEAD, -1, m->dxn, gat(Gh, m->o_head, as), S->logits, S->xnf,
                       at(Wh, m->o_head, xs), N, D, Vl, 0.0f);
            MOD_END(m, DX_MOD_LM_HEAD, -1);
        }
        {
            MOD_BEGIN(m);
            OP(DX_MOD_RMSNORM, -1, DX_OP_MEMSET, 0, (int64_t)Nr * D * xsz, be->zero(be, m->dres, (size_t)Nr * D * xs));
            if (norm_bwd(m, DX_MOD_RMSNORM, -1, dwat(m, Gh, m->o_normf), S->x[C->nl], at(Wh, m->o_normf, xs),
                         S->rstdf, N))
                return -1;
            MOD_END(m, DX_MOD_RMSNORM, -1);
        }
        if (hook(m, gh, DX_HOOK_POST_BACKWARD)) return -1;
    }

    for (int li = C->nl - 1; li >= 0; li--) {
        const int l = C->first_layer + li, gi = C->g0 + li, ga = C->ga0 >= 0 ? C->ga0 + li : -1;
        if (hook(m, gi, DX_HOOK_PRE_BACKWARD) || (ga >= 0 && hook(m, ga, DX_HOOK_PRE_BACKWARD))) return -1;
        if (ga >= 0) grad_begin(m, ga); /* (the adapters' GEMMs accumulate: zeroed when fresh) */
        grad_begin(m, gi);
        if (recompute_layer(m, C, S, li)) return -1;
        const void *W = m->groups[gi].work;
        void *G = m->groups[gi].grad;
        layer_acts *a = &S->acts[li];
        const size_t kvo = (size_t)m->kv_head * Dh * D;
        { /* MLP: dres = dL/dx[l+1] */
            MOD_BEGIN(m);
            const void *dy = row_parallel_dy(m, DX_MOD_MLP, l, N, &rc);
            if (rc) return -1;
            /* without LoRA on down_proj, SwiGLU's backward runs in the epilogue of the GEMM for dh
             * where the backend can (gemm_swiglu_bwd: traced as that GEMM, its FLOPs and bytes
             * included, and no swiglu op) */
            if (be->gemm_swiglu_bwd && !(m->lora_targets & 1u << DX_LORA_DOWN)) {
                OP(DX_MOD_MLP, l, DX_OP_GEMM, gemm_flops(N, Il, D) + 12 * NI, gemm_bytes(m, N, Il, D, 0, 0) + 3 * NI * xsz,
                   be->gemm_swiglu_bwd(be, m->dg, m->da, dy, at(W, m->o_down, xs), a->g, N, Il, D));
                linear_bwd_dw(m, DX_MOD_MLP, l, gat(G, m->o_down, as), dy, D, a->a, N, Il, D);
            } else {
                linear_bwd(m, DX_MOD_MLP, l, m->da, gat(G, m->o_down, as), dy, a->a,
                           at(W, m->o_down, xs), N, Il, D, 0.0f);
                lora_bwd_t(m, C, a, li, DX_LORA_DOWN, m->da, dy, D, a->a, N, Il, D);
                OP(DX_MOD_MLP, l, DX_OP_SWIGLU, 12 * NI, 5 * NI * xsz,
                   be->swiglu_bwd(be, m->dg, m->du, m->da, a->g, a->u, N, Il, 2 * Il));
            }
            int norm_done = 0; /* the norm's backward already queued (on the overlap stream) */
            if (m->norm_overlap > 0 && be->overlap_begin && m->tp == 1 && D <= 2048 &&
                !(m->lora_targets & (1u << DX_LORA_GATE | 1u << DX_LORA_UP))) {
                /* the norm's backward needs only the input gradient: it runs on a few SMs
                 * beside the gate|up weight gradient (NOTES items 30 and 39; traced on stream "aux"),
                 * not for rows over 2048 (kernels.h: rmsnorm_bwd is capped to the SMs only up
                 * to there; not measured beyond) */
                linear_bwd_dx(m, DX_MOD_MLP, l, m->dxn, m->dg, 2 * Il, at(W, m->o_gate, xs), N, D, 2 * Il, 0.0f);
                const int ov = be->overlap_begin(be, m->norm_overlap) == 0;
                if (ov) {
                    m->op_stream = DX_STREAM_AUX;
                    const int nrc = norm_bwd(m, DX_MOD_MLP, l, dwat(m, G, m->o_ln2), a->h, at(W, m->o_ln2, xs),
                                             a->rstd2, N);
                    m->op_stream = DX_STREAM_COMPUTE;
                    be->overlap_end(be);
                    if (nrc) {
                        be->overlap_join(be);
                        return -1;
                    }
                    norm_done = 1;
                } else { /* (the backend refused: serial from now on) */
                    fprintf(stderr, "dissect: warning: DX_NORM_OVERLAP=%d: %s; the norm's backward runs after "
                                    "the weight gradient\n", m->norm_overlap, dx_last_error());
                    m->norm_overlap = 0;
                }
                linear_bwd_dw(m, DX_MOD_MLP, l, gat(G, m->o_gate, as), m->dg, 2 * Il, a->xn2, N, D, 2 * Il);
                if (ov) be->overlap_join(be);
            } else {
                linear_bwd(m, DX_MOD_MLP, l, m->dxn, gat(G, m->o_gate, as), m->dg, a->xn2,
                           at(W, m->o_gate, xs), N, D, 2 * Il, 0.0f); /* gate | up */
                lora_bwd_t(m, C, a, li, DX_LORA_GATE, m->dxn, m->dg, 2 * Il, a->xn2, N, D, Il);
                lora_bwd_t(m, C, a, li, DX_LORA_UP, m->dxn, m->du, 2 * Il, a->xn2, N, D, Il);
            }
            if (!norm_done &&
                norm_bwd(m, DX_MOD_MLP, l, dwat(m, G, m->o_ln2), a->h, at(W, m->o_ln2, xs), a->rstd2, N))
                return -1;
            MOD_END(m, DX_MOD_MLP, l);
        }
        { /* attention: dres = dL/dh */
            MOD_BEGIN(m);
            const void *dy = row_parallel_dy(m, DX_MOD_ATTENTION, l, N, &rc);
            if (rc) return -1;
            linear_bwd(m, DX_MOD_ATTENTION, l, m->datt, gat(G, m->o_o, as), dy, a->att,
                       at(W, m->o_o, xs), N, HDl, D, 0.0f);
            lora_bwd_t(m, C, a, li, DX_LORA_O, m->datt, dy, D, a->att, N, HDl, D);
            if (be->attention_bwd_rope) { /* RoPE's backward folded into the attention kernels */
                OP(DX_MOD_ATTENTION, l, DX_OP_ATTENTION, att_flops + 6 * (int64_t)N * (HDl + KDl), att_bytes,
                   be->attention_bwd_rope(be, m->dq, m->dk, m->dv, m->datt, a->q, a->k, a->v, a->att,
                                          a->lse, QL, QL, B, T, Hl, KVl, Dh, theta));
            } else {
                OP(DX_MOD_ATTENTION, l, DX_OP_ATTENTION, att_flops, att_bytes,
                   be->attention_bwd(be, m->dq, m->dk, m->dv, m->datt, a->q, a->k, a->v, a->att, a->lse,
                                     QL, QL, B, T, Hl, KVl, Dh));
                OP(DX_MOD_ATTENTION, l, DX_OP_ROPE, 6 * (int64_t)N * (HDl + KDl), 2 * (int64_t)N * (HDl + KDl) * xsz,
                   be->rope_bwd(be, m->dq, QL, B, T, Hl, Dh, theta); be->rope_bwd(be, m->dk, QL, B, T, KVl, Dh, theta));
            }
            if (!m->kv_repl) { /* dq | dk | dv against q_proj | k_proj | v_proj: one input gradient */
                linear_bwd_dx(m, DX_MOD_ATTENTION, l, m->dxn, m->dq, QL, at(W, m->o_q, xs), N, D, QL, 0.0f);
                if (m->qkv_fused) {
                    linear_bwd_dw(m, DX_MOD_ATTENTION, l, gat(G, m->o_q, as), m->dq, QL, a->xn1, N, D, QL);
                } else {
                    linear_bwd_dw(m, DX_MOD_ATTENTION, l, gat(G, m->o_q, as), m->dq, QL, a->xn1, N, D, HDl);
                    linear_bwd_dw(m, DX_MOD_ATTENTION, l, gat(G, m->o_k, as), m->dk, QL, a->xn1, N, D, 2 * KDl);
                }
            } else {
                linear_bwd_ld(m, DX_MOD_ATTENTION, l, m->dxn, gat(G, m->o_q, as), m->dq, QL, a->xn1,
                              at(W, m->o_q, xs), N, D, HDl, 0.0f);
                linear_bwd_ld(m, DX_MOD_ATTENTION, l, m->dxn, gat(G, m->o_k + kvo, as), m->dk, QL,
                              a->xn1, at(W, m->o_k + kvo, xs), N, D, KDl, 1.0f);
                linear_bwd_ld(m, DX_MOD_ATTENTION, l, m->dxn, gat(G, m->o_v + kvo, as), m->dv, QL,
                              a->xn1, at(W, m->o_v + kvo, xs), N, D, KDl, 1.0f);
            }
            lora_bwd_t(m, C, a, li, DX_LORA_Q, m->dxn, m->dq, QL, a->xn1, N, D, HDl);
            lora_bwd_t(m, C, a, li, DX_LORA_K, m->dxn, m->dk, QL, a->xn1, N, D, KDl);
            lora_bwd_t(m, C, a, li, DX_LORA_V, m->dxn, m->dv, QL, a->xn1, N, D, KDl);
            if (norm_bwd(m, DX_MOD_ATTENTION, l, dwat(m, G, m->o_ln1), S->x[li], at(W, m->o_ln1, xs), a->rstd1, N))
                return -1;
            MOD_END(m, DX_MOD_ATTENTION, l);
        }
        if (hook(m, gi, DX_HOOK_POST_BACKWARD) || (ga >= 0 && hook(m, ga, DX_HOOK_POST_BACKWARD))) return -1;
    }

    if (C->has_emb && !m->groups[m->gemb].frozen) {
        const int ge = m->gemb;
        if (hook(m, ge, DX_HOOK_PRE_BACKWARD)) return -1;
        grad_begin(m, ge);
        const int64_t ND = (int64_t)N * D;
        MOD_BEGIN(m);
        if (m->tp == 1) {
            OP(DX_MOD_EMBEDDING, -1, DX_OP_EMBEDDING, ND, ND * (xsz + 2 * asz) + (int64_t)N * 4,
               be->embedding_bwd(be, m->groups[ge].grad, m->dres, S->ids, N, D));
        } else {
            const void *dy = row_parallel_dy(m, DX_MOD_EMBEDDING, -1, N, &rc);
            if (rc) return -1;
            OP(DX_MOD_EMBEDDING, -1, DX_OP_EMBEDDING, ND, ND * (xsz + 2 * asz) + (int64_t)N * 4,
               be->embedding_vp_bwd(be, m->groups[ge].grad, dy, S->ids, N, D, m->v0, Vl));
        }
        MOD_END(m, DX_MOD_EMBEDDING, -1);
        if (hook(m, ge, DX_HOOK_POST_BACKWARD)) return -1;
    }
    return 0;
}

int dx_model_forward(dx_model *m, const int32_t *ids, const int32_t *targets, int B, int T,
                     void *loss_sum, int want_grad, float dscale)
{
    if (m->nchunks != 1 || !m->ch[0].has_emb || !m->ch[0].has_head)
        return dx_fail("model: dx_model_forward needs the whole model on one rank (use the pipeline)");
    return dx_model_forward_chunk(m, 0, 0, ids, targets, B, T, loss_sum, want_grad, dscale);
}

int dx_model_backward(dx_model *m) { return dx_model_backward_chunk(m, 0, 0); }

void dx_model_set_dropout_seed(dx_model *m, uint64_t seed) { m->drop_seed = seed; }

int dx_model_set_micro_sequence(dx_model *m, int c, int s, uint64_t seq0)
{
    chunk *C = chunk_at(m, c, s, "set_micro_sequence");
    if (!C) return -1;
    C->slot[s].drop_seq0 = seq0;
    return 0;
}
