/*
 * cclrun: start N local ranks of a program with the environment that
 * ccl_comm_init_env reads, and show their output line by line as "[r] ...".
 *
 * One thread and one poll loop: signals arrive through a signalfd, so child
 * exits, the user's Ctrl-C, the --timeout deadline and the children's pipes
 * are all just events. Each rank runs in its own process group so that
 * stopping a rank also stops whatever it started (a shell's `sleep`).
 */
#define _GNU_SOURCE
#include "ccl_spawn.h"
#include "cclrun.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum {
    LINE_START_BYTES = 4096,
    LINE_MAX_BYTES = 65536, /* longer lines are cut into pieces of this size */
    READS_PER_WAKEUP = 4,   /* so that one chatty rank cannot starve the rest */
    READS_AT_EXIT = 256,    /* bounded: a descendant may keep writing forever */
    EXIT_USAGE = 2,
    EXIT_TIMEOUT = 124,     /* what timeout(1) returns */
    EXIT_CANNOT_EXEC = 127,
};
#define DRAIN_SECONDS 1.0 /* reading leftovers of descendants after the last rank exited */

/* One of a rank's output pipes, with the start of a line not yet printed. */
struct line_stream {
    int fd; /* -1 once closed */
    int dest;
    char *buf;
    size_t len, cap;
};

struct rank_proc {
    pid_t pid; /* 0 if never started */
    int running;
    struct line_stream streams[2];
};

