/* Llama inference with a KV cache, llm.c style: forward only, plain f32 buffers, no graph.
 *
 * Shapes (n tokens of one block, D hidden, Hq/Hkv heads, Dh head dim, F intermediate, V vocab,
 * S = max_seq, L layers):
 *   x, xb, xb2 [n, D]; q, att [n, Hq*Dh]; k, v [n, Hkv*Dh]; hb, hb2 [n, F]; cs [n, Dh] (cos of the
 *   block's positions in the first half, sin in the second); logits [V];
 *   KV cache kc, vc [L, Hkv, S, Dh]; attention scores [threads, S].
 * A prompt is processed in blocks of up to CHUNK tokens, so its projections are matrix-matrix
 * products (each weight is streamed once per block, not once per token); decoding is n = 1.
 * Weights are Hugging Face's [out, in] row-major matrices: y[n, out] = x[n, in] W^T. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "core/meminfo.h"
#include "dtrain/generate.h"
#include "dtrain/ops_attn.h"

#define CHUNK 128

typedef struct layer_w {
    const float *wq, *wk, *wv, *wo, *wg, *wu, *wd, *ln1, *ln2; /* dt_llama_tensor_name order */
} layer_w;

struct dt_llm {
    dt_llama_config c;
    int max_seq, pos, chunk, nthr; /* nthr: score rows allocated (threads at creation) */
    float *owned; /* weights read from a folder (NULL when borrowed from a graph) */
    size_t owned_bytes, cache_bytes, scratch_bytes;
    const float *emb, *norm, *head;
    layer_w *L;
    float *kc, *vc;  /* [L, Hkv, S, Dh] */
    float *inv_freq; /* [Dh/2] */
    float *x, *xb, *xb2, *q, *k, *v, *att, *hb, *hb2, *cs, *scores, *logits;
    void *work; /* sampling scratch, dt_sample_work_bytes(V) */
};

/* ---------------------------------------------------------------- kernels */

/* y[n, out] = x[n, in] W^T with W [out, in]. */
static void matmul(float *y, const float *x, const float *w, int n, int in, int out) {
    if (n == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, out, in, 1.0f, w, in, x, 1, 0.0f, y, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in, 0.0f,
                    y, out);
}

/* y[n, D] = x * rsqrt(mean(x^2) + eps) * w, in Hugging Face's order (normalise, then scale). */
static void rmsnorm(float *y, const float *x, const float *w, int n, int D, float eps) {
    const float invD = 1.0f / (float)D;
    for (int i = 0; i < n; i++) {
        const float *xr = x + (size_t)i * D;
        float *yr = y + (size_t)i * D, s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int d = 0; d < D; d++) s += xr[d] * xr[d];
        const float rs = 1.0f / sqrtf(s * invD + eps);
#pragma omp simd
        for (int d = 0; d < D; d++) yr[d] = w[d] * (xr[d] * rs);
    }
}

/* cs[n, Dh]: cos and sin of (p0 + i) * inv_freq, the f32 product transformers forms. */
static void rope_table(float *cs, const float *inv_freq, int n, int p0, int half) {
    for (int i = 0; i < n; i++) {
        float *c = cs + (size_t)i * 2 * half, *s = c + half;
        for (int j = 0; j < half; j++) {
            float a = (float)(p0 + i) * inv_freq[j];
            c[j] = cosf(a);
            s[j] = sinf(a);
        }
    }
}

/* x[n, H*Dh] rotated in place: halves [x1, x2] -> [x1 cos - x2 sin, x2 cos + x1 sin]. */
static void rope(float *x, const float *cs, int n, int H, int half) {
    for (int i = 0; i < n; i++) {
        const float *c = cs + (size_t)i * 2 * half, *s = c + half;
        for (int h = 0; h < H; h++) {
            float *x1 = x + ((size_t)i * H + h) * 2 * half, *x2 = x1 + half;
#pragma omp simd
            for (int j = 0; j < half; j++) {
                float a = x1[j], b = x2[j];
                x1[j] = a * c[j] - b * s[j];
                x2[j] = b * c[j] + a * s[j];
            }
        }
    }
}

/* att[n, Hq*Dh]: query i of the block (absolute position p0 + i) over cache positions
 * 0..p0+i of layer l; query head h reads kv head h / (Hq / Hkv). Scores in scores[thread, S]. */
