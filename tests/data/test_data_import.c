/* Importers on small generated inputs: CIFAR-10 binary batches (CHW -> HWC, val split), IDX
 * files (malformed: bad magic, truncated, count mismatch, bad label, broken gzip), text files
 * (documents, separators, invalid UTF-8), JSONL instruction data (Llama 3 chat template, loss
 * mask only on assistant turns; Alpaca, ShareGPT and prompt/completion records; malformed lines
 * skipped, or refused with strict). Every failed import leaves nothing behind.
 *
 * usage: test_data_import TIKTOKEN_FILE */
#include <zlib.h>
#include "data_testutil.h"
#include "dtrain/tokenizer.h"

static const char *g_tmp, *g_tok;
static dt_import_options g_o;

static void wfile(const char *dir, const char *name, const void *data, size_t n) {
    char p[4300];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    dt_write_file(p, data, n);
}

static void check_nothing_left(const char *out) {
    CHECK(!dt_path_exists(out), "failed import left %s", out);
    CHECK(tu_count_entries(g_tmp, ".tmp-") == 0, "failed import left a temporary directory");
}

/* ---- CIFAR-10 ---- */

static void cifar_batch(const char *dir, const char *name, int n, int first, int bad_label) {
    uint8_t *b = malloc((size_t)n * 3073);
    for (int r = 0; r < n; r++) {
        uint8_t *rec = b + r * 3073;
        int g = first + r;
        rec[0] = (uint8_t)(r == bad_label ? 11 : g % 10);
        for (int c = 0; c < 3; c++)
            for (int p = 0; p < 1024; p++)
                rec[1 + c * 1024 + p] = (uint8_t)((g * (c + 1) + p) & 255);
    }
    wfile(dir, name, b, (size_t)n * 3073);
    free(b);
}

static void test_cifar(void) {
    char src[4200], out[4200], dir[4300];
    snprintf(src, sizeof src, "%s/cifar-src", g_tmp);
    mkdir(src, 0755);
    cifar_batch(src, "data_batch_1.bin", 30, 0, -1);
    cifar_batch(src, "data_batch_2.bin", 20, 30, -1);
    cifar_batch(src, "test_batch.bin", 10, 100, -1);
    snprintf(out, sizeof out, "%s/cifar", g_tmp);
    const char *srcs[] = {src};
    dt_import_options o = g_o;
    o.val_fraction = 0.2;
    CHECK_OK(dt_data_import("cifar10", srcs, 1, out, &o));
    int64_t seen[60] = {0}, total = 0;
    const char *splits[] = {"train", "val", "test"};
    int64_t want_n[] = {40, 10, 10};
    for (int s = 0; s < 3; s++) {
        snprintf(dir, sizeof dir, "%s/%s", out, splits[s]);
        dt_dataset *d;
        CHECK_OK(dt_dataset_open(dir, DT_DATA_VERIFY, &d));
        if (!d) continue;
        const dt_dataset_info *in = dt_dataset_get_info(d);
        CHECK(in->records == want_n[s] && in->height == 32 && in->width == 32 && in->channels == 3,
              "%s: %lld records", splits[s], (long long)in->records);
        for (int64_t i = 0; i < in->records; i++) {
            int32_t lab;
            const uint8_t *px = dt_dataset_image(d, i, &lab);
            /* find which record this is from pixel (0,0) of the red plane = g & 255 */
            int g = px[0];
            int ok = lab == g % 10;
            for (int y = 0; y < 32; y += 7)
                for (int x = 0; x < 32; x += 5)
                    for (int c = 0; c < 3; c++)
                        ok &=
                            px[(y * 32 + x) * 3 + c] == (uint8_t)((g * (c + 1) + y * 32 + x) & 255);
            CHECK(ok, "%s image %lld: HWC pixels or label wrong", splits[s], (long long)i);
            if (s < 2 && g < 60) seen[g]++;
            total++;
        }
        dt_dataset_close(d);
    }
    int once = 1;
    for (int g = 0; g < 50; g++) once &= seen[g] == 1;
    CHECK(once && total == 60, "train + val hold each train record once");

    /* corrupt inputs */
    char bad[4200];
    snprintf(bad, sizeof bad, "%s/cifar-bad", g_tmp);
    mkdir(bad, 0755);
    cifar_batch(bad, "data_batch_1.bin", 5, 0, 3);
    cifar_batch(bad, "test_batch.bin", 2, 0, -1);
    srcs[0] = bad;
    snprintf(out, sizeof out, "%s/cifar-out-bad", g_tmp);
    tu_check_error("cifar bad label", dt_data_import("cifar10", srcs, 1, out, &g_o),
                   "data_batch_1.bin: record 3 (byte 9219)", "label 11");
    check_nothing_left(out);
    cifar_batch(bad, "data_batch_1.bin", 5, 0, -1);
    char p[4300];
    snprintf(p, sizeof p, "%s/data_batch_1.bin", bad);
    truncate(p, 5 * 3073 - 10);
    tu_check_error("cifar truncated", dt_data_import("cifar10", srcs, 1, out, &g_o),
                   "data_batch_1.bin", "byte 12292 is truncated");
    check_nothing_left(out);
}

