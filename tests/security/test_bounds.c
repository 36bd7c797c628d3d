/* Resource bounds (issue 12): every size a file states is checked against the file's own size
 * and a sane maximum before anything is allocated by it, size arithmetic is overflow-checked,
 * and nesting is bounded. One case per bound: a small hostile file is written, the library's
 * real entry point is called on it, and the case checks
 *   (a) the status (DT_ERR_FORMAT: refused as malformed, not DT_ERR_NOMEM: it did not try),
 *   (b) the message names the file (and key) and the problem,
 *   (c) "without allocating": the call runs in a forked child whose address space is capped at
 *       its current size + 48 MiB (RLIMIT_AS), so an allocation sized by the claim (GBs, or the
 *       64 MiB of the old index.json reader) fails there and the case gets DT_ERR_NOMEM, another
 *       message, or a crash instead. A control case checks that the cap is in force. Under
 *       AddressSanitizer (which reserves terabytes of address space) the cap is left out and
 *       (a) and (b) remain; ASan itself aborts on allocations of the claimed sizes.
 * The trainer's resume arithmetic (optimizer_step, world_size, data cursor) is in
 * test_resume_bounds.c; paths that escape their directory in test_paths.c. */
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#include "data/shard.h"
#include "core/file.h"
#include "dtrain/checkpoint.h"
#include "dtrain/dtrain.h"
#include "dtrain/models.h"
#include "dtrain/ops_basic.h"
#include "dtrain/safetensors.h"
#include "dtrain/storage.h"
#include "dtrain/tokenizer.h"
#include "dtrain/track.h"
#include "harness.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

/* Headroom of the capped child: small next to every claim below (the smallest is the old
 * index.json reader's fixed 64 MiB buffer), ample for parsing a few KB. */
#define HEADROOM ((size_t)48 << 20)
#define GIB ((uint64_t)1 << 30)

static char g_tmp[256];

/* ---- fixtures ---------------------------------------------------------------------------- */

static void path_of(char *buf, size_t n, const char *rel) {
    snprintf(buf, n, "%s/%s", g_tmp, rel);
}

static void put(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(p, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = 0;
    CHECK(ok, "cannot write %s", path);
}

static void put_str(const char *path, const char *s) {
    put(path, s, strlen(s));
}

/* A file of `size` bytes that starts with `prefix` and is a hole after it (sparse: no disk). */
static void put_sparse(const char *path, const char *prefix, uint64_t size) {
    put_str(path, prefix);
    CHECK(truncate(path, (off_t)size) == 0, "cannot extend %s to %" PRIu64 " bytes", path, size);
}

static char *repeat(const char *s, int n, const char *head, const char *tail) {
    size_t l = strlen(s), h = strlen(head), t = strlen(tail);
    char *r = malloc(h + l * (size_t)n + t + 1);
    memcpy(r, head, h);
    for (int i = 0; i < n; i++) memcpy(r + h + l * (size_t)i, s, l);
    memcpy(r + h + l * (size_t)n, tail, t + 1);
    return r;
}

/* A safetensors file: u64 header length (hlen_claim, or the real padded one if 0), the JSON
 * header padded to 8 bytes, data_bytes zero bytes. */
static void put_st(const char *path, const char *json, size_t data_bytes, uint64_t hlen_claim) {
    size_t jl = strlen(json), pad = (8 - jl % 8) % 8, n = 8 + jl + pad + data_bytes;
    char *b = calloc(1, n);
    uint64_t hl = hlen_claim ? hlen_claim : jl + pad;
    memcpy(b, &hl, 8);
    memcpy(b + 8, json, jl);
    memset(b + 8 + jl, ' ', pad);
    put(path, b, n);
    free(b);
}

/* ---- the capped child ---------------------------------------------------------------------- */

typedef dt_status (*case_fn)(const void *arg);

typedef struct outcome {
    int status;
    int crashed; /* signal, or no report */
    char msg[2048];
} outcome;

#ifndef UNDER_ASAN
static size_t vm_size(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %zu kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb * 1024;
}
#endif

static outcome run_capped(case_fn fn, const void *arg) {
    outcome o = {0};
#ifdef UNDER_ASAN
    o.status = (int)fn(arg);
    snprintf(o.msg, sizeof o.msg, "%s", dt_last_error());
#else
    int fd[2];
    if (pipe(fd) != 0) {
        o.crashed = 1;
        snprintf(o.msg, sizeof o.msg, "pipe failed");
        return o;
    }
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        struct rlimit rl;
        rl.rlim_cur = rl.rlim_max = vm_size() + HEADROOM;
        if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(3);
        dt_status st = fn(arg);
        char buf[2100];
        int n = snprintf(buf, sizeof buf, "%d %s", (int)st, dt_last_error());
        if (n > (int)sizeof buf - 1) n = (int)sizeof buf - 1;
        if (write(fd[1], buf, (size_t)n) != n) _exit(4);
        _exit(0);
    }
    close(fd[1]);
    char buf[2100] = "";
    size_t got = 0;
    ssize_t r;
    while (got < sizeof buf - 1 && (r = read(fd[0], buf + got, sizeof buf - 1 - got)) > 0)
        got += (size_t)r;
    buf[got] = 0;
    close(fd[0]);
    int ws = 0;
    waitpid(pid, &ws, 0);
    int off = 0;
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0 || sscanf(buf, "%d %n", &o.status, &off) != 1) {
        o.crashed = 1;
        snprintf(o.msg, sizeof o.msg, "child %s %d", WIFSIGNALED(ws) ? "killed by signal" : "exit",
                 WIFSIGNALED(ws) ? WTERMSIG(ws) : WEXITSTATUS(ws));
    } else {
        snprintf(o.msg, sizeof o.msg, "%s", buf + off);
    }
