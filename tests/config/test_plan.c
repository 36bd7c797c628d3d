/* The memory plan (`dtrain plan`):
 *  - calibration: for small Llama and ResNet configs, with and without recompute, the plan's
 *    activations + parameters + gradients + AdamW state are within 15% of the real graph's
 *    figures (dt_graph_memory after dt_graph_compile: the planned arena a step runs in, plus
 *    param/grad bytes and 2 x params for AdamW), and one real step runs in that memory;
 *  - Llama-3.1-8B (examples/llama3.1-8b/config.json): the parameter count is exactly
 *    8,030,261,248, and the LoRA example and full-finetuning variants are within 10% of this
 *    test's own arithmetic (written out below, independent of src/config);
 *  - ResNet-152 and ResNet-18/Fashion-MNIST examples: exact parameter counts (torchvision's
 *    published counts adjusted for stem and classes) and a real-graph calibration of ResNet-152;
 *  - ZeRO sharding arithmetic, dt_plan_reshard; errors (missing config.json, no image size).
 * argv[1]: the source tree (for examples/). */
#include <dnnl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "dtrain/config.h"
#include "dtrain/dtrain.h"
#include "dtrain/models.h"
#include "harness.h"

static char tmpdir[256];
static const char *src_dir = ".";

static const char *tmp_path(const char *name) {
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
    return p[k];
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!CHECK(f != NULL, "cannot write %s", path)) return;
    fputs(text, f);
    fclose(f);
}

static dt_config *config(const char *yaml_path, int n, char **over) {
    dt_config *c = NULL;
    dt_status st = dt_config_from_args(yaml_path, n, over, &c);
    CHECK(st == DT_OK, "config %s: %s", yaml_path ? yaml_path : "(defaults)", dt_last_error());
    return c;
}

static dt_plan plan(const dt_config *c, int world) {
    dt_plan p;
    memset(&p, 0, sizeof p);
    CHECK_OK(dt_plan_compute(c, world, &p));
    return p;
}

static double rel(double a, double b) {
    return fabs(a - b) / b;
}

/* plan figures that the real graph has: activations + params + grads + AdamW state. */
static int64_t plan_core(const dt_plan *p) {
    return p->activation_bytes + p->param_bytes + p->grad_bytes + p->optim_bytes;
}

static void compare(const char *what, const dt_plan *p, dt_graph *g) {
    dt_graph_mem m;
    dt_graph_memory(g, &m);
    int64_t real = (int64_t)(m.arena_bytes + m.param_bytes + m.grad_bytes + 2 * m.param_bytes);
    double r_tot = rel((double)plan_core(p), (double)real);
    double r_act = rel((double)p->activation_bytes, (double)m.arena_bytes);
    printf("%-36s real: arena %.2f MB, params %.2f MB, total %.2f MB; plan: activations %.2f MB,"
           " total %.2f MB (%+.1f%%)\n",
           what, m.arena_bytes / 1e6, m.param_bytes / 1e6, real / 1e6, p->activation_bytes / 1e6,
           plan_core(p) / 1e6, 100.0 * (plan_core(p) - real) / real);
    CHECK(r_tot <= 0.15, "%s: plan total %lld vs real %lld: %.1f%% off (limit 15%%)", what,
          (long long)plan_core(p), (long long)real, 100 * r_tot);
    /* A looser guard on activations alone, so a drift there is caught even where the
     * parameters dominate the total. */
    CHECK(r_act <= 0.25, "%s: plan activations %lld vs arena %zu: %.1f%% off (limit 25%%)", what,
          (long long)p->activation_bytes, m.arena_bytes, 100 * r_act);
    CHECK((int64_t)m.param_bytes == p->param_bytes && (int64_t)m.grad_bytes == p->grad_bytes,
          "%s: param/grad bytes plan %lld/%lld real %zu/%zu", what, (long long)p->param_bytes,
          (long long)p->grad_bytes, m.param_bytes, m.grad_bytes);
    CHECK(p->optim_bytes == 2 * p->param_bytes, "%s: AdamW state is 2 x params", what);
}

/* ---------------------------------------------------------------- calibration: Llama */

