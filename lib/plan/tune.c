/* The cost model's figures: file, defaults, and the rule that makes every
 * rank hold the same ones (the probes that measure them: tune_probe.c). */
#define _GNU_SOURCE
#include "plan/tune.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "algo/algo.h"
#include "core/log.h"
#include "core/socket.h"
#include "plan/plan.h"
#include "reduce/reduce.h"

#define FILE_MAGIC "libccl-tuning 1"
/* Sane ranges: a figure outside them is a corrupt file, not a machine. */
#define ALPHA_MIN 0.005
#define ALPHA_MAX 1e5
#define SPEED_MIN 1.0
#define SPEED_MAX 1e7
#define LARGE_MAX (1u << 30) /* a large point's size: above CCL__PROBE_BYTES, a slot at most this */

_Static_assert(CCL__NUM_LINKS <= CCL__TUNED_LINKS, "the bootstrap record holds every link class");

/* ---- the file ---- */

void ccl__tune_machine_key(char *key, size_t n) {
    char host[64] = "unknown", id[40] = "";
    gethostname(host, sizeof(host) - 1);
    FILE *f = fopen("/etc/machine-id", "r");
    if (f) {
        if (!fgets(id, sizeof id, f)) id[0] = 0;
        fclose(f);
        id[strcspn(id, "\n ")] = 0;
    }
    snprintf(key, n, "%.63s/%.39s/%ldcpu", host, id[0] ? id : "-", sysconf(_SC_NPROCESSORS_CONF));
}

#define STR2(x) #x
#define STR(x) STR2(x)
#define LIBCCL_VERSION_TEXT STR(CCL_VERSION_MAJOR) "." STR(CCL_VERSION_MINOR) "." STR(CCL_VERSION_PATCH)

/* The kernel release: figures measured under another kernel (or by
 * another libccl) describe another machine, as far as timing goes. */
static void conditions_now(char *kernel, size_t n) {
    struct utsname u;
    snprintf(kernel, n, "%s", uname(&u) == 0 ? u.release : "unknown");
    kernel[strcspn(kernel, " \t\n")] = 0;
}

static int alpha_ok(double a) { return isfinite(a) && a >= ALPHA_MIN && a <= ALPHA_MAX; }
static int speed_ok(double s) { return isfinite(s) && s >= SPEED_MIN && s <= SPEED_MAX; }
static int large_ok(double bytes, double s) {
    return bytes == 0 || (isfinite(bytes) && bytes > CCL__PROBE_BYTES && bytes <= LARGE_MAX && speed_ok(s));
}

/* What a file says about itself: "check no" (figures given by hand) and
 * the conditions it was measured under ("measured <time> libccl <version>
 * kernel <release>"). */
struct conditions {
    int given, measured;
    long long when;
    char version[32], kernel[80];
};

/* One line of the file into f and cond; 0 when it is not a line of the format. */
static int parse_line(const char *line, const char *key, struct ccl__figures *f, struct conditions *cond,
                      int *saw_key, char *why, size_t whylen) {
    char word[32], name[32];
    double x, y;
    if (sscanf(line, "%31s", word) != 1) return 1; /* blank */
    if (strcmp(word, "machine") == 0) {
        const char *k = line + strspn(line, " \t") + strlen("machine");
        k += strspn(k, " \t");
        size_t len = strcspn(k, "\n");
        if (key && (len != strlen(key) || strncmp(k, key, len) != 0)) {
            snprintf(why, whylen, "it describes another machine (%.*s; this is %s)", (int)(len > 80 ? 80 : len), k,
                     key);
            return 0;
        }
        *saw_key = 1;
        return 1;
    }
    if (strcmp(word, "check") == 0) {
        char value[16];
        cond->given |= sscanf(line, "%*s %15s", value) == 1 && strcmp(value, "no") == 0;
        return 1;
    }
    if (strcmp(word, "measured") == 0) {
        cond->measured = sscanf(line, "%*s %lld libccl %31s kernel %79s", &cond->when, cond->version, cond->kernel) == 3;
        return 1;
    }
    if (strcmp(word, "copy") == 0 || strcmp(word, "reduce") == 0) {
        char end[2];
        if (sscanf(line, "%*s %lf %1s", &x, end) != 1 || !speed_ok(x)) goto bad;
        *(word[0] == 'c' ? &f->copy_bytes_per_us : &f->reduce_bytes_per_us) = x;
        f->measured |= CCL__FIG_LOCAL;
        return 1;
    }
    if (strcmp(word, "cma") == 0) {
        /* "cma <a call, us> <bytes per us>" */
        char end[2];
        if (sscanf(line, "%*s %lf %lf %1s", &x, &y, end) != 2 || !alpha_ok(x) || !speed_ok(y)) goto bad;
        f->cma_call_us = x, f->cma_bytes_per_us = y;
        f->measured |= CCL__FIG_CMA;
        return 1;
    }
    if (strcmp(word, "cma-large") == 0) {
        /* "cma-large <bytes> <bytes per us>" (ccl-tune's large point) */
        char end[2];
        if (sscanf(line, "%*s %lf %lf %1s", &x, &y, end) != 2 || x == 0 || !large_ok(x, y)) goto bad;
        f->cma_large_bytes = x, f->cma_large_bytes_per_us = y;
        f->measured |= CCL__FIG_CMA_LARGE;
        return 1;
    }
    if (strcmp(word, "link") == 0) {
        /* "link <class> <alpha> <speed>", and a network link's large
         * point, "<bytes> <speed>", when it has one. */
        char end[2];
        double lb = 0, ls = 0;
        int used = 0, more = 0;
        if (sscanf(line, "%*s %31s %lf %lf%n", name, &x, &y, &used) != 3) goto bad;
        if (sscanf(line + used, "%1s", end) == 1 &&
            (sscanf(line + used, "%lf %lf%n", &lb, &ls, &more) != 2 || sscanf(line + used + more, "%1s", end) == 1 ||
             lb == 0))
            goto bad;
        int c = ccl__link_by_name(name);
        if (c < 0 || !alpha_ok(x) || !speed_ok(y) || !large_ok(lb, ls)) goto bad;
        f->link[c] = (struct ccl__link_figure){x, y, lb, ls};
        f->measured |= 1u << c;
        return 1;
    }
bad:;
    int shown = (int)strcspn(line, "\n");
    snprintf(why, whylen, "it is corrupt (line \"%.*s\")", shown > 60 ? 60 : shown, line);
    return 0;
}