#endif
    return o;
}

/* The case must fail with `want` and a message holding every needle; printed for the record. */
static void refused_(const char *what, case_fn fn, const void *arg, dt_status want,
                     const char *const *needles) {
    outcome o = run_capped(fn, arg);
    int ok = CHECK(!o.crashed, "%s: %s", what, o.msg);
    ok &= CHECK(o.status == (int)want, "%s: status %d (%s), expected %d (%s): %s", what, o.status,
                dt_status_name((dt_status)o.status), (int)want, dt_status_name(want), o.msg);
    for (int i = 0; needles[i]; i++)
        ok &= CHECK(strstr(o.msg, needles[i]) != NULL, "%s: the message lacks \"%s\": %s", what,
                    needles[i], o.msg);
    printf("%-4s %s\n     -> %s\n", ok ? "ok" : "FAIL", what, o.msg);
}
#define REFUSED(what, fn, arg, want, ...)                                                          \
    refused_(what, fn, arg, want, (const char *const[]){__VA_ARGS__, NULL})

/* ---- control: the cap is in force ------------------------------------------------------------ */

#ifndef UNDER_ASAN
static dt_status alloc_256m(const void *arg) {
    (void)arg;
    size_t n = (size_t)256 << 20;
    char *p = malloc(n);
    if (!p) return dt_error_set(DT_ERR_NOMEM, "control: malloc(256 MiB) failed");
    memset(p, 1, n);
    free(p);
    return DT_OK;
}
#endif

static void control(void) {
#ifdef UNDER_ASAN
    printf("AddressSanitizer: the address-space cap is not used (statuses and messages only)\n");
#else
    REFUSED("control: 256 MiB under the cap", alloc_256m, NULL, DT_ERR_NOMEM, "malloc(256 MiB)");
#endif
}

/* ---- safetensors -------------------------------------------------------------------------- */

static dt_status st_open(const void *path) {
    dt_st_file *f = NULL;
    dt_status st = dt_st_open(path, &f);
    dt_st_close(f);
    return st;
}

static dt_status st_header_size(const void *path) {
    /* the checkpoint restore's streaming path: the first 8 bytes and the listed size */
    size_t n = 0;
    char *d = dt_test_read_file(path, &n);
    size_t need = 0;
    dt_status st = d && n >= 8 ? dt_st_header_size(path, d, n, &need) : DT_ERR_IO;
    free(d);
    return st;
}

