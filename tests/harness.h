/* Test helpers: checks with a closing "N passed, N failed" line, PyTorch reference files,
 * comparisons with stated tolerances, and finite-difference gradient checks on graphs. */
#ifndef DT_TEST_HARNESS_H
#define DT_TEST_HARNESS_H

#include <stdint.h>
#include <stdio.h>
#include "dtrain/graph.h"
#include "dtrain/ops.h"

/* Records one check; on failure prints file:line and the formatted message. */
int dt_check_(int ok, const char *file, int line, const char *expr, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
#define CHECK(cond, ...) dt_check_(!!(cond), __FILE__, __LINE__, #cond, __VA_ARGS__)
/* Checks that a dt_status call returned DT_OK; prints dt_last_error() otherwise. */
#define CHECK_OK(expr)                                                                             \
    do {                                                                                           \
        dt_status s_ = (expr);                                                                     \
        dt_check_(s_ == DT_OK, __FILE__, __LINE__, #expr, "status %d: %s", (int)s_,                \
                  dt_last_error());                                                                \
    } while (0)
/* A builder call that must fail: the id is negative and dt_last_error() contains every one of
 * the given strings (op name, shapes, ...). Use as EXPECT_FAIL(dt_add(g, a, b), "add", "[2, 3]").
 */
void dt_expect_fail_(int id, const char *what, const char *const *want);
#define EXPECT_FAIL(call, ...)                                                                     \
    dt_expect_fail_((call), #call, (const char *const[]){__VA_ARGS__, NULL})
/* Prints "<name>: N passed, N failed" and returns the process exit code. */
int dt_test_finish(const char *name);

/* Reference files written by the tests/ref scripts (safetensors) in $DT_REF_DIR. */
typedef struct dt_ref dt_ref;
dt_ref *dt_ref_load(const char *file); /* NULL (and a failed check) if missing or malformed */
/* Tensor by name, converted to f32 (ints are converted too); NULL + failed check if absent. */
const dt_tensor *dt_ref_get(dt_ref *r, const char *name);
/* Raw tensor (original dtype), NULL if absent (no check recorded). */
const dt_tensor *dt_ref_raw(dt_ref *r, const char *name);
void dt_ref_free(dt_ref *r);

/* |a - b| <= atol + rtol * |b| elementwise; records one check, prints the worst element. */
int dt_check_close(const char *what, const float *a, const float *b, int64_t n, double atol,
                   double rtol);
/* Same for tensors (shape must match too; `a` may be any dtype, converted). */
int dt_check_tensor(const char *what, const dt_tensor *a, const dt_tensor *b, double atol,
                    double rtol);

/* Against a float64 reference written as `key` with `err.<key>` = PyTorch f32's max distance
 * from it (tests/ref/ref_resnet.py, ref_llama.py): passes when every element satisfies
 *   |a - exact| <= 3 * err_torch + 1e-5 * max|exact|
 * i.e. dtrain is as close to the exact answer as PyTorch's own f32 run, with a margin. */
int dt_check_vs_f64(dt_ref *ref, const char *name, const char *key, const dt_tensor *a);
double dt_max_abs(const dt_tensor *t);

/* Copies `src` (any dtype) into the node's value buffer (converting to the node's dtype). */
void dt_test_set(dt_graph *g, int id, const dt_tensor *src);
/* Fills a node's value buffer with N(0, std^2) (floats) from a deterministic seed. */
void dt_test_randn(dt_graph *g, int id, uint64_t seed, float std);
void dt_randn(float *x, int64_t n, uint64_t seed, float std);

/* loss = sum(out * R) with R a new input named "R" of out's shape: fill R after compiling
 * (dt_test_randn or a reference's "R") so that every element of out gets a different,
 * non-trivial gradient. *r_id receives R's id. */
int dt_test_dotloss(dt_graph *g, int out, int *r_id);

typedef struct dt_gradcheck_opts {
    double eps;         /* central-difference step (default 1e-2) */
    double atol, rtol;  /* tolerance on |analytic - numeric| (defaults 1e-2, 5e-2) */
    int max_per_tensor; /* elements probed per tensor (default 24) */
    int training;       /* forward mode used for both */
} dt_gradcheck_opts;
/* Compiles nothing: `g` must be compiled with `loss`. Checks d loss / d x for every trainable
 * param and every input created with requires_grad, against central differences (computed in
 * f32 forward passes). Records one check per tensor; returns the number that failed. */
int dt_gradcheck(dt_graph *g, int loss, const dt_gradcheck_opts *o);

/* Runs fn(argc, argv) -- a CLI subcommand -- with stdout and stderr captured into out [nout]
 * and err [nerr] (NUL-terminated; through temporary files); returns its exit code. */
int dt_test_capture(int (*fn)(int, char **), int argc, char **argv, char *out, size_t nout,
                    char *err, size_t nerr);

/* A Llama training graph: ids [B, T] i64 -> logits [B, T, V] (kept) -> cross-entropy against
 * targets [B*T] i64; compiled. `loss` < 0 (and a failed check) if building failed. */
typedef struct dt_test_lm {
    dt_graph *g;
    int ids, targets, logits, loss;
} dt_test_lm;
struct dt_llama_config;
dt_test_lm dt_test_llama_lm(const struct dt_llama_config *c, int64_t B, int64_t T);

/* A whole file into a malloc'ed, NUL-terminated buffer (free() it); NULL if it cannot be read. */
char *dt_test_read_file(const char *path, size_t *n);
/* A JSON file parsed (cJSON_Delete() it); NULL if it cannot be read or parsed. */
struct cJSON;
struct cJSON *dt_test_read_json(const char *path);
/* Writes o to path as formatted JSON (created or truncated); 0 on success, -1 (and a CHECK
 * failure naming the file) otherwise. */
int dt_test_write_json(const char *path, const struct cJSON *o);

/* Distributed tests: every rank of `c` holds the same n floats as rank 0, bit for bit (rank 0's
 * values are broadcast and compared with memcmp; a rank passing p == NULL counts as differing).
 * A collective: every rank calls it with the same n. Records one check on every rank. */
struct dt_comm;
void dt_check_same_on_all_ranks(struct dt_comm *c, const char *what, const float *p, size_t n);

#endif