static void attention(dt_llm *m, int l, int n, int p0) {
    const int Hq = m->c.num_attention_heads, Hkv = m->c.num_key_value_heads, Dh = m->c.head_dim;
    const int S = m->max_seq, group = Hq / Hkv;
    const float scale = 1.0f / sqrtf((float)Dh);
    /* the current thread setting, but no more threads than there are score rows */
    int nt = omp_get_max_threads() < m->nthr ? omp_get_max_threads() : m->nthr;
#pragma omp parallel num_threads(nt)
    {
        float *sc = m->scores + (size_t)omp_get_thread_num() * S;
#pragma omp for schedule(dynamic, 1)
        for (int r = 0; r < n * Hq; r++) {
            int i = r / Hq, h = r % Hq, len = p0 + i + 1;
            size_t base = ((size_t)l * Hkv + h / group) * S * Dh;
            const float *qv = m->q + ((size_t)i * Hq + h) * Dh, *K = m->kc + base,
                        *V = m->vc + base;
            float mx = -INFINITY, sum = 0.0f;
            for (int j = 0; j < len; j++) {
                const float *kj = K + (size_t)j * Dh;
                float s = 0.0f;
#pragma omp simd reduction(+ : s)
                for (int d = 0; d < Dh; d++) s += qv[d] * kj[d];
                sc[j] = s * scale;
                mx = fmaxf(mx, sc[j]);
            }
            for (int j = 0; j < len; j++) sum += (sc[j] = expf(sc[j] - mx));
            /* softmax first, then the weighted sum of values, as transformers' eager path */
            const float inv = 1.0f / sum;
            float *o = m->att + ((size_t)i * Hq + h) * Dh;
            memset(o, 0, (size_t)Dh * sizeof(float));
            for (int j = 0; j < len; j++) {
                const float w = sc[j] * inv, *vj = V + (size_t)j * Dh;
#pragma omp simd
                for (int d = 0; d < Dh; d++) o[d] += w * vj[d];
            }
        }
    }
}

static void add_into(float *x, const float *y, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

/* One block of n <= chunk tokens at positions pos..pos+n-1; logits of the last, if asked. */
static void forward_block(dt_llm *m, const int32_t *tok, int n, float *logits) {
    const dt_llama_config *c = &m->c;
    const int D = c->hidden_size, Hq = c->num_attention_heads, Hkv = c->num_key_value_heads;
    const int Dh = c->head_dim, F = c->intermediate_size, S = m->max_seq, p0 = m->pos;
    const int qd = Hq * Dh, kvd = Hkv * Dh;
    const float eps = c->rms_norm_eps;
    for (int i = 0; i < n; i++)
        memcpy(m->x + (size_t)i * D, m->emb + (size_t)tok[i] * D, (size_t)D * sizeof(float));
    rope_table(m->cs, m->inv_freq, n, p0, Dh / 2);
    for (int l = 0; l < c->num_hidden_layers; l++) {
        const layer_w *w = &m->L[l];
        rmsnorm(m->xb, m->x, w->ln1, n, D, eps);
        matmul(m->q, m->xb, w->wq, n, D, qd);
        matmul(m->k, m->xb, w->wk, n, D, kvd);
        matmul(m->v, m->xb, w->wv, n, D, kvd);
        rope(m->q, m->cs, n, Hq, Dh / 2);
        rope(m->k, m->cs, n, Hkv, Dh / 2);
        for (int i = 0; i < n; i++) /* append to the cache: [n, Hkv, Dh] -> [Hkv, S, Dh] */
            for (int h = 0; h < Hkv; h++) {
                size_t dst = (((size_t)l * Hkv + h) * S + p0 + i) * Dh,
                       src = ((size_t)i * Hkv + h) * Dh;
                memcpy(m->kc + dst, m->k + src, (size_t)Dh * sizeof(float));
                memcpy(m->vc + dst, m->v + src, (size_t)Dh * sizeof(float));
            }
        attention(m, l, n, p0);
        matmul(m->xb2, m->att, w->wo, n, qd, D);
        add_into(m->x, m->xb2, (size_t)n * D);
        rmsnorm(m->xb, m->x, w->ln2, n, D, eps);
        matmul(m->hb, m->xb, w->wg, n, D, F);
        matmul(m->hb2, m->xb, w->wu, n, D, F);
        size_t nf = (size_t)n * F;
#pragma omp parallel for simd schedule(static) if (nf > 65536)
        for (size_t i = 0; i < nf; i++) m->hb[i] = m->hb[i] / (1.0f + expf(-m->hb[i])) * m->hb2[i];
        matmul(m->xb2, m->hb, w->wd, n, F, D);
        add_into(m->x, m->xb2, (size_t)n * D);
    }
    m->pos += n;
    if (!logits) return;
    rmsnorm(m->xb, m->x + (size_t)(n - 1) * D, m->norm, 1, D, eps);
    matmul(logits, m->xb, m->head, 1, D, c->vocab_size);
}

/* ---------------------------------------------------------------- public */

dt_status dt_llm_logits(dt_llm *m, const int32_t *tokens, int n, float *logits) {
    if (!m || !tokens || n < 1)
        return dt_error_set(DT_ERR_INVALID, "llm: need a model and at least one token (n = %d)", n);
    if (n > m->max_seq - m->pos)
        return dt_error_set(DT_ERR_RANGE,
                            "llm: %d tokens at position %d exceed the KV cache of %d positions "
                            "(max_seq)",
                            n, m->pos, m->max_seq);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->c.vocab_size)
            return dt_error_set(DT_ERR_RANGE, "llm: token %d at index %d is outside [0, %d)",
                                (int)tokens[i], i, m->c.vocab_size);
    for (int i = 0; i < n; i += m->chunk) {
        int b = n - i < m->chunk ? n - i : m->chunk;
        forward_block(m, tokens + i, b, i + b == n ? logits : NULL);
    }
    return DT_OK;
}