static void safetensors_cases(void) {
    char p[512];
    /* 1 KB whose header places a [2^20, 2^20] f32 tensor (4 TiB) at [0, 2^42) */
    path_of(p, sizeof p, "tensor-4tb.safetensors");
    put_st(p,
           "{\"w\":{\"dtype\":\"F32\",\"shape\":[1048576,1048576],"
           "\"data_offsets\":[0,4398046511104]}}",
           1024, 0);
    REFUSED("safetensors: 1 KB file, header places a 4 TiB tensor", st_open, p, DT_ERR_FORMAT, p,
            "'w'", "past the end of the data");
    /* the same shape with 1 KB of data offsets: the shape's product is checked against them */
    path_of(p, sizeof p, "shape-4tb.safetensors");
    put_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1048576,1048576],\"data_offsets\":[0,1024]}}",
           1024, 0);
    REFUSED("safetensors: shape [2^20, 2^20] f32 over 1 KB of data", st_open, p, DT_ERR_FORMAT, p,
            "'w'", "1024 bytes of data for 1099511627776");
    /* a shape whose product overflows 64 bits */
    path_of(p, sizeof p, "shape-overflow.safetensors");
    put_st(p,
           "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
           "\"data_offsets\":[0,0]}}",
           0, 0);
    REFUSED("safetensors: shape product over 2^64", st_open, p, DT_ERR_FORMAT, p, "'w'",
            "shape too large");
    /* the u64 header length claims 1 TiB */
    path_of(p, sizeof p, "header-1tb.safetensors");
    put_st(p, "{}", 1024, (uint64_t)1 << 40);
    REFUSED("safetensors: header length 2^40 in a 1 KB file", st_open, p, DT_ERR_FORMAT, p,
            "header size 1099511627776");
    REFUSED("safetensors (streaming restore): header length 2^40", st_header_size, p, DT_ERR_FORMAT,
            p, "header size 1099511627776");
    /* a JSON header nested 100000 deep (cJSON stops at 1000) */
    path_of(p, sizeof p, "nested.safetensors");
    char *deep = repeat("[", 100000, "", "");
    put_st(p, deep, 0, 0);
    free(deep);
    REFUSED("safetensors: header nested 100000 deep", st_open, p, DT_ERR_FORMAT, p,
            "not a JSON object");
}

/* ---- model.safetensors.index.json ----------------------------------------------------------- */

static dt_graph *g_model;
static char g_model_dir[512];

static dt_status model_load(const void *dir) {
    return dt_model_load(g_model, dir, NULL);
}

static void index_cases(void) {
    /* a one-parameter model, its weights in one shard named by an index */
    g_model = dt_graph_init();
    int w = dt_graph_param(g_model, "w", DT_F32, 2, (int64_t[]){2, 2}, 0);
    dt_graph_opts go = {.no_backward = 1};
    CHECK_OK(dt_graph_compile(g_model, dt_sum(g_model, w), &go));
    path_of(g_model_dir, sizeof g_model_dir, "model");
    mkdir(g_model_dir, 0755);
    char p[600], idx[600];
    snprintf(p, sizeof p, "%s/w-00001-of-00001.safetensors", g_model_dir);
    CHECK_OK(dt_model_save(g_model, p, -1));
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", g_model_dir);
    put_str(idx, "{\"metadata\": {\"total_size\": 16}, \"weight_map\": "
                 "{\"w\": \"w-00001-of-00001.safetensors\"}}");
    /* a 100-byte index loads under the cap: the old reader took 64 MiB for any index */
    outcome o = run_capped(model_load, g_model_dir);
    CHECK(!o.crashed && o.status == DT_OK, "index.json of 100 bytes: status %d: %s", o.status,
          o.msg);
    printf("%-4s index.json of 100 bytes loads, allocating by its size\n",
           !o.crashed && o.status == DT_OK ? "ok" : "FAIL");
    /* an index of 1 GiB (sparse): refused by its size, not read */
    put_sparse(idx, "{\"weight_map\": {\"w\": \"w-00001-of-00001.safetensors\"}}", GIB);
    REFUSED("index.json of 1 GiB", model_load, g_model_dir, DT_ERR_FORMAT, idx,
            "more than the 67108864-byte limit");
    /* nested 100000 deep */
    char *deep = repeat("{\"a\":", 100000, "", "");
    put_str(idx, deep);
    free(deep);
    REFUSED("index.json nested 100000 deep", model_load, g_model_dir, DT_ERR_FORMAT, idx,
            "not valid JSON");
    unlink(idx);
}

/* ---- config.json, adapter_config.json ----------------------------------------------------------
 */

static dt_status llama_config(const void *path) {
    dt_llama_config c;
    return dt_llama_config_load(path, &c);
}

static dt_status lora_config(const void *dir) {
    dt_llama_config c;
    memset(&c, 0, sizeof c);
    return dt_lora_config_load(dir, &c);
}

static const char *llama_json(const char *hidden, const char *vocab, const char *ffn,
                              const char *layers, char *buf, size_t n) {
    snprintf(buf, n,
             "{\"model_type\": \"llama\", \"vocab_size\": %s, \"hidden_size\": %s, "
             "\"intermediate_size\": %s, \"num_hidden_layers\": %s, \"num_attention_heads\": "
             "%s, \"num_key_value_heads\": 8, \"head_dim\": 128}",
             vocab, hidden, ffn, layers, "32");
    return buf;
}

