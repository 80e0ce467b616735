/*
 * Files the environment names: the log (CCL_DEBUG_FILE), the trace
 * (CCL_TRACE), the tuning file (CCL_TUNING_FILE) and the secret file
 * (CCL_SECRET_FILE), each named by a hostile or careless user: a pattern
 * that expands past any buffer, a FIFO that would block an open, a device
 * node or someone else's file that must not be replaced. Each case is its
 * own process (Check forks one per test), since the library reads its
 * environment once per process.
 */
/* ctest: TIMEOUT 120 LABELS args */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static char dir[64];

static void make_dir(void) {
    snprintf(dir, sizeof dir, "/tmp/ccl-env-files-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void remove_dir(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Runs fn with stderr going to a file; returns what it wrote (static). */
static const char *captured_stderr(void (*fn)(void)) {
    static char text[8192];
    char path[128];
    snprintf(path, sizeof path, "%s/stderr", dir);
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
    ck_assert_int_ge(fd, 0);
    dup2(fd, 2);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    close(fd);
    text[n > 0 ? n : 0] = 0;
    return text;
}

static void make_an_id(void) {
    ccl_unique_id_t id;
    ck_assert_int_eq(ccl_get_unique_id(&id), CCL_OK); /* logs "bootstrap root listening" at INFO */
}

/* A host name of 63 characters (this process's own UTS namespace) and a
 * pattern of nested folders ending in %h: the path is longer than the
 * 512 bytes the log's expansion once had, and the log still lands there. */
START_TEST(debug_file_long_host_name) {
    char host[65] = {0};
    memset(host, 'h', 63);
    /* Without a namespace of its own (not root) the folders alone take the
     * path past 512 bytes, under the machine's own name. */
    if (unshare(CLONE_NEWUTS) != 0 || sethostname(host, 63) != 0)
        fprintf(stderr, "no UTS namespace (%s): the machine's host name stays\n", strerror(errno));
    ck_assert_int_eq(gethostname(host, sizeof host - 1), 0);
    make_dir();
    char pattern[2048], folder[300];
    snprintf(pattern, sizeof pattern, "%s", dir);
    memset(folder, 'd', 200);
    folder[200] = 0;
    for (int i = 0; i < 3; i++) {
        size_t o = strlen(pattern);
        snprintf(pattern + o, sizeof pattern - o, "/%s", folder);
        ck_assert_int_eq(mkdir(pattern, 0700), 0);
    }
    size_t o = strlen(pattern);
    snprintf(pattern + o, sizeof pattern - o, "/log-%%p-%%h");
    setenv("CCL_DEBUG", "INFO", 1);
    setenv("CCL_DEBUG_FILE", pattern, 1);
    make_an_id();
    char expect[2048];
    snprintf(expect, sizeof expect, "%.*s/log-%d-%s", (int)(strlen(pattern) - strlen("/log-%p-%h")), pattern,
             (int)getpid(), host);
    ck_assert_uint_gt(strlen(expect), 512);
    FILE *f = fopen(expect, "r");
    ck_assert_msg(f != NULL, "no log at the expanded path (%zu bytes)", strlen(expect));
    char line[512];
    int found = 0;
    while (fgets(line, sizeof line, f)) found |= strstr(line, "bootstrap root listening") != NULL;
    fclose(f);
    ck_assert_msg(found, "the log file lacks the root's INFO line");
    remove_dir();
}
END_TEST

static void log_with_too_long_a_pattern(void) {
    static char pattern[6000];
    memset(pattern, 'x', sizeof pattern - 3);
    memcpy(pattern + sizeof pattern - 3, "%h", 3);
    setenv("CCL_DEBUG", "INFO", 1);
    setenv("CCL_DEBUG_FILE", pattern, 1);
    make_an_id();
}

/* A pattern whose path could never exist: refused in a sentence, and
 * logging goes on, to stderr. */
START_TEST(debug_file_too_long_is_refused) {
    make_dir();
    const char *err = captured_stderr(log_with_too_long_a_pattern);
    ck_assert_msg(strstr(err, "CCL_DEBUG_FILE") && strstr(err, "longer than 4095 bytes"),
                  "no sentence about the pattern: %.300s", err);
    ck_assert_msg(strstr(err, "bootstrap root listening"), "the log did not go on on stderr: %.300s", err);
    remove_dir();
}
END_TEST

/* A one-rank communicator tracing to `pattern`, after an all-reduce that
 * worked. */
static ccl_comm_t *traced_one_rank(const char *pattern) {
    setenv("CCL_TRACE", pattern, 1);
    ccl_unique_id_t id;
    ccl_comm_t *c = NULL;
    ck_assert_int_eq(ccl_get_unique_id(&id), CCL_OK);
    ck_assert_int_eq(ccl_comm_init_rank(&c, 1, id, 0), CCL_OK);
    float x[3] = {1, 2, 3}, y[3];
    ck_assert_int_eq(ccl_all_reduce(x, y, 3, CCL_FLOAT32, CCL_SUM, c), CCL_OK);
    return c;
}

/* A CCL_TRACE whose file name cannot exist: stopping the trace says so,
 * and the communicator goes on (a one-rank job). */
START_TEST(trace_file_too_long_is_refused) {
    /* 400 communicator ids of 16 digits each: 800 characters that expand
     * to 6400. */
    static char pattern[801];
    for (int i = 0; i < 400; i++) memcpy(pattern + 2 * i, "%c", 2);
    ccl_comm_t *c = traced_one_rank(pattern);
    float x[3] = {1, 2, 3}, y[3];
    ck_assert_int_eq(ccl_comm_trace_stop(c, NULL), CCL_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(ccl_comm_last_error(c), "longer than"), "error: %s", ccl_comm_last_error(c));
    ck_assert_int_eq(ccl_all_reduce(x, y, 3, CCL_FLOAT32, CCL_SUM, c), CCL_OK);
    ck_assert(y[2] == 3);
    ck_assert_int_eq(ccl_comm_destroy(c), CCL_OK);
}
END_TEST

/* A CCL_TRACE into a directory that does not exist: destroy fails with
 * CCL_ERR_SYSTEM, and the reason (the path and the system's word) is on
 * stderr without CCL_DEBUG and in ccl_comm_last_error(NULL) afterwards. */
START_TEST(trace_file_unwritable_says_why) {
    ccl_comm_t *c = traced_one_rank("/nonexistent-libccl-dir/trace.json");
    ck_assert_int_eq(ccl_comm_destroy(c), CCL_ERR_SYSTEM);
    const char *why = ccl_comm_last_error(NULL);
    ck_assert_msg(strstr(why, "cannot write /nonexistent-libccl-dir/trace.json: No such file or directory"),
                  "after destroy, ccl_comm_last_error(NULL) says \"%s\"", why);
}
END_TEST

/* A process out of file descriptors: init fails at once (not after
 * CCL_TIMEOUT), saying so and what the limit is. */
START_TEST(out_of_file_descriptors_says_so) {
    ccl_unique_id_t id;
    ck_assert_int_eq(ccl_get_unique_id(&id), CCL_OK);
    int lowest = dup(0);
    ck_assert_int_ge(lowest, 0);
    close(lowest);
    struct rlimit lim, saved;
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &saved), 0);
    lim = saved;
    lim.rlim_cur = (rlim_t)lowest; /* no descriptor more */
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &lim), 0);
    ccl_comm_t *c = NULL;
    double t0 = harness_now();
    ccl_status_t st = ccl_comm_init_rank(&c, 1, id, 0);
    double took = harness_now() - t0;
    /* Back to the limit, for what runs at exit (a sanitizer's leak check reads /proc). */
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &saved), 0);
    const char *why = ccl_comm_last_error(NULL);
    fprintf(stderr, "[env] out of file descriptors: %s after %.2f s: \"%s\"\n", ccl_status_string(st), took, why);
    ck_assert_msg(st < 0 && c == NULL, "init returned %s with no descriptor left", ccl_status_string(st));
    ck_assert_msg(took < 3.0, "init took %.1f s to fail", took);
    ck_assert_msg(strstr(why, "Too many open files") && strstr(why, "ulimit -n"),
                  "the error does not say the process ran out of file descriptors: \"%s\"", why);
}
END_TEST