static const char *file_kind(mode_t m) {
    return S_ISFIFO(m)  ? "a FIFO"
           : S_ISCHR(m) ? "a character device"
           : S_ISBLK(m) ? "a block device"
           : S_ISDIR(m) ? "a directory"
           : S_ISSOCK(m) ? "a socket"
                         : "not a plain file";
}

/* The tuning file opened for reading, as reading and replacing it both
 * need: its descriptor; -1 when nothing is there; -2 (why says so) when
 * it cannot be read or is not a regular file. Non-blocking: opening a
 * FIFO for reading would wait for a writer. */
static int open_regular(const char *path, char *why, size_t whylen) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return -1;
        snprintf(why, whylen, "it cannot be read (%s)", strerror(errno));
        return -2;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        snprintf(why, whylen, "it is not a regular file (%s)", file_kind(sb.st_mode));
        close(fd);
        return -2;
    }
    return fd;
}

/* Whether a line read from a file is the tuning file's first. */
static int is_magic_line(const char *line) {
    size_t n = strlen(FILE_MAGIC);
    return strncmp(line, FILE_MAGIC, n) == 0 && (line[n] == '\n' || line[n] == 0);
}

/* ccl__tune_file_read, and the file's conditions in *c (zeroed first). */
static int read_file(const char *path, const char *key, struct ccl__figures *f, struct conditions *c, char *why,
                     size_t whylen) {
    memset(c, 0, sizeof *c);
    int fd = open_regular(path, why, whylen);
    if (fd < 0) return fd == -1 ? 0 : -1;
    FILE *fp = fdopen(fd, "r");
    if (!fp) {
        snprintf(why, whylen, "it cannot be read (%s)", strerror(errno));
        close(fd);
        return -1;
    }
    struct ccl__figures read = *f;
    read.measured = 0;
    char line[256];
    int ok = 1, saw_key = 0;
    if (!fgets(line, sizeof line, fp) || !is_magic_line(line)) {
        snprintf(why, whylen, "it is not a libccl tuning file (it does not start with \"%s\")", FILE_MAGIC);
        ok = 0;
    }
    while (ok && fgets(line, sizeof line, fp)) {
        if (line[0] == '#') continue;
        if (!strchr(line, '\n') && !feof(fp)) {
            snprintf(why, whylen, "it is corrupt (a line longer than %zu bytes)", sizeof line);
            ok = 0;
        } else {
            ok = parse_line(line, key, &read, c, &saw_key, why, whylen);
        }
    }
    fclose(fp);
    if (ok && !saw_key) snprintf(why, whylen, "it does not say which machine it describes"), ok = 0;
    if (!ok) return -1;
    *f = read;
    return 1;
}

int ccl__tune_file_read(const char *path, const char *key, struct ccl__figures *f, char *why, size_t whylen) {
    struct conditions c;
    return read_file(path, key, f, &c, why, whylen);
}

/* Speeds further apart than this factor are another machine's state. */
#define STALE_FACTOR CCL__TUNE_STALE_FACTOR

static int far_apart(double a, double b, double factor) { return a > b * factor || b > a * factor; }

/* Whether a file read with conditions c (and figures file) still
 * describes this machine as it is now; tune.h says when it does not. */