/* ---- IDX ---- */

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8),
    p[3] = (uint8_t)v;
}

static void idx_pair(const char *dir, const char *prefix, int n, uint32_t img_magic, int nlab,
                     int bad_label, long cut) {
    size_t isz = 16 + (size_t)n * 4, lsz = 8 + (size_t)nlab;
    uint8_t *im = calloc(isz, 1), *lb = calloc(lsz, 1);
    put_be32(im, img_magic), put_be32(im + 4, (uint32_t)n), put_be32(im + 8, 2),
        put_be32(im + 12, 2);
    for (size_t i = 16; i < isz; i++) im[i] = (uint8_t)i;
    put_be32(lb, 0x801), put_be32(lb + 4, (uint32_t)nlab);
    for (int i = 0; i < nlab; i++) lb[8 + i] = (uint8_t)(i == bad_label ? 12 : i % 10);
    char name[64];
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
    wfile(dir, name, im, cut ? (size_t)cut : isz);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
    wfile(dir, name, lb, lsz);
    free(im), free(lb);
}

static void test_idx(void) {
    char src[4200], out[4200], gz[4300];
    snprintf(src, sizeof src, "%s/idx", g_tmp);
    snprintf(out, sizeof out, "%s/idx-out", g_tmp);
    mkdir(src, 0755);
    const char *srcs[] = {src};
    idx_pair(src, "train", 6, 0x803, 6, -1, 0);
    idx_pair(src, "t10k", 3, 0x803, 3, -1, 0);
    CHECK_OK(dt_data_import("mnist", srcs, 1, out, &g_o));
    dt_remove_tree(out);

    idx_pair(src, "train", 6, 0x804, 6, -1, 0);
    tu_check_error("IDX bad magic", dt_data_import("mnist", srcs, 1, out, &g_o),
                   "train-images-idx3-ubyte", "bad magic 0x00000804 at byte 0");
    check_nothing_left(out);
    idx_pair(src, "train", 6, 0x803, 6, -1, 30);
    tu_check_error("IDX truncated", dt_data_import("mnist", srcs, 1, out, &g_o),
                   "train-images-idx3-ubyte", "data ends at byte 40, the file has 30");
    check_nothing_left(out);
    idx_pair(src, "train", 6, 0x803, 5, -1, 0);
    tu_check_error("IDX count mismatch", dt_data_import("mnist", srcs, 1, out, &g_o),
                   "train-labels-idx1-ubyte", "5 labels");
    check_nothing_left(out);
    idx_pair(src, "train", 6, 0x803, 6, 4, 0);
    tu_check_error("IDX bad label", dt_data_import("mnist", srcs, 1, out, &g_o),
                   "train-labels-idx1-ubyte", "label 12 at byte 12");
    check_nothing_left(out);
    /* the test split fails after train was written: still nothing left */
    idx_pair(src, "train", 6, 0x803, 6, -1, 0);
    idx_pair(src, "t10k", 3, 0x803, 3, 1, 0);
    tu_check_error("IDX bad test label", dt_data_import("mnist", srcs, 1, out, &g_o),
                   "t10k-labels-idx1-ubyte", "label 12");
    check_nothing_left(out);
    /* a truncated gzip file */
    idx_pair(src, "t10k", 3, 0x803, 3, -1, 0);
    snprintf(gz, sizeof gz, "%s/train-images-idx3-ubyte", src);
    uint8_t *raw;
    size_t len;
    dt_read_file(gz, 0, &raw, &len);
    unlink(gz);
    strcat(gz, ".gz");
    gzFile g = gzopen(gz, "wb");
    gzwrite(g, raw, (unsigned)len);
    gzclose(g);
    free(raw);
    CHECK_OK(dt_data_import("mnist", srcs, 1, out, &g_o)); /* .gz is read */
    dt_remove_tree(out);
    truncate(gz, tu_file_size(gz) - 12);
    tu_check_error("IDX truncated gzip", dt_data_import("mnist", srcs, 1, out, &g_o),
                   "train-images-idx3-ubyte.gz", "gzip");
    check_nothing_left(out);
    char missing[4200];
    snprintf(missing, sizeof missing, "%s/nothing-here", g_tmp);
    mkdir(missing, 0755);
    srcs[0] = missing;
    tu_check_error("IDX missing files", dt_data_import("fashion-mnist", srcs, 1, out, &g_o),
                   "no IDX file train-images-idx3-ubyte", NULL);
    check_nothing_left(out);
}

