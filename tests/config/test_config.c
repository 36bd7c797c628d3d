/* The YAML config: defaults, loading, overrides, typed access, dump -> load round trip, the
 * schema help, and every error case (unknown key with suggestion, typo in a section, wrong type,
 * out of range, bad enum value, malformed YAML with its line, bad override syntax, missing file,
 * cross-key checks): each returns an error whose message names the file/line and key. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "dtrain/config.h"
#include "harness.h"

static char tmpdir[256];

/* Writes `text` to tmpdir/name and returns the path (static buffer per call site is enough:
 * callers use it at once). */
static const char *write_file(const char *name, const char *text) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    if (!CHECK(f != NULL, "cannot write %s", path)) return path;
    fputs(text, f);
    fclose(f);
    return path;
}

/* Loads YAML text (+ overrides) expecting an error whose message contains every needle. */
static void expect_error(const char *what, const char *yaml, int n_over, char *const *over,
                         const char *const *needles) {
    const char *path = write_file("err.yaml", yaml);
    dt_config *c = NULL;
    dt_status st = dt_config_from_args(path, n_over, over, &c);
    CHECK(st != DT_OK && c == NULL, "%s: expected an error, got status %d", what, (int)st);
    const char *msg = dt_last_error();
    for (int i = 0; needles[i]; i++)
        CHECK(strstr(msg, needles[i]) != NULL, "%s: message '%s' lacks '%s'", what, msg,
              needles[i]);
    dt_config_free(c);
}

#define NEEDLES(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_defaults(void) {
    dt_config *c = dt_config_init_defaults();
    if (!CHECK(c != NULL, "defaults: %s", dt_last_error())) return;
    const dt_config_values *v = dt_config_get_values(c);
    CHECK(v->model.kind == DT_CFG_MODEL_RESNET && v->model.depth == 18, "model defaults");
    CHECK(v->optim.name == DT_CFG_OPTIM_ADAMW && v->optim.lr == 1e-3, "optim defaults");
    CHECK(v->optim.beta2 == 0.999 && v->optim.eps == 1e-8, "adam defaults");
    CHECK(v->data.batch == 32 && v->data.shuffle == 1 && v->data.augment == 0, "data defaults");
    CHECK(v->lora.targets.n == 2 && !strcmp(v->lora.targets.item[0], "q_proj") &&
              !strcmp(v->lora.targets.item[1], "v_proj"),
          "lora.targets default [q_proj, v_proj]");
    CHECK(!strcmp(v->output.dir, "runs") && v->output.export_model == 1, "output defaults");
    CHECK(!strcmp(v->train.device, "auto"), "train.device default auto: '%s'", v->train.device);
    /* any well-formed device validates: whether it exists is decided at the trainer's start */
    CHECK_OK(dt_config_set(c, "train.device", "cuda:3"));
    CHECK_OK(dt_config_validate(c));
    CHECK(v->dist.gpu_comm == DT_CFG_GPU_COMM_AUTO, "dist.gpu_comm default auto");
    CHECK_OK(dt_config_set(c, "dist.gpu_comm", "nccl")); /* with cuda:3: accepted */
    CHECK_OK(dt_config_validate(c));
    CHECK(v->dist.gpu_comm == DT_CFG_GPU_COMM_NCCL, "dist.gpu_comm nccl: %d", v->dist.gpu_comm);
    CHECK_OK(dt_config_set(c, "dist.gpu_comm", "auto"));
    CHECK_OK(dt_config_set(c, "train.device", "auto"));
    CHECK(!strcmp(dt_config_origin(c, "optim.lr"), "default"), "origin default");
    CHECK_OK(dt_config_validate(c));
    /* Every schema row: default parses (init_defaults did it), the help line exists. */
    for (int k = 0; k < dt_config_key_count(); k++) {
        const dt_config_key *key = dt_config_key_at(k);
        CHECK(strchr(key->name, '.') && key->help && key->help[0], "key %d has name and help", k);
        CHECK(dt_config_key_find(key->name) == key, "find %s", key->name);
    }
    dt_config_free(c);
}