static int stale_for(const struct conditions *c, const struct ccl__figures *file, double copy_now, double reduce_now,
                     char *why, size_t whylen) {
    char now_kernel[80];
    if (c->given) return 0; /* figures given by hand, for a machine described on purpose */
    conditions_now(now_kernel, sizeof now_kernel);
    if (!c->measured)
        snprintf(why, whylen, "it does not say when or under what conditions it was measured (an older libccl wrote it)");
    else if (strcmp(c->version, LIBCCL_VERSION_TEXT) != 0)
        snprintf(why, whylen, "libccl %s measured it; this is %s", c->version, LIBCCL_VERSION_TEXT);
    else if (strcmp(c->kernel, now_kernel) != 0)
        snprintf(why, whylen, "it was measured under kernel %s; this is %s", c->kernel, now_kernel);
    else if ((file->measured & CCL__FIG_LOCAL) && (far_apart(file->copy_bytes_per_us, copy_now, STALE_FACTOR) ||
                                                 far_apart(file->reduce_bytes_per_us, reduce_now, STALE_FACTOR)))
        snprintf(why, whylen,
                 "it says this core copies %.2f GB/s and sums %.2f GB/s; it does %.2f and %.2f now, so the machine's "
                 "state has changed since it was measured",
                 file->copy_bytes_per_us / 1e3, file->reduce_bytes_per_us / 1e3, copy_now / 1e3, reduce_now / 1e3);
    else return 0;
    return 1;
}

int ccl__tune_file_stale(const char *path, const struct ccl__figures *file, double copy_now, double reduce_now,
                         char *why, size_t whylen) {
    struct ccl__figures scratch;
    struct conditions c;
    char ignored[200];
    ccl__cost_defaults(&scratch);
    if (read_file(path, NULL, &scratch, &c, ignored, sizeof ignored) != 1) return 0;
    return stale_for(&c, file, copy_now, reduce_now, why, whylen);
}

static int make_parent(const char *path) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *s = dir + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(dir, 0700) != 0 && errno != EEXIST) return -1;
        *s = '/';
    }
    return 0;
}

/* Whether path may be replaced: nothing is there, or a tuning file is (a
 * regular file that starts as libccl writes one, or an empty one). A
 * device node, a FIFO, or anyone's other file named by mistake is never
 * replaced. */
static int replaceable(const char *path, char *why, size_t whylen) {
    char line[sizeof FILE_MAGIC + 1] = "";
    int fd = open_regular(path, why, whylen);
    if (fd == -1) return 1;
    if (fd >= 0) {
        ssize_t got = read(fd, line, sizeof line - 1);
        close(fd);
        line[got > 0 ? got : 0] = 0;
        if (got == 0 || is_magic_line(line)) return 1;
        snprintf(why, whylen, "it is not a libccl tuning file (it does not start with \"%s\")", FILE_MAGIC);
    }
    size_t o = strlen(why);
    if (o < whylen) snprintf(why + o, whylen - o, "; it is left as it is");
    return 0;
}