static void config_json_cases(void) {
    char p[700], j[1024];
    path_of(p, sizeof p, "config.json");
    put_str(p, llama_json("1000000000", "32000", "11008", "32", j, sizeof j));
    REFUSED("config.json: hidden_size 1e9", llama_config, p, DT_ERR_FORMAT, p, "'hidden_size'",
            "[0, 1048576]");
    put_str(p, llama_json("4096", "1e300", "11008", "32", j, sizeof j));
    REFUSED("config.json: vocab_size 1e300", llama_config, p, DT_ERR_FORMAT, p, "'vocab_size'");
    put_str(p, llama_json("4096", "32000", "11008", "1e999", j, sizeof j));
    REFUSED("config.json: num_hidden_layers 1e999 (inf)", llama_config, p, DT_ERR_FORMAT, p,
            "'num_hidden_layers'");
    /* every size at its maximum: each is allowed, together they are 2^61 parameters, whose
     * bytes overflow int64 (`dtrain plan` printed negative GiB): refused */
    put_str(p, "{\"vocab_size\": 16777216, \"hidden_size\": 1048576, \"intermediate_size\": "
               "4194304, \"num_hidden_layers\": 65536, \"num_attention_heads\": 64, "
               "\"num_key_value_heads\": 64, \"head_dim\": 65536}");
    REFUSED("config.json: every size at its maximum (2^61 parameters)", llama_config, p,
            DT_ERR_FORMAT, p, "2017647954874073088 parameters", "(2^50)");
    /* the largest model in use is accepted, its count exact: Llama 3.1 405B has 405,853,388,800
     * parameters (Meta's model card) */
    put_str(p, "{\"vocab_size\": 128256, \"hidden_size\": 16384, \"intermediate_size\": 53248, "
               "\"num_hidden_layers\": 126, \"num_attention_heads\": 128, "
               "\"num_key_value_heads\": 8, \"tie_word_embeddings\": false}");
    dt_llama_config c;
    CHECK_OK(dt_llama_config_load(p, &c));
    CHECK(dt_llama_param_count(&c) == 405853388800LL, "Llama 3.1 405B: %lld parameters",
          (long long)dt_llama_param_count(&c));
    put_sparse(p, "{\"vocab_size\": 8}", GIB);
    REFUSED("config.json of 1 GiB", llama_config, p, DT_ERR_FORMAT, p,
            "more than the 16777216-byte limit");

    char dir[512];
    path_of(dir, sizeof dir, "adapter");
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/adapter_config.json", dir);
    put_str(p, "{\"peft_type\": \"LORA\", \"r\": 1e9, \"lora_alpha\": 16, "
               "\"target_modules\": [\"q_proj\"]}");
    REFUSED("adapter_config.json: r 1e9", lora_config, dir, DT_ERR_FORMAT, p, "key r");
    put_str(p, "{\"peft_type\": \"LORA\", \"r\": 8, \"lora_alpha\": 1e999, "
               "\"target_modules\": [\"q_proj\"]}");
    REFUSED("adapter_config.json: lora_alpha 1e999 (inf)", lora_config, dir, DT_ERR_FORMAT, p,
            "key lora_alpha");
    put_sparse(p, "{\"peft_type\": \"LORA\"}", GIB);
    REFUSED("adapter_config.json of 1 GiB", lora_config, dir, DT_ERR_FORMAT, p,
            "more than the 16777216-byte limit");
}

/* ---- tokenizers ---------------------------------------------------------------------------- */

static dt_status tok_load(const void *path) {
    dt_tokenizer *t = NULL;
    dt_status st = dt_tokenizer_load(path, &t);
    dt_tokenizer_free(t);
    return st;
}

static void b64(const uint8_t *s, size_t n, char *out) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) |
                     (i + 2 < n ? s[i + 2] : 0);
        out[o++] = tab[v >> 18 & 63], out[o++] = tab[v >> 12 & 63];
        out[o++] = i + 1 < n ? tab[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? tab[v & 63] : '=';
    }
    out[o] = 0;
}

/* A byte-level tiktoken rank file (256 ranks) plus `extra` lines. */
static void put_ranks(const char *path, const char *extra) {
    char *t = malloc(256 * 16 + strlen(extra) + 1);
    size_t o = 0;
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        char e[8];
        b64(&c, 1, e);
        o += (size_t)sprintf(t + o, "%s %d\n", e, b);
    }
    strcpy(t + o, extra);
    put_str(path, t);
    free(t);
}

