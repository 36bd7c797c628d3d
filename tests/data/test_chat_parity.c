/* JSONL chat import against transformers: for each model folder ref_chat_templates.py made
 * (Llama 3, Llama 3.1, Qwen 2 and 2.5 ChatML, Mistral v0.3, Gemma 2: a byte-level tokenizer.json
 * and a tokenizer_config.json carrying the family's published chat_template; Mistral and Gemma 2
 * also with SentencePiece-style tokenizers, byte fallback included), `dtrain data import
 * jsonl --tokenizer FOLDER` must give apply_chat_template's ids token for token, and the loss
 * mask the Python side computed over the assistant turns. Then the refusals: templates of other
 * families or variants, Gemma with a system prompt; and --train-on last.
 *
 * usage: test_chat_parity REF_DIR */
#include <inttypes.h>
#include "data_testutil.h"

/* CHECK_OK as an expression: 1 when st is DT_OK */
#define OK(expr) ok_((expr), #expr)
static int ok_(dt_status st, const char *what) {
    return CHECK(st == DT_OK, "%s: status %d: %s", what, (int)st, dt_last_error());
}

static const char *g_ref, *g_tmp; /* (short paths: the buffers below are sized for them) */

/* Imports FOLDER/records.jsonl with the folder as tokenizer into g_tmp/NAME. */
static dt_status import(const char *name, const char *folder, const dt_import_options *o, char *out,
                        size_t n) {
    char src[4300];
    snprintf(src, sizeof src, "%s/records.jsonl", folder);
    snprintf(out, n, "%s/%s", g_tmp, name);
    const char *srcs[] = {src};
    return dt_data_import("jsonl", srcs, 1, out, o);
}

static void check_family(const char *fam) {
    char folder[1024], out[2048], path[4400];
    snprintf(folder, sizeof folder, "%s/chat-%s", g_ref, fam);
    dt_import_options o;
    dt_import_options_default(&o);
    o.quiet = 1, o.tokenizer = folder, o.strict = 1;
    if (!OK(import(fam, folder, &o, out, sizeof out))) return;
    snprintf(path, sizeof path, "%s/train", out);
    dt_dataset *d;
    if (!OK(dt_dataset_open(path, DT_DATA_VERIFY, &d))) return;
    snprintf(path, sizeof path, "%s/expected.txt", folder);
    FILE *f = fopen(path, "r");
    CHECK(f, "%s: cannot open", path);
    const dt_dataset_info *in = dt_dataset_get_info(d);
    int64_t rec = 0, n;
    while (f && fscanf(f, "%" SCNd64, &n) == 1) {
        int64_t len = 0;
        const uint32_t *tk = NULL;
        const uint8_t *m = NULL;
        if (rec < in->records) dt_dataset_doc(d, rec, &tk, &m, &len);
        int ids_ok = len == n, mask_ok = len == n;
        int64_t first_bad = -1;
        for (int64_t k = 0; k < n; k++) {
            long v;
            if (fscanf(f, "%ld", &v) != 1) break;
            if (k < len && (long)tk[k] != v && first_bad < 0) ids_ok = 0, first_bad = k;
        }
        for (int64_t k = 0; k < n; k++) {
            int v;
            if (fscanf(f, "%d", &v) != 1) break;
            if (k < len && m[k] != v) mask_ok = 0;
        }
        CHECK(ids_ok, "%s record %lld: %lld ids, transformers %lld (first difference at %lld)", fam,
              (long long)rec, (long long)len, (long long)n, (long long)first_bad);
        CHECK(mask_ok, "%s record %lld: loss mask differs from the assistant spans", fam,
              (long long)rec);
        rec++;
    }
    CHECK(rec > 0 && rec == in->records, "%s: %lld expected records, %lld imported", fam,
          (long long)rec, (long long)in->records);
    if (f) fclose(f);
    dt_dataset_close(d);
    /* the tokenizer was used as is (the template's tokens are its own): a model trained on the
     * data is exported with it and its tokenizer_config.json */
    char exp[2100], a[2200], b[2200];
    snprintf(exp, sizeof exp, "%s/export-%s", g_tmp, fam);
    mkdir(exp, 0755);
    snprintf(path, sizeof path, "%s/train", out);
    int copied = 0;
    CHECK(dt_dataset_tokenizer_export(path, exp, &copied) == DT_OK && copied,
          "%s: the tokenizer is not exported with the data's model", fam);
    snprintf(a, sizeof a, "%s/tokenizer_config.json", exp);
    snprintf(b, sizeof b, "%s/tokenizer_config.json", folder);
    long la = tu_file_size(a), lb = tu_file_size(b);
    CHECK(la > 0 && la == lb, "%s: exported tokenizer_config.json %ld bytes, the folder's %ld", fam,
          la, lb);
}

/* --train-on last: the mask is the default's on the last assistant turn only (record 1 of the
 * Llama 3 folder has two: fewer trained tokens, none new). */
