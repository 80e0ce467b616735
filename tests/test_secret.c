/* ctest: TIMEOUT 180 LABELS faults */
/*
 * The secret of a job started from the environment (ccl_comm_init_env).
 * With CCL_SECRET_FILE, a stranger who can reach the root and computes the
 * secret a job without one would use (root address and job id are public)
 * is refused, and the real job runs as if it had not come. Without a
 * secret every rank warns, loudly; with one, none does. Bad secrets (too
 * short, not hex, both variables, a file others can read, directly or
 * through a link, a missing file) fail init with CCL_ERR_INVALID_ARGUMENT
 * and a sentence naming the problem, before anything listens.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ccl.h"
#include "harness.h"
#include "util.h"

#define COUNT 1000
#define SECRET_HEX "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

static char dir[64];

static void make_dir(void) {
    snprintf(dir, sizeof dir, "/tmp/ccl-secret-XXXXXX");
    ck_assert_msg(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
}

static void remove_dir(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* path <- dir/name holding text, with mode. */
static void write_file(char *path, size_t n, const char *name, const char *text, mode_t mode) {
    snprintf(path, n, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_msg(fd >= 0, "create %s: %s", path, strerror(errno));
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    ck_assert_int_eq(chmod(path, mode), 0);
}

/* The environment of one process of a 2-rank job; secret_file NULL: none. */
static void job_env(int rank, int port, const char *secret_file, const char *timeout) {
    char v[64];
    unsetenv("CCL_SECRET");
    unsetenv("CCL_SECRET_FILE");
    snprintf(v, sizeof v, "%d", rank);
    setenv("CCL_RANK", v, 1);
    setenv("CCL_WORLD_SIZE", "2", 1);
    snprintf(v, sizeof v, "127.0.0.1:%d", port);
    setenv("CCL_ROOT_ADDR", v, 1);
    setenv("CCL_TIMEOUT", timeout, 1);
    setenv("CCL_TRANSPORT", "tcp", 1);
    if (secret_file) setenv("CCL_SECRET_FILE", secret_file, 1);
}

enum role { REAL, STRANGER };

/* A forked process of the job, its stderr in dir/log<tag>. Real ranks exit
 * 0 when init works and the all-reduce is right; the stranger exits 0 when
 * it is kept out (init fails, or its all-reduce does). */
static pid_t start(enum role role, int rank, int port, const char *secret_file, const char *tag) {
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid > 0) return pid;
    char log[128];
    snprintf(log, sizeof log, "%s/log%s", dir, tag);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || dup2(fd, 2) < 0) _exit(20);
    job_env(rank, port, secret_file, role == REAL ? "20" : "5");
    ccl_comm_t *comm = NULL;
    ccl_status_t st = ccl_comm_init_env(&comm);
    if (st != CCL_OK) {
        fprintf(stderr, "test: init returned %s: %s\n", ccl_status_string(st), ccl_comm_last_error(NULL));
        _exit(role == STRANGER ? 0 : 1);
    }
    int32_t in[COUNT], out[COUNT];
    for (int i = 0; i < COUNT; i++) in[i] = role == STRANGER ? 1000000 : i * (rank + 1);
    st = ccl_all_reduce(in, out, COUNT, CCL_INT32, CCL_SUM, comm);
    int bad = 0;
    for (int i = 0; i < COUNT && st == CCL_OK; i++) bad += out[i] != i * 3;
    fprintf(stderr, "test: all_reduce returned %s, %d elements wrong\n", ccl_status_string(st), bad);
    (void)ccl_comm_destroy(comm);
    if (role == STRANGER) _exit(st == CCL_OK ? 2 : 0);
    _exit(st == CCL_OK && bad == 0 ? 0 : 3);
}

static int log_has(const char *tag, const char *needle) {
    char path[128], buf[1 << 16];
    snprintf(path, sizeof path, "%s/log%s", dir, tag);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, needle) != NULL;
}

static void show_log(const char *tag) {
    char cmd[160];
    snprintf(cmd, sizeof cmd, "sed 's/^/  [%s] /' %s/log%s >&2", tag, dir, tag);
    if (system(cmd) != 0) fprintf(stderr, "no log %s\n", tag);
}

/* ---- a stranger with the derivable secret ---- */

START_TEST(secret_file_keeps_stranger_out) {
    make_dir();
    char secret[128];
    write_file(secret, sizeof secret, "secret", SECRET_HEX "\n", 0600);
    int port = util_free_port();
    pid_t r0 = start(REAL, 0, port, secret, "0");
    usleep(300000); /* the root listens */
    pid_t stranger = start(STRANGER, 1, port, NULL, "s");
    usleep(300000); /* the stranger is there first */
    pid_t r1 = start(REAL, 1, port, secret, "1");
    int s0 = util_finish_child(r0, 60), s1 = util_finish_child(r1, 60), ss = util_finish_child(stranger, 60);
    if (s0 || s1 || ss) {
        show_log("0");
        show_log("1");
        show_log("s");
    }
    ck_assert_msg(ss == 0, "the stranger with the derived secret was not kept out (exit %d)", ss);
    ck_assert_msg(s0 == 0 && s1 == 0, "the real ranks did not finish right behind the stranger (exits %d, %d)", s0,
                  s1);
    ck_assert_msg(!log_has("0", "INSECURE") && !log_has("1", "INSECURE"), "a rank with CCL_SECRET_FILE warned");
    ck_assert_msg(log_has("s", "INSECURE"), "the stranger, without a secret, did not warn");
    remove_dir();
}
END_TEST

