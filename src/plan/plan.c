/* The memory plan; see plan.h. Each formula names the allocation it mirrors. */
#include "plan.h"

#include "nf4.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/grid.h"
#include "common/common.h"
#include "pp/schedule.h"
#include "zero/zero.h"

/* The layers of the rank's model chunks (worker.c's open_data_and_model). */
static int chunks_of(const dx_config *c, int pp_rank, int *first, int *num)
{
    if (c->pp_schedule == DX_PP_INTERLEAVED && c->pp > 1) {
        int v = c->model.num_hidden_layers / (c->pp * c->layers_per_virtual_stage);
        for (int k = 0; k < v; k++) {
            num[k] = c->layers_per_virtual_stage;
            first[k] = (k * c->pp + pp_rank) * c->layers_per_virtual_stage;
        }
        return v;
    }
    num[0] = dx_stage_layers(c, pp_rank, &first[0]);
    return 1;
}

/* The pipeline's activation slots (pipeline.c: the schedule's most micro-batches in flight). */
static int slots_of(const dx_config *c, int pp_rank, int v)
{
    if (c->pp < 2) return 1;
    dx_pp_action *a = calloc((size_t)2 * c->grad_accum * v, sizeof *a);
    if (!a) return -1;
    int n = dx_pp_schedule_build(c->pp_schedule, c->pp, pp_rank, c->grad_accum, v, a);
    int s = n < 0 ? -1 : dx_pp_slots(a, n, v);
    free(a);
    return s;
}

