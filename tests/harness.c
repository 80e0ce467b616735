/*
 * The multi-rank harness (see harness.h). Children are plain fork()ed copies
 * of the test process; they never return into Check's code.
 */
#define _GNU_SOURCE
#include "harness.h"
#include "util.h"

#include "ccl_spawn.h"
#include "container.h"

#include "core/params.h"
#include "transports/shm/shm.h"

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CTRL_FD_ENV "CCL_TEST_CTRL_FD"
/* The control channel sits at this descriptor in every child; everything
 * above it is closed so a child looks like a freshly started process. */
#define CHILD_CTRL_FD 3
#define PRINTED_FAILURES 10
#define DEFAULT_DEADLINE_S 240.0
#define DEFAULT_CCL_TIMEOUT "60"
/* After one rank dies unexpectedly the others get this long beyond
 * CCL_TIMEOUT to notice and exit before they count as hung. */
#define GRACE_AFTER_DEATH_S 15.0

double harness_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void harness_fail(struct harness_tally *t, const char *file, int line, const char *fmt, ...) {
    t->fails++;
    if (t->fails > PRINTED_FAILURES) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "[rank %d] %s:%d %s%s\n", t->rank, file, line, msg,
            t->fails == PRINTED_FAILURES ? " (further failures not printed)" : "");
}

/* ---- child ---- */

static void observe_dir(const struct harness_run *run, char *out, size_t n) {
    snprintf(out, n, "/tmp/%s.observe", run->shm_prefix);
}

/* Removes the run's observe directory and what the ranks wrote there. */
static void observe_remove(const struct harness_run *run) {
    char dir[64];
    observe_dir(run, dir, sizeof dir);
    util_remove_dir(dir);
}

static void apply_env_list(const char *list) {
    if (!list) return;
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", list);
    char *save = NULL;
    for (char *tok = strtok_r(copy, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) continue;
        *eq = '\0';
        setenv(tok, eq + 1, 1);
    }
}

/* CCL_TEST_IB_HCAS="rxe0,rxe1": the RDMA devices of a machine that plays
 * several hosts; the ranks of simulated host h use device h mod n, so two
 * "hosts" really talk across two adapters. */
static void pick_ib_device(int host) {
    const char *list = getenv("CCL_TEST_IB_HCAS");
    if (!list || !*list) return;
    char copy[256], *save = NULL;
    snprintf(copy, sizeof copy, "%s", list);
    int n = 0;
    char *dev[16];
    for (char *tok = strtok_r(copy, ",", &save); tok && n < 16; tok = strtok_r(NULL, ",", &save)) dev[n++] = tok;
    if (n) setenv("CCL_IB_HCA", dev[host % n], 1);
}

static void child_environment(const struct harness_run *run, int rank) {
    char val[64];
    snprintf(val, sizeof val, "%d", CHILD_CTRL_FD);
    setenv(CTRL_FD_ENV, val, 1);
    if (run->transport) setenv("CCL_TRANSPORT", run->transport, 1);
    int per_host = run->host_per_rank ? 1 : run->ranks_per_host;
    if (per_host > 0) {
        snprintf(val, sizeof val, "host%d", rank / per_host);
        setenv("CCL_HOST_ID", val, 1);
    }
    setenv("CCL_TIMEOUT", run->ccl_timeout ? run->ccl_timeout : DEFAULT_CCL_TIMEOUT, 1);
    setenv("CCL_SHM_PREFIX", run->shm_prefix, 1);
    /* Flight recorder dumps and status files go to the run's own
     * directory, which the parent removes (a test may name another). */
    char observe[64];
    observe_dir(run, observe, sizeof observe);
    setenv("CCL_FLIGHT_DIR", observe, 1);
    setenv("CCL_STATUS_DIR", observe, 1);
    pick_ib_device(per_host > 0 ? rank / per_host : 0);
    apply_env_list(run->env);
    if (run->rank_env && run->rank_env[rank]) apply_env_list(run->rank_env[rank]);
}

static int recv_packet(int fd, void *buf, size_t n, double deadline, size_t *len);

/* The library reads its environment once per process. If the parent had
 * already loaded it before forking, every setenv above was ignored: say so
 * rather than silently testing the wrong transport. */