/* In a process of its own (the environment is read once per process):
 * sets name=value, makes an id (which reads every knob), and returns what
 * went to stderr. */
static const char *warning_for(const char *name, const char *value) {
    static char text[4096];
    char path[128];
    snprintf(path, sizeof path, "%s/knob", dir);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
        dup2(fd, 2);
        setenv(name, value, 1);
        ccl_unique_id_t id;
        _exit(ccl_get_unique_id(&id) == CCL_OK ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s=%s: making an id failed", name, value);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = 0;
    return text;
}

/* Every knob takes a value whole or refuses it, naming the variable:
 * trailing garbage, infinities, numbers past a field's range or past what
 * a shift can hold, a window below its least size. */
START_TEST(knobs_refuse_what_they_cannot_take_whole) {
    static const struct {
        const char *name, *value, *says;
    } cases[] = {
        {"CCL_TIMEOUT", "inf", "ignoring CCL_TIMEOUT=inf"},
        {"CCL_TIMEOUT", "1e300", "ignoring CCL_TIMEOUT=1e300"},
        {"CCL_TIMEOUT", "5xyz", "ignoring CCL_TIMEOUT=5xyz"},
        {"CCL_TIMEOUT", "nan", "ignoring CCL_TIMEOUT=nan"},
        {"CCL_TIMEOUT", "0", "ignoring CCL_TIMEOUT=0"},
        {"CCL_LINK_TIMEOUT", "10s", "ignoring CCL_LINK_TIMEOUT=10s"},
        {"CCL_SLOTS", "8x", "ignoring CCL_SLOTS=8x"},
        {"CCL_SHM_WINDOW_BYTES", "1", "CCL_SHM_WINDOW_BYTES=1 is below the window's least"},
        {"CCL_SHM_WINDOW_BYTES", "9007199254740993M", "ignoring CCL_SHM_WINDOW_BYTES=9007199254740993M"},
        {"CCL_SHM_SLOT_BYTES", "99999999999999999999", "ignoring CCL_SHM_SLOT_BYTES=99999999999999999999"},
        {"CCL_SHM_PREFIX", "a-prefix-much-longer-than-its-field-of-32", "ignoring CCL_SHM_PREFIX="},
    };
    make_dir();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *err = warning_for(cases[i].name, cases[i].value);
        ck_assert_msg(strstr(err, cases[i].says), "%s=%s: no warning saying \"%s\": %.300s", cases[i].name,
                      cases[i].value, cases[i].says, err);
    }
    /* Values taken whole say nothing. */
    ck_assert_str_eq(warning_for("CCL_TIMEOUT", "2.5"), "");
    ck_assert_str_eq(warning_for("CCL_SHM_WINDOW_BYTES", "4M"), "");
    remove_dir();
}
END_TEST

