/* The frozen base pointing into read-only shared mappings of its files (dt_model_map_base,
 * dt_graph_param_external): the same forward and backward bits as the copying load, no copy
 * where the file holds the parameter's own dtype, a conversion copied, and a write through the
 * parameter faults (the mapping is PROT_READ). */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "dtrain/dtrain.h"
#include "dtrain/models.h"
#include "dtrain/safetensors.h"
#include "harness.h"

enum { B = 4, IN = 8, OUT = 6 };

typedef struct net {
    dt_graph *g;
    int x, w, b, loss, r;
} net;

/* x [B, IN] -> linear with frozen bf16 w [OUT, IN] and frozen f32 b [OUT] -> dot loss. */
static net build(int untouched) {
    net n = {.g = dt_graph_init()};
    n.x = dt_graph_input(n.g, "x", DT_F32, 2, (int64_t[]){B, IN}, 1);
    n.w = dt_graph_param(n.g, "w", DT_BF16, 2, (int64_t[]){OUT, IN}, DT_PARAM_FROZEN);
    n.b = dt_graph_param(n.g, "b", DT_F32, 1, (int64_t[]){OUT}, DT_PARAM_FROZEN);
    n.loss = dt_test_dotloss(n.g, dt_linear(n.g, n.x, n.w, n.b), &n.r);
    dt_graph_opts o = {.frozen_untouched = untouched};
    CHECK_OK(dt_graph_compile(n.g, n.loss, &o));
    dt_test_randn(n.g, n.x, 1, 1.0f);
    dt_test_randn(n.g, n.r, 2, 1.0f);
    return n;
}

static void run(net *n) {
    CHECK_OK(dt_graph_forward(n->g, 1));
    CHECK_OK(dt_graph_backward(n->g));
}

static int inside_frozen_buffer(net *n, int id) {
    size_t nb = 0;
    const char *f = dt_graph_flat_frozen(n->g, &nb), *d = dt_graph_value(n->g, id)->data;
    return d >= f && d < f + nb;
}

/* 1 when writing one element of the parameter's memory kills a child process with SIGSEGV. */
static int write_faults(const void *p) {
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL); /* not the sanitizer's handler, which reports and exits 1 */
        *(volatile uint16_t *)p = 0x3f80;
        _exit(0);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    return WIFSIGNALED(ws) && WTERMSIG(ws) == SIGSEGV;
}

static void save(const char *path, dt_dtype wdt) {
    float wf[OUT * IN], bf[OUT];
    uint16_t wb[OUT * IN];
    dt_randn(wf, OUT * IN, 3, 0.5f);
    dt_randn(bf, OUT, 4, 0.5f);
    dt_bf16_from_f32_n(wb, wf, OUT * IN);
    if (wdt == DT_F32) /* the same values, stored wide: the conversion gives the same bf16 */
        dt_bf16_to_f32_n(wf, wb, OUT * IN);
    dt_tensor w, b;
    dt_tensor_init(&w, wdt == DT_BF16 ? (void *)wb : (void *)wf, wdt, 2, (int64_t[]){OUT, IN});
    dt_tensor_init(&b, bf, DT_F32, 1, (int64_t[]){OUT});
    dt_st_entry e[2] = {{"w", &w}, {"b", &b}};
    CHECK_OK(dt_st_save(path, e, 2, NULL, NULL, 0));
}

static void same(const char *what, net *a, net *m) {
    const dt_tensor *la = dt_graph_value(a->g, a->loss), *lm = dt_graph_value(m->g, m->loss);
    CHECK(!memcmp(la->data, lm->data, 4), "%s: loss %.9g mapped vs %.9g copied", what,
          *(float *)lm->data, *(float *)la->data);
    CHECK(!memcmp(dt_graph_grad(a->g, a->x)->data, dt_graph_grad(m->g, m->x)->data,
                  sizeof(float) * B * IN),
          "%s: input gradient differs from the copying load's", what);
}