struct launcher {
    struct cclrun_options opt;
    struct rank_proc *ranks;
    int running;
    int sigfd;
    sigset_t old_mask;
    sigset_t sent;        /* signals cclrun sent: deaths by them are expected */
    int exit_status;      /* the first failure's status; -1 while none */
    int stopping;         /* a stop (SIGTERM, or the user's signal) sent to every rank */
    double kill_at;       /* when SIGKILL follows; 0 if not pending */
    double timeout_at;    /* 0 if no --timeout */
    int timed_out;
    int user_signal;      /* last signal the user sent cclrun */
    int user_signals;     /* how many: the second one means SIGKILL */
    int output_broken[3]; /* stdout/stderr closed by the reader */
    char *scratch;        /* "[r] " + one line + "\n" */
    int master_port;      /* MASTER_PORT for torch's store: not the root's */
    int root_fd;          /* listening on the root's port until rank 0 has it */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* One write per line, so lines of different ranks never interleave. */
static void emit_line(struct launcher *l, int rank, int dest, const char *line, size_t len) {
    if (l->output_broken[dest]) return;
    int p = snprintf(l->scratch, 16, "[%d] ", rank);
    memcpy(l->scratch + p, line, len);
    l->scratch[(size_t)p + len] = '\n';
    if (write_all(dest, l->scratch, (size_t)p + len + 1) < 0) l->output_broken[dest] = 1;
}

static void close_stream(struct line_stream *s) {
    close(s->fd);
    s->fd = -1;
    free(s->buf);
    s->buf = NULL;
    s->len = s->cap = 0;
}

/* Prints every complete line that arrived, at end of file also the partial
 * last line; stops early when the pipe is empty. */
static void read_stream(struct launcher *l, int rank, struct line_stream *s, int max_reads) {
    for (int reads = 0; s->fd >= 0 && reads < max_reads; reads++) {
        if (s->len == s->cap) {
            size_t cap = s->cap ? s->cap * 2 : LINE_START_BYTES;
            char *buf = realloc(s->buf, cap);
            if (!buf) { /* drop the stream rather than spin on it */
                fprintf(stderr, "cclrun: out of memory, dropping rank %d's output\n", rank);
                close_stream(s);
                return;
            }
            s->buf = buf;
            s->cap = cap;
        }
        ssize_t n = read(s->fd, s->buf + s->len, s->cap - s->len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return;
        if (n <= 0) { /* end of file, or an error that ends it the same way */
            if (s->len) emit_line(l, rank, s->dest, s->buf, s->len);
            close_stream(s);
            return;
        }
        s->len += (size_t)n;
        size_t start = 0;
        for (char *nl; (nl = memchr(s->buf + start, '\n', s->len - start)) != NULL;) {
            emit_line(l, rank, s->dest, s->buf + start, (size_t)(nl - (s->buf + start)));
            start = (size_t)(nl - s->buf) + 1;
        }
        if (start == 0 && s->len >= LINE_MAX_BYTES) { /* cut an endless line */
            emit_line(l, rank, s->dest, s->buf, s->len);
            start = s->len;
        }
        memmove(s->buf, s->buf + start, s->len - start);
        s->len -= start;
    }
}

/* Sends sig to every rank's process group that may still hold something:
 * a running rank, or one whose pipes a descendant still keeps open. */
static void signal_ranks(struct launcher *l, int sig) {
    sigaddset(&l->sent, sig);
    for (int r = 0; r < l->opt.nranks; r++) {
        struct rank_proc *p = &l->ranks[r];
        if (p->pid <= 0) continue; /* kill(-0) would hit cclrun's own group */
        if (!p->running && p->streams[0].fd < 0 && p->streams[1].fd < 0) continue;
        if (kill(-p->pid, sig) < 0 && p->running) kill(p->pid, sig);
    }
}

static void stop_ranks(struct launcher *l) {
    if (l->stopping) return;
    l->stopping = 1;
    signal_ranks(l, SIGTERM);
    l->kill_at = now_s() + CCLRUN_GRACE_SECONDS;
}

static void record_exit(struct launcher *l, int rank, int wstatus) {
    int code;
    if (WIFEXITED(wstatus)) {
        code = WEXITSTATUS(wstatus);
        if (code == 0) return;
        fprintf(stderr, "cclrun: rank %d exited with status %d\n", rank, code);
    } else if (WIFSIGNALED(wstatus)) {
        int sig = WTERMSIG(wstatus);
        code = 128 + sig;
        /* A rank that dies of the signal cclrun sent it is no news. */
        if (!sigismember(&l->sent, sig))
            fprintf(stderr, "cclrun: rank %d killed by signal %d (%s)%s\n", rank, sig, strsignal(sig),
                    l->opt.elastic && !l->stopping ? "; --elastic: the others go on" : "");
        if (l->opt.elastic && !l->stopping) return;
    } else {
        return; /* stopped or continued: not an exit */
    }
    if (l->exit_status < 0) l->exit_status = code;
    stop_ranks(l);
}

static void reap_children(struct launcher *l) {
    for (;;) {
        int wstatus;
        pid_t pid = waitpid(-1, &wstatus, WNOHANG);
        if (pid <= 0) return;
        for (int r = 0; r < l->opt.nranks; r++) {
            struct rank_proc *p = &l->ranks[r];
            if (p->pid != pid || !p->running) continue;
            /* Its last words come before cclrun's note about its exit. */
            for (int k = 0; k < 2; k++) read_stream(l, r, &p->streams[k], READS_AT_EXIT);
            p->running = 0;
            l->running--;
            record_exit(l, r, wstatus);
        }
    }
}

static void handle_signals(struct launcher *l) {
    struct signalfd_siginfo si;
    while (read(l->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        int sig = (int)si.ssi_signo;
        if (sig == SIGCHLD) {
            reap_children(l);
        } else if (++l->user_signals == 1) {
            fprintf(stderr, "cclrun: got signal %d (%s), passing it to the ranks\n", sig, strsignal(sig));
            l->user_signal = sig;
            /* The user's signal is the stop: a rank that exits because of it
             * must not start a second round of SIGTERM, which a rank still
             * in its handler would see twice. */
            l->stopping = 1;
            signal_ranks(l, sig);
        } else {
            fprintf(stderr, "cclrun: got signal %d again, killing the ranks\n", sig);
            signal_ranks(l, SIGKILL);
        }
    }
}

static void setenv_int(const char *name, int value) {
    char buf[16];
    snprintf(buf, sizeof(buf), "%d", value);
    setenv(name, buf, 1);
}

/* In the child between fork and exec. cclrun has one thread, so setenv and
 * stdio are safe here. */
static void run_child(const struct launcher *l, int rank, int out_fd, int err_fd, const char *root_addr,
                      const char *secret) {
    setpgid(0, 0);
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, &l->old_mask, NULL);
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd > 0) {
        dup2(null_fd, 0);
        close(null_fd);
    }
    /* The pipes are close-on-exec; their copies on 1 and 2 are not. */
    if (dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) _exit(EXIT_CANNOT_EXEC);
    setenv_int("CCL_RANK", rank);
    setenv_int("CCL_WORLD_SIZE", l->opt.nranks);
    setenv_int("CCL_LOCAL_RANK", rank);
    setenv("CCL_ROOT_ADDR", root_addr, 1);
    if (rank == 0 && l->root_fd >= 0 && fcntl(l->root_fd, F_SETFD, 0) == 0) setenv_int("CCL_ROOT_FD", l->root_fd);
    else unsetenv("CCL_ROOT_FD");
    setenv("CCL_SECRET", secret, 1);
    /* What torch.distributed (env://) and programs written for torchrun
     * read; MASTER_PORT is a port of its own, for torch's store, since
     * libccl's root listens on CCL_ROOT_ADDR. */
    setenv_int("RANK", rank);
    setenv_int("WORLD_SIZE", l->opt.nranks);
    setenv_int("LOCAL_RANK", rank);
    setenv_int("LOCAL_WORLD_SIZE", l->opt.nranks);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv_int("MASTER_PORT", l->master_port);
    setenv("CCL_BIND", "core", 0); /* one core per rank, as MPI launchers do; the user's CCL_BIND wins */
    if (l->opt.host_per_rank) {
        char host[32];
        snprintf(host, sizeof(host), "cclrun-host%d", rank);
        setenv("CCL_HOST_ID", host, 1);
    }
    if (l->opt.transport) setenv("CCL_TRANSPORT", l->opt.transport, 1);
    execvp(l->opt.argv[0], l->opt.argv);
    fprintf(stderr, "cclrun: cannot run '%s': %s\n", l->opt.argv[0], strerror(errno));
    _exit(EXIT_CANNOT_EXEC);
}

static int start_rank(struct launcher *l, int rank, const char *root_addr, const char *secret) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) < 0) return -1;
    if (pipe2(err, O_CLOEXEC) < 0) {
        close(out[0]);
        close(out[1]);
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) run_child(l, rank, out[1], err[1], root_addr, secret);
    close(out[1]);
    close(err[1]);
    if (pid < 0) {
        close(out[0]);
        close(err[0]);
        return -1;
    }
    setpgid(pid, pid); /* also here, so that a signal sent right now reaches the group */
    struct rank_proc *p = &l->ranks[rank];
    p->pid = pid;
    p->running = 1;
    l->running++;
    p->streams[0] = (struct line_stream){.fd = out[0], .dest = 1};
    p->streams[1] = (struct line_stream){.fd = err[0], .dest = 2};
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    return 0;
}