static const char *small_llama_json =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 64,"
    " \"intermediate_size\": 176, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
    " \"num_key_value_heads\": 2, \"vocab_size\": 512, \"max_position_embeddings\": 256,"
    " \"rms_norm_eps\": 1e-5, \"rope_theta\": 500000.0, \"tie_word_embeddings\": false,"
    " \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0,"
    " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64},"
    " \"bos_token_id\": 1, \"eos_token_id\": 2, \"hidden_act\": \"silu\"}";

static void calib_llama(int recompute) {
    const int64_t B = 4, T = 64;
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "model:\n  kind: llama\n  hf_path: %s\n  recompute: %s\n"
             "data:\n  batch: %lld\n  seq_len: %lld\noptim:\n  name: adamw\n",
             tmpdir, recompute ? "true" : "false", (long long)B, (long long)T);
    write_text(tmp_path("llama.yaml"), yaml);
    dt_config *c = config(tmp_path("llama.yaml"), 0, NULL);
    if (!c) return;
    dt_plan p = plan(c, 1);
    dt_config_free(c);
    dt_llama_config lc;
    CHECK_OK(dt_llama_config_load(tmpdir, &lc));
    lc.recompute = recompute;
    CHECK(p.params_total == dt_llama_param_count(&lc), "llama params");
    dt_graph *g = dt_graph_init();
    int ids = dt_graph_input(g, "ids", DT_I64, 2, (int64_t[]){B, T}, 0);
    int tg = dt_graph_input(g, "targets", DT_I64, 1, (int64_t[]){B * T}, 0);
    int logits = dt_llama_build(g, &lc, ids);
    int flat = dt_reshape(g, logits, 2, (int64_t[]){B * T, lc.vocab_size});
    int loss = dt_cross_entropy(g, flat, tg, 0.0f, -100);
    CHECK(loss >= 0, "build llama: %s", dt_last_error());
    CHECK_OK(dt_graph_keep(g, logits)); /* as the trainer does: it reads them after forward */
    CHECK_OK(dt_graph_compile(g, loss, NULL));
    compare(recompute ? "llama (small) + recompute" : "llama (small)", &p, g);
    /* One real step runs in that memory. */
    CHECK_OK(dt_llama_init(g, 1));
    int64_t *id = dt_graph_value(g, ids)->data, *t = dt_graph_value(g, tg)->data;
    for (int64_t i = 0; i < B * T; i++)
        id[i] = (i * 7) % lc.vocab_size, t[i] = (i * 7 + 7) % lc.vocab_size;
    CHECK_OK(dt_graph_forward(g, 1));
    CHECK_OK(dt_graph_backward(g));
    CHECK(isfinite(*(float *)dt_graph_value(g, loss)->data), "llama step loss finite");
    dt_graph_free(g);
}

/* train.precision: bf16 is planned as it runs: the arena of the graph compiled with
 * dt_graph_opts.bf16_gemm (the GEMM ops' bf16-rounded operand copies in their scratch), larger
 * than the fp32 plan's, and named in the run description. */
static void test_bf16(void) {
    const int64_t B = 4, T = 64;
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "model:\n  kind: llama\n  hf_path: %s\ndata:\n  batch: %lld\n  seq_len: %lld\n"
             "optim:\n  name: adamw\n",
             tmpdir, (long long)B, (long long)T);
    write_text(tmp_path("llama.yaml"), yaml);
    dt_config *c32 = config(tmp_path("llama.yaml"), 0, NULL);
    dt_config *c16 = config(tmp_path("llama.yaml"), 1, (char *[]){"train.precision=bf16"});
    if (!c32 || !c16) return;
    dt_plan p32 = plan(c32, 1), p16 = plan(c16, 1);
    dt_config_free(c32), dt_config_free(c16);
    dt_llama_config lc;
    CHECK_OK(dt_llama_config_load(tmpdir, &lc));
    dt_graph *g = dt_graph_init();
    int ids = dt_graph_input(g, "ids", DT_I32, 2, (int64_t[]){B, T}, 0);
    int tg = dt_graph_input(g, "targets", DT_I32, 1, (int64_t[]){B * T}, 0);
    int logits = dt_llama_build(g, &lc, ids);
    int flat = dt_reshape(g, logits, 2, (int64_t[]){B * T, lc.vocab_size});
    int loss = dt_cross_entropy(g, flat, tg, 0.0f, -100);
    CHECK_OK(dt_graph_keep(g, logits));
    /* a real bf16 compile on any CPU, in the mode the plan sized: this CPU's native kernels
     * where it has them (their bf16 copies are smaller), else the emulation */
    int emulate = dt_bf16_gemm_mode() == DT_BF16_NONE;
    if (emulate) setenv("DT_CPU_BF16", "emulate", 1);
    CHECK_OK(dt_graph_compile(g, loss, &(dt_graph_opts){.bf16_gemm = 1}));
    if (emulate) unsetenv("DT_CPU_BF16");
    dt_graph_mem m;
    dt_graph_memory(g, &m);
    dt_graph_free(g);
    printf("bf16 plan: activations %.3f MB (fp32 plan %.3f MB), real bf16 arena %.3f MB\n",
           p16.activation_bytes / 1e6, p32.activation_bytes / 1e6, m.arena_bytes / 1e6);
    CHECK(p16.activation_bytes == (int64_t)m.arena_bytes,
          "bf16 plan activations %lld == the bf16 graph's arena %zu",
          (long long)p16.activation_bytes, m.arena_bytes);
    CHECK(p16.activation_bytes > p32.activation_bytes, "bf16 plan %lld > fp32 plan %lld",
          (long long)p16.activation_bytes, (long long)p32.activation_bytes);
    CHECK(strstr(p16.run_desc, "bf16") && !strstr(p32.run_desc, "bf16"),
          "run descriptions name the precision: '%s' / '%s'", p16.run_desc, p32.run_desc);
}