int main(void) {
    char dir[] = "/tmp/dt_base_map_XXXXXX", p16[96], p32[96];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(p16, sizeof p16, "%s/bf16.safetensors", dir);
    snprintf(p32, sizeof p32, "%s/f32.safetensors", dir);
    save(p16, DT_BF16);
    save(p32, DT_F32);

    /* the file in the base's dtypes: every frozen parameter points into the mapping */
    net a = build(0), m = build(1);
    CHECK_OK(dt_model_load_base(a.g, p16, NULL));
    dt_base_map *bm = NULL;
    dt_base_report rep;
    CHECK_OK(dt_model_map_base(m.g, p16, NULL, 1, &bm, &rep));
    CHECK(rep.n_mapped == 2 && rep.n_other == 0 && rep.why[0] == '\0',
          "bf16 file: %d mapped, %d not (%s)", rep.n_mapped, rep.n_other, rep.why);
    CHECK(rep.mapped_bytes == OUT * IN * 2 + OUT * 4, "mapped bytes %zu", rep.mapped_bytes);
    CHECK(!inside_frozen_buffer(&m, m.w) && !inside_frozen_buffer(&m, m.b),
          "mapped parameters still in the frozen buffer");
    run(&a), run(&m);
    same("bf16 file", &a, &m);
    CHECK(write_faults(dt_graph_value(m.g, m.w)->data),
          "a write into the mapped base did not fault");
    CHECK(!write_faults(dt_graph_value(a.g, a.w)->data), "a write into the copied base faulted");
    /* a graph attached to the same mappings (a rebuild) */
    net m2 = build(1);
    CHECK_OK(dt_base_map_attach(bm, m2.g, 1, NULL));
    CHECK(dt_graph_value(m2.g, m2.w)->data == dt_graph_value(m.g, m.w)->data,
          "a second graph does not share the first's mapping");
    run(&m2);
    same("attached", &a, &m2);

    /* the wide file: w is converted (copied), b mapped; without copy_rest w is left alone */
    net c = build(1), s = build(1);
    dt_base_map *cm = NULL, *sm = NULL;
    CHECK_OK(dt_model_map_base(c.g, p32, NULL, 1, &cm, &rep));
    CHECK(rep.n_mapped == 1 && rep.n_other == 1 && strstr(rep.why, "'w'") && strstr(rep.why, "f32"),
          "f32 file: %d mapped, %d not (%s)", rep.n_mapped, rep.n_other, rep.why);
    CHECK(inside_frozen_buffer(&c, c.w) && !inside_frozen_buffer(&c, c.b), "f32 file: placement");
    run(&c);
    same("f32 file, converted", &a, &c);
    CHECK_OK(dt_model_map_base(s.g, p32, NULL, 0, &sm, &rep));
    const uint16_t *sw = dt_graph_value(s.g, s.w)->data;
    int zero = 1;
    for (int i = 0; i < OUT * IN; i++) zero &= sw[i] == 0;
    CHECK(zero && rep.n_other == 1, "copy_rest 0: w was loaded");

    /* refusals */
    CHECK(dt_graph_param_external(a.g, a.x, sw) != DT_OK &&
              strstr(dt_last_error(), "not a frozen parameter"),
          "an input accepted external memory (%s)", dt_last_error());
    const char *bd = dt_graph_value(a.g, a.b)->data;
    CHECK(dt_graph_param_external(a.g, a.b, bd + 1) != DT_OK && strstr(dt_last_error(), "'b'") &&
              strstr(dt_last_error(), "not aligned"),
          "a misaligned pointer was accepted (%s)", dt_last_error());
    dt_graph_free(a.g), dt_graph_free(m.g), dt_graph_free(m2.g), dt_graph_free(c.g);
    dt_graph_free(s.g);
    dt_base_map_close(bm), dt_base_map_close(cm), dt_base_map_close(sm);
    remove(p16), remove(p32), rmdir(dir);
    return dt_test_finish("test_base_map");
}
