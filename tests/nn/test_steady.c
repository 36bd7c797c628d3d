/* Steady state: once a model has taken its first steps, further training steps (forward,
 * backward, optimizer) take no page faults at all -- nothing is allocated and touched anew, by
 * us or by the libraries we call (oneDNN allocates per sgemm call; see dt_runtime_tune_malloc).
 * Checked on a small Llama and a small ResNet, after 16 warm-up steps.
 *
 * Why 16: on AVX2-only CPUs oneDNN's sgemm takes a 10.7 MB 128-byte-aligned packing buffer per
 * call on each thread. glibc serves an aligned block with padding and frees the padding back;
 * small blocks then cached in the thread's tcache sit in that padding, so the next call's block
 * no longer fits and comes from the top of the heap: fresh pages (3016 faults a step here) for
 * 9 steps, until the freed blocks coalesce (about 90 MB more heap, then no faults at all;
 * GLIBC_TUNABLES=glibc.malloc.tcache_count=0 avoids it). With AVX-512 it settled within 8. */
#include <stdlib.h>
#include <sys/resource.h>
#include "dtrain/dtrain.h"
#include "harness.h"

static long faults(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_minflt + r.ru_majflt;
}

static void steady(const char *what, dt_graph *g, int loss) {
    CHECK_OK(dt_graph_compile(g, loss, NULL));
    size_t n;
    float *p = dt_graph_flat_param(g, &n), *gr = dt_graph_flat_grad(g, NULL);
    dt_rng_normal(p, (int64_t)n, 1, 0, 0, 0.0f, 0.05f);
    dt_optim_config c = dt_optim_config_default(DT_OPTIM_ADAMW);
    dt_optim *opt;
    CHECK_OK(dt_optim_init(&c, n, 0, n, NULL, 0, &opt));
    long f0 = 0;
    /* oneDNN's sgemm settles its per-call buffers over the first steps (see above). Under ASan
     * (which faults pages of its own, so nothing is asserted) 3 steps run the same code. */
#ifdef __SANITIZE_ADDRESS__
    const int warm = 2;
#else
    const int warm = 16;
#endif
    for (int s = 0; s < warm + 3; s++) {
        if (s == warm) f0 = faults();
        CHECK_OK(dt_graph_forward(g, 1));
        CHECK_OK(dt_graph_backward(g));
        dt_grad_clip_norm(gr, n, 1.0f);
        CHECK_OK(dt_optim_step(opt, p, gr, 1e-3f));
    }
    long d = faults() - f0;
#ifndef __SANITIZE_ADDRESS__ /* ASan's shadow memory faults pages of its own */
    CHECK(d == 0, "%s: %ld page faults in 3 steady steps", what, d);
#endif
    printf("  %s: %ld page faults in 3 steps after warm-up\n", what, d);
    dt_optim_free(opt);
    dt_graph_free(g);
}

int main(void) {
    dt_threads_set(2);
    dt_graph *g = dt_graph_init();
    /* Big enough that the libraries' per-call buffers exceed glibc's mmap threshold. */
    dt_llama_config lc = {.vocab_size = 32000, .hidden_size = 256, .intermediate_size = 704,
                          .num_hidden_layers = 1, .num_attention_heads = 4,
                          .num_key_value_heads = 2, .head_dim = 64, .rms_norm_eps = 1e-5f,
                          .rope_theta = 10000.0f, .max_position_embeddings = 256};
    int ids = dt_graph_input(g, "ids", DT_I32, 2, (int64_t[]){4, 256}, 0);
    int tg = dt_graph_input(g, "targets", DT_I32, 1, (int64_t[]){4 * 256}, 0);
    int lg = dt_reshape(g, dt_llama_build(g, &lc, ids), 2, (int64_t[]){4 * 256, 32000});
    steady("llama", g, dt_cross_entropy(g, lg, tg, 0.0f, -100));

    g = dt_graph_init();
    int x = dt_graph_input(g, "x", DT_F32, 4, (int64_t[]){16, 3, 32, 32}, 0);
    int y = dt_graph_input(g, "y", DT_I32, 1, (int64_t[]){16}, 0);
    dt_resnet_config rc = {.depth = 18, .in_channels = 3, .num_classes = 10, .small_stem = 1,
                           .width = 16};
    steady("resnet", g, dt_cross_entropy(g, dt_resnet_build(g, &rc, x), y, 0.0f, -100));
    return dt_test_finish("test_steady");
}