static void test_load_and_override(void) {
    const char *path = write_file("ok.yaml", "# a comment\n"
                                             "model:\n"
                                             "  kind: resnet\n"
                                             "  depth: 50\n"
                                             "  small_stem: yes\n"
                                             "optim:\n"
                                             "  name: sgd\n"
                                             "  lr: 0.1\n"
                                             "  momentum: 0.9\n"
                                             "  nesterov: true\n"
                                             "lora:\n"
                                             "  targets: [q_proj, k_proj, \"o_proj\"]\n"
                                             "ckpt:\n"
                                             "  dir: s3://bucket/prefix\n"
                                             "output:\n"
                                             "  run_name: 'my run: \"1\"'\n"
                                             "train:\n"
                                             "  steps: 100\n");
    dt_config *c = NULL;
    CHECK_OK(dt_config_load(path, &c));
    if (!c) return;
    const dt_config_values *v = dt_config_get_values(c);
    CHECK(v->model.depth == 50 && v->model.small_stem == 1, "model from file");
    CHECK(v->optim.name == DT_CFG_OPTIM_SGD && v->optim.lr == 0.1 && v->optim.nesterov == 1,
          "optim from file");
    CHECK(v->lora.targets.n == 3 && !strcmp(v->lora.targets.item[2], "o_proj"), "list from file");
    CHECK(!strcmp(v->ckpt.dir, "s3://bucket/prefix"), "uri from file");
    CHECK(!strcmp(v->output.run_name, "my run: \"1\""), "quoted string: '%s'", v->output.run_name);
    char want[600];
    snprintf(want, sizeof want, "%s:8", path);
    CHECK(!strcmp(dt_config_origin(c, "optim.lr"), want), "origin of optim.lr: %s",
          dt_config_origin(c, "optim.lr"));
    /* Overrides beat file values. */
    CHECK_OK(dt_config_set_arg(c, "optim.lr=0.25"));
    CHECK_OK(dt_config_set_arg(c, "model.depth=101"));
    CHECK_OK(dt_config_set_arg(c, "lora.targets=[up_proj, down_proj]"));
    CHECK_OK(dt_config_set(c, "data.augment", "on"));
    CHECK(v->optim.lr == 0.25 && v->model.depth == 101 && v->data.augment == 1, "overrides");
    CHECK(v->lora.targets.n == 2 && !strcmp(v->lora.targets.item[1], "down_proj"), "list override");
    CHECK(!strcmp(dt_config_origin(c, "optim.lr"), "command line"), "origin of override");
    CHECK_OK(dt_config_validate(c));
    /* Typed access by name. */
    int64_t i64 = 0;
    double d = 0;
    int b = -1;
    const char *s = NULL;
    CHECK_OK(dt_config_get_int(c, "model.depth", &i64));
    CHECK(i64 == 101, "get_int");
    CHECK_OK(dt_config_get_int(c, "optim.name", &i64));
    CHECK(i64 == DT_CFG_OPTIM_SGD, "get_int of an enum gives its index");
    CHECK_OK(dt_config_get_float(c, "optim.lr", &d));
    CHECK(d == 0.25, "get_float");
    CHECK_OK(dt_config_get_bool(c, "optim.nesterov", &b));
    CHECK(b == 1, "get_bool");
    CHECK_OK(dt_config_get_str(c, "optim.name", &s));
    CHECK(s && !strcmp(s, "sgd"), "get_str of an enum");
    CHECK(dt_config_get_bool(c, "optim.lr", &b) != DT_OK &&
              strstr(dt_last_error(), "optim.lr") != NULL,
          "get_bool of a float is an error naming the key");
    CHECK(dt_config_get_int(c, "optim.lrr", &i64) != DT_OK &&
              strstr(dt_last_error(), "did you mean 'optim.lr'") != NULL,
          "get of an unknown key suggests: %s", dt_last_error());
    dt_config_free(c);
    /* from_args: file + overrides + validation in one call. */
    char *over[] = {"train.steps=7", "optim.name=adamw", "optim.nesterov=false"};
    CHECK_OK(dt_config_from_args(path, 3, over, &c));
    if (c) {
        CHECK(dt_config_get_values(c)->train.steps == 7, "from_args override");
        dt_config_free(c);
    }
    /* An empty file is all defaults; a section with nothing under it too. */
    CHECK_OK(dt_config_load(write_file("empty.yaml", ""), &c));
    dt_config_free(c);
    CHECK_OK(dt_config_load(write_file("empty2.yaml", "model:\ndata:\n  batch: 4\n"), &c));
    if (c) CHECK(dt_config_get_values(c)->data.batch == 4, "empty section then a key");
    dt_config_free(c);
}