/* ---- no secret: every rank warns ---- */

START_TEST(no_secret_warns_every_rank) {
    make_dir();
    int port = util_free_port();
    pid_t r0 = start(REAL, 0, port, NULL, "0");
    pid_t r1 = start(REAL, 1, port, NULL, "1");
    int s0 = util_finish_child(r0, 60), s1 = util_finish_child(r1, 60);
    if (s0 || s1) {
        show_log("0");
        show_log("1");
    }
    ck_assert_msg(s0 == 0 && s1 == 0, "a job without a secret failed (exits %d, %d)", s0, s1);
    ck_assert_msg(log_has("0", "INSECURE") && log_has("1", "INSECURE"), "not every rank warned");
    remove_dir();
}
END_TEST

/* ---- bad secrets ---- */

struct bad_secret {
    const char *what;
    const char *secret;      /* CCL_SECRET, or NULL */
    const char *file_text;   /* CCL_SECRET_FILE's content, or NULL for no file variable */
    mode_t mode;
    int link;                /* the variable names a symbolic link to the file */
    int missing;             /* the variable names a file that does not exist */
    const char *said;        /* in ccl_comm_last_error(NULL) */
};

static const struct bad_secret bad_secrets[] = {
    {"not hex", "not-a-secret-not-a-secret-not-a-secret", NULL, 0, 0, 0, "CCL_SECRET is not"},
    {"too short", "0011223344556677", NULL, 0, 0, 0, "CCL_SECRET is not"},
    {"odd length", SECRET_HEX "0", NULL, 0, 0, 0, "CCL_SECRET is not"},
    {"both set", SECRET_HEX, SECRET_HEX, 0600, 0, 0, "both CCL_SECRET and CCL_SECRET_FILE"},
    {"file readable by others", NULL, SECRET_HEX, 0644, 0, 0, "readable or writable by others"},
    {"file writable by the group", NULL, SECRET_HEX, 0620, 0, 0, "readable or writable by others"},
    {"file not hex", NULL, "hello world, this is not hex at all", 0600, 0, 0, "does not hold"},
    {"link to a file others can read", NULL, SECRET_HEX, 0644, 1, 0, "readable or writable by others"},
    {"missing file", NULL, SECRET_HEX, 0600, 0, 1, "cannot open CCL_SECRET_FILE"},
};

START_TEST(bad_secret_refused) {
    const struct bad_secret *b = &bad_secrets[_i];
    make_dir();
    char path[192] = "";
    for (int rank = 0; rank < 2; rank++) {
        job_env(rank, util_free_port(), NULL, "5");
        if (b->secret) setenv("CCL_SECRET", b->secret, 1);
        if (b->file_text) {
            write_file(path, sizeof path, "secret", b->file_text, b->mode);
            if (b->link) {
                char link[160];
                snprintf(link, sizeof link, "%s/link", dir);
                ck_assert_int_eq(symlink(path, link), 0);
                snprintf(path, sizeof path, "%s", link);
            }
            if (b->missing) snprintf(path, sizeof path, "%s/nothing-here", dir);
            setenv("CCL_SECRET_FILE", path, 1);
        }
        ccl_comm_t *comm = NULL;
        double t0 = harness_now();
        ccl_status_t st = ccl_comm_init_env(&comm);
        const char *why = ccl_comm_last_error(NULL);
        fprintf(stderr, "[secret] %s, rank %d: %s: \"%s\"\n", b->what, rank, ccl_status_string(st), why);
        ck_assert_msg(st == CCL_ERR_INVALID_ARGUMENT, "%s (rank %d): init returned %s", b->what, rank,
                      ccl_status_string(st));
        ck_assert_msg(comm == NULL, "%s: a communicator came back", b->what);
        ck_assert_msg(strstr(why, b->said) != NULL, "%s: the error \"%s\" does not say \"%s\"", b->what, why, b->said);
        ck_assert_msg(harness_now() - t0 < 2.0, "%s: refusing took %.1f s", b->what, harness_now() - t0);
        if (b->link) unlink(path);
    }
    remove_dir();
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("secret");
    TCase *tc = tcase_create("jobs");
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, secret_file_keeps_stranger_out);
    tcase_add_test(tc, no_secret_warns_every_rank);
    tcase_add_loop_test(tc, bad_secret_refused, 0, (int)(sizeof bad_secrets / sizeof bad_secrets[0]));
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return harness_main(suite()); }