/* ---------------------------------------------------------------- calibration: ResNet */

static void calib_resnet(const char *what, const char *yaml_path, int n, char **over) {
    dt_config *c = config(yaml_path, n, over);
    if (!c) return;
    const dt_config_values *v = dt_config_get_values(c);
    dt_plan p = plan(c, 1);
    dt_resnet_config rc = {(int)v->model.depth,       (int)v->model.in_channels,
                           (int)v->model.num_classes, v->model.small_stem,
                           (int)v->model.width,       v->model.recompute};
    int64_t B = v->data.batch, S = v->data.image_size;
    dt_config_free(c);
    CHECK(p.params_total == dt_resnet_param_count(&rc), "%s: params", what);
    dt_graph *g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 4, (int64_t[]){B, rc.in_channels, S, S}, 0);
    int y = dt_graph_input(g, "y", DT_I64, 1, (int64_t[]){B}, 0);
    int logits = dt_resnet_build(g, &rc, x);
    int loss = dt_cross_entropy(g, logits, y, 0.0f, -100);
    CHECK(loss >= 0, "build resnet: %s", dt_last_error());
    CHECK_OK(dt_graph_keep(g, logits));
    CHECK_OK(dt_graph_compile(g, loss, NULL));
    dt_graph_mem m;
    dt_graph_memory(g, &m);
    CHECK((int64_t)m.state_bytes == p.state_bytes, "%s: batchnorm state plan %lld real %zu", what,
          (long long)p.state_bytes, m.state_bytes);
    compare(what, &p, g);
    dt_graph_free(g);
}

static void test_calibration(void) {
    write_text(tmp_path("config.json"), small_llama_json);
    calib_llama(0);
    calib_llama(1);
    const char *r18 = tmp_path("r18.yaml");
    write_text(r18, "model:\n  depth: 18\n  small_stem: true\n  in_channels: 1\n"
                    "  num_classes: 10\n  width: 16\ndata:\n  batch: 8\n  image_size: 28\n"
                    "optim:\n  name: adamw\n");
    calib_resnet("resnet-18 (width 16, 28px)", r18, 0, NULL);
    char *rc[] = {"model.recompute=true"};
    calib_resnet("resnet-18 (width 16, 28px) + recompute", r18, 1, rc);
    const char *r50 = tmp_path("r50.yaml");
    write_text(r50, "model:\n  depth: 50\n  width: 16\n  num_classes: 10\n"
                    "data:\n  batch: 2\n  image_size: 64\noptim:\n  name: adamw\n");
    calib_resnet("resnet-50 (width 16, 64px)", r50, 0, NULL);
    calib_resnet("resnet-50 (width 16, 64px) + recompute", r50, 1, rc);
}

/* ---------------------------------------------------------------- Llama-3.1-8B */

/* Llama-3.1-8B's shape, written out here (not read through the library). */
enum { L8 = 32, D8 = 4096, F8 = 14336, H8 = 32, KV8 = 8, DH8 = 128, V8 = 128256 };