static void test_round_trip(void) {
    char *over[] = {"model.kind=llama",
                    "model.hf_path=some dir/with \"quotes\"",
                    "optim.lr=3.0000000000000004e-4",
                    "optim.eps=1e-12",
                    "lora.enabled=true",
                    "lora.targets=q_proj,v_proj,gate_proj",
                    "train.seed=9007199254740993",
                    "ckpt.dir=file:///mnt/ckpt",
                    "output.experiment=tab\there",
                    "schedule.kind=cosine",
                    "train.steps=1000",
                    "dist.zero_stage=2"};
    int n = (int)(sizeof over / sizeof over[0]);
    dt_config *a = NULL, *b = NULL;
    CHECK_OK(dt_config_from_args(NULL, n, over, &a));
    if (!a) return;
    char path[512];
    snprintf(path, sizeof path, "%s/dump.yaml", tmpdir);
    CHECK_OK(dt_config_save_yaml(a, path));
    CHECK_OK(dt_config_load(path, &b));
    if (b) {
        const dt_config_values *va = dt_config_get_values(a), *vb = dt_config_get_values(b);
        CHECK(!memcmp(va, vb, sizeof *va), "dump -> load gives the same values");
        CHECK(!strcmp(vb->model.hf_path, "some dir/with \"quotes\""), "string with quotes: %s",
              vb->model.hf_path);
        CHECK(vb->optim.lr == 3.0000000000000004e-4, "double round trip exact");
        CHECK(vb->train.seed == 9007199254740993LL, "int64 round trip exact");
        CHECK_OK(dt_config_validate(b));
    }
    dt_config_free(a);
    dt_config_free(b);
}