static void check_params_took_effect(const struct harness_run *run, int rank, struct harness_tally *t) {
    const struct ccl__params *p = ccl__params_get();
    char host[64] = "";
    int per_host = run->host_per_rank ? 1 : run->ranks_per_host;
    if (per_host > 0) snprintf(host, sizeof host, "host%d", rank / per_host);
    const char *set = getenv("CCL_TIMEOUT"); /* the run's, or this rank's own (rank_env) */
    double timeout = atof(set ? set : DEFAULT_CCL_TIMEOUT);
    const struct ccl__shm_knobs *shm = ccl__transport_knobs(&ccl__transport_shm);
    if ((run->transport && strcmp(p->transport, run->transport) != 0) || (host[0] && strcmp(p->host_id, host) != 0) ||
        !shm || strcmp(shm->prefix, run->shm_prefix) != 0 || p->timeout_s != timeout)
        harness_fail(t, __FILE__, __LINE__,
                     "the library's parameters were loaded before the harness forked, so the environment it set "
                     "(transport %s, host %s, shm prefix %s) was ignored: run one harness per test process",
                     run->transport ? run->transport : "auto", host[0] ? host : "-", run->shm_prefix);
}

static __attribute__((noreturn)) void child_exit(int fails) {
    fflush(stdout);
    fflush(stderr);
    _exit(fails > 100 ? 100 : fails);
}

static __attribute__((noreturn)) void child_main(struct harness_run *run, int rank, int ctrl, pid_t parent) {
    /* Die with the test process, whatever kills it. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(99);
    if (ctrl != CHILD_CTRL_FD) {
        dup2(ctrl, CHILD_CTRL_FD);
        close(ctrl);
    }
    close_range(CHILD_CTRL_FD + 1, ~0u, 0);
    if (run->containers && run->containers[rank]) container_enter(rank, run->containers[rank]);
    child_environment(run, rank);

    struct harness_tally t = {.rank = rank, .fails = 0};
    check_params_took_effect(run, rank, &t);
    if (t.fails) child_exit(t.fails);

    /* The parent makes the unique id after forking us (so that it has not
     * loaded the library's parameters before the fork) and sends it here. */
    ccl_unique_id_t id;
    size_t got = 0;
    if (recv_packet(CHILD_CTRL_FD, &id, sizeof id, harness_now() + run->deadline_s, &got) != 0 || got != sizeof id) {
        fprintf(stderr, "[rank %d] harness: no unique id from the parent\n", rank);
        child_exit(1);
    }
    if (run->setup) run->setup(rank, run->nranks, &id, run->arg);
    int members = run->nranks - run->joiners;
    if (rank >= members) {
        if (run->joiner_body) t.fails += run->joiner_body(rank, run->nranks, run->arg);
        child_exit(t.fails);
    }

    ccl_comm_t *comm = NULL;
    ccl_status_t st = ccl_comm_init_rank(&comm, members, id, run->claim ? run->claim[rank] : rank);
    if (run->init_check) {
        t.fails += run->init_check(rank, st, run->arg);
    } else if (st != CCL_OK) {
        harness_fail(&t, __FILE__, __LINE__, "ccl_comm_init_rank(%d ranks) returned %s", run->nranks,
                     ccl_status_string(st));
    }
    if (st == CCL_OK && comm == NULL) {
        harness_fail(&t, __FILE__, __LINE__, "ccl_comm_init_rank returned CCL_OK with a NULL communicator");
    } else if (st == CCL_OK) {
        if (run->body) t.fails += run->body(comm, rank, members, run->arg);
        ccl_status_t dst = ccl_comm_destroy(comm);
        if (dst != CCL_OK && !run->lenient_destroy)
            harness_fail(&t, __FILE__, __LINE__, "ccl_comm_destroy returned %s", ccl_status_string(dst));
    }
    child_exit(t.fails);
}

/* ---- parent ---- */

static void make_shm_prefix(char *out, size_t n) {
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) r = (uint32_t)(harness_now() * 1e6);
    snprintf(out, n, "cct%d_%08x", (int)getpid(), r);
}

int harness_shm_count(const char *prefix) {
    DIR *d = opendir("/dev/shm");
    if (!d) return 0;
    int count = 0;
    size_t plen = strlen(prefix);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (plen && strncmp(e->d_name, prefix, plen) == 0) count++;
    closedir(d);
    return count;
}

static void shm_remove_all(const char *prefix) {
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    size_t plen = strlen(prefix);
    char path[512];
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (!plen || strncmp(e->d_name, prefix, plen) != 0) continue;
        snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
        unlink(path);
    }
    closedir(d);
}