const dt_llama_config *dt_llm_config(const dt_llm *m) {
    return &m->c;
}
int dt_llm_max_seq(const dt_llm *m) {
    return m->max_seq;
}
int dt_llm_pos(const dt_llm *m) {
    return m->pos;
}
void dt_llm_reset(dt_llm *m) {
    m->pos = 0;
}

void dt_llm_memory(const dt_llm *m, size_t *weights, size_t *kv_cache, size_t *scratch) {
    if (weights) *weights = m->owned_bytes;
    if (kv_cache) *kv_cache = m->cache_bytes;
    if (scratch) *scratch = m->scratch_bytes;
}

void dt_llm_free(dt_llm *m) {
    if (!m) return;
    free(m->owned), free(m->L), free(m->kc), free(m->inv_freq), free(m->x), free(m->work);
    free(m);
}

dt_status dt_llm_sample(dt_llm *m, const float *logits, const dt_sample_opts *o, uint64_t step,
                        int32_t *token) {
    if (!m) return dt_error_set(DT_ERR_INVALID, "llm sample: model is NULL");
    return dt_sample_token(logits, m->c.vocab_size, o, step, m->work, token);
}

dt_status dt_llm_generate(dt_llm *m, const int32_t *prompt, int n_prompt, int max_new,
                          const dt_sample_opts *o, int32_t *out, int *n_out) {
    if (!m || !prompt || !n_out || max_new < 0 || (max_new > 0 && !out))
        return dt_error_set(DT_ERR_INVALID,
                            "generate: model, prompt, out and n_out are required "
                            "(max_new %d)",
                            max_new);
    *n_out = 0;
    if (n_prompt < 1) return dt_error_set(DT_ERR_INVALID, "generate: the prompt is empty");
    if (n_prompt > m->max_seq)
        return dt_error_set(DT_ERR_RANGE,
                            "generate: prompt of %d tokens does not fit the KV cache of %d "
                            "positions (max_seq)",
                            n_prompt, m->max_seq);
    dt_llm_reset(m);
    dt_status st = dt_llm_logits(m, prompt, n_prompt, m->logits);
    for (int s = 0; s < max_new && st == DT_OK; s++) {
        int32_t tok;
        if ((st = dt_llm_sample(m, m->logits, o, (uint64_t)s, &tok)) != DT_OK) break;
        out[(*n_out)++] = tok;
        int eos = 0;
        for (int e = 0; e < m->c.n_eos && !(o && o->ignore_eos); e++)
            eos |= tok == m->c.eos_token_ids[e];
        if (eos || s + 1 == max_new || m->pos == m->max_seq) break;
        st = dt_llm_logits(m, &tok, 1, m->logits);
    }
    return st;
}