static void tokenizer_cases(void) {
    char p[512];
    path_of(p, sizeof p, "tokenizer.json");
    /* 150 bytes naming id 2147483000: the id tables would be 16 GiB */
    put_str(p, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 2147483000}, "
               "\"merges\": []}}");
    REFUSED("tokenizer.json: vocabulary id 2147483000 in 90 bytes", tok_load, p, DT_ERR_RANGE, p,
            "model.vocab[\"b\"]", "2147483000 is too large");
    put_str(p, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
               "\"added_tokens\": [{\"id\": 1e12, \"content\": \"x\"}]}");
    REFUSED("tokenizer.json: added token id 1e12", tok_load, p, DT_ERR_FORMAT, p, "added_tokens",
            "not a token id");
    put_sparse(p, "{\"model\": {}}", GIB);
    REFUSED("tokenizer.json of 1 GiB", tok_load, p, DT_ERR_FORMAT, p,
            "more than the 134217728-byte limit");
    char *deep = repeat("[", 100000, "", "");
    put_str(p, deep);
    free(deep);
    REFUSED("tokenizer.json nested 100000 deep", tok_load, p, DT_ERR_FORMAT, p, "malformed JSON");

    path_of(p, sizeof p, "ranks.tiktoken");
    put_ranks(p, "YWI= 1073741824\n"); /* "ab" at rank 2^30 */
    REFUSED("tiktoken: rank 2^30 in a 2 KB file", tok_load, p, DT_ERR_RANGE, p,
            ":257:", "too large");
    put_sparse(p, "IQ== 0\n", GIB);
    REFUSED("tiktoken rank file of 1 GiB", tok_load, p, DT_ERR_FORMAT, p,
            "more than the 134217728-byte limit");
}

/* ---- dataset shards and manifests --------------------------------------------------------------
 */

static dt_status shard_open(const void *path) {
    dt_shard s;
    dt_status st = dt_shard_open(path, 0, &s);
    if (st == DT_OK) dt_shard_close(&s);
    return st;
}

static dt_status dataset_open(const void *dir) {
    dt_dataset *d = NULL;
    dt_status st = dt_dataset_open(dir, 0, &d);
    dt_dataset_close(d);
    return st;
}

/* A token shard with `records` documents, no tokens, and an offsets section of n_off entries. */
static void put_token_shard(const char *path, uint64_t records, uint64_t n_off) {
    dt_shard_header h;
    memset(&h, 0, sizeof h);
    h.kind = DT_DATA_TOKENS, h.dtype = DT_DATA_U32, h.records = records, h.elements = 0;
    h.n_sections = 2;
    h.sec[0] = (dt_shard_section){DT_SEC_TOKENS, DT_DATA_U32, 0, 0, 0};
    h.sec[1] = (dt_shard_section){DT_SEC_OFFSETS, DT_DATA_U64, 0, 8 * n_off, n_off};
    uint64_t *off = calloc(n_off + 1, 8);
    const void *data[2] = {off, off};
    CHECK_OK(dt_shard_write(path, &h, data));
    free(off);
}

static char g_ds[512];

/* Rewrites the dataset's manifest.json with fn applied to the parsed object. */
static void edit_manifest(const char *dir, void (*fn)(cJSON *)) {
    char p[600];
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    cJSON *o = dt_test_read_json(p);
    if (CHECK(o != NULL, "cannot read %s", p)) {
        fn(o);
        dt_test_write_json(p, o);
    }
    cJSON_Delete(o);
}

static void set_records_1e300(cJSON *o) {
    cJSON_ReplaceItemInObjectCaseSensitive(o, "records", cJSON_CreateNumber(1e300));
}
static void set_shard_bytes_2p60(cJSON *o) {
    cJSON *s = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "shards"), 0);
    cJSON_ReplaceItemInObjectCaseSensitive(s, "bytes", cJSON_CreateNumber(1152921504606846976.0));
}

static void make_dataset(const char *dir) {
    dt_dataset_spec spec = {.kind = DT_DATA_TOKENS, .vocab_size = 100, .name = "t"};
    dt_dataset_writer *w = NULL;
    CHECK_OK(dt_dataset_writer_open(dir, &spec, &w));
    uint32_t doc[5] = {1, 2, 3, 4, 5};
    for (int i = 0; w && i < 3; i++) CHECK_OK(dt_dataset_writer_add_doc(w, doc, NULL, 5));
    if (w) CHECK_OK(dt_dataset_writer_close(w));
}

