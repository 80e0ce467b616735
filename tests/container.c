/* Namespaces for ranks (see container.h). */
#define _GNU_SOURCE
#include "container.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static int private_shm(void) {
    if (unshare(CLONE_NEWNS) != 0) return -1;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return -1;
    return mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=1g");
}

static int own_hostname(int rank) {
    char name[32];
    snprintf(name, sizeof name, "ccl-rank-%d", rank);
    if (unshare(CLONE_NEWUTS) != 0) return -1;
    return sethostname(name, strlen(name));
}

/* Forks into the new PID namespace; the parent mirrors the child's end. */
static void own_pid_ns(void) {
    if (unshare(CLONE_NEWPID) != 0) {
        fprintf(stderr, "container: unshare(CLONE_NEWPID): %s\n", strerror(errno));
        _exit(3);
    }
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "container: fork: %s\n", strerror(errno));
        _exit(3);
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* killed with the process the harness watches */
        return;
    }
    /* Only the child talks to the harness: the parent's copies go, so the
     * harness sees the channels close when the child ends. */
    for (int fd = 3; fd < 1024; fd++) close(fd);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) continue;
    if (WIFSIGNALED(status)) {
        signal(WTERMSIG(status), SIG_DFL);
        prctl(PR_SET_PDEATHSIG, 0);
        raise(WTERMSIG(status));
    }
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 99);
}

void container_enter(int rank, int what) {
    if ((what & CONTAINER_PRIVATE_SHM) && private_shm() != 0) {
        fprintf(stderr, "[rank %d] container: private /dev/shm: %s\n", rank, strerror(errno));
        _exit(3);
    }
    if ((what & CONTAINER_HOSTNAME) && own_hostname(rank) != 0) {
        fprintf(stderr, "[rank %d] container: own hostname: %s\n", rank, strerror(errno));
        _exit(3);
    }
    if (what & CONTAINER_PID_NS) own_pid_ns();
}

int container_probe(char *why, size_t n) {
    if (geteuid() != 0) {
        snprintf(why, n, "namespaces for containers need root");
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, n, "fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        int bad = private_shm() != 0 ? 1 : own_hostname(0) != 0 ? 2 : unshare(CLONE_NEWPID) != 0 ? 3 : 0;
        _exit(bad);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) continue;
    int bad = WIFEXITED(status) ? WEXITSTATUS(status) : 9;
    static const char *const what[] = {"", "a private /dev/shm (mount namespace and tmpfs)",
                                       "a hostname of its own (UTS namespace)", "a PID namespace", "", "", "", "",
                                       "", "the probe died"};
    if (bad) snprintf(why, n, "cannot make %s here", what[bad]);
    return bad ? -1 : 0;
}