/* ---------------------------------------------------------------- construction */

/* The slot of tensor i (dt_llama_tensor_name order). */
static const float **slot(dt_llm *m, int i) {
    int nl = m->c.num_hidden_layers * 9;
    if (i == 0) return &m->emb;
    if (i == 1 + nl) return &m->norm;
    if (i == 2 + nl) return &m->head;
    layer_w *w = &m->L[(i - 1) / 9];
    const float **s[9] = {&w->wq, &w->wk, &w->wv, &w->wo, &w->wg, &w->wu, &w->wd, &w->ln1, &w->ln2};
    return s[(i - 1) % 9];
}

static void *zalloc(size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p) memset(p, 0, bytes); /* touch now, not inside the first token */
    return p;
}

/* A dt_llm without weights: the KV cache, scratch and the rope table. */
static dt_status llm_new(const dt_llama_config *c, int max_seq, dt_llm **out) {
    *out = NULL;
    if (c->vocab_size <= 0 || c->hidden_size <= 0 || c->intermediate_size <= 0 ||
        c->num_hidden_layers <= 0 || c->num_attention_heads <= 0 || c->num_key_value_heads <= 0 ||
        c->head_dim <= 0 || c->head_dim % 2 || c->num_attention_heads % c->num_key_value_heads)
        return dt_error_set(DT_ERR_INVALID, "llm: bad config (sizes positive, head_dim even, heads "
                                            "a multiple of kv heads)");
    if (max_seq <= 0) max_seq = c->max_position_embeddings;
    if (max_seq <= 0) return dt_error_set(DT_ERR_INVALID, "llm: max_seq %d", max_seq);
    /* the KV cache [2, L, Hkv, S, Dh] f32, overflow-checked against what the machine holds */
    int64_t kv_bytes, lim = dt_mem_machine_limit();
    const int64_t kv_f[] = {2,       c->num_hidden_layers, c->num_key_value_heads, c->head_dim,
                            max_seq, sizeof(float)};
    if (dt_mem_mul(&kv_bytes, 6, kv_f) || kv_bytes > lim)
        return dt_error_set(DT_ERR_RANGE,
                            "llm: a KV cache of %d positions x num_hidden_layers %d x "
                            "num_key_value_heads %d x head_dim %d needs more than the %.1f GiB "
                            "this machine holds: shorten the cache (--max-seq) or check "
                            "config.json",
                            max_seq, c->num_hidden_layers, c->num_key_value_heads, c->head_dim,
                            (double)lim / (1 << 30));
    dt_llm *m = calloc(1, sizeof *m);
    if (!m) return dt_error_set(DT_ERR_NOMEM, "llm: out of memory");
    m->c = *c;
    m->max_seq = max_seq;
    m->chunk = max_seq < CHUNK ? max_seq : CHUNK;
    m->nthr = omp_get_max_threads();
    const size_t C = (size_t)m->chunk, D = c->hidden_size, Dh = c->head_dim,
                 F = c->intermediate_size;
    const size_t qd = (size_t)c->num_attention_heads * Dh,
                 kvd = (size_t)c->num_key_value_heads * Dh;
    const size_t V = c->vocab_size;
    m->cache_bytes = (size_t)c->num_hidden_layers * kvd * (size_t)max_seq * sizeof(float);
    size_t nf =
        3 * C * D + 2 * C * qd + 2 * C * kvd + 2 * C * F + C * Dh + (size_t)m->nthr * max_seq + V;
    m->scratch_bytes = nf * sizeof(float) + dt_sample_work_bytes(c->vocab_size);
    m->L = calloc((size_t)c->num_hidden_layers, sizeof *m->L);
    m->kc = zalloc(2 * m->cache_bytes);
    m->inv_freq = malloc(Dh / 2 * sizeof(float));
    m->x = zalloc(nf * sizeof(float));
    m->work = zalloc(dt_sample_work_bytes(c->vocab_size));
    if (!m->L || !m->kc || !m->inv_freq || !m->x || !m->work) {
        dt_llm_free(m);
        return dt_error_set(DT_ERR_NOMEM,
                            "llm: out of memory for a KV cache of %d positions (%zu "
                            "bytes) and scratch",
                            max_seq, 2 * m->cache_bytes);
    }
    m->cache_bytes *= 2;
    m->vc = m->kc + m->cache_bytes / 2 / sizeof(float);
    float *p = m->x;
    m->xb = p += C * D, m->xb2 = p += C * D, m->q = p += C * D, m->att = p += C * qd;
    m->k = p += C * qd, m->v = p += C * kvd, m->hb = p += C * kvd, m->hb2 = p += C * F;
    m->cs = p += C * F, m->scores = p += C * Dh, m->logits = p += (size_t)m->nthr * max_seq;
    dt_status st =
        c->rope_type == 1
            ? dt_rope_llama3_inv_freq(m->inv_freq, c->head_dim, c->rope_theta, c->rope_factor,
                                      c->rope_low_freq_factor, c->rope_high_freq_factor,
                                      c->rope_original_max_position_embeddings)
            : dt_rope_default_inv_freq(m->inv_freq, c->head_dim, c->rope_theta);
    if (st != DT_OK) {
        dt_llm_free(m);
        return st;
    }
    *out = m;
    return DT_OK;
}