static void check_train_last(void) {
    char folder[1024], out[2][2048], path[4400];
    snprintf(folder, sizeof folder, "%s/chat-llama3", g_ref);
    dt_import_options o;
    dt_import_options_default(&o);
    o.quiet = 1, o.tokenizer = folder;
    dt_dataset *d[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        o.train_last = i;
        CHECK_OK(import(i ? "last" : "all", folder, &o, out[i], sizeof out[i]));
        snprintf(path, sizeof path, "%s/train", out[i]);
        CHECK_OK(dt_dataset_open(path, 0, &d[i]));
    }
    if (!d[0] || !d[1]) return;
    const uint32_t *t0, *t1;
    const uint8_t *m0, *m1;
    int64_t l0, l1, n0 = 0, n1 = 0, extra = 0;
    dt_dataset_doc(d[0], 1, &t0, &m0, &l0);
    dt_dataset_doc(d[1], 1, &t1, &m1, &l1);
    int64_t last = -1; /* where the last assistant turn starts: after the last 0 -> 1 edge */
    for (int64_t k = 1; k < l0; k++)
        if (m0[k] && !m0[k - 1]) last = k;
    for (int64_t k = 0; k < l0 && l0 == l1; k++) {
        n0 += m0[k], n1 += m1[k];
        extra += m1[k] != (k >= last ? m0[k] : 0);
    }
    CHECK(l0 == l1 && last > 0 && n1 < n0 && n1 > 0 && extra == 0,
          "--train-on last: %lld of %lld tokens trained (all: %lld), %lld off the last turn",
          (long long)n1, (long long)l1, (long long)n0, (long long)extra);
    dt_dataset_close(d[0]);
    dt_dataset_close(d[1]);
}

static void check_refusals(void) {
    char folder[1024], out[2048];
    dt_import_options o;
    dt_import_options_default(&o);
    o.quiet = 1;
    const struct {
        const char *fam, *frag;
    } bad[] = {
        {"zephyr", "chat_template \"{% for message in messages %}{% if messa...\" is not"},
        {"nemo", "other than Mistral-7B-Instruct-v0.3"},
        {"llama32", "strftime_now"},
    };
    for (int i = 0; i < 3; i++) {
        snprintf(folder, sizeof folder, "%s/chat-%s", g_ref, bad[i].fam);
        o.tokenizer = folder;
        char src[4300];
        snprintf(src, sizeof src, "%s/chat-llama3/records.jsonl", g_ref);
        snprintf(out, sizeof out, "%s/refused-%s", g_tmp, bad[i].fam);
        const char *srcs[] = {src};
        tu_check_error(bad[i].fam, dt_data_import("jsonl", srcs, 1, out, &o), bad[i].frag,
                       "tokenizer_config.json");
        CHECK(!dt_path_exists(out), "refused import left %s", out);
    }
    /* Gemma 2 has no system role: --system is refused, a record with one is skipped (strict:
     * refused with its file and line) */
    snprintf(folder, sizeof folder, "%s/chat-gemma2", g_ref);
    o.tokenizer = folder;
    o.system = "Be brief.";
    tu_check_error("gemma --system", import("gemma-sys", folder, &o, out, sizeof out), "--system",
                   "no system role");
    o.system = NULL;
    char src[4300];
    snprintf(src, sizeof src, "%s/gemma-system.jsonl", g_tmp);
    const char *j = "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": "
                    "\"assistant\", \"content\": \"b\"}]}\n"
                    "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": "
                    "\"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": "
                    "\"b\"}]}\n";
    dt_write_file(src, j, strlen(j));
    const char *srcs[] = {src};
    snprintf(out, sizeof out, "%s/gemma-skip", g_tmp);
    CHECK_OK(dt_data_import("jsonl", srcs, 1, out, &o));
    dt_dataset *d;
    char path[4400];
    snprintf(path, sizeof path, "%s/train", out);
    if (OK(dt_dataset_open(path, 0, &d))) {
        CHECK(dt_dataset_get_info(d)->records == 1, "gemma: %lld records, want 1 (one skipped)",
              (long long)dt_dataset_get_info(d)->records);
        dt_dataset_close(d);
    }
    o.strict = 1;
    snprintf(out, sizeof out, "%s/gemma-strict", g_tmp);
    tu_check_error("gemma system record, --strict", dt_data_import("jsonl", srcs, 1, out, &o),
                   "gemma-system.jsonl:2: ", "system role not supported");
}

int main(int argc, char **argv) {
    char tmp[4096];
    g_ref = argc > 1 ? argv[1] : getenv("DT_REF_DIR");
    g_tmp = tu_tempdir(tmp, sizeof tmp, "chat");
    if (!CHECK(g_ref && g_tmp, "usage: test_chat_parity REF_DIR")) return dt_test_finish("chat");
    const char *fams[] = {"llama3", "llama31",    "qwen2",      "qwen25",   "mistral",
                          "gemma2", "mistral-sp", "mistral-ms", "gemma2-sp"};
    for (int i = 0; i < 9; i++) check_family(fams[i]);
    check_train_last();
    check_refusals();
    dt_remove_tree(tmp);
    return dt_test_finish("test_chat_parity");
}