int dx_plan_rank_bytes(const dx_config *c, int rank, const char *device, dx_plan_rank *out)
{
    memset(out, 0, sizeof *out);
    const dx_model_config *mc = &c->model;
    const int64_t xs = !strcmp(device, "cuda") ? 2 : 4, as = 4;
    int tpr, dpr, ppr;
    dx_grid_coords(rank, c->tp, c->dp, &tpr, &dpr, &ppr);
    out->pp = ppr;
    out->dp = dpr;
    out->tp = tpr;
    const int64_t tp = c->tp, D = mc->hidden_size, H = mc->num_attention_heads, Hkv = mc->num_key_value_heads;
    const int64_t Dh = D / H, Hl = H / tp, I = mc->intermediate_size, Il = I / tp, V = mc->vocab_size, Vl = V / tp;
    const int kv_repl = Hkv % tp != 0;
    const int64_t KVl = kv_repl ? 1 : Hkv / tp, KDl = KVl * Dh, KDh = kv_repl ? Hkv * Dh : KVl * Dh, HDl = Hl * Dh;
    const int sp = c->sequence_parallel && tp > 1;
    const int64_t N = (int64_t)c->micro_batch * c->seq_length, Nr = sp ? N / tp : N;
    int first[DX_PP_MAX_CHUNKS], num[DX_PP_MAX_CHUNKS];
    if (c->pp_schedule == DX_PP_INTERLEAVED && c->pp > 1 &&
        mc->num_hidden_layers / (c->pp * c->layers_per_virtual_stage) > DX_PP_MAX_CHUNKS)
        return dx_fail("plan: more than %d model chunks per stage", DX_PP_MAX_CHUNKS);
    const int v = chunks_of(c, ppr, first, num);
    const int slots = slots_of(c, ppr, v);
    if (slots < 1) return -1;
    const int has_emb = first[0] == 0, has_head = first[v - 1] + num[v - 1] == mc->num_hidden_layers;

    /* ---- groups (model.c) and ZeRO (zero.c) ---- */
    const int64_t P = c->dp, st = c->zero_stage;
    const int64_t layer_n = 2 * D + HDl * D + 2 * KDh * D + D * HDl + 3 * Il * D;
    int64_t max_pad = 0, max_shard = 0, max_gather = 0, params = 0, grads = 0, optim = 0, hparams = 0;
    int64_t gn[3] = {has_emb ? Vl * D : 0, layer_n, has_head ? D + Vl * D : 0};
    int64_t gcount[3] = {has_emb, 0, has_head};
    for (int k = 0; k < v; k++) gcount[1] += num[k];
    /* LoRA: the base groups frozen (a replicated working copy only; ZeRO-3: its shard, gathered
     * into the slots), one adapter group per layer (r x (in + out) per target) trained (ZeRO-3:
     * as stage 2) */
    const int lora = c->lora_r > 0;
    /* adapters per layer (model.c: A of a column-parallel target whole, B its rows; A of a
     * row-parallel one its columns, B whole), and targets */
    int64_t lora_n = 0, lora_t = 0;
    {
        const int64_t a_in[DX_LORA_NTARGETS] = {D, D, D, HDl, D, D, Il}, b_out[DX_LORA_NTARGETS] = {HDl, KDh, KDh, D, Il, Il, D};
        for (int t = 0; t < DX_LORA_NTARGETS && lora; t++)
            if ((c->lora_targets >> t) & 1u) {
                lora_n += c->lora_r * (a_in[t] + b_out[t]);
                lora_t++;
            }
    }
    for (int t = 0; t < 3 && lora; t++) { /* frozen: zalloc(n_pad) of X, nothing else */
        const int64_t n_pad = (gn[t] + P - 1) / P * P;
        if (t == 1 && c->quantize_nf4) { /* QLoRA (zero.c): NF4 matrices, raw norms, one dequantized copy */
            const int64_t pn[9] = {D, HDl * D, KDh * D, KDh * D, D * HDl, D, Il * D, Il * D, D * Il};
            const int64_t mat[9] = {0, 1, 1, 1, 1, 0, 1, 1, 1};
            int64_t per = 0;
            for (int k = 0; k < 9; k++) {
                const int64_t nb = (pn[k] + DX_NF4_BLOCK - 1) / DX_NF4_BLOCK;
                per += mat[k] && pn[k] % DX_NF4_BLOCK == 0
                           ? (pn[k] + 1) / 2 + nb + (nb + DX_NF4_DQ_BLOCK - 1) / DX_NF4_DQ_BLOCK * 4
                           : pn[k] * xs;
            }
            params += gcount[t] * per + (gcount[t] ? n_pad * xs : 0);
            continue;
        }
        if (st == 3) {
            params += gcount[t] * (n_pad / P ? n_pad / P * xs : 1);
            if (gcount[t] && n_pad > max_gather) max_gather = n_pad;
        } else {
            params += gcount[t] * n_pad * xs;
        }
    }
    for (int t = lora ? 3 : 0; t < 4; t++) {
        const int64_t cnt = t == 3 ? (lora ? gcount[1] : 0) : gcount[t];
        if (!cnt) continue;
        const int64_t gs = lora && st == 3 ? 2 : st; /* the group's stage (zero.c) */
        const int64_t n = t == 3 ? lora_n : gn[t], n_pad = (n + P - 1) / P * P, shard = n_pad / P, own = gs == 0 ? n : shard;
        const int64_t z1 = 1; /* zalloc(0) allocates 1 byte */
        if (gs == 3 && c->offload_param) hparams += cnt * shard * xs; /* host shards */
        else params += cnt * (gs == 3 ? (shard ? shard * xs : z1) : n_pad * xs);
        grads += cnt * ((gs < 2 ? n_pad : shard) * as);
        optim += cnt * 3 * (own ? own * as : z1);
        if (n_pad > max_pad) max_pad = n_pad;
        if (shard > max_shard) max_shard = shard;
        if (gs == 3 && n_pad > max_gather) max_gather = n_pad;
    }
    if (st >= 2) grads += 2 * max_pad * as;                                 /* the two gradient buckets */
    if (st >= 2 && P > 1 && dx_zero_reduce_act_requested()) grads += 2 * max_pad * xs; /* their X copies */
    if (st == 3) params += 2 * (max_gather ? max_gather * xs : 1);          /* the two gather slots */

    /* ---- activations (model.c dx_model_create_part) ---- */
    const int full = c->recompute == DX_RECOMPUTE_FULL, block = full && c->recompute_method == DX_RECOMPUTE_BLOCK;
    const int64_t dropped = N * D * xs * 2 + N * Il * xs;                                  /* xn1, xn2, a */
    const int64_t gemm_out = 2 * Nr * as + N * HDl * xs + 2 * N * KDl * xs + Nr * D * xs + 2 * N * Il * xs
                             + N * HDl * xs + N * Hl * as; /* rstd1/2, q, k, v, h, g, u, att, lse */
    int64_t acts = 0;
    int any_rc = 0;
    for (int k = 0; k < v; k++) {
        int64_t per_slot = (int64_t)(num[k] + 1) * Nr * D * xs; /* the residual stream */
        for (int li = 0; li < num[k]; li++) {
            int r = c->recompute;
            if (block && li >= c->recompute_num_layers) r = DX_RECOMPUTE_NONE;
            any_rc |= r != DX_RECOMPUTE_NONE;
            per_slot += (r != DX_RECOMPUTE_FULL ? gemm_out : 0) + (r == DX_RECOMPUTE_NONE ? dropped : 0);
        }
        if (k == 0 && has_emb) per_slot += N * 4; /* the ids */
        if (k == v - 1 && has_head) per_slot += N * D * xs + Nr * as + N * Vl * xs; /* xnf, rstd, logits */
        acts += per_slot * slots;
    }
    if (any_rc) acts += gemm_out + dropped + Nr * D * xs;                        /* scratch + rx */
    acts += Nr * D * xs + N * D * xs + 2 * N * HDl * xs + 2 * N * KDl * xs + 3 * N * Il * xs; /* dres..da */
    if (sp) acts += N * D * xs + Nr * D * xs;                                    /* full, shard */
    if (tp > 1 && has_head) acts += N * 2 * as + tp * N * 2 * as;               /* stats, gstats */
    if (lora) { /* x A^T kept per target, layer and slot; dt; the frozen norms' dw */
        for (int k = 0; k < v; k++) acts += (int64_t)num[k] * slots * lora_t * N * c->lora_r * xs;
        acts += N * c->lora_r * xs + D * as;
        if (c->lora_dropout > 0) { /* the dropped input / masked input gradient scratch */
            int64_t w = D > HDl ? D : HDl;
            if (Il > w) w = Il;
            acts += N * w * xs;
        }
    }

    out->bytes[DX_PLAN_PARAMS] = params;
    out->bytes[DX_PLAN_GRADS] = grads;
    out->bytes[DX_PLAN_OPTIM] = c->offload_optimizer ? 0 : optim;
    /* offload: the states in host memory, and the staging slots the step streams through */
    if (c->offload_optimizer)
        out->host = optim + hparams +
                    (int64_t)DX_ZERO_OFFLOAD_SLOTS * (int64_t)dx_zero_offload_chunk((size_t)max_shard) *
                        (4 + (c->offload_param ? 0 : xs)); /* staging: gradient (+ parameters) */
    out->bytes[DX_PLAN_ACTIVATIONS] = acts;
    /* worker: ids and targets (without a pipeline, of the step's micro-batches), loss; zero: scalar */
    out->bytes[DX_PLAN_OTHER] = 2 * N * 4 * (c->pp > 1 ? 1 : c->grad_accum) + as + as;
    for (int k = 0; k < DX_PLAN_NCAT; k++) out->peak += out->bytes[k];
    return 0;
}