static int64_t llama8b_params(void) {
    const int64_t D = D8, F = F8, Q = (int64_t)H8 * DH8, K = (int64_t)KV8 * DH8, V = V8;
    /* per layer: 2 RMSNorm weights, q, k, v, o, gate, up, down */
    int64_t layer = 2 * D + D * Q + D * K + D * K + Q * D + 3 * D * F;
    return V * D /* embed_tokens */ + L8 * layer + D /* final norm */ + V * D /* lm_head */;
}

static void check_within(const char *what, double plan_v, double mine, double tol) {
    double r = rel(plan_v, mine);
    printf("  %-40s plan %10.3f GiB  test %10.3f GiB  (%+.2f%%)\n", what, plan_v / (1 << 30),
           mine / (1 << 30), 100 * (plan_v - mine) / mine);
    CHECK(r <= tol, "%s: plan %.0f vs %.0f (%.1f%% > %.0f%%)", what, plan_v, mine, 100 * r,
          100 * tol);
}

static void test_llama8b(void) {
    char yaml[1024], json[1024];
    snprintf(yaml, sizeof yaml, "%s/examples/llama3.1-8b-lora.yaml", src_dir);
    snprintf(json, sizeof json, "%s/examples/llama3.1-8b", src_dir);
    dt_llama_config lc;
    CHECK_OK(dt_llama_config_load(json, &lc));
    CHECK(lc.hidden_size == D8 && lc.intermediate_size == F8 && lc.num_hidden_layers == L8 &&
              lc.num_attention_heads == H8 && lc.num_key_value_heads == KV8 && lc.head_dim == DH8 &&
              lc.vocab_size == V8,
          "8B shape");
    CHECK(lc.rope_type == 1 && lc.rope_factor == 8.0f && lc.rope_low_freq_factor == 1.0f &&
              lc.rope_high_freq_factor == 4.0f &&
              lc.rope_original_max_position_embeddings == 8192 && lc.rope_theta == 500000.0f,
          "8B llama3 rope scaling");
    CHECK(lc.max_position_embeddings == 131072 && fabsf(lc.rms_norm_eps - 1e-5f) < 1e-12f &&
              !lc.tie_word_embeddings && lc.bos_token_id == 128000 && lc.n_eos == 3 &&
              lc.eos_token_ids[0] == 128001 && lc.eos_token_ids[1] == 128008 &&
              lc.eos_token_ids[2] == 128009,
          "8B positions, eps, untied, bos/eos");
    CHECK(llama8b_params() == 8030261248LL, "test arithmetic: %lld", (long long)llama8b_params());

    /* The LoRA example, 16 workers (hf_path made absolute: tests run in the build folder). */
    char hf[1100];
    snprintf(hf, sizeof hf, "model.hf_path=%s", json);
    char *over[] = {hf};
    dt_config *c = config(yaml, 1, over);
    if (!c) return;
    const dt_config_values *v = dt_config_get_values(c);
    CHECK(v->lora.enabled && v->model.recompute && v->train.precision == DT_CFG_PREC_BF16 &&
              v->optim.name == DT_CFG_OPTIM_ADAMW && v->dist.zero_stage == 0,
          "example: LoRA, recompute, bf16, AdamW, ZeRO 0");
    const int64_t N = v->data.batch * v->data.seq_len, r = v->lora.rank;
    dt_plan p = plan(c, 16);
    /* lora.share_base (default) with a pretrained base: a host's workers hold one base */
    CHECK(p.base_shared && p.frozen_bytes > 0 &&
              dt_plan_host_bytes(&p, 2) == 2 * p.total_bytes - p.frozen_bytes &&
              dt_plan_host_bytes(&p, 1) == p.total_bytes,
          "shared base: 2 workers of a host need %lld, 2 x %lld - %lld",
          (long long)dt_plan_host_bytes(&p, 2), (long long)p.total_bytes,
          (long long)p.frozen_bytes);
    CHECK_OK(dt_config_set(c, "lora.share_base", "false"));
    dt_plan q = plan(c, 16);
    CHECK(!q.base_shared && dt_plan_host_bytes(&q, 2) == 2 * q.total_bytes &&
              q.total_bytes == p.total_bytes,
          "lora.share_base=false: each worker holds its base");
    CHECK_OK(dt_config_set(c, "model.init", "random"));
    q = plan(c, 16);
    CHECK(!q.base_shared, "a random base is not mapped from files: not shared");
    /* lora.shard_base=auto (the default) shards the base under ZeRO-3 only; an explicit false
     * keeps it whole, true shards it at any stage; auto with dist.batch_shares=auto does not
     * (the trainer decides by the same dt_config_shard_base) */
    CHECK(v->lora.shard_base == DT_CFG_SHARD_AUTO && !p.base_sharded,
          "default auto, ZeRO 0: whole");
    struct {
        const char *zero, *shard, *shares;
        int sharded;
    } sb[] = {{"3", "auto", "equal", 1},
              {"2", "auto", "equal", 0},
              {"3", "false", "equal", 0},
              {"0", "true", "equal", 1},
              {"3", "auto", "auto", 0}};
    for (size_t i = 0; i < sizeof sb / sizeof sb[0]; i++) {
        CHECK_OK(dt_config_set(c, "dist.zero_stage", sb[i].zero));
        CHECK_OK(dt_config_set(c, "lora.shard_base", sb[i].shard));
        CHECK_OK(dt_config_set(c, "dist.batch_shares", sb[i].shares));
        q = p;
        CHECK_OK(dt_plan_reshard(c, 16, &q));
        CHECK(q.base_sharded == sb[i].sharded && dt_config_shard_base(v) == sb[i].sharded &&
                  (q.frozen_bytes < p.frozen_bytes) == sb[i].sharded,
              "zero %s, lora.shard_base=%s, batch_shares %s: sharded %d (frozen %lld of %lld)",
              sb[i].zero, sb[i].shard, sb[i].shares, q.base_sharded, (long long)q.frozen_bytes,
              (long long)p.frozen_bytes);
    }
    dt_config_free(c);
    printf("Llama-3.1-8B LoRA example (-n 16):\n");
    dt_plan_print(stdout, &p, 0);
    CHECK(p.params_frozen == 8030261248LL, "8B base parameters exactly 8,030,261,248: %lld",
          (long long)p.params_frozen);
    /* LoRA on q, k, v, o: rank * (in + out) each, per layer. */
    const int64_t D = D8, Q = H8 * DH8, K = KV8 * DH8, V = V8;
    int64_t lora = L8 * r * ((D + Q) + (D + K) + (D + K) + (Q + D));
    CHECK(p.params_trainable == lora, "LoRA trainable %lld, test %lld",
          (long long)p.params_trainable, (long long)lora);
    CHECK(p.params_total == 8030261248LL + lora, "total params");
    /* Activations with recompute, frozen bf16 head: the peak is the lm_head's backward: the
     * 2L + 1 segment boundaries [N, D] f32 kept for recomputation (each layer's input and its
     * residual stream after attention, and the last layer's output), the logits [N, V] (kept: the
     * trainer reads them) and their gradient, f32, and the bf16 copy of that gradient the
     * bf16 GEMM computing dx reads (its scratch, [N, V] bf16). */
    /* Without bf16 matmul kernels (an AVX2-only CPU: oneDNN's ISA lacks avx512_core_bf16) the
     * frozen linear runs f32 GEMMs on bf16-rounded blocks (src/ops/linear_bf16.c): no [N, V]
     * bf16 copy. */
    const int bf16_kernels = (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core_bf16) ==
                             dnnl_cpu_isa_avx512_core_bf16;
    double act = (double)(2 * L8 + 1) * N * D * 4 + 2.0 * N * V * 4 + (bf16_kernels ? 2.0 * N * V : 0);
    double mine[] = {4.0 * lora, 4.0 * lora, 8.0 * lora, 2.0 * 8030261248LL, act};
    double theirs[] = {(double)p.param_bytes, (double)p.grad_bytes, (double)p.optim_bytes,
                       (double)p.frozen_bytes, (double)p.activation_bytes};
    const char *names[] = {"trainable parameters", "gradients", "AdamW state", "frozen base (bf16)",
                           "activations"};
    double tot = 0;
    for (int i = 0; i < 5; i++) {
        check_within(names[i], theirs[i], mine[i], 0.10);
        tot += mine[i];
    }
    check_within("total", (double)p.total_bytes, tot, 0.10);

    /* Full finetuning, fp32, ZeRO-3 over 16 workers, with recompute. */
    char *full[] = {hf, "lora.enabled=false", "train.precision=fp32", "dist.zero_stage=3"};
    c = config(yaml, 4, full);
    if (!c) return;
    p = plan(c, 16);
    dt_config_free(c);
    printf("Llama-3.1-8B full finetuning, ZeRO-3, -n 16:\n");
    dt_plan_print(stdout, &p, 0);
    int64_t P = llama8b_params(), shard = (P + 15) / 16;
    CHECK(p.params_total == P && p.params_trainable == P && p.params_frozen == 0, "full params");
    /* Recompute: the 2L + 1 boundaries, the final norm's output (the trainable lm_head's
     * input), logits and their gradient. */
    act = (double)(2 * L8 + 1) * N * D * 4 + (double)N * D * 4 + 2.0 * N * V * 4;
    double mine2[] = {4.0 * shard, 4.0 * shard, 8.0 * shard, act};
    double theirs2[] = {(double)p.param_bytes, (double)p.grad_bytes, (double)p.optim_bytes,
                        (double)p.activation_bytes};
    const char *names2[] = {"parameters (ZeRO-3 shard)", "gradients (shard)", "AdamW state (shard)",
                            "activations"};
    tot = 0;
    for (int i = 0; i < 4; i++) {
        check_within(names2[i], theirs2[i], mine2[i], 0.10);
        tot += mine2[i];
    }
    check_within("total", (double)p.total_bytes, tot, 0.10);
    CHECK(p.param_bytes == 4 * shard && p.optim_bytes == 8 * shard, "ZeRO-3 shards exactly");

    /* Full finetuning without recompute: every layer keeps, per token (f32): its input x, the
     * attention norm's output and rstd, q and k after rope, v, the attention output and lse
     * (one per head), the o_proj input, the residual x + attn, the MLP norm's output and rstd,
     * gate, silu(gate), up and their product: 4D + 3Q + 2K + 4F + H + 2 floats. Then the final
     * norm's input and output, the logits, and at the peak the logits' gradient. */
    char *norc[] = {hf, "lora.enabled=false", "train.precision=fp32", "model.recompute=false"};
    c = config(yaml, 4, norc);
    if (!c) return;
    p = plan(c, 1);
    dt_config_free(c);
    double per_layer = 4.0 * D + 3.0 * Q + 2.0 * K + 4.0 * F8 + H8 + 2;
    act = 4.0 * N * (L8 * per_layer + 2.0 * D + 1 + 2.0 * V);
    check_within("activations, no recompute", (double)p.activation_bytes, act, 0.10);
    check_within("kept for backward, no recompute", (double)p.saved_bytes,
                 4.0 * N * (L8 * per_layer + 2.0 * D + 1 + V), 0.10);
}