static void test_help(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/help.txt", tmpdir);
    FILE *f = fopen(path, "w+");
    if (!CHECK(f != NULL, "help file")) return;
    dt_config_help(f);
    long n = ftell(f);
    rewind(f);
    char *buf = calloc(1, (size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) CHECK(0, "help read");
    fclose(f);
    for (int k = 0; k < dt_config_key_count(); k++) {
        const dt_config_key *key = dt_config_key_at(k);
        CHECK(strstr(buf, key->name) && strstr(buf, key->help), "help lists %s", key->name);
    }
    CHECK(strstr(buf, "sgd|adamw") != NULL, "help shows enum values");
    free(buf);
}

static void test_errors(void) {
    expect_error("unknown key (typo)",
                 "optim:\n  lr: 0.1\n\n\n\n  momentum: 0.9\n  weight_decy: 0.1\n", 0, NULL,
                 NEEDLES("err.yaml:7", "unknown key 'optim.weight_decy'",
                         "did you mean 'optim.weight_decay'"));
    expect_error("train.device", "train:\n  device: gpu\n", 0, NULL,
                 NEEDLES("err.yaml:2", "train.device", "'gpu' is not a device",
                         "auto, cpu, cuda or cuda:N"));
    expect_error("dist.gpu_comm nccl on the CPU",
                 "train:\n  device: cpu\ndist:\n  gpu_comm: nccl\n", 0, NULL,
                 NEEDLES("err.yaml:4", "dist.gpu_comm is nccl", "train.device=cuda"));
    expect_error("dist.gpu_comm value", "dist:\n  gpu_comm: mpi\n", 0, NULL,
                 NEEDLES("err.yaml:2", "dist.gpu_comm", "auto, nccl, host"));
    expect_error("key in the wrong section", "train:\n  lr: 0.1\n", 0, NULL,
                 NEEDLES("err.yaml:2", "'train.lr'", "did you mean 'optim.lr'"));
    expect_error("unknown key, nothing close", "optim:\n  learning_rate_of_the_run: 1\n", 0, NULL,
                 NEEDLES("err.yaml:2", "optim.learning_rate_of_the_run", "optim.lr"));
    expect_error("unknown section", "optimizer:\n  lr: 0.1\n", 0, NULL,
                 NEEDLES("err.yaml:1", "unknown section 'optimizer'", "did you mean 'optim'"));
    expect_error("typo in a section", "modle:\n  depth: 50\n", 0, NULL,
                 NEEDLES("err.yaml:1", "'modle'", "did you mean 'model'"));
    expect_error("wrong type: float", "optim:\n  lr: fast\n", 0, NULL,
                 NEEDLES("err.yaml:2", "optim.lr", "'fast' is not a number", "expected a number"));
    expect_error("wrong type: int", "train:\n  steps: 1.5\n", 0, NULL,
                 NEEDLES("err.yaml:2", "train.steps", "'1.5' is not an integer"));
    expect_error("wrong type: bool", "data:\n  augment: maybe\n", 0, NULL,
                 NEEDLES("err.yaml:2", "data.augment", "'maybe'", "true or false"));
    expect_error("wrong type: mapping for a scalar", "data:\n  batch:\n    a: 1\n", 0, NULL,
                 NEEDLES("err.yaml", "data.batch", "got a mapping"));
    expect_error("wrong type: list for a scalar", "data:\n  batch: [1, 2]\n", 0, NULL,
                 NEEDLES("err.yaml:2", "data.batch", "got a list"));
    expect_error("section is not a mapping", "model: resnet\n", 0, NULL,
                 NEEDLES("err.yaml:1", "section 'model'"));
    expect_error("out of range (max)", "dist:\n  zero_stage: 4\n", 0, NULL,
                 NEEDLES("err.yaml:2", "dist.zero_stage", "4 is out of range", "[0, 3]"));
    expect_error("data.cache_mb below 1", "data:\n  cache_mb: 0\n", 0, NULL,
                 NEEDLES("err.yaml:2", "data.cache_mb", "0 is out of range"));
    expect_error("negative data.store_wait_s", "data:\n  store_wait_s: -1\n", 0, NULL,
                 NEEDLES("err.yaml:2", "data.store_wait_s", "out of range"));
    expect_error("out of range (open)", "optim:\n  beta2: 1.0\n", 0, NULL,
                 NEEDLES("err.yaml:2", "optim.beta2", "out of range", "[0, 1)"));
    expect_error("out of range (lr > 0)", "optim:\n  lr: 0\n", 0, NULL,
                 NEEDLES("optim.lr", "out of range", "(0, 10]"));
    expect_error("bad enum value", "optim:\n  name: adam\n", 0, NULL,
                 NEEDLES("err.yaml:2", "optim.name", "'adam' is not one of sgd, adamw",
                         "did you mean 'adamw'"));
    expect_error("bad list item", "lora:\n  targets: [q_proj, q_porj]\n", 0, NULL,
                 NEEDLES("err.yaml", "lora.targets", "'q_porj'", "did you mean 'q_proj'"));
    expect_error("bad storage URI", "ckpt:\n  dir: ftp://host/x\n", 0, NULL,
                 NEEDLES("err.yaml:2", "ckpt.dir", "ftp://host/x", "unsupported"));
    /* a secret in a URL is refused without being repeated (the message goes to logs) */
    expect_error("credentials in a storage URI", "ckpt:\n  dir: s3://AKID:SECRETXYZ@bucket/x\n", 0,
                 NULL, NEEDLES("err.yaml:2", "ckpt.dir", "credentials in the URL"));
    CHECK(!strstr(dt_last_error(), "SECRETXYZ"), "the secret is echoed: %s", dt_last_error());
    char *res_over[] = {"ckpt.resume=s3://AKID:SECRETXYZ@bucket/x/step-1"};
    expect_error("credentials in ckpt.resume", "", 1, res_over,
                 NEEDLES("ckpt.resume", "credentials in the URL"));
    CHECK(!strstr(dt_last_error(), "SECRETXYZ"), "the secret is echoed: %s", dt_last_error());
    expect_error("duplicate key", "optim:\n  lr: 0.1\n  lr: 0.2\n", 0, NULL,
                 NEEDLES("err.yaml:3", "optim.lr", "twice", "line 2"));
    expect_error("malformed YAML", "optim:\n  lr: 0.1\n  name: 'sgd\n", 0, NULL,
                 NEEDLES("err.yaml:", "malformed YAML"));
    expect_error("malformed YAML (indentation)", "optim:\n  lr: 0.1\n momentum: 0.9\n", 0, NULL,
                 NEEDLES("err.yaml:3", "malformed YAML"));
    expect_error("not a mapping", "- a\n- b\n", 0, NULL, NEEDLES("err.yaml:1", "mapping"));
    expect_error("two documents", "model:\n  depth: 50\n---\nmodel:\n  depth: 18\n", 0, NULL,
                 NEEDLES("err.yaml:3", "one YAML document"));
    /* Overrides. */
    char *o1[] = {"optim.lr"};
    expect_error("override without =", "", 1, o1,
                 NEEDLES("command line", "'optim.lr'", "section.key=value"));
    char *o2[] = {"lr=0.1"};
    expect_error("override without section", "", 1, o2,
                 NEEDLES("command line", "no section", "section.key=value"));
    char *o3[] = {"optim.weight_decy=0.1"};
    expect_error("override unknown key", "", 1, o3,
                 NEEDLES("command line", "unknown key 'optim.weight_decy'",
                         "did you mean 'optim.weight_decay'"));
    char *o4[] = {"train.steps=-5"};
    expect_error("override out of range", "", 1, o4,
                 NEEDLES("command line", "train.steps", "-5 is out of range", ">= 0"));
    char *o5[] = {"model.kind=transformer"};
    expect_error("override bad enum", "", 1, o5,
                 NEEDLES("command line", "model.kind", "'transformer'", "resnet, llama"));
    char *o6[] = {"=1"};
    expect_error("override with empty key", "", 1, o6,
                 NEEDLES("command line", "section.key=value"));
    /* Cross-key checks name where the key was set. */
    expect_error("lora on resnet", "model:\n  kind: resnet\nlora:\n  enabled: true\n", 0, NULL,
                 NEEDLES("err.yaml:4", "lora.enabled", "model.kind"));
    expect_error("nesterov without momentum", "optim:\n  name: sgd\n  nesterov: true\n", 0, NULL,
                 NEEDLES("err.yaml:3", "optim.nesterov", "momentum"));
    expect_error("llama without hf_path", "model:\n  kind: llama\n", 0, NULL,
                 NEEDLES("err.yaml:2", "model.hf_path"));
    expect_error("resnet depth", "model:\n  depth: 20\n", 0, NULL,
                 NEEDLES("err.yaml:2", "model.depth", "20", "18, 34, 50, 101 or 152"));
    expect_error("no steps, no epochs", "train:\n  steps: 0\n  epochs: 0\n", 0, NULL,
                 NEEDLES("train.steps", "train.epochs"));
    expect_error("warmup past the end",
                 "schedule:\n  kind: cosine\n  warmup_steps: 100\ntrain:\n  steps: 50\n", 0, NULL,
                 NEEDLES("err.yaml:3", "schedule.warmup_steps"));
    /* An override can fix what the file gets wrong (cross checks run after overrides). */
    const char *path = write_file("fix.yaml", "model:\n  kind: resnet\nlora:\n  enabled: true\n");
    char *fix[] = {"lora.enabled=false"};
    dt_config *c = NULL;
    CHECK_OK(dt_config_from_args(path, 1, fix, &c));
    dt_config_free(c);
    /* Missing file. */
    c = NULL;
    dt_status st = dt_config_load("/nonexistent/dir/run.yaml", &c);
    CHECK(st == DT_ERR_IO && c == NULL && strstr(dt_last_error(), "/nonexistent/dir/run.yaml"),
          "missing file names the file: %s", dt_last_error());
    /* API misuse. */
    CHECK(dt_config_load(NULL, &c) != DT_OK, "NULL path");
    CHECK(dt_config_set(NULL, "optim.lr", "1") != DT_OK, "NULL config");
}

/* Mutated YAML (bytes flipped, dropped, duplicated; deterministic) never crashes the reader:
 * each load either succeeds or fails with a message naming the file. */
static void test_mutations(void) {
    const char *base = "model:\n  kind: resnet\n  depth: 50\n  small_stem: true\n"
                       "data:\n  batch: 8\n  train: \"data/x\"\n"
                       "lora:\n  targets: [q_proj, v_proj]\n"
                       "optim:\n  name: sgd\n  lr: 0.1\n  momentum: 0.9\n";
    const char alphabet[] = ":-[]{}\"'#&*!|>%@`, \n\t.0a~";
    size_t n = strlen(base);
    uint64_t r = 0x9e3779b97f4a7c15ULL;
    int errors = 0, bad_msgs = 0;
    for (int it = 0; it < 400; it++) {
        char buf[1024];
        memcpy(buf, base, n + 1);
        size_t len = n;
        for (int m = 0; m < 1 + it % 4; m++) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            size_t pos = (size_t)(r >> 33) % len;
            int op = (int)(r >> 20) % 3;
            char ch = alphabet[(r >> 40) % (sizeof alphabet - 1)];
            if (op == 0) {
                buf[pos] = ch;
            } else if (op == 1 && len > 1) {
                memmove(buf + pos, buf + pos + 1, len - pos);
                len--;
            } else if (len + 1 < sizeof buf) {
                memmove(buf + pos + 1, buf + pos, len - pos + 1);
                buf[pos] = ch;
                len++;
            }
        }
        buf[len] = '\0';
        dt_config *c = NULL;
        const char *path = write_file("mut.yaml", buf);
        if (dt_config_load(path, &c) == DT_OK) {
            dt_config_free(c);
        } else {
            errors++;
            if (!strstr(dt_last_error(), "mut.yaml")) bad_msgs++;
        }
    }
    CHECK(errors > 0 && bad_msgs == 0, "mutations: %d errors, %d without the file name", errors,
          bad_msgs);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dt_config_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "mkdtemp failed\n");
        return 1;
    }
    test_defaults();
    test_load_and_override();
    test_round_trip();
    test_help();
    test_errors();
    test_mutations();
    const char *files[] = {"mut.yaml",    "err.yaml",  "ok.yaml",  "empty.yaml",
                           "empty2.yaml", "dump.yaml", "help.txt", "fix.yaml"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", tmpdir, files[i]);
        unlink(p);
    }
    rmdir(tmpdir);
    return dt_test_finish("test_config");
}