int ccl__tune_file_write(const char *path, const char *key, const struct ccl__figures *f, char *why, size_t whylen) {
    if (!replaceable(path, why, whylen)) return -1;
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    /* A name of its own, made here (never a link or file planted there). */
    int fd = make_parent(path) == 0 ? open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644) : -1;
    FILE *fp = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!fp) {
        if (fd >= 0) close(fd), unlink(tmp);
        snprintf(why, whylen, "%s", strerror(errno));
        return -1;
    }
    fprintf(fp, "%s\n# cost-model figures of one machine, written by libccl (ccl-tune measures on purpose)\n",
            FILE_MAGIC);
    fprintf(fp, "machine %s\n", key);
    char kernel[80];
    conditions_now(kernel, sizeof kernel);
    fprintf(fp, "# measured <unix time> libccl <version> kernel <release>: init checks them, and copy and reduce, "
                "against this machine now\nmeasured %lld libccl %s kernel %s\n",
            (long long)time(NULL), LIBCCL_VERSION_TEXT, kernel);
    /* Only figures the reader takes back: a probe's reading out of range
     * (a job's crowding can time a link at nothing) stays out of the file
     * rather than make all of it corrupt. */
    if ((f->measured & CCL__FIG_LOCAL) && speed_ok(f->copy_bytes_per_us) && speed_ok(f->reduce_bytes_per_us))
        fprintf(fp, "copy %.1f\nreduce %.1f\n", f->copy_bytes_per_us, f->reduce_bytes_per_us);
    if ((f->measured & CCL__FIG_CMA) && alpha_ok(f->cma_call_us) && speed_ok(f->cma_bytes_per_us))
        fprintf(fp, "# cma <a cross-memory attach call, us> <its bytes per us>\ncma %.3f %.1f\n", f->cma_call_us,
                f->cma_bytes_per_us);
    if ((f->measured & CCL__FIG_CMA_LARGE) && f->cma_large_bytes > 0 &&
        large_ok(f->cma_large_bytes, f->cma_large_bytes_per_us))
        fprintf(fp, "# cma-large <a peer buffer too large for any cache, bytes> <its bytes per us>\ncma-large %.0f %.1f\n",
                f->cma_large_bytes, f->cma_large_bytes_per_us);
    fprintf(fp, "# link <class> <alpha, us> <bytes per us and rank> [<large step, bytes> <its bytes per us>]\n");
    for (int c = 0; c < CCL__NUM_LINKS; c++) {
        const struct ccl__link_figure *l = &f->link[c];
        if (!(f->measured >> c & 1u) || !alpha_ok(l->alpha_us) || !speed_ok(l->bytes_per_us)) continue;
        fprintf(fp, "link %s %.3f %.1f", ccl__link_names[c], l->alpha_us, l->bytes_per_us);
        if (l->large_bytes > 0 && large_ok(l->large_bytes, l->large_bytes_per_us))
            fprintf(fp, " %.0f %.1f", l->large_bytes, l->large_bytes_per_us);
        fputc('\n', fp);
    }
    int bad = ferror(fp);
    bad |= fclose(fp) != 0;
    if (bad || rename(tmp, path) != 0) {
        snprintf(why, whylen, "%s", strerror(errno ? errno : EIO));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* ---- measuring ---- */

static double best_of(int reps, void (*fn)(void *), void *arg) {
    double best = 1e30;
    for (int i = 0; i < reps; i++) {
        double t0 = ccl__now();
        fn(arg);
        double t = ccl__now() - t0;
        if (t < best) best = t;
    }
    return best * 1e6;
}

#define LOCAL_BYTES (256u << 10) /* in L2 or L3 of any core of this decade; what a pipeline chunk touches */

struct local_bufs {
    float *a, *b, *c;
    ccl__reduce_fn sum;
};

/* The result is read by nobody and freed: without this a compiler may
 * drop the copy as a dead store (clang did, and init timed it at
 * 10 TB/s, a figure the tuning file then refused as corrupt). */
static void keep(const void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

static void do_copy(void *arg) {
    struct local_bufs *l = arg;
    memcpy(l->c, l->a, LOCAL_BYTES);
    keep(l->c);
}

static void do_sum(void *arg) {
    struct local_bufs *l = arg;
    l->sum(l->c, l->a, l->b, LOCAL_BYTES / sizeof(float));
    keep(l->c);
}

void ccl__tune_measure_local(double *copy_bytes_per_us, double *reduce_bytes_per_us) {
    struct local_bufs l = {malloc(LOCAL_BYTES), malloc(LOCAL_BYTES), malloc(LOCAL_BYTES),
                           ccl__reduce_get(CCL_FLOAT32, CCL_SUM)};
    struct ccl__figures d;
    ccl__cost_defaults(&d);
    *copy_bytes_per_us = d.copy_bytes_per_us;
    *reduce_bytes_per_us = d.reduce_bytes_per_us;
    if (l.a && l.b && l.c) {
        for (size_t i = 0; i < LOCAL_BYTES / sizeof(float); i++) l.a[i] = (float)(i & 255), l.b[i] = 1.0f;
        memset(l.c, 0, LOCAL_BYTES);
        double copy = best_of(8, do_copy, &l), sum = best_of(8, do_sum, &l);
        if (copy > 0) *copy_bytes_per_us = LOCAL_BYTES / copy;
        if (sum > 0) *reduce_bytes_per_us = LOCAL_BYTES / sum;
    }
    free(l.a), free(l.b), free(l.c);
}

/* ---- the job's figures ---- */

static void record_from(struct ccl__tuned_record *r, const struct ccl__figures *f) {
    memset(r, 0, sizeof *r);
    r->measured = f->measured;
    for (int c = 0; c < CCL__NUM_LINKS; c++) {
        const struct ccl__link_figure *l = &f->link[c];
        r->alpha_us[c] = (float)l->alpha_us, r->bytes_per_us[c] = (float)l->bytes_per_us;
        r->large_bytes[c] = (float)l->large_bytes, r->large_bytes_per_us[c] = (float)l->large_bytes_per_us;
    }
    r->copy_bytes_per_us = (float)f->copy_bytes_per_us;
    r->reduce_bytes_per_us = (float)f->reduce_bytes_per_us;
    r->cma_call_us = (float)f->cma_call_us;
    r->cma_bytes_per_us = (float)f->cma_bytes_per_us;
    r->cma_large_bytes = (float)f->cma_large_bytes;
    r->cma_large_bytes_per_us = (float)f->cma_large_bytes_per_us;
}

void ccl__tune_local(struct ccl_comm *comm, struct ccl__peer_info *self) {
    static int warned; /* once per process, not once per communicator */
    struct ccl__figures f;
    ccl__cost_defaults(&f);
    /* Measured every time (a fraction of a millisecond): the check of the
     * file against this machine as it is now, and the figures without one. */
    double copy_now, reduce_now;
    ccl__tune_measure_local(&copy_now, &reduce_now);
    const char *path = comm->params.tuning_file;
    if (strcmp(path, "none") != 0) {
        char key[160], why[300];
        ccl__tune_machine_key(key, sizeof key);
        struct conditions c;
        int read = read_file(path, key, &f, &c, why, sizeof why);
        if (read < 0 && !__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            CCL_WARN(CCL__SUB_PLAN, comm->rank, "ignoring the tuning file %s: %s; measuring afresh", path, why);
        if (read > 0 && c.given) f.measured |= CCL__FIG_GIVEN; /* in the record: every rank sees it */
        if (read > 0 && stale_for(&c, &f, copy_now, reduce_now, why, sizeof why)) {
            if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
                CCL_WARN(CCL__SUB_PLAN, comm->rank,
                         "the tuning file %s is stale: %s; measuring afresh and rewriting it (ccl-tune measures "
                         "with care)", path, why);
            ccl__cost_defaults(&f);
        }
    }
    if (!(f.measured & CCL__FIG_LOCAL)) {
        f.copy_bytes_per_us = copy_now, f.reduce_bytes_per_us = reduce_now;
        f.measured |= CCL__FIG_LOCAL;
    }
    record_from(&self->tuned, &f);
}

/* Each class's slowest figure among the ranks that bring one (a ring goes
 * as fast as its slowest link; of large points, the slowest step), the
 * median copy and reduce speed (each rank measured its own core); defaults
 * for the rest. Every rank has the same records, so every rank computes
 * the same figures. */
static void combine(const struct ccl_comm *comm, struct ccl__figures *f) {
    int n = comm->nranks;
    ccl__cost_defaults(f);
    double *copy = malloc(sizeof(double) * (size_t)n), *red = malloc(sizeof(double) * (size_t)n);
    double *call = malloc(sizeof(double) * (size_t)n), *cma = malloc(sizeof(double) * (size_t)n);
    double *large = malloc(sizeof(double) * (size_t)n);
    int nlocal = 0, ncma = 0, nlarge = 0;
    for (int r = 0; r < n; r++) {
        const struct ccl__tuned_record *t = &comm->peers[r].tuned;
        for (int c = 0; c < CCL__NUM_LINKS; c++) {
            if (!(t->measured >> c & 1u) || !alpha_ok(t->alpha_us[c]) || !speed_ok(t->bytes_per_us[c])) continue;
            struct ccl__link_figure *l = &f->link[c];
            if (!(f->measured >> c & 1u)) *l = (struct ccl__link_figure){t->alpha_us[c], t->bytes_per_us[c], 0, 0};
            if (t->alpha_us[c] > l->alpha_us) l->alpha_us = t->alpha_us[c];
            if (t->bytes_per_us[c] < l->bytes_per_us) l->bytes_per_us = t->bytes_per_us[c];
            double lb = t->large_bytes[c], ls = t->large_bytes_per_us[c];
            if (lb > 0 && large_ok(lb, ls) &&
                (l->large_bytes == 0 || lb / ls > l->large_bytes / l->large_bytes_per_us))
                l->large_bytes = lb, l->large_bytes_per_us = ls;
            f->measured |= 1u << c;
        }
        f->measured |= t->measured & CCL__FIG_GIVEN;
        if ((t->measured & CCL__FIG_LOCAL) && speed_ok(t->copy_bytes_per_us) && speed_ok(t->reduce_bytes_per_us) &&
            copy && red)
            copy[nlocal] = t->copy_bytes_per_us, red[nlocal++] = t->reduce_bytes_per_us;
        if ((t->measured & CCL__FIG_CMA) && alpha_ok(t->cma_call_us) && speed_ok(t->cma_bytes_per_us) && call && cma)
            call[ncma] = t->cma_call_us, cma[ncma++] = t->cma_bytes_per_us;
        /* The large point at one size: the first rank's that has one. */
        if ((t->measured & CCL__FIG_CMA_LARGE) && t->cma_large_bytes > 0 &&
            large_ok(t->cma_large_bytes, t->cma_large_bytes_per_us) && large &&
            (nlarge == 0 || t->cma_large_bytes == f->cma_large_bytes))
            f->cma_large_bytes = t->cma_large_bytes, large[nlarge++] = t->cma_large_bytes_per_us;
    }
    if (nlarge) {
        f->cma_large_bytes_per_us = ccl__tune_median(large, nlarge);
        f->measured |= CCL__FIG_CMA_LARGE;
    }
    if (ncma) {
        f->cma_call_us = ccl__tune_median(call, ncma);
        f->cma_bytes_per_us = ccl__tune_median(cma, ncma);
        f->measured |= CCL__FIG_CMA;
    }
    if (nlocal) {
        f->copy_bytes_per_us = ccl__tune_median(copy, nlocal);
        f->reduce_bytes_per_us = ccl__tune_median(red, nlocal);
        f->measured |= CCL__FIG_LOCAL;
    }
    free(copy), free(red), free(call), free(cma), free(large);
}

#define SHM_LARGE_CHUNKS 4 /* shared memory's large point: a step of this many ring chunks */
#define LARGE_PROBE_RANKS 16 /* the most ranks whose probe measures a large point: 17 steps of buffer, 15 steps */

/* ", 6.40 GB/s at 512 KiB steps" for a link with a large point, else "". */
static const char *large_text(const struct ccl__link_figure *l, char *buf, size_t n) {
    buf[0] = 0;
    if (l->large_bytes > 0)
        snprintf(buf, n, ", %.2f GB/s at %.0f KiB steps", l->large_bytes_per_us / 1e3, l->large_bytes / 1024);
    return buf;
}

/* The class of the ring's links that holds it back: the slowest by
 * default figures at a probe-sized step. */
static int slowest_class(unsigned links) {
    struct ccl__figures d;
    ccl__cost_defaults(&d);
    int worst = -1;
    double worst_us = 0;
    for (int c = 0; c < CCL__NUM_LINKS; c++) {
        if (!(links >> c & 1u)) continue;
        double us = d.link[c].alpha_us + CCL__PROBE_BYTES / d.link[c].bytes_per_us;
        if (worst < 0 || us > worst_us) worst = c, worst_us = us;
    }
    return worst;
}

/* The lowest rank of each machine keeps what this init learnt. */
static void save(const struct ccl_comm *comm, const struct ccl__figures *f, int rewrite) {
    const char *path = comm->params.tuning_file;
    int index;
    ccl__plan_machine_ranks(comm, &index);
    unsigned had = comm->peers[comm->rank].tuned.measured;
    /* A described machine (CCL_TOPO_FILE) names link classes this one
     * may not have: what the probe saw is not theirs to keep. */
    if (strcmp(path, "none") == 0 || comm->params.topo_file[0] || index != 0) return;
    char key[160], why[200];
    ccl__tune_machine_key(key, sizeof key);
    /* Nothing learnt, and the file is this machine's, sound and fresh:
     * keep it. A file absent, corrupt, stale or another machine's is
     * replaced with what this job can vouch for, even if that is only
     * copy and reduce. */
    struct ccl__figures file;
    struct conditions c;
    const struct ccl__tuned_record *mine = &comm->peers[comm->rank].tuned;
    ccl__cost_defaults(&file);
    if (!rewrite && (f->measured & ~had & ~CCL__FIG_GIVEN) == 0 && read_file(path, key, &file, &c, why, sizeof why) == 1 &&
        !stale_for(&c, &file, mine->copy_bytes_per_us, mine->reduce_bytes_per_us, why, sizeof why))
        return;
    if (ccl__tune_file_write(path, key, f, why, sizeof why) != 0)
        CCL_WARN(CCL__SUB_PLAN, comm->rank, "cannot write the tuning file %s: %s", path, why);
    else CCL_INFO(CCL__SUB_PLAN, comm->rank, "wrote the tuning file %s", path);
}

struct ring_probe {
    struct ccl_comm *comm;
    const struct ccl__job_shape *shape;
    const struct ccl__figures *fig;
};

static ccl_status_t probe_ring_small(void *arg, struct ccl__link_figure *now) {
    const struct ring_probe *p = arg;
    return ccl__tune_probe_ring(p->comm, p->shape, p->fig, 0, now);
}

/* The ring's figures from the tuning files, checked against quick probes
 * (a few milliseconds each). Where ranks have cores of their own the two
 * must agree (3x for alpha, 2x for bandwidth). Where they share cores the
 * probe times the crowding as well as the link, so it can only be slower
 * than the link: a file that says the link is slower still than that is
 * wrong, and one that says it is faster may be right. A probe that
 * disagrees is taken again, up to three in all, and the best of what they
 * saw decides: on a 2-core virtual machine one probe of the same link
 * read 1.5 GB/s, the next 8-12, from one init to the next, and with the
 * file rewritten at each disagreement the planner swung between the ring
 * and single-copy for 1 MiB all-reduces (75 us against 150-500). 1 when
 * the file fails (every rank finds the same: the probes' figures are the
 * ranks' medians), with a warning naming the file and *seen the best the
 * probes saw. */
static int stale_link(struct ccl_comm *comm, const struct ccl__job_shape *shape, int c, const struct ccl__figures *f,
                      struct ccl__link_figure *seen, ccl_status_t *st) {
    /* Decided from what every rank holds alike (the combined records), so
     * that all of them enter the probes or none does. */
    if (comm->params.topo_file[0] || (f->measured & CCL__FIG_GIVEN)) return 0;
    struct ring_probe p = {comm, shape, f};
    const struct ccl__link_figure *l = &f->link[c];
    if (!ccl__tune_link_stale(l, shape->oversub > 1, probe_ring_small, &p, seen, st)) return 0;
    if (comm->rank == 0)
        CCL_WARN(CCL__SUB_PLAN, comm->rank,
                 "the tuning file %s is stale: it says the ring's %s links take %.2f us and %.2f GB/s a step; this "
                 "init measured %.2f us and %.2f GB/s at best in %d probes%s, so it was measured under other "
                 "conditions; rewriting it (ccl-tune measures with care)",
                 comm->params.tuning_file, ccl__link_names[c], l->alpha_us, l->bytes_per_us / 1e3, seen->alpha_us,
                 seen->bytes_per_us / 1e3, CCL__TUNE_STALE_PROBES,
                 shape->oversub > 1 ? " with ranks sharing cores, which only slows a probe" : "");
    return 1;
}

/* Whether the files' cross-memory attach figure (in f, from combine) and
 * this job's probe agree: within 3x for the call, STALE_FACTOR for the
 * speed, as for a link's. */
static int cma_agrees(const struct ccl__figures *f, double call_us, double bytes_per_us) {
    return !far_apart(f->cma_call_us, call_us, 3.0) && !far_apart(f->cma_bytes_per_us, bytes_per_us, STALE_FACTOR);
}

ccl_status_t ccl__tune_figures(struct ccl_comm *comm, const struct ccl__job_shape *shape, struct ccl__figures *out) {
    combine(comm, out);
    /* Cross-memory attach: the machine's file where the job's probe
     * (plan/cma_probe.c) agrees with it, as for the links below; else the
     * probe's. The probe alone swung from 1.1 us + 13.5 GB/s to 1.7 us +
     * 10 GB/s from one init to the next on the 2-core development
     * machine, and the single-copy all-reduce of 64 KiB on 2 ranks came
     * and went with it (11 us against the ring's 8). Ranks that share
     * cores keep their probe's: it times their crowding, which the
     * model's single-copy terms were fitted with (plan/cost.c). */
    int probed_cma = comm->cma_bytes_per_us > 0 && !((out->measured & CCL__FIG_GIVEN) && (out->measured & CCL__FIG_CMA));
    int file_cma = (out->measured & CCL__FIG_CMA) && shape->oversub <= 1;
    int cma_stale = probed_cma && file_cma && !cma_agrees(out, comm->cma_call_us, comm->cma_bytes_per_us);
    if (probed_cma && (!file_cma || cma_stale)) {
        if (cma_stale && comm->rank == 0)
            CCL_WARN(CCL__SUB_PLAN, comm->rank,
                     "the tuning file %s is stale: it says a cross-memory attach read takes %.2f us + %.2f GB/s; "
                     "this init measured %.2f us + %.2f GB/s; rewriting it (ccl-tune measures with care)",
                     comm->params.tuning_file, out->cma_call_us, out->cma_bytes_per_us / 1e3, comm->cma_call_us,
                     comm->cma_bytes_per_us / 1e3);
        out->cma_call_us = comm->cma_call_us, out->cma_bytes_per_us = comm->cma_bytes_per_us;
        out->measured |= CCL__FIG_CMA;
    }
    if (comm->cma_msg_bytes_per_us > 0 && comm->cma_msg_bytes > CCL__PROBE_BYTES && !(out->measured & CCL__FIG_GIVEN))
        out->cma_msg_bytes = comm->cma_msg_bytes, out->cma_msg_bytes_per_us = comm->cma_msg_bytes_per_us;
    if (comm->cma_large_bytes_per_us > 0 && comm->cma_large_bytes > CCL__PROBE_BYTES &&
        !((out->measured & CCL__FIG_GIVEN) && (out->measured & CCL__FIG_CMA_LARGE))) {
        out->cma_large_bytes = comm->cma_large_bytes, out->cma_large_bytes_per_us = comm->cma_large_bytes_per_us;
        out->measured |= CCL__FIG_CMA_LARGE;
    }
    int c = comm->nranks > 1 ? slowest_class(shape->ring_links) : -1;
    int probed = 0;
    ccl_status_t st = CCL_OK;
    /* Every rank comes from one communicator that checked or measured these
     * links (a split, a shrink): what it found stands, alike everywhere,
     * and the new one is usable without a probe's collective. */
    const struct ccl__figures *parent = comm->parent ? ccl__plan_model_figures(comm->parent) : NULL;
    if (c >= 0 && parent && (parent->measured >> c & 1u) && !(out->measured & CCL__FIG_GIVEN)) {
        out->link[c] = parent->link[c];
        out->measured |= 1u << c;
        c = -1;
    }
    struct ccl__link_figure seen = {0};
    int stale = c >= 0 && (out->measured >> c & 1u) && stale_link(comm, shape, c, out, &seen, &st);
    if (stale) out->measured &= ~(1u << c);
    CCL_CHECK(st);
    if (c >= 0 && !(out->measured >> c & 1u)) {
        double t0 = ccl__now();
        /* A large point (cost.h says why), where the model uses it: not
         * where ranks share cores. A network link's is at the ring's slot.
         * Shared memory's is a step of SHM_LARGE_CHUNKS chunks, which pass
         * through the FIFO while the next are written: a step of one
         * probe's size is written whole before it is read. On one 2-core
         * machine the two came out alike (64 KiB 6 us, 128 KiB 11, 512
         * KiB 50); on another, whose two cores sat near each other in some
         * runs and far apart in others, a far run's 64 KiB steps moved
         * 5.5-6.3 GB/s where its 1 MiB ring all-reduce ran at 13, and
         * priced by them the ring lost 256 KiB and 1 MiB all-reduces to
         * single-copy at 2-2.5x the ring's time. The probe's all-gathers
         * hold a step per rank: in a big job they would take it past its
         * bounds (time, and memory), and any smaller job on the same links
         * measures the same point. */
        size_t slot = comm->ring_chunk_bytes;
        int wanted = shape->oversub <= 1 && comm->nranks <= LARGE_PROBE_RANKS;
        if (ccl__link_is_shared_memory(c)) slot *= SHM_LARGE_CHUNKS;
        size_t large = wanted && slot > CCL__PROBE_BYTES && slot <= LARGE_MAX ? slot : 0;
        /* A stale file's probes stand, with the large point's where one
         * is wanted (each figure the best seen). */
        if (stale && !large) out->link[c] = seen;
        else CCL_CHECK(ccl__tune_probe_ring(comm, shape, out, large, &out->link[c]));
        if (stale && large) ccl__tune_link_keep_best(&out->link[c], &seen);
        out->measured |= 1u << c;
        probed = 1;
        const struct ccl__link_figure *l = &out->link[c];
        CCL_INFO(CCL__SUB_PLAN, comm->rank, "%s the ring's %s links in %.1f ms: alpha %.2f us, %.0f bytes/us%s",
                 stale && !large ? "took the stale check's best probes of" : "probed", ccl__link_names[c],
                 (ccl__now() - t0) * 1e3, l->alpha_us, l->bytes_per_us, large_text(l, (char[64]){0}, 64));
    }
    /* A probe of ranks that share cores times their crowding and a fresh
     * communicator's waits, not the link (measured here: 8 ranks on 2
     * cores, its 64 KiB all-gathers took 0.8-2 ms where a benchmark's same
     * call after a barrier takes 0.35-0.55): the job uses what it saw, the
     * machine's file keeps what uncrowded jobs and ccl-tune measure. */
    struct ccl__figures keep = *out;
    if (probed && shape->oversub > 1) keep.measured &= ~(1u << c), probed = 0;
    if (shape->oversub > 1) keep.measured &= ~CCL__FIG_CMA;
    save(comm, &keep, probed || stale || cma_stale); /* a stale figure leaves the file, measured or not */
    return CCL_OK;
}

void ccl__tune_describe(const struct ccl__figures *f, unsigned links, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = 0;
    for (int c = 0; c < CCL__NUM_LINKS && o < n; c++)
        if (links >> c & 1u)
            o += (size_t)snprintf(buf + o, n - o, "%s %.2f us %.2f GB/s%s (%s), ", ccl__link_names[c],
                                  f->link[c].alpha_us, f->link[c].bytes_per_us / 1e3,
                                  large_text(&f->link[c], (char[64]){0}, 64),
                                  f->measured >> c & 1u ? "measured" : "default");
    if (o < n)
        o += (size_t)snprintf(buf + o, n - o, "copy %.2f GB/s, reduce %.2f GB/s (%s)", f->copy_bytes_per_us / 1e3,
                              f->reduce_bytes_per_us / 1e3, f->measured & CCL__FIG_LOCAL ? "measured" : "default");
    if (o < n)
        o += (size_t)snprintf(buf + o, n - o, ", cross-memory attach %.2f us + %.2f GB/s (%s)", f->cma_call_us,
                              f->cma_bytes_per_us / 1e3, f->measured & CCL__FIG_CMA ? "measured" : "default");
    if (o < n && (f->measured & CCL__FIG_CMA_LARGE))
        snprintf(buf + o, n - o, ", %.2f GB/s at %.0f MiB buffers (measured)", f->cma_large_bytes_per_us / 1e3,
                 f->cma_large_bytes / (1 << 20));
}