/* ---- text ---- */

static void test_text(void) {
    char src[4200], out[4200], dir[4300];
    snprintf(src, sizeof src, "%s/text", g_tmp);
    mkdir(src, 0755);
    const char *a = "First fortune.\nTwo lines.\n%\nSecond: caf\xc3\xa9 \xf0\x9f\x98\x80\n%\n\n%\n";
    const char *b = "Third, without a separator at the end.";
    wfile(src, "a.txt", a, strlen(a));
    wfile(src, "b.txt", b, strlen(b));
    wfile(src, "c.dat", "\0\1\2binary", 9); /* skipped: binary */
    snprintf(out, sizeof out, "%s/text-out", g_tmp);
    dt_import_options o = g_o;
    o.doc_separator = "%";
    const char *srcs[] = {src};
    CHECK_OK(dt_data_import("text", srcs, 1, out, &o));
    snprintf(dir, sizeof dir, "%s/train", out);
    dt_dataset *d;
    dt_tokenizer *t;
    CHECK_OK(dt_dataset_open(dir, DT_DATA_VERIFY, &d));
    CHECK_OK(dt_tokenizer_load(g_tok, &t));
    if (d && t) {
        const dt_dataset_info *in = dt_dataset_get_info(d);
        const char *want[] = {"First fortune.\nTwo lines.\n",
                              "Second: caf\xc3\xa9 \xf0\x9f\x98\x80\n", b};
        CHECK(in->records == 3 && !in->has_mask && in->eot_id == 100257,
              "text: %lld documents, eot %d", (long long)in->records, in->eot_id);
        for (int64_t i = 0; i < in->records && i < 3; i++) {
            const uint32_t *tk;
            int64_t len;
            dt_dataset_doc(d, i, &tk, NULL, &len);
            char *txt = NULL;
            size_t tl;
            int32_t ids[64];
            for (int64_t k = 0; k < len && k < 64; k++) ids[k] = (int32_t)tk[k];
            dt_tokenizer_decode(t, ids, len - 1, &txt, &tl);
            CHECK(txt && !strcmp(txt, want[i]) && tk[len - 1] == 100257,
                  "document %lld decodes to \"%s\"", (long long)i, txt ? txt : "");
            free(txt);
        }
    }
    dt_dataset_close(d);
    dt_tokenizer_free(t);

    /* invalid UTF-8 names file, line, column and byte */
    char bad[4200];
    snprintf(bad, sizeof bad, "%s/bad.txt", g_tmp);
    dt_write_file(bad, "hello\nwor\xffld\n", 12);
    srcs[0] = bad;
    snprintf(out, sizeof out, "%s/text-bad", g_tmp);
    tu_check_error("text invalid UTF-8", dt_data_import("text", srcs, 1, out, &o), "bad.txt:2:4",
                   "invalid UTF-8 (byte offset 9");
    check_nothing_left(out);
    o.tokenizer = "/nonexistent.tiktoken";
    tu_check_error("missing tokenizer", dt_data_import("text", srcs, 1, out, &o),
                   "/nonexistent.tiktoken", NULL);
    check_nothing_left(out);
}

/* ---- jsonl ---- */