/* ---------------------------------------------------------------- ResNet examples */

static void test_resnet_examples(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/examples/resnet152.yaml", src_dir);
    dt_config *c = config(path, 0, NULL);
    if (c) {
        dt_plan p = plan(c, 1);
        printf("ResNet-152 example:\n");
        dt_plan_print(stdout, &p, 0);
        /* torchvision resnet152: 60,192,808 parameters (7x7x3 stem, 1000 classes); the example
         * has the 3x3x3 small stem and 10 classes. */
        int64_t want =
            60192808LL - 7 * 7 * 3 * 64 + 3 * 3 * 3 * 64 - (2048 * 1000 + 1000) + (2048 * 10 + 10);
        CHECK(p.params_total == want, "resnet152 params %lld, want %lld", (long long)p.params_total,
              (long long)want);
        /* SGD with momentum: one f32 buffer of optimizer state. */
        CHECK(p.optim_states == 1 && p.optim_bytes == 4 * want, "SGD momentum state");
        CHECK(p.activation_bytes > p.saved_bytes && p.saved_bytes > 0, "activations");
        /* Independent arithmetic for what is kept: every conv output and every relu output,
         * f32, batch 32, 32x32 small stem. Stage s: planes 64 << s at side 32 >> s; a stage's
         * first block reads the previous side (its 1x1 conv1 runs there, the stride sits on the
         * 3x3 conv2) and has a downsample conv. Per block: conv1 + relu, conv2 + relu, conv3
         * (4 x planes), [downsample], the block's relu. */
        const int blocks[4] = {3, 8, 36, 3};
        double per_img = 2.0 * 64 * 32 * 32; /* stem conv + relu */
        for (int s = 0; s < 4; s++) {
            double planes = 64 << s, side = 32 >> s, prev = s ? 2 * side : side;
            for (int i = 0; i < blocks[s]; i++) {
                double s1 = i == 0 ? prev : side;
                per_img += 2 * planes * s1 * s1 + 2 * planes * side * side +
                           4 * planes * side * side * (i == 0 ? 3 : 2);
            }
        }
        double kept_b = per_img * 32 * 4;
        check_within("resnet152 kept for backward", (double)p.saved_bytes, kept_b, 0.10);
        dt_config_free(c);
    }
    /* Real-graph calibration of the same network at batch 2. */
    char *b2[] = {"data.batch=2", "optim.name=adamw", "optim.nesterov=false"};
    calib_resnet("resnet-152 example (batch 2)", path, 3, b2);

    snprintf(path, sizeof path, "%s/examples/resnet18-fmnist.yaml", src_dir);
    c = config(path, 0, NULL);
    if (c) {
        const dt_config_values *v = dt_config_get_values(c);
        CHECK(v->model.depth == 18 && v->model.small_stem && v->model.in_channels == 1 &&
                  v->model.num_classes == 10,
              "resnet18-fmnist: small stem, 1 channel, 10 classes");
        dt_plan p = plan(c, 1);
        /* torchvision resnet18: 11,689,512 (7x7x3 stem, 1000 classes). */
        int64_t want =
            11689512LL - 7 * 7 * 3 * 64 + 3 * 3 * 1 * 64 - (512 * 1000 + 1000) + (512 * 10 + 10);
        CHECK(p.params_total == want, "resnet18-fmnist params %lld, want %lld",
              (long long)p.params_total, (long long)want);
        dt_config_free(c);
    }
}