static int ms_until(double deadline, double now) {
    if (deadline <= now) return 0;
    double ms = ceil((deadline - now) * 1000.0);
    return ms > 60000.0 ? 60000 : (int)ms;
}

static int wait_timeout_ms(const struct launcher *l, double now, double drain_until) {
    int ms = -1;
    double deadlines[3] = {l->timed_out ? 0 : l->timeout_at, l->kill_at, l->running ? 0 : drain_until};
    for (int k = 0; k < 3; k++) {
        if (deadlines[k] <= 0) continue;
        int m = ms_until(deadlines[k], now);
        if (ms < 0 || m < ms) ms = m;
    }
    return ms;
}

/* owners[f] is rank * 2 + stream for fds[f], f >= 1 (fds[0] is the signalfd). */
static void event_loop(struct launcher *l, struct pollfd *fds, int *owners) {
    double drain_until = 0;
    for (;;) {
        double now = now_s();
        if (l->timeout_at > 0 && !l->timed_out && now >= l->timeout_at) {
            l->timed_out = 1;
            fprintf(stderr, "cclrun: timeout of %g s reached, stopping every rank\n", l->opt.timeout_s);
            stop_ranks(l);
        }
        if (l->kill_at > 0 && now >= l->kill_at) {
            signal_ranks(l, SIGKILL);
            l->kill_at = 0;
        }
        int nfds = 1;
        fds[0] = (struct pollfd){.fd = l->sigfd, .events = POLLIN};
        for (int r = 0; r < l->opt.nranks; r++)
            for (int k = 0; k < 2; k++)
                if (l->ranks[r].streams[k].fd >= 0) {
                    owners[nfds] = r * 2 + k;
                    fds[nfds++] = (struct pollfd){.fd = l->ranks[r].streams[k].fd, .events = POLLIN};
                }
        if (l->running == 0) {
            if (nfds == 1) return;
            if (drain_until == 0) drain_until = now + DRAIN_SECONDS;
            if (now >= drain_until) return; /* a descendant keeps a pipe open: not ours to wait for */
        }
        if (poll(fds, (nfds_t)nfds, wait_timeout_ms(l, now, drain_until)) < 0) {
            if (errno == EINTR) continue;
            fprintf(stderr, "cclrun: poll: %s\n", strerror(errno));
            stop_ranks(l);
            usleep(100 * 1000);
            reap_children(l);
            continue;
        }
        if (fds[0].revents) handle_signals(l);
        for (int f = 1; f < nfds; f++) {
            int r = owners[f] / 2;
            struct line_stream *s = &l->ranks[r].streams[owners[f] % 2];
            /* s->fd may have been closed (and even reused) by a reap since poll. */
            if (fds[f].revents && s->fd == fds[f].fd) read_stream(l, r, s, READS_PER_WAKEUP);
        }
    }
}