static void test_jsonl(void) {
    char src[4200], out[4200], dir[4300];
    snprintf(src, sizeof src, "%s/chat.jsonl", g_tmp);
    const char *j =
        "{\"prompt\": \"What is 2+2?\", \"response\": \"4\"}\n"
        "\n"
        "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
        "\"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello! \\ud83d\\udc4b\"}, "
        "{\"role\": \"user\", \"content\": \"Bye\"}, {\"role\": \"assistant\", \"content\": "
        "\"  Goodbye.  \"}]}\n"
        "{\"system\": \"S\", \"prompt\": \"P <|eot_id|>\", \"response\": \"R\"}\n";
    dt_write_file(src, j, strlen(j));
    snprintf(out, sizeof out, "%s/chat-out", g_tmp);
    const char *srcs[] = {src};
    CHECK_OK(dt_data_import("jsonl", srcs, 1, out, &g_o));
    snprintf(dir, sizeof dir, "%s/train", out);
    dt_dataset *d;
    dt_tokenizer *t;
    CHECK_OK(dt_dataset_open(dir, DT_DATA_VERIFY, &d));
    CHECK_OK(dt_tokenizer_load(g_tok, &t));
    if (t) CHECK_OK(dt_tokenizer_add_llama3_chat(t));
    /* The template rendered as text (special tokens allowed) encodes to the same ids; the
     * trained-on tokens decode to exactly the assistant contents and their <|eot_id|>. */
    const char *H = "<|start_header_id|>", *E = "<|end_header_id|>\n\n", *T = "<|eot_id|>";
    char render[3][1024];
    snprintf(render[0], 1024, "<|begin_of_text|>%suser%sWhat is 2+2?%s%sassistant%s4%s", H, E, T, H,
             E, T);
    snprintf(render[1], 1024,
             "<|begin_of_text|>%ssystem%sBe brief.%s%suser%sHi%s%sassistant%sHello! "
             "\xf0\x9f\x91\x8b%s%suser%sBye%s%sassistant%sGoodbye.%s",
             H, E, T, H, E, T, H, E, T, H, E, T, H, E, T);
    const char *trained[3] = {"4<|eot_id|>", "Hello! \xf0\x9f\x91\x8b<|eot_id|>Goodbye.<|eot_id|>",
                              "R<|eot_id|>"};
    if (d && t) {
        const dt_dataset_info *in = dt_dataset_get_info(d);
        CHECK(in->records == 3 && in->has_mask && in->vocab_size == 100282 &&
                  in->eot_id == dt_tokenizer_special_id(t, "<|eot_id|>"),
              "jsonl: %lld records, mask %d, vocab %lld", (long long)in->records, in->has_mask,
              (long long)in->vocab_size);
        for (int64_t i = 0; i < in->records && i < 3; i++) {
            const uint32_t *tk;
            const uint8_t *m;
            int64_t len;
            dt_dataset_doc(d, i, &tk, &m, &len);
            int32_t *ids = malloc((size_t)len * 4), *sel = malloc((size_t)len * 4);
            int64_t ns = 0;
            for (int64_t k = 0; k < len; k++) {
                ids[k] = (int32_t)tk[k];
                if (m[k]) sel[ns++] = ids[k];
            }
            if (i < 2) {
                dt_tokens ref = {0};
                dt_tokenizer_encode(t, render[i], strlen(render[i]), DT_TOK_ALLOW_SPECIAL, &ref);
                int same = ref.n == len;
                for (int64_t k = 0; same && k < len; k++) same = ref.ids[k] == ids[k];
                CHECK(same, "record %lld: ids differ from the rendered template's", (long long)i);
                dt_tokens_free(&ref);
            } else {
                /* special-token text inside content is ordinary text, not a control token */
                char *txt = NULL;
                size_t tl;
                dt_tokenizer_decode(t, ids, len, &txt, &tl);
                CHECK(txt && strstr(txt, "P <|eot_id|><|eot_id|>"), "record 2 decodes to %s", txt);
                int n_eot = 0;
                for (int64_t k = 0; k < len; k++) n_eot += ids[k] == in->eot_id;
                CHECK(n_eot == 3, "record 2: %d <|eot_id|> tokens (3 turns)", n_eot);
                free(txt);
            }
            char *txt = NULL;
            size_t tl;
            dt_tokenizer_decode(t, sel, ns, &txt, &tl);
            CHECK(txt && !strcmp(txt, trained[i]), "record %lld trains on \"%s\"", (long long)i,
                  txt ? txt : "");
            free(txt);
            free(ids), free(sel);
        }
    }
    dt_dataset_close(d);
    dt_tokenizer_free(t);

    struct {
        const char *text, *what, *frag;
    } bad[] = {
        {"{\"prompt\": \"a\", \"response\": \"b\"}\n{\"prompt\": \"x\", \"response\": }\n",
         "malformed JSON", "chat-bad.jsonl:2:"},
        {"{\"foo\": 1}\n", "expected a record of one of messages", "chat-bad.jsonl:1:"},
        {"{\"prompt\": \"a\", \"response\": \"b\"} trailing\n", "unexpected text",
         "chat-bad.jsonl:1:"},
        {"\n\n{\"prompt\": \"caf\xe9\", \"response\": \"b\"}\n", "invalid UTF-8",
         "chat-bad.jsonl:3:16"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n", "no assistant message",
         "chat-bad.jsonl:1"},
        {"[1, 2]\n", "not a JSON object", "chat-bad.jsonl:1:"},
        {"{\"messages\": [{\"role\": \"user\"}]}\n", "messages[0]", "chat-bad.jsonl:1"},
        {"{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}\n", "role \"tool\"",
         "chat-bad.jsonl:1: "},
    };
    snprintf(src, sizeof src, "%s/chat-bad.jsonl", g_tmp);
    snprintf(out, sizeof out, "%s/chat-bad-out", g_tmp);
    dt_import_options strict = g_o;
    strict.strict = 1;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dt_write_file(src, bad[i].text, strlen(bad[i].text));
        tu_check_error(bad[i].what, dt_data_import("jsonl", srcs, 1, out, &strict), bad[i].frag,
                       bad[i].what);
        check_nothing_left(out);
    }
    /* by default a malformed record is skipped (counted); only bad ones: no documents */
    const char *mixed = "{\"prompt\": \"a\", \"response\": \"b\"}\n{\"prompt\": \"x\"}\n[1]\n"
                        "{\"prompt\": \"c\", \"response\": \"d\"}\n";
    dt_write_file(src, mixed, strlen(mixed));
    CHECK_OK(dt_data_import("jsonl", srcs, 1, out, &g_o));
    snprintf(dir, sizeof dir, "%s/train", out);
    if (dt_dataset_open(dir, 0, &d) == DT_OK) {
        CHECK(dt_dataset_get_info(d)->records == 2, "skip: %lld records, want 2",
              (long long)dt_dataset_get_info(d)->records);
        dt_dataset_close(d);
    }
    dt_remove_tree(out);
    dt_write_file(src, bad[1].text, strlen(bad[1].text));
    tu_check_error("only malformed records", dt_data_import("jsonl", srcs, 1, out, &g_o),
                   "1 malformed records skipped", "chat-bad.jsonl:1:");
    check_nothing_left(out);
}