static void data_cases(void) {
    char p[512];
    path_of(p, sizeof p, "records-2p40.dts");
    put_token_shard(p, (uint64_t)1 << 40, 1);
    REFUSED("shard: 2^40 records in a 264-byte file", shard_open, p, DT_ERR_FORMAT, p,
            "1099511627776 records (byte 24) cannot fit");
    /* 2^64 - 1 records: records + 1 offsets wraps to 0, and the old reader then walked the
     * offsets far past the mapping */
    path_of(p, sizeof p, "records-max.dts");
    put_token_shard(p, UINT64_MAX, 0);
    REFUSED("shard: 2^64-1 records, an empty offsets section", shard_open, p, DT_ERR_FORMAT, p,
            "18446744073709551615 records (byte 24) cannot fit");

    char man[600];
    path_of(g_ds, sizeof g_ds, "ds");
    make_dataset(g_ds);
    snprintf(man, sizeof man, "%s/manifest.json", g_ds);
    size_t n;
    char *good = dt_test_read_file(man, &n);
    CHECK_OK(dataset_open(g_ds));
    edit_manifest(g_ds, set_records_1e300);
    REFUSED("manifest.json: records 1e300", dataset_open, g_ds, DT_ERR_FORMAT, man,
            "\"records\" is missing or not a non-negative integer");
    put_str(man, good);
    edit_manifest(g_ds, set_shard_bytes_2p60);
    REFUSED("manifest.json: a shard's bytes 2^60", dataset_open, g_ds, DT_ERR_FORMAT, man,
            "shards[0].bytes", "not a non-negative integer");
    char *deep = repeat("[", 100000, "", "");
    put_str(man, deep);
    free(deep);
    REFUSED("manifest.json nested 100000 deep", dataset_open, g_ds, DT_ERR_FORMAT, man,
            "malformed JSON");
    put_sparse(man, "{\"format\": \"dtrain-dataset\"}", GIB);
    REFUSED("manifest.json of 1 GiB", dataset_open, g_ds, DT_ERR_FORMAT, man,
            "more than the 67108864-byte limit");
    put_str(man, good);
    CHECK_OK(dataset_open(g_ds));
    free(good);
}

/* ---- importers ------------------------------------------------------------------------------ */

typedef struct import_case {
    const char *kind, *src, *out, *tokenizer;
} import_case;

