/* S3 credentials from the shared credentials file (src/store/storage_s3.c), through
 * dt_store_open("s3://..."), and which key a request is then signed with: a one-shot HTTP
 * server in this process reads the request's Authorization header (SigV4:
 * "Credential=KEYID/date/region/s3/aws4_request") and answers 404 to the HEAD of dt_store_stat.
 * Checks: the environment's keys come first; the file (AWS_SHARED_CREDENTIALS_FILE, else
 * $HOME/.aws/credentials) and its profile (AWS_PROFILE, else default) otherwise; INI details
 * (comments, blanks around '=', case of keys, CRLF); refused files (any group/other mode bit,
 * another owner, a folder, over 64 KiB) and malformed ones (no ']', a line without '=', a
 * missing profile or key, an over-long value) each with a one-line message naming the file,
 * and never the secret or the text of a line; hostile bytes (NULs, junk) never crash (ASan);
 * a URL with KEY:SECRET@ in it is refused without being echoed. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include "dtrain/storage.h"
#include "harness.h"

#define SECRET "SeCrEt-do-not-print-0123456789"

static char g_dir[256], g_file[512];

/* ---- a server for one request: records the access key id it was signed with -------------- */

typedef struct server {
    int fd, port;
    char keyid[128];
    pthread_t th;
} server;

static void *serve_one(void *arg) {
    server *s = arg;
    int c = accept(s->fd, NULL, NULL);
    if (c < 0) return NULL;
    char buf[16384];
    size_t n = 0;
    while (n + 1 < sizeof buf) {
        ssize_t k = recv(c, buf + n, sizeof buf - 1 - n, 0);
        if (k <= 0) break;
        n += (size_t)k;
        buf[n] = 0;
        if (strstr(buf, "\r\n\r\n")) break;
    }
    buf[n] = 0;
    const char *cr = strstr(buf, "Credential=");
    if (cr) sscanf(cr + 11, "%127[^/]", s->keyid);
    const char *r = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    send(c, r, strlen(r), MSG_NOSIGNAL);
    close(c);
    return NULL;
}

/* Opens s3://bkt with the current environment and signs one request; returns the key id the
 * request carried ("" if none), or NULL when the open failed (message in dt_last_error()). */