/* A valid CCL_ALGO longer than its field is refused at init with the
 * sentence ccl_comm_set_algo gives, never cut to another algorithm. */
START_TEST(long_algo_is_refused_not_cut) {
    char algo[400] = "allreduce:ring";
    while (strlen(algo) < 300) strcat(algo, ",broadcast:ring");
    setenv("CCL_ALGO", algo, 1);
    ccl_unique_id_t id;
    ccl_comm_t *c = NULL;
    ck_assert_int_eq(ccl_get_unique_id(&id), CCL_OK);
    ck_assert_int_eq(ccl_comm_init_rank(&c, 1, id, 0), CCL_ERR_INVALID_ARGUMENT);
    const char *why = ccl_comm_last_error(NULL);
    ck_assert_msg(strstr(why, "CCL_ALGO") && strstr(why, "is longer than 159 characters"), "error: %s", why);
}
END_TEST

/* A one-rank job on the tuning file path; returns init's status. */
static ccl_status_t one_rank_job(void) {
    ccl_unique_id_t id;
    ccl_comm_t *c = NULL;
    ck_assert_int_eq(ccl_get_unique_id(&id), CCL_OK);
    ccl_status_t st = ccl_comm_init_rank(&c, 1, id, 0);
    if (st == CCL_OK) ck_assert_int_eq(ccl_comm_destroy(c), CCL_OK);
    return st;
}

static void job_on_named_tuning_file(void) {
    alarm(30); /* a blocked open would hang here: fail instead */
    ck_assert_int_eq(one_rank_job(), CCL_OK);
    alarm(0);
}