static int reap(struct harness_run *run, int *alive, int r, int flags) {
    int status = 0;
    pid_t got = waitpid(run->pid[r], &status, flags);
    if (got == run->pid[r]) {
        run->status[r] = status;
        alive[r] = 0;
        return 1;
    }
    if (got < 0 && errno != EINTR) { /* not our child any more: count it as gone */
        run->status[r] = 0xff00;
        alive[r] = 0;
        return 1;
    }
    return 0;
}

static int unexpected_death(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

static void wait_children(struct harness_run *run, int *alive) {
    double timeout = atof(run->ccl_timeout ? run->ccl_timeout : DEFAULT_CCL_TIMEOUT);
    double deadline = run->deadline;
    int left = 0;
    for (int r = 0; r < run->nranks; r++) left += alive[r];
    useconds_t nap = 200;
    while (left > 0) {
        for (int r = 0; r < run->nranks; r++) {
            if (alive[r] && reap(run, alive, r, WNOHANG)) {
                left--;
                double grace = harness_now() + timeout + GRACE_AFTER_DEATH_S;
                if (unexpected_death(run->status[r]) && grace < deadline) deadline = grace;
            }
        }
        if (left == 0 || harness_now() >= deadline) break;
        usleep(nap); /* bounded poll: the deadline above ends it */
        if (nap < 5000) nap *= 2;
    }
    for (int r = 0; r < run->nranks; r++) {
        if (!alive[r]) continue;
        run->hung[r] = 1;
        kill(run->pid[r], SIGKILL);
        reap(run, alive, r, 0);
    }
}

/* Sends the unique id to every child (the spawner's hand-out, channels
 * kept open for the control messages); on failure closes the channels so
 * the children give up at once. */
static void hand_out_id(struct harness_run *run, struct ccl_spawn *sp) {
    setenv("CCL_TIMEOUT", run->ccl_timeout ? run->ccl_timeout : DEFAULT_CCL_TIMEOUT, 1); /* for the root */
    run->id_status = ccl_get_unique_id(&run->id);
    if (run->id_status != CCL_OK)
        fprintf(stderr, "harness: ccl_get_unique_id returned %s\n", ccl_status_string(run->id_status));
    ccl_spawn_hand_id(sp, run->id_status == CCL_OK ? &run->id : NULL, sizeof run->id, 0);
    for (int r = 0; r < run->nranks; r++) run->ctrl_fd[r] = sp->fd[r];
}

int harness_run(struct harness_run *run) {
    int alive[HARNESS_MAX_RANKS] = {0};
    if (run->nranks < 1 || run->nranks > HARNESS_MAX_RANKS) {
        fprintf(stderr, "harness: bad rank count %d\n", run->nranks);
        run->parent_failures++;
        return 1;
    }
    if (run->deadline_s <= 0) run->deadline_s = DEFAULT_DEADLINE_S;
    make_shm_prefix(run->shm_prefix, sizeof run->shm_prefix);
    for (int r = 0; r < HARNESS_MAX_RANKS; r++) run->ctrl_fd[r] = -1;
    fflush(stdout);
    fflush(stderr);
    run->start = harness_now();
    run->deadline = run->start + run->deadline_s;
    pid_t self = getpid();
    static struct ccl_spawn sp; /* the project's one spawner: ranks first, the id after */
    struct ccl_spawned me;
    int forked = ccl_spawn_fork(&sp, run->nranks, CCL_SPAWN_SEQPACKET, &me);
    if (forked == 1) child_main(run, me.rank, me.fd, self);
    if (forked != 0) {
        run->parent_failures++;
        run->nranks = sp.started; /* wait for the ones already started */
    }
    for (int r = 0; r < sp.started; r++) {
        run->pid[r] = sp.pid[r];
        run->ctrl_fd[r] = sp.fd[r];
        alive[r] = 1;
    }
    hand_out_id(run, &sp);
    if (run->parent && run->nranks > 0 && run->id_status == CCL_OK)
        run->parent_failures += run->parent(run, run->arg);
    wait_children(run, alive);
    run->elapsed_s = harness_now() - run->start;
    for (int r = 0; r < run->nranks; r++) {
        if (run->ctrl_fd[r] >= 0) close(run->ctrl_fd[r]);
        run->ctrl_fd[r] = -1;
    }
    run->shm_leftovers = harness_shm_count(run->shm_prefix);
    if (run->shm_leftovers) {
        fprintf(stderr, "harness: %d /dev/shm entries named %s* left behind; removing them\n",
                run->shm_leftovers, run->shm_prefix);
        shm_remove_all(run->shm_prefix);
    }
    observe_remove(run);
    return harness_problems(run, 0);
}

int harness_problems(const struct harness_run *run, uint64_t expected_dead) {
    int n = run->parent_failures + (run->shm_leftovers > 0) + (run->id_status != CCL_OK);
    for (int r = 0; r < run->nranks; r++) {
        if ((expected_dead >> r) & 1) continue;
        n += run->hung[r] || unexpected_death(run->status[r]);
    }
    return n;
}

static void appendf(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void appendf(char *buf, size_t n, const char *fmt, ...) {
    size_t len = strnlen(buf, n);
    if (len + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, n - len, fmt, ap);
    va_end(ap);
}

void harness_describe(const struct harness_run *run, uint64_t expected_dead, char *buf, size_t n) {
    if (n == 0) return;
    buf[0] = '\0';
    if (run->id_status != CCL_OK)
        appendf(buf, n, "ccl_get_unique_id returned %s; ", ccl_status_string(run->id_status));
    for (int r = 0; r < run->nranks; r++) {
        if ((expected_dead >> r) & 1) continue;
        int st = run->status[r];
        if (run->hung[r])
            appendf(buf, n, "rank %d hung (killed after %.0f s); ", r, run->elapsed_s);
        else if (WIFSIGNALED(st))
            appendf(buf, n, "rank %d killed by signal %d (%s); ", r, WTERMSIG(st), strsignal(WTERMSIG(st)));
        else if (WIFEXITED(st) && WEXITSTATUS(st) != 0)
            appendf(buf, n, "rank %d exited %d (failures, see its stderr); ", r, WEXITSTATUS(st));
    }
    if (run->parent_failures) appendf(buf, n, "%d parent-side failures; ", run->parent_failures);
    if (run->shm_leftovers) appendf(buf, n, "%d /dev/shm entries left behind; ", run->shm_leftovers);
}

/* ---- control channel ---- */

static int child_ctrl_fd(void) {
    const char *s = getenv(CTRL_FD_ENV);
    return s ? atoi(s) : -1;
}

static int send_msg(int fd, const char *fmt, va_list ap) {
    char msg[HARNESS_MSG_BYTES];
    int len = vsnprintf(msg, sizeof msg, fmt, ap);
    if (fd < 0 || len < 0) return -1;
    if ((size_t)len >= sizeof msg) len = sizeof msg - 1;
    ssize_t w;
    do w = send(fd, msg, (size_t)len + 1, MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    return w == len + 1 ? 0 : -1;
}

/* One packet of at most n bytes into buf; *len its size. 0 on success, -1
 * on timeout or a closed channel. */
static int recv_packet(int fd, void *buf, size_t n, double deadline, size_t *len) {
    if (fd < 0 || n == 0) return -1;
    for (;;) {
        double left = deadline - harness_now();
        if (left <= 0) return -1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int rc = poll(&p, 1, (int)(left * 1000) + 1);
        if (rc < 0 && errno == EINTR) continue;
        if (rc <= 0) continue; /* the deadline check above ends it */
        ssize_t got = recv(fd, buf, n, 0);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        *len = (size_t)got;
        return 0;
    }
}

static int recv_msg(int fd, char *buf, size_t n, double deadline) {
    size_t len = 0;
    if (recv_packet(fd, buf, n, deadline, &len) != 0) return -1;
    buf[len < n ? len : n - 1] = '\0';
    return 0;
}

int harness_child_send(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = send_msg(child_ctrl_fd(), fmt, ap);
    va_end(ap);
    return rc;
}

int harness_child_recv(char *buf, size_t n, double timeout_s) {
    return recv_msg(child_ctrl_fd(), buf, n, harness_now() + timeout_s);
}

int harness_send(struct harness_run *run, int rank, const char *fmt, ...) {
    if (rank < 0 || rank >= run->nranks) return -1;
    va_list ap;
    va_start(ap, fmt);
    int rc = send_msg(run->ctrl_fd[rank], fmt, ap);
    va_end(ap);
    return rc;
}

int harness_recv(struct harness_run *run, int rank, char *buf, size_t n, double deadline) {
    if (rank < 0 || rank >= run->nranks) return -1;
    return recv_msg(run->ctrl_fd[rank], buf, n, deadline);
}

int harness_main(Suite *suite) {
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
