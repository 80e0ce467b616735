/* The command line, and what each job needs once: a rendezvous port and a secret. */
#define _GNU_SOURCE
#include "cclrun.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "Usage: cclrun -n N [--host-per-rank] [--transport shm|tcp|ib] [--timeout SECONDS] [--elastic] [--]\n"
            "              prog [args...]\n"
            "\n"
            "Starts N ranks of prog on this machine for ccl_comm_init_env. Each rank gets\n"
            "CCL_RANK, CCL_WORLD_SIZE, CCL_LOCAL_RANK, CCL_ROOT_ADDR and CCL_SECRET, and what\n"
            "torch.distributed and torchrun programs read: RANK, WORLD_SIZE, LOCAL_RANK,\n"
            "LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT (a port of its own, for torch's\n"
            "store). Its output is printed line by line as \"[rank] line\" (stdin is /dev/null).\n"
            "\n"
            "  -n N                 number of ranks (1..%d)\n"
            "  --host-per-rank      give each rank its own CCL_HOST_ID, as if on its own machine\n"
            "                       (ranks then talk over TCP)\n"
            "  --transport T        set CCL_TRANSPORT=T (shm, tcp or ib)\n"
            "  --timeout SECONDS    stop every rank after SECONDS and exit with status 124\n"
            "  --elastic            a rank killed by a signal is reported, and the others go on\n"
            "                       (an elastic job shrinks past it; docs/elastic.md)\n"
            "  -h, --help           show this help\n"
            "\n"
            "If a rank fails, the others get SIGTERM (SIGKILL %g s later) and cclrun exits\n"
            "with the first failure's status (128+signal if it was killed by a signal).\n"
            "SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to the ranks; a second one kills them.\n",
            CCLRUN_MAX_RANKS, CCLRUN_GRACE_SECONDS);
}

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("cclrun: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'cclrun --help' for more information.\n", stderr);
    return -1;
}

/* Matches "--name value" or "--name=value"; advances *i past the value. */
static int take_value(int argc, char **argv, int *i, const char *name, const char **value) {
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0) return 0;
    if (argv[*i][n] == '=') {
        *value = argv[*i] + n + 1;
        return 1;
    }
    if (argv[*i][n] != '\0') return 0;
    *value = *i + 1 < argc ? argv[++*i] : NULL;
    return 1;
}

int cclrun_parse_options(int argc, char **argv, struct cclrun_options *o) {
    memset(o, 0, sizeof(*o));
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i], *v;
        char *end;
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 1;
        } else if (strcmp(a, "--elastic") == 0) {
            o->elastic = 1;
        } else if (strcmp(a, "--host-per-rank") == 0) {
            o->host_per_rank = 1;
        } else if (strncmp(a, "-n", 2) == 0 && (a[2] == '\0' || (a[2] >= '0' && a[2] <= '9'))) {
            v = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);
            if (!v) return usage_error("-n needs a number of ranks");
            errno = 0;
            long n = strtol(v, &end, 10);
            if (errno || end == v || *end || n < 1 || n > CCLRUN_MAX_RANKS)
                return usage_error("-n must be a whole number from 1 to %d, not '%s'", CCLRUN_MAX_RANKS, v);
            o->nranks = (int)n;
        } else if (take_value(argc, argv, &i, "--transport", &v)) {
            if (!v) return usage_error("--transport needs shm, tcp or ib");
            if (strcmp(v, "shm") != 0 && strcmp(v, "tcp") != 0 && strcmp(v, "ib") != 0)
                return usage_error("--transport must be shm, tcp or ib, not '%s'", v);
            o->transport = v;
        } else if (take_value(argc, argv, &i, "--timeout", &v)) {
            if (!v) return usage_error("--timeout needs a number of seconds");
            errno = 0;
            double t = strtod(v, &end);
            if (errno || end == v || *end || !(t > 0) || !isfinite(t))
                return usage_error("--timeout must be a positive number of seconds, not '%s'", v);
            o->timeout_s = t;
        } else {
            return usage_error("unknown option '%s'", a);
        }
    }
    if (o->nranks == 0) return usage_error("missing -n N (the number of ranks)");
    if (i >= argc) return usage_error("missing the program to run");
    o->argv = argv + i;
    return 0;
}

int cclrun_make_secret(char hex[65]) {
    unsigned char raw[32];
    size_t got = 0;
    while (got < sizeof(raw)) {
        ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -1;
        got += (size_t)n;
    }
    for (size_t k = 0; k < sizeof(raw); k++) snprintf(hex + 2 * k, 3, "%02x", raw[k]);
    return 0;
}