/* A FIFO named name in the test's folder; its path in path. */
static void make_fifo(char *path, size_t n, const char *name) {
    snprintf(path, n, "%s/%s", dir, name);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
}

/* A FIFO as the tuning file: init neither blocks on it nor replaces it. */
START_TEST(tuning_file_fifo_neither_blocks_nor_is_replaced) {
    make_dir();
    char path[128];
    make_fifo(path, sizeof path, "fifo");
    setenv("CCL_TUNING_FILE", path, 1);
    const char *err = captured_stderr(job_on_named_tuning_file);
    ck_assert_msg(strstr(err, "a FIFO"), "no warning saying it is a FIFO: %.400s", err);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_msg(S_ISFIFO(sb.st_mode), "the FIFO was replaced");
    remove_dir();
}
END_TEST

/* Someone's file, or a device node, named as the tuning file by mistake:
 * left as it was, and the warning says why. */
START_TEST(tuning_file_that_is_not_one_is_never_replaced) {
    make_dir();
    char path[128];
    snprintf(path, sizeof path, "%s/notes.txt", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("my notes\n", f);
    fclose(f);
    setenv("CCL_TUNING_FILE", path, 1);
    const char *err = captured_stderr(job_on_named_tuning_file);
    ck_assert_msg(strstr(err, "not a libccl tuning file") && strstr(err, "left as it is"), "no warning: %.400s", err);
    char text[64] = {0};
    f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(text, sizeof text, f));
    fclose(f);
    ck_assert_str_eq(text, "my notes\n");
    remove_dir();
}
END_TEST

START_TEST(tuning_file_device_node_is_never_replaced) {
    make_dir();
    char path[128];
    snprintf(path, sizeof path, "%s/null", dir);
    if (mknod(path, S_IFCHR | 0600, makedev(1, 3)) != 0) {
        /* Not root: a device node cannot be made, but /dev/null can be named. */
        snprintf(path, sizeof path, "/dev/null");
    }
    setenv("CCL_TUNING_FILE", path, 1);
    const char *err = captured_stderr(job_on_named_tuning_file);
    ck_assert_msg(strstr(err, "a character device"), "no warning naming the device: %.400s", err);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_msg(S_ISCHR(sb.st_mode), "%s is no longer a device node", path);
    remove_dir();
}
END_TEST

static void init_env_with_secret_fifo(void) {
    alarm(30);
    setenv("OMPI_COMM_WORLD_RANK", "0", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "1", 1);
    setenv("CCL_ROOT_ADDR", "127.0.0.1:0", 1);
    ccl_comm_t *c = NULL;
    ck_assert_int_eq(ccl_comm_init_env(&c), CCL_ERR_INVALID_ARGUMENT);
    alarm(0);
}

/* A FIFO as the secret file: refused at once, in a sentence. */
START_TEST(secret_file_fifo_is_refused) {
    make_dir();
    char path[128];
    make_fifo(path, sizeof path, "secret");
    setenv("CCL_SECRET_FILE", path, 1);
    const char *err = captured_stderr(init_env_with_secret_fifo);
    ck_assert_msg(strstr(err, "CCL_SECRET_FILE") && strstr(err, "FIFO"), "no sentence: %.400s", err);
    remove_dir();
}
END_TEST

int main(void) {
    Suite *s = suite_create("env_files");
    TCase *tc = tcase_create("env_files");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, debug_file_long_host_name);
    tcase_add_test(tc, debug_file_too_long_is_refused);
    tcase_add_test(tc, trace_file_too_long_is_refused);
    tcase_add_test(tc, trace_file_unwritable_says_why);
    tcase_add_test(tc, out_of_file_descriptors_says_so);
    tcase_add_test(tc, knobs_refuse_what_they_cannot_take_whole);
    tcase_add_test(tc, long_algo_is_refused_not_cut);
    tcase_add_test(tc, tuning_file_fifo_neither_blocks_nor_is_replaced);
    tcase_add_test(tc, tuning_file_that_is_not_one_is_never_replaced);
    tcase_add_test(tc, tuning_file_device_node_is_never_replaced);
    tcase_add_test(tc, secret_file_fifo_is_refused);
    suite_add_tcase(s, tc);
    return harness_main(s);
}