/* ---------------------------------------------------------------- ZeRO, errors */

static void test_zero_and_errors(void) {
    const char *y = tmp_path("z.yaml");
    write_text(y, "model:\n  depth: 18\n  small_stem: true\n  num_classes: 10\n"
                  "data:\n  image_size: 32\n  batch: 4\noptim:\n  name: adamw\n");
    int64_t P = 0;
    for (int z = 0; z <= 3; z++) {
        char zs[32];
        snprintf(zs, sizeof zs, "dist.zero_stage=%d", z);
        char *over[] = {zs};
        dt_config *c = config(y, 1, over);
        if (!c) return;
        dt_plan p = plan(c, 3);
        dt_config_free(c);
        P = p.params_trainable;
        int64_t sh = (P + 2) / 3;
        CHECK(p.optim_bytes == 8 * (z >= 1 ? sh : P), "zero %d: optimizer state", z);
        CHECK(p.grad_bytes == 4 * (z >= 2 ? sh : P), "zero %d: gradients", z);
        CHECK(p.param_bytes == 4 * (z >= 3 ? sh : P), "zero %d: parameters", z);
        CHECK(p.param_bytes_1 == 4 * P && p.optim_bytes_1 == 8 * P, "zero %d: unsharded", z);
        CHECK(p.total_bytes == p.param_bytes + p.grad_bytes + p.optim_bytes + p.frozen_bytes +
                                   p.state_bytes + p.activation_bytes,
              "zero %d: total is the sum", z);
    }
    /* Resharding a plan equals planning again; a plan of another batch is refused. */
    {
        char *z0[] = {"dist.zero_stage=0"}, *z3[] = {"dist.zero_stage=3"},
             *b8[] = {"dist.zero_stage=3", "data.batch=8"};
        dt_config *c0 = config(y, 1, z0), *c3 = config(y, 1, z3), *c8 = config(y, 2, b8);
        if (c0 && c3 && c8) {
            dt_plan p = plan(c0, 1), want = plan(c3, 5);
            CHECK_OK(dt_plan_reshard(c3, 5, &p));
            CHECK(p.world == 5 && p.zero_stage == 3 && p.param_bytes == want.param_bytes &&
                      p.grad_bytes == want.grad_bytes && p.optim_bytes == want.optim_bytes &&
                      p.activation_bytes == want.activation_bytes &&
                      p.total_bytes == want.total_bytes && !strcmp(p.run_desc, want.run_desc),
                  "reshard to ZeRO-3 x 5 = plan of it: %s", p.run_desc);
            CHECK(dt_plan_reshard(c8, 5, &p) == DT_ERR_INVALID &&
                      strstr(dt_last_error(), "data.batch"),
                  "reshard across batches refused: %s", dt_last_error());
        }
        dt_config_free(c0), dt_config_free(c3), dt_config_free(c8);
    }
    /* SGD without momentum keeps no state. */
    char *sgd[] = {"optim.name=sgd"};
    dt_config *c = config(y, 1, sgd);
    if (c) {
        dt_plan p = plan(c, 1);
        CHECK(p.optim_states == 0 && p.optim_bytes == 0, "plain SGD: no optimizer state");
        dt_config_free(c);
    }
    /* JSON output carries the figures. */
    c = config(y, 0, NULL);
    if (c) {
        dt_plan p = plan(c, 2);
        FILE *f = fopen(tmp_path("plan.json"), "w+");
        dt_plan_print(f, &p, 1);
        rewind(f);
        char buf[4096] = "";
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = '\0';
        fclose(f);
        char want[64];
        snprintf(want, sizeof want, "\"total_bytes\": %lld", (long long)p.total_bytes);
        CHECK(strstr(buf, want) && strstr(buf, "\"world\": 2") && buf[0] == '{', "json output: %s",
              buf);
        /* Bad world size. */
        CHECK(dt_plan_compute(c, 0, &p) != DT_OK && strstr(dt_last_error(), "workers"),
              "world 0 is an error");
        dt_config_free(c);
    }
    /* ResNet without an image size. */
    c = config(NULL, 0, NULL);
    if (c) {
        dt_plan p;
        CHECK(dt_plan_compute(c, 1, &p) != DT_OK && strstr(dt_last_error(), "data.image_size"),
              "no image size: %s", dt_last_error());
        dt_config_free(c);
    }
    /* Sizes whose byte counts would overflow int64: the 8B model at the largest batch and
     * sequence the schema allows (2^42 tokens) is refused by name, not planned in wrapped
     * arithmetic; so is a ResNet at the largest batch and image side. */
    char yaml8b[1024], hf8b[1100];
    snprintf(yaml8b, sizeof yaml8b, "%s/examples/llama3.1-8b-lora.yaml", src_dir);
    snprintf(hf8b, sizeof hf8b, "model.hf_path=%s/examples/llama3.1-8b", src_dir);
    char *huge[] = {hf8b, "data.batch=1048576", "data.seq_len=4194304"};
    c = config(yaml8b, 3, huge);
    if (c) {
        dt_plan p;
        CHECK(dt_plan_compute(c, 1, &p) == DT_ERR_RANGE &&
                  strstr(dt_last_error(), "data.batch x data.seq_len") &&
                  strstr(dt_last_error(), "2^60"),
              "2^42 tokens of an 8B model: %s", dt_last_error());
        dt_config_free(c);
    }
    char *huge_img[] = {"data.batch=1048576", "data.image_size=65536", "model.width=4096"};
    c = config(NULL, 3, huge_img);
    if (c) {
        dt_plan p;
        CHECK(dt_plan_compute(c, 1, &p) == DT_ERR_RANGE && strstr(dt_last_error(), "data.batch"),
              "2^20 images of 65536^2 at width 4096: %s", dt_last_error());
        dt_config_free(c);
    }
    /* Llama whose config.json is missing. */
    char *miss[] = {"model.kind=llama", "model.hf_path=/nonexistent/llama"};
    c = config(NULL, 2, miss);
    if (c) {
        dt_plan p;
        CHECK(dt_plan_compute(c, 1, &p) != DT_OK && strstr(dt_last_error(), "/nonexistent/llama"),
              "missing config.json named: %s", dt_last_error());
        dt_config_free(c);
    }
}

int main(int argc, char **argv) {
    if (argc > 1) src_dir = argv[1];
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dt_plan_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    test_calibration();
    test_llama8b();
    test_resnet_examples();
    test_zero_and_errors();
    test_bf16();
    const char *files[] = {"config.json", "llama.yaml", "r18.yaml",
                           "r50.yaml",    "z.yaml",     "plan.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) unlink(tmp_path(files[i]));
    rmdir(tmpdir);
    return dt_test_finish("test_plan");
}
