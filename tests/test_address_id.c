/* ctest: TIMEOUT 180 LABELS faults */
/*
 * Ids made from an address (ccl_unique_id_from_address, NCCL's
 * NCCL_COMM_ID): every rank makes its own from the same host:port and the
 * job's secret, rank 0 starts the root at init, and the job runs as with
 * a passed id. A rank with another secret is kept out and the others name
 * it as missing; a root address rank 0 cannot listen on fails rank 0
 * saying so; bad arguments and bad secrets are refused with a sentence.
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
#include <sys/wait.h>
#include <unistd.h>

#include "ccl.h"
#include "harness.h"
#include "util.h"

#define COUNT 1031
#define SECRET "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
#define OTHER_SECRET "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100"

/* What a rank's process reports through its exit status. */
enum { RAN = 0, INIT_FAILED = 10, WRONG = 11, CALL_FAILED = 12 };

/* Rank `rank` of nranks: its own id from the address, init, an all-reduce
 * checked. Its stderr goes to log (for the messages checked after). */
static pid_t start_rank(int rank, int nranks, const char *addr, const char *secret, const char *log) {
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid > 0) return pid;
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || dup2(fd, 2) < 0) _exit(20);
    setenv("CCL_SECRET", secret, 1);
    unsetenv("CCL_SECRET_FILE");
    setenv("CCL_TIMEOUT", "3", 1);
    ccl_unique_id_t id;
    ccl_comm_t *comm = NULL;
    ccl_status_t st = ccl_unique_id_from_address(addr, &id);
    if (st == CCL_OK) st = ccl_comm_init_rank(&comm, nranks, id, rank);
    if (st != CCL_OK) {
        fprintf(stderr, "test: rank %d: init: %s: %s\n", rank, ccl_status_string(st), ccl_comm_last_error(NULL));
        _exit(INIT_FAILED);
    }
    int32_t in[COUNT], out[COUNT];
    for (int i = 0; i < COUNT; i++) in[i] = i * (rank + 1);
    st = ccl_all_reduce(in, out, COUNT, CCL_INT32, CCL_SUM, comm);
    int bad = 0;
    for (int i = 0; i < COUNT && st == CCL_OK; i++) bad += out[i] != i * nranks * (nranks + 1) / 2;
    fprintf(stderr, "test: rank %d: all_reduce %s, %d wrong\n", rank, ccl_status_string(st), bad);
    (void)ccl_comm_destroy(comm);
    _exit(st != CCL_OK ? CALL_FAILED : bad ? WRONG : RAN);
}

static int file_has(const char *path, const char *needle) {
    char buf[1 << 16];
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, needle) != NULL;
}

static void show(const char *path) {
    char cmd[200];
    snprintf(cmd, sizeof cmd, "sed 's/^/  | /' %s >&2", path);
    if (system(cmd) != 0) fprintf(stderr, "no log %s\n", path);
}

/* Runs nranks ranks, rank `odd` (-1: none) with secrets[1]; statuses out. */
static void run_job(int nranks, const char *addr, int odd, int *status, char logs[][64]) {
    pid_t pid[8];
    for (int r = 0; r < nranks; r++) {
        snprintf(logs[r], 64, "/tmp/ccl-addrid-%d-%d.log", (int)getpid(), r);
        pid[r] = start_rank(r, nranks, addr, r == odd ? OTHER_SECRET : SECRET, logs[r]);
    }
    for (int r = 0; r < nranks; r++) status[r] = util_finish_child(pid[r], 60);
}

START_TEST(every_rank_makes_its_own_id) {
    static const int sizes[] = {1, 3, 5};
    int n = sizes[_i], status[8];
    char addr[64], logs[8][64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", util_free_port());
    run_job(n, addr, -1, status, logs);
    for (int r = 0; r < n; r++) {
        if (status[r] != RAN) show(logs[r]);
        ck_assert_msg(status[r] == RAN, "%d ranks: rank %d exited %d", n, r, status[r]);
        unlink(logs[r]);
    }
}
END_TEST

START_TEST(a_rank_with_another_secret_is_kept_out) {
    int status[8];
    char addr[64], logs[8][64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", util_free_port());
    run_job(3, addr, 2, status, logs);
    for (int r = 0; r < 3; r++) {
        if (status[r] != INIT_FAILED) show(logs[r]);
        ck_assert_msg(status[r] == INIT_FAILED, "rank %d exited %d, not with a failed init", r, status[r]);
    }
    ck_assert_msg(file_has(logs[0], "never connected") && file_has(logs[0], "rank 2"),
                  "rank 0 does not name rank 2 as the one that never came");
    for (int r = 0; r < 3; r++) unlink(logs[r]);
}
END_TEST

START_TEST(root_address_taken) {
    /* Something else holds the port on every address: rank 0 cannot be the root. */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    ck_assert_int_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(s, 4), 0);
    socklen_t len = sizeof a;
    ck_assert_int_eq(getsockname(s, (struct sockaddr *)&a, &len), 0);
    char addr[64], logs[8][64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(a.sin_port));
    int status[8];
    run_job(2, addr, -1, status, logs);
    close(s);
    ck_assert_msg(status[0] == INIT_FAILED, "rank 0 exited %d", status[0]);
    ck_assert_msg(file_has(logs[0], "cannot listen on 127.0.0.1:"), "rank 0 does not say it cannot listen");
    ck_assert_msg(status[1] == INIT_FAILED, "rank 1 exited %d", status[1]);
    for (int r = 0; r < 2; r++) unlink(logs[r]);
}
END_TEST

START_TEST(bad_arguments) {
    ccl_unique_id_t id;
    ck_assert_int_eq(ccl_unique_id_from_address(NULL, &id), CCL_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ccl_unique_id_from_address("127.0.0.1:4000", NULL), CCL_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ccl_unique_id_from_address("", &id), CCL_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ccl_unique_id_from_address("not an address", &id), CCL_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(ccl_comm_last_error(NULL), "host:port"), "the error does not say what it wants: %s",
                  ccl_comm_last_error(NULL));
    setenv("CCL_SECRET", "abc", 1);
    ck_assert_int_eq(ccl_unique_id_from_address("127.0.0.1:4000", &id), CCL_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(ccl_comm_last_error(NULL), "CCL_SECRET"), "a bad secret is not named: %s",
                  ccl_comm_last_error(NULL));
    setenv("CCL_SECRET", SECRET, 1);
    ck_assert_int_eq(ccl_unique_id_from_address("127.0.0.1:4000", &id), CCL_OK);
    /* the same address and secret make the same id on every rank */
    ccl_unique_id_t again;
    ck_assert_int_eq(ccl_unique_id_from_address("127.0.0.1:4000", &again), CCL_OK);
    ck_assert_msg(memcmp(&id, &again, sizeof id) == 0, "two ids from one address and secret differ");
    unsetenv("CCL_SECRET");
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("address_id");
    util_add_loop_case(s, "every_rank_makes_its_own_id", every_rank_makes_its_own_id, 3, 150);
    TCase *tc = tcase_create("faults_and_arguments");
    tcase_set_timeout(tc, 150);
    tcase_add_test(tc, a_rank_with_another_secret_is_kept_out);
    tcase_add_test(tc, root_address_taken);
    tcase_add_test(tc, bad_arguments);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return harness_main(suite()); }