static const char *signed_with(char *out, size_t cap) {
    server sv = {.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (sv.fd < 0 || bind(sv.fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(sv.fd, 4) != 0 ||
        getsockname(sv.fd, (struct sockaddr *)&a, &al) != 0) {
        CHECK(0, "server socket: %s", strerror(errno));
        return NULL;
    }
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", ntohs(a.sin_port));
    setenv("AWS_ENDPOINT_URL", ep, 1);
    dt_store_opts o = dt_store_opts_default();
    o.max_retries = 0;
    o.timeout_s = 5;
    dt_store *s = NULL;
    dt_status st = dt_store_open("s3://bkt/p", &o, &s);
    const char *ret = NULL;
    if (st == DT_OK) {
        pthread_create(&sv.th, NULL, serve_one, &sv);
        size_t sz;
        dt_status ss = dt_store_stat(s, "k", &sz);
        CHECK(ss == DT_ERR_NOTFOUND, "stat on the one-shot server: %d %s", (int)ss,
              dt_last_error());
        pthread_join(sv.th, NULL);
        dt_store_close(s);
        snprintf(out, cap, "%s", sv.keyid);
        ret = out;
    }
    close(sv.fd);
    return ret;
}

static void write_file(const char *path, const char *text, size_t n, mode_t mode) {
    unlink(path);
    FILE *f = fopen(path, "wb");
    if (!f) {
        CHECK(0, "%s: %s", path, strerror(errno));
        return;
    }
    fwrite(text, 1, n, f);
    fclose(f);
    chmod(path, mode);
}

static void creds(const char *text, mode_t mode) {
    write_file(g_file, text, strlen(text), mode);
}

static void expect_key(const char *want, const char *what) {
    char got[128];
    const char *k = signed_with(got, sizeof got);
    CHECK(k && !strcmp(k, want), "%s: signed with '%s' (expected %s; %s)", what,
          k ? k : "(open failed)", want, k ? "" : dt_last_error());
}

/* The open fails with one line holding every `want` and neither the secret nor `never`. */
static void expect_refused(const char *what, const char *never, const char *w1, const char *w2) {
    char got[128];
    const char *k = signed_with(got, sizeof got);
    const char *m = dt_last_error();
    CHECK(!k && strstr(m, w1) && (!w2 || strstr(m, w2)) && !strstr(m, SECRET) &&
              (!never || !strstr(m, never)) && !strchr(m, '\n'),
          "%s: refused with one line naming '%s'%s%s: %s", what, w1, w2 ? " and " : "",
          w2 ? w2 : "", k ? "(it was accepted)" : m);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/dt-creds-XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    snprintf(g_file, sizeof g_file, "%s/credentials", g_dir);
    unsetenv("AWS_PROFILE");
    unsetenv("AWS_SESSION_TOKEN");
    setenv("AWS_REGION", "us-east-1", 1);

    /* the environment first, whatever the file says */
    setenv("AWS_SHARED_CREDENTIALS_FILE", g_file, 1);
    creds("[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = " SECRET "\n", 0600);
    setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
    setenv("AWS_SECRET_ACCESS_KEY", SECRET, 1);
    expect_key("ENVKEY", "environment set");
    unsetenv("AWS_SECRET_ACCESS_KEY"); /* a key id without its secret: an error, not the file */
    expect_refused("AWS_ACCESS_KEY_ID without the secret", NULL, "AWS_SECRET_ACCESS_KEY is not set",
                   NULL);
    unsetenv("AWS_ACCESS_KEY_ID");

    /* the file: [default], then AWS_PROFILE */
    expect_key("FILEKEY", "the file's [default]");
    creds(
        "# comment\n; comment\n\n[other]\naws_access_key_id=OTHERKEY\naws_secret_access_key="
        "x\n\n  [ default ]  \n\tAWS_ACCESS_KEY_ID\t=\tDEFKEY  \r\nAws_Secret_Access_Key = " SECRET
        "\r\naws_session_token = TOKEN123\nregion = ignored\n[third]\naws_access_key_id = THIRD\n",
        0600);
    expect_key("DEFKEY", "INI details: comments, blanks, key case, CRLF, other keys");
    setenv("AWS_PROFILE", "other", 1);
    expect_key("OTHERKEY", "AWS_PROFILE=other");
    setenv("AWS_PROFILE", "third", 1);
    expect_refused("a profile without a secret", NULL, "profile [third]: no aws_secret_access_key",
                   g_file);
    setenv("AWS_PROFILE", "nope", 1);
    expect_refused("a missing profile", NULL, "has no profile [nope]", g_file);
    unsetenv("AWS_PROFILE");

    /* $HOME/.aws/credentials when AWS_SHARED_CREDENTIALS_FILE is not set */
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    char home[300], aws[320], hf[360];
    snprintf(home, sizeof home, "%s/home", g_dir);
    snprintf(aws, sizeof aws, "%s/.aws", home);
    snprintf(hf, sizeof hf, "%s/credentials", aws);
    mkdir(home, 0700);
    mkdir(aws, 0700);
    setenv("HOME", home, 1);
    expect_refused("no file at all", NULL, "AWS_ACCESS_KEY_ID is not set", hf);
    static const char htext[] =
        "[default]\naws_access_key_id=HOMEKEY\naws_secret_access_key=" SECRET "\n";
    write_file(hf, htext, sizeof htext - 1, 0600);
    expect_key("HOMEKEY", "$HOME/.aws/credentials");
    setenv("AWS_SHARED_CREDENTIALS_FILE", g_file, 1);

    /* permissions: any group or other bit refuses it */
    const mode_t bad[] = {0644, 0640, 0660, 0604, 0602, 0620, 0610, 0601, 0666};
    for (int i = 0; i < 9; i++) {
        creds("[default]\naws_access_key_id = K\naws_secret_access_key = " SECRET "\n", bad[i]);
        char mode[64];
        snprintf(mode, sizeof mode, "has mode %04o", (unsigned)bad[i]);
        expect_refused(mode, NULL, mode, "chmod 600");
    }
    creds("[default]\naws_access_key_id = K4\naws_secret_access_key = " SECRET "\n", 0400);
    expect_key("K4", "mode 400");
    if (geteuid() == 0) {
        creds("[default]\naws_access_key_id = K\naws_secret_access_key = " SECRET "\n", 0600);
        CHECK(chown(g_file, 65534, 65534) == 0, "chown");
        expect_refused("a file of another user", NULL, "owned by uid 65534", g_file);
    }
    setenv("AWS_SHARED_CREDENTIALS_FILE", g_dir, 1);
    expect_refused("a folder", NULL, "not a regular file", g_dir);
    setenv("AWS_SHARED_CREDENTIALS_FILE", g_file, 1);

    /* malformed: messages give the line number, never the line (it may hold a secret) */
    creds("[default\naws_secret_access_key = " SECRET "\n", 0600);
    expect_refused("no ']'", NULL, "line 1: no ']'", g_file);
    creds("[default]\naws_access_key_id = K\n" SECRET "\n", 0600);
    expect_refused("a line without '='", NULL, "line 3: expected 'key = value'", g_file);
    char *big = malloc(100000);
    int k = snprintf(big, 100000, "[default]\naws_access_key_id = K\naws_secret_access_key = ");
    memset(big + k, 's', 300);
    snprintf(big + k + 300, 100, "\n");
    creds(big, 0600);
    expect_refused("a 300-byte secret", "sssssssssssssssssss", "line 3", "too long");
    memset(big, '#', 99999);
    big[99999] = 0;
    creds(big, 0600);
    expect_refused("a 100 KB file", NULL, "more than", g_file);
    /* hostile bytes: NULs, every byte value, no newline at the end */
    unsigned char junk[3000];
    for (int i = 0; i < 3000; i++) junk[i] = (unsigned char)(i * 131 + 7);
    write_file(g_file, (const char *)junk, sizeof junk, 0600);
    char got[128];
    CHECK(!signed_with(got, sizeof got), "binary junk refused: %s", dt_last_error());
    static const char nul[] = "[default]\naws_access_key_id = NK\0junk\naws_secret_access_key = "
                              "S\n";
    write_file(g_file, nul, sizeof nul - 1, 0600);
    const char *kk = signed_with(got, sizeof got);
    CHECK(!kk || !strcmp(kk, "NK"), "a NUL inside the file: %s", kk ? kk : dt_last_error());
    creds("[default]\naws_access_key_id = K5\naws_secret_access_key = " SECRET, 0600);
    expect_key("K5", "no newline at the end");
    free(big);
    /* credentials in the URL: refused without showing them */
    dt_store *s = NULL;
    CHECK(dt_store_open("s3://AKIDX:" SECRET "@bkt/p", NULL, &s) == DT_ERR_INVALID && !s &&
              !strstr(dt_last_error(), SECRET) && strstr(dt_last_error(), "not shown"),
          "s3://KEY:SECRET@bucket: %s", dt_last_error());

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", g_dir);
    return dt_test_finish("secrets_creds");
}