/* The largest peak over the ranks (ranks of one (pp, tp) position differ only by padding). */
static int64_t max_peak(const dx_config *c, const char *device)
{
    int64_t worst = 0;
    const int world = c->tp * c->dp * c->pp;
    for (int r = 0; r < world; r++) {
        dx_plan_rank pr;
        if (dx_plan_rank_bytes(c, r, device, &pr)) return -1;
        if (pr.peak > worst) worst = pr.peak;
    }
    return worst;
}

int dx_plan_max_micro_batch(const dx_config *c, const char *device, int64_t limit, int max_micro)
{
    dx_config t = *c;
    int best = 0;
    for (int mb = 1; mb <= max_micro; mb++) {
        t.micro_batch = mb;
        if (t.sequence_parallel && t.tp > 1 && ((long)mb * t.seq_length) % t.tp) continue;
        int64_t p = max_peak(&t, device);
        if (p < 0 || p > limit) break;
        best = mb;
    }
    return best;
}

void dx_plan_advice(const dx_config *c, const char *device, int64_t limit, char *buf, size_t cap)
{
    dx_config t = *c;
    int mb = dx_plan_max_micro_batch(c, device, limit, c->micro_batch);
    if (mb >= 1) {
        snprintf(buf, cap, "train_micro_batch_size_per_gpu %d (with gradient_accumulation_steps x %d for the same batch)",
                 mb, (c->micro_batch + mb - 1) / mb);
        return;
    }
    t.recompute = DX_RECOMPUTE_FULL;
    t.recompute_method = DX_RECOMPUTE_UNIFORM;
    t.recompute_method_set = 1;
    t.recompute_num_layers = 0;
    int64_t p = max_peak(&t, device);
    if (p >= 0 && p <= limit) {
        snprintf(buf, cap, "recompute_granularity \"full\" (peak %.2f GiB)", (double)p / (1 << 30));
        return;
    }
    for (int s = c->zero_stage + 1; s <= 3; s++) {
        if (s == 3 && c->pp > 1) break;
        t = *c;
        t.zero_stage = s;
        p = max_peak(&t, device);
        if (p >= 0 && p <= limit) {
            snprintf(buf, cap, "zero_optimization.stage %d (peak %.2f GiB)", s, (double)p / (1 << 30));
            return;
        }
    }
    if (strcmp(device, "cpu") && !c->offload_optimizer) { /* on a GPU, the states can go to the host */
        t = *c;
        t.offload_optimizer = 1;
        if (t.zero_stage < 1) t.zero_stage = 1;
        p = max_peak(&t, device);
        if (p >= 0 && p <= limit) {
            snprintf(buf, cap, "zero_optimization.offload_optimizer.device \"cpu\" (ZeRO stage %d; peak %.2f GiB "
                               "on the GPU)", t.zero_stage, (double)p / (1 << 30));
            return;
        }
    }
    if (strcmp(device, "cpu") && !c->offload_param && c->pp == 1) { /* ZeRO-Infinity: parameters too */
        t = *c;
        t.offload_optimizer = t.offload_param = 1;
        t.zero_stage = 3;
        p = max_peak(&t, device);
        if (p >= 0 && p <= limit) {
            snprintf(buf, cap, "zero_optimization.stage 3 with offload_optimizer.device and offload_param.device "
                               "\"cpu\" (peak %.2f GiB on the GPU)", (double)p / (1 << 30));
            return;
        }
    }
    snprintf(buf, cap, "more ranks (ZeRO-3 over more data-parallel ranks, tensor or pipeline parallelism): "
                       "on these ranks even ZeRO-3 with full recomputation at micro-batch 1 does not fit");
}