/* A closed stdout would make a child's pipe take fd 1 and lose it at exec. */
static void ensure_std_fds_open(void) {
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0) {
            int n = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
            if (n >= 0 && n != fd) close(n); /* open takes the lowest free fd */
        }
}

static int final_status(const struct launcher *l) {
    if (l->timed_out) return EXIT_TIMEOUT;
    if (l->exit_status >= 0) return l->exit_status;
    /* Every rank exited 0, but only because the user stopped the job. */
    if (l->user_signal) return 128 + l->user_signal;
    return 0;
}

int main(int argc, char **argv) {
    struct launcher l = {.exit_status = -1, .sigfd = -1, .root_fd = -1};
    int parsed = cclrun_parse_options(argc, argv, &l.opt);
    if (parsed != 0) return parsed > 0 ? 0 : EXIT_USAGE;
    ensure_std_fds_open();

    /* The root's port stays bound, by a socket rank 0 takes over
     * (CCL_ROOT_FD); torch's store binds MASTER_PORT itself. */
    int port = ccl_spawn_pick_port(&l.root_fd);
    if (port >= 0) l.master_port = ccl_spawn_pick_port(NULL);
    char secret[65], root_addr[32];
    if (port < 0 || l.master_port < 0 || l.master_port == port) {
        fprintf(stderr, "cclrun: cannot find a free TCP port on 127.0.0.1: %s\n", strerror(errno));
        return 1;
    }
    if (cclrun_make_secret(secret) < 0) {
        fprintf(stderr, "cclrun: getrandom: %s\n", strerror(errno));
        return 1;
    }
    snprintf(root_addr, sizeof(root_addr), "127.0.0.1:%d", port);

    int n = l.opt.nranks;
    l.ranks = calloc((size_t)n, sizeof(*l.ranks));
    l.scratch = malloc(LINE_MAX_BYTES + 32);
    struct pollfd *fds = calloc((size_t)(2 * n + 1), sizeof(*fds));
    int *owners = calloc((size_t)(2 * n + 1), sizeof(*owners));
    if (!l.ranks || !l.scratch || !fds || !owners) {
        fprintf(stderr, "cclrun: out of memory\n");
        return 1;
    }

    /* Blocked before the first fork, so no child exit can slip by unseen. */
    sigset_t handled;
    sigemptyset(&handled);
    sigemptyset(&l.sent);
    int handled_signals[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    for (size_t k = 0; k < sizeof(handled_signals) / sizeof(handled_signals[0]); k++)
        sigaddset(&handled, handled_signals[k]);
    sigprocmask(SIG_BLOCK, &handled, &l.old_mask);
    signal(SIGPIPE, SIG_IGN); /* a closed stdout is noted, not fatal */
    l.sigfd = signalfd(-1, &handled, SFD_NONBLOCK | SFD_CLOEXEC);
    if (l.sigfd < 0) {
        fprintf(stderr, "cclrun: signalfd: %s\n", strerror(errno));
        return 1;
    }

    if (l.opt.timeout_s > 0) l.timeout_at = now_s() + l.opt.timeout_s;
    for (int r = 0; r < n; r++) {
        if (start_rank(&l, r, root_addr, secret) < 0) {
            fprintf(stderr, "cclrun: cannot start rank %d: %s\n", r, strerror(errno));
            if (l.exit_status < 0) l.exit_status = 1;
            stop_ranks(&l);
            break;
        }
        if (r == 0 && l.root_fd >= 0) {
            close(l.root_fd); /* rank 0 holds it now */
            l.root_fd = -1;
        }
    }
    if (l.root_fd >= 0) close(l.root_fd);
    event_loop(&l, fds, owners);
    if (l.stopping) signal_ranks(&l, SIGKILL); /* descendants still holding a pipe */

    int status = final_status(&l);
    for (int r = 0; r < n; r++)
        for (int k = 0; k < 2; k++)
            if (l.ranks[r].streams[k].fd >= 0) close_stream(&l.ranks[r].streams[k]);
    close(l.sigfd);
    free(owners);
    free(fds);
    free(l.scratch);
    free(l.ranks);
    return status;
}