/* Alpaca, ShareGPT and prompt/completion records against the token sequences written out by
 * hand: the Llama 3 rendering as text (special tokens recognised) and what is trained on. */
static void test_formats(void) {
    char src[4200], out[4200], dir[4300];
    snprintf(src, sizeof src, "%s/formats.jsonl", g_tmp);
    const char *j =
        "{\"instruction\": \"Add.\", \"input\": \"2 and 3\", \"output\": \"5\"}\n"
        "{\"instruction\": \"Say hi.\", \"input\": \"\", \"output\": \"hi\"}\n"
        "{\"conversations\": [{\"from\": \"system\", \"value\": \"S\"}, {\"from\": \"human\", "
        "\"value\": \"Q1\"}, {\"from\": \"gpt\", \"value\": \"A1\"}, {\"from\": \"user\", "
        "\"value\": \"Q2\"}, {\"from\": \"assistant\", \"value\": \"A2\"}]}\n"
        "{\"prompt\": \"The sky is\", \"completion\": \" blue.\"}\n"
        "{\"conversations\": [{\"from\": \"bing\", \"value\": \"x\"}]}\n";
    dt_write_file(src, j, strlen(j));
    snprintf(out, sizeof out, "%s/formats-out", g_tmp);
    const char *srcs[] = {src};
    dt_import_options o = g_o;
    o.system = "Be kind.";
    CHECK_OK(dt_data_import("jsonl", srcs, 1, out, &o));
    const char *H = "<|start_header_id|>", *E = "<|end_header_id|>\n\n", *T = "<|eot_id|>";
    char render[4][1024];
    snprintf(render[0], 1024,
             "<|begin_of_text|>%ssystem%sBe kind.%s%suser%sAdd.\n\n2 and 3%s%sassistant%s5%s", H, E,
             T, H, E, T, H, E, T);
    snprintf(render[1], 1024,
             "<|begin_of_text|>%ssystem%sBe kind.%s%suser%sSay hi.%s%sassistant%shi%s", H, E, T, H,
             E, T, H, E, T);
    snprintf(render[2], 1024,
             "<|begin_of_text|>%ssystem%sS%s%suser%sQ1%s%sassistant%sA1%s%suser%sQ2%s%s"
             "assistant%sA2%s",
             H, E, T, H, E, T, H, E, T, H, E, T, H, E, T);
    snprintf(render[3], 1024, "The sky is blue.<|endoftext|>"); /* cl100k: no BOS */
    const char *trained[4] = {"5<|eot_id|>", "hi<|eot_id|>", "A1<|eot_id|>A2<|eot_id|>",
                              " blue.<|endoftext|>"};
    dt_dataset *d;
    dt_tokenizer *t;
    snprintf(dir, sizeof dir, "%s/train", out);
    CHECK_OK(dt_dataset_open(dir, 0, &d));
    CHECK_OK(dt_tokenizer_load(g_tok, &t));
    if (t) CHECK_OK(dt_tokenizer_add_llama3_chat(t));
    CHECK(d && dt_dataset_get_info(d)->records == 4,
          "formats: %lld records (the ShareGPT "
          "record with from \"bing\" skipped)",
          d ? (long long)dt_dataset_get_info(d)->records : -1);
    for (int64_t i = 0; d && t && i < 4 && i < dt_dataset_get_info(d)->records; i++) {
        const uint32_t *tk;
        const uint8_t *m;
        int64_t len, ns = 0;
        dt_dataset_doc(d, i, &tk, &m, &len);
        dt_tokens ref = {0};
        dt_tokenizer_encode(t, render[i], strlen(render[i]), DT_TOK_ALLOW_SPECIAL, &ref);
        int32_t *sel = malloc((size_t)len * 4);
        int same = ref.n == len;
        for (int64_t k = 0; k < len; k++) {
            same = same && ref.ids[k] == (int32_t)tk[k];
            if (m[k]) sel[ns++] = (int32_t)tk[k];
        }
        CHECK(same, "formats record %lld: ids differ from \"%s\"", (long long)i, render[i]);
        char *txt = NULL;
        size_t tl;
        dt_tokenizer_decode(t, sel, ns, &txt, &tl);
        CHECK(txt && !strcmp(txt, trained[i]), "formats record %lld trains on \"%s\"", (long long)i,
              txt ? txt : "");
        free(txt), free(sel);
        dt_tokens_free(&ref);
    }
    dt_dataset_close(d);
    dt_tokenizer_free(t);
    o.format = "alpaca", o.strict = 1;
    snprintf(out, sizeof out, "%s/formats-alpaca", g_tmp);
    tu_check_error("--format alpaca on ShareGPT", dt_data_import("jsonl", srcs, 1, out, &o),
                   "formats.jsonl:3: ", "Alpaca needs");
    o.format = "sharegpt";
    tu_check_error("--format sharegpt", dt_data_import("jsonl", srcs, 1, out, &o),
                   "formats.jsonl:1: ", "\"conversations\" must be an array");
    o.format = "xml";
    tu_check_error("--format xml", dt_data_import("jsonl", srcs, 1, out, &o), "--format xml",
                   "unknown");
    check_nothing_left(out);
}

int main(int argc, char **argv) {
    char tmp[4096];
    g_tok = argc > 1 ? argv[1] : "data/tokenizers/cl100k_base.tiktoken";
    g_tmp = tu_tempdir(tmp, sizeof tmp, "import");
    if (!CHECK(g_tmp, "mkdtemp")) return dt_test_finish("test_data_import");
    dt_import_options_default(&g_o);
    g_o.quiet = 1;
    g_o.tokenizer = g_tok;
    test_cifar();
    test_idx();
    test_text();
    test_jsonl();
    test_formats();
    const char *srcs[] = {g_tmp};
    char out[4200];
    snprintf(out, sizeof out, "%s/x", g_tmp);
    tu_check_error("unknown kind", dt_data_import("imagenet", srcs, 1, out, &g_o), "imagenet",
                   NULL);
    tu_check_error("existing output", dt_data_import("text", srcs, 1, g_tmp, &g_o), g_tmp,
                   "already exists");
    dt_remove_tree(tmp);
    return dt_test_finish("test_data_import");
}