static dt_status import(const void *arg) {
    const import_case *c = arg;
    dt_import_options o;
    dt_import_options_default(&o);
    o.quiet = 1, o.tokenizer = c->tokenizer;
    dt_remove_tree(c->out);
    return dt_data_import(c->kind, &c->src, 1, c->out, &o);
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void import_cases(void) {
    char src[512], out[512], p[600];
    path_of(src, sizeof src, "idx");
    path_of(out, sizeof out, "idx-out");
    mkdir(src, 0755);
    import_case c = {"mnist", src, out, NULL};
    /* 1 KB claiming 60000 images of 10^6 x 10^6 */
    uint8_t b[1024] = {0};
    put_be32(b, 0x803), put_be32(b + 4, 60000), put_be32(b + 8, 1000000);
    put_be32(b + 12, 1000000);
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", src);
    put(p, b, sizeof b);
    REFUSED("IDX: 1 KB claiming 60000 x 10^6 x 10^6", import, &c, DT_ERR_FORMAT, p,
            "60000 x 1000000 x 1000000", "more than the 17179869184-byte limit");
    /* dimensions whose product overflows 64 bits */
    put_be32(b + 4, 0xffffffffu), put_be32(b + 8, 0xffffffffu), put_be32(b + 12, 0xffffffffu);
    put(p, b, sizeof b);
    REFUSED("IDX: dimensions 2^32-1 cubed (64-bit overflow)", import, &c, DT_ERR_FORMAT, p,
            "4294967295 x 4294967295 x 4294967295", "imply more than");
    /* a gzip stream whose header says 6 images of 28 x 28 (4720 bytes) but that inflates to
     * 256 MiB: stopped at the size the header implies */
    unlink(p);
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", src);
    gzFile g = gzopen(p, "wb9");
    memset(b, 0, sizeof b);
    put_be32(b, 0x803), put_be32(b + 4, 6), put_be32(b + 8, 28), put_be32(b + 12, 28);
    int ok = g && gzwrite(g, b, 16) == 16;
    static uint8_t zeros[1 << 20];
    for (int i = 0; ok && i < 256; i++) ok = gzwrite(g, zeros, sizeof zeros) == (int)sizeof zeros;
    if (g) gzclose(g);
    CHECK(ok, "cannot write %s", p);
    struct stat sb;
    stat(p, &sb);
    printf("     (gzip bomb: %lld bytes inflating to 256 MiB)\n", (long long)sb.st_size);
    REFUSED("IDX gzip: 4720 bytes by its header, inflates to 256 MiB", import, &c, DT_ERR_FORMAT, p,
            "inflates to more than 4720 bytes", "IDX header");
    unlink(p);

    /* CIFAR-10 has no size fields: a batch is read by its size, which must be whole records */
    path_of(src, sizeof src, "cifar");
    mkdir(src, 0755);
    snprintf(p, sizeof p, "%s/data_batch_1.bin", src);
    put(p, zeros, 4000);
    snprintf(p, sizeof p, "%s/test_batch.bin", src);
    put(p, zeros, 3073);
    snprintf(p, sizeof p, "%s/data_batch_1.bin", src);
    import_case cc = {"cifar10", src, out, NULL};
    REFUSED("CIFAR-10: a batch of 4000 bytes (1.3 records)", import, &cc, DT_ERR_FORMAT, p,
            "not a whole number of 3073-byte records");

    /* JSONL: a line nested 100000 deep */
    char tok[512];
    path_of(tok, sizeof tok, "bytes.tiktoken");
    put_ranks(tok, "");
    path_of(src, sizeof src, "deep.jsonl");
    char *deep = repeat("[", 100000, "", "\n");
    put_str(src, deep);
    free(deep);
    import_case jc = {"jsonl", src, out, tok};
    REFUSED("JSONL: a line nested 100000 deep", import, &jc, DT_ERR_FORMAT, src,
            ":1:", "malformed JSON");
}

/* ---- YAML: the config and the store's flattening of it -------------------------------------- */

static dt_status config_load(const void *path) {
    dt_config *c = NULL;
    dt_status st = dt_config_load(path, &c);
    dt_config_free(c);
    return st;
}

static int count_kv(void *ud, const char *k, const char *v) {
    (void)k, (void)v;
    ++*(int *)ud;
    return 0;
}

static dt_status flatten(const void *yaml) {
    int n = 0;
    return dt_track_flatten_yaml(yaml, count_kv, &n);
}

static void yaml_cases(void) {
    char p[512];
    path_of(p, sizeof p, "deep.yaml");
    char *deep = repeat("{a: ", 100000, "model:\n  hf_path: ", "\n");
    put_str(p, deep);
    REFUSED("config YAML: flow mappings nested 100000 deep", config_load, p, DT_ERR_FORMAT, p,
            ":2:", "model.hf_path");
    /* block mappings nested 1000 deep (1 MB of indentation) */
    size_t cap = 1100000, o = 0;
    char *blk = malloc(cap);
    o += (size_t)snprintf(blk, cap, "model:\n  hf_path:\n");
    for (int i = 2; i <= 1000 && o + 2 * (size_t)i + 8 < cap; i++)
        o += (size_t)snprintf(blk + o, cap - o, "%*sk%d:\n", 2 * i, "", i);
    put_str(p, blk);
    REFUSED("config YAML: block mappings nested 1000 deep", config_load, p, DT_ERR_FORMAT, p,
            ":3:", "model.hf_path");
    /* an 8 MiB config (one long scalar): cut off at 4 MiB, not held whole */
    size_t big = (size_t)8 << 20;
    char *s = malloc(big + 64);
    int h = snprintf(s, 64, "model:\n  hf_path: ");
    memset(s + h, 'x', big);
    strcpy(s + h + big, "\n");
    put_str(p, s);
    free(s);
    REFUSED("config YAML of 8 MiB", config_load, p, DT_ERR_FORMAT, p,
            "more than 4194304 bytes, the limit of a config file");

    /* the store's reader of a run's config */
    char *tail = repeat("]", 100000, "", "\n");
    char *fd = repeat("[", 100000, "a: ", tail);
    free(tail);
    REFUSED("config YAML (flatten): sequences nested 100000 deep", flatten, fd, DT_ERR_FORMAT,
            "config YAML", "nested too deeply");
    free(fd);
    o = 0;
    for (int i = 0; i <= 1000 && o + 2 * (size_t)i + 8 < cap; i++)
        o += (size_t)snprintf(blk + o, cap - o, "%*sk%d:\n", 2 * i, "", i);
    REFUSED("config YAML (flatten): block mappings nested 1000 deep", flatten, blk, DT_ERR_FORMAT,
            "nested too deeply");
    free(blk);
    free(deep);
}

/* ---- a checkpoint's trainer_state.json ------------------------------------------------------ */

static dt_store *g_store;

static dt_status ckpt_sizes(const void *dir) {
    return dt_ckpt_check(g_store, dir, DT_CKPT_SIZES, NULL);
}
static dt_status ckpt_sums(const void *dir) {
    return dt_ckpt_check(g_store, dir, DT_CKPT_CHECKSUMS, NULL);
}

static void ckpt_cases(void) {
    char root[512];
    path_of(root, sizeof root, "store");
    dt_store_opts so = dt_store_opts_default();
    so.fsync = 0;
    CHECK_OK(dt_store_open(root, &so, &g_store));
    if (!g_store) return;
    static const char model[] = "dtrain model bytes";
    CHECK_OK(dt_store_put(g_store, "ck/step-1/model.safetensors", model, sizeof model - 1));
    char state[512], sp[600];
    snprintf(sp, sizeof sp, "%s/ck/step-1/trainer_state.json", root);
    const char *dir = "ck/step-1";
    snprintf(state, sizeof state,
             "{\"files\": {\"model.safetensors\": {\"bytes\": 1152921504606846976, \"xxh3\": "
             "\"0000000000000000\"}}}");
    CHECK_OK(dt_store_put(g_store, "ck/step-1/trainer_state.json", state, strlen(state)));
    REFUSED("trainer_state.json: a file listed with 2^60 bytes (sizes)", ckpt_sizes, dir,
            DT_ERR_FORMAT, "ck/step-1/trainer_state.json", "files[\"model.safetensors\"]",
            "1152921504606846976 is not a size");
    REFUSED("trainer_state.json: a file listed with 2^60 bytes (checksums)", ckpt_sums, dir,
            DT_ERR_FORMAT, "ck/step-1/trainer_state.json", "files[\"model.safetensors\"]",
            "1152921504606846976 is not a size");
    snprintf(state, sizeof state,
             "{\"files\": {\"model.safetensors\": {\"bytes\": 1099511627776, \"xxh3\": "
             "\"0000000000000000\"}}}");
    CHECK_OK(dt_store_put(g_store, "ck/step-1/trainer_state.json", state, strlen(state)));
    REFUSED("trainer_state.json: an 18-byte file listed with 2^40 bytes (checksums)", ckpt_sums,
            dir, DT_ERR_FORMAT, "ck/step-1", "model.safetensors",
            "has 18 bytes, expected 1099511627776");
    snprintf(state, sizeof state,
             "{\"files\": {\"model.safetensors\": {\"bytes\": 1e999, \"xxh3\": "
             "\"0000000000000000\"}}}");
    CHECK_OK(dt_store_put(g_store, "ck/step-1/trainer_state.json", state, strlen(state)));
    REFUSED("trainer_state.json: a file listed with 1e999 (inf) bytes", ckpt_sums, dir,
            DT_ERR_FORMAT, "ck/step-1/trainer_state.json", "files[\"model.safetensors\"]",
            "is not a size");
    /* a listed size shorter than the file: read no further than the listed size */
    snprintf(state, sizeof state,
             "{\"files\": {\"model.safetensors\": {\"bytes\": 4, \"xxh3\": "
             "\"0000000000000000\"}}}");
    CHECK_OK(dt_store_put(g_store, "ck/step-1/trainer_state.json", state, strlen(state)));
    REFUSED("trainer_state.json: a file longer than listed (checksums)", ckpt_sums, dir,
            DT_ERR_FORMAT, "ck/step-1", "model.safetensors", "longer than the 4 bytes listed");
    char *deep = repeat("[", 100000, "", "");
    CHECK_OK(dt_store_put(g_store, "ck/step-1/trainer_state.json", deep, strlen(deep)));
    free(deep);
    REFUSED("trainer_state.json nested 100000 deep", ckpt_sums, dir, DT_ERR_FORMAT,
            "ck/step-1/trainer_state.json", "not valid JSON");
    put_sparse(sp, "{\"files\": {}}", GIB);
    REFUSED("trainer_state.json of 1 GiB", ckpt_sums, dir, DT_ERR_FORMAT,
            "ck/step-1/trainer_state.json", "more than 67108864 bytes");
    dt_store_close(g_store);
}

int main(void) {
    const char *name = "test_bounds";
    const char *t = getenv("TMPDIR");
    snprintf(g_tmp, sizeof g_tmp, "%s/dt-bounds-XXXXXX", t && *t ? t : "/tmp");
    if (!CHECK(mkdtemp(g_tmp) != NULL, "mkdtemp %s", g_tmp)) return dt_test_finish(name);
    control();
    safetensors_cases();
    index_cases();
    config_json_cases();
    tokenizer_cases();
    data_cases();
    import_cases();
    yaml_cases();
    ckpt_cases();
    dt_graph_free(g_model);
    dt_remove_tree(g_tmp);
    return dt_test_finish(name);
}