dt_status dt_llm_from_graph(dt_graph *g, const dt_llama_config *c, int max_seq, dt_llm **out) {
    if (!g || !c || !out)
        return dt_error_set(DT_ERR_INVALID, "llm: graph, config and out are required");
    dt_llm *m;
    dt_status st = llm_new(c, max_seq, &m);
    if (st != DT_OK) return st;
    for (int i = 0; i < dt_llama_tensor_count(c); i++) {
        char name[128];
        int64_t shape[2];
        int nd = dt_llama_tensor_name(c, i, name, sizeof name, shape);
        int id = dt_graph_find(g, name);
        const dt_tensor *v = id >= 0 ? dt_graph_value(g, id) : NULL;
        dt_tensor want;
        dt_tensor_init(&want, NULL, DT_F32, nd, shape);
        if (!v || !v->data || v->dtype != DT_F32 || !dt_tensor_is_contiguous(v) ||
            !dt_tensor_same_shape(v, &want)) {
            char s[96];
            dt_llm_free(m);
            return dt_error_set(DT_ERR_STATE,
                                "llm: the graph has no compiled contiguous f32 %s "
                                "tensor '%s'",
                                dt_shape_str(s, sizeof s, nd, shape), name);
        }
        *slot(m, i) = v->data;
    }
    if (c->tie_word_embeddings) m->head = m->emb;
    *out = m;
    return DT_OK;
}

/* in llama_infer_load.c */
dt_status dt_llm_read_weights_(const char *dir, const dt_llama_config *c, float *dst);

dt_status dt_llm_load(const char *hf_dir, int max_seq, dt_llm **out) {
    if (!hf_dir || !out)
        return dt_error_set(DT_ERR_INVALID, "llm load: folder and out are required");
    *out = NULL;
    dt_llama_config c;
    dt_status st = dt_llama_config_load(hf_dir, &c);
    if (st != DT_OK) return st;
    /* the headers before any size from config.json is allocated (a config that claims a 2^20
     * vocabulary over a small file would otherwise ask for terabytes first) */
    if ((st = dt_llama_weights_check(hf_dir, &c)) != DT_OK) return st;
    dt_llm *m;
    if ((st = llm_new(&c, max_seq, &m)) != DT_OK) return st;
    m->owned_bytes = (size_t)dt_llama_param_count(&c) * sizeof(float);
    m->owned = aligned_alloc(64, (m->owned_bytes + 63) / 64 * 64);
    if (!m->owned) {
        dt_llm_free(m);
        return dt_error_set(DT_ERR_NOMEM, "llm load %s: out of memory for %zu bytes of weights",
                            hf_dir, m->owned_bytes);
    }
    if ((st = dt_llm_read_weights_(hf_dir, &c, m->owned)) != DT_OK) {
        dt_llm_free(m);
        return st;
    }
    float *p = m->owned;
    for (int i = 0; i < dt_llama_tensor_count(&c); i++) {
        char name[128];
        int64_t shape[2];
        int nd = dt_llama_tensor_name(&c, i, name, sizeof name, shape);
        *slot(m, i) = p;
        p += shape[0] * (nd == 2 ? shape[1] : 1);
    }
    if (c.tie_word_embeddings) m->head = m->emb;
    *out = m;
    return DT_OK;
}
