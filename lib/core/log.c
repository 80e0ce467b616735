/* Logging with a one-compare fast path; configured once from CCL_DEBUG*. */
#include "core/log.h"
#include "core/pattern.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int ccl__log_level_cached = CCL__LOG_WARN;
unsigned ccl__log_subsys_mask = CCL__SUB_ALL;

static FILE *log_file;
static char log_host[64] = "?";
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static const struct {
    const char *name;
    unsigned bit;
} subsys_names[] = {
    {"INIT", CCL__SUB_INIT}, {"BOOT", CCL__SUB_BOOT}, {"NET", CCL__SUB_NET},   {"SHM", CCL__SUB_SHM},
    {"COLL", CCL__SUB_COLL}, {"P2P", CCL__SUB_P2P},   {"PLAN", CCL__SUB_PLAN}, {"ENV", CCL__SUB_ENV},
    {"ALL", CCL__SUB_ALL},
};

static unsigned parse_subsys(const char *spec) {
    int exclude = spec[0] == '^';
    unsigned mask = 0;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", spec + exclude);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
            if (strcasecmp(tok, subsys_names[i].name) == 0) mask |= subsys_names[i].bit;
    return exclude ? ~mask : mask;
}

static const char *subsys_name(unsigned bit) {
    for (size_t i = 0; i + 1 < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
        if (subsys_names[i].bit == bit) return subsys_names[i].name;
    return "ALL";
}

/* A warning while the log is being set up (CCL_WARN would wait for that
 * very set-up): straight to stderr, where the log then stays. */
static void setup_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void setup_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s:%d CCL WARN INIT: ", log_host, (int)getpid());
    vfprintf(stderr, fmt, ap);
    fputs("; logging to stderr instead\n", stderr);
    va_end(ap);
}

/* "%h" -> host, "%p" -> pid, so each process of a job gets its own file.
 * A path too long for the system is refused, never cut. */
static void open_log_file(const char *pattern) {
    char path[PATH_MAX], pid[16];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    const char *values[] = {log_host, pid};
    if (ccl__pattern_expand(pattern, "hp", values, path, sizeof path) != 0) {
        setup_warn("CCL_DEBUG_FILE=%.64s...: its path would be longer than %d bytes", pattern, PATH_MAX - 1);
        return;
    }
    log_file = fopen(path, "a");
    if (log_file) setvbuf(log_file, NULL, _IOLBF, 0);
    else setup_warn("CCL_DEBUG_FILE: cannot open %s (%s)", path, strerror(errno));
}

static void log_setup(void) {
    gethostname(log_host, sizeof(log_host) - 1);
    const char *lvl = getenv("CCL_DEBUG");
    if (lvl && *lvl) {
        if (!strcasecmp(lvl, "NONE")) ccl__log_level_cached = CCL__LOG_NONE;
        else if (!strcasecmp(lvl, "WARN")) ccl__log_level_cached = CCL__LOG_WARN;
        else if (!strcasecmp(lvl, "INFO")) ccl__log_level_cached = CCL__LOG_INFO;
        else if (!strcasecmp(lvl, "TRACE")) ccl__log_level_cached = CCL__LOG_TRACE;
    }
    const char *sub = getenv("CCL_DEBUG_SUBSYS");
    if (sub && *sub) ccl__log_subsys_mask = parse_subsys(sub);
    const char *file = getenv("CCL_DEBUG_FILE");
    if (file && *file) open_log_file(file);
}

void ccl__log_init(void) { pthread_once(&log_once, log_setup); }

void ccl__log(int level, unsigned subsys, int rank, const char *fmt, ...) {
    static const char *const level_names[] = {"NONE", "WARN", "INFO", "TRACE"};
    ccl__log_init(); /* a line before any init still names the host and goes to CCL_DEBUG_FILE */
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    char who[16];
    if (rank >= 0) snprintf(who, sizeof(who), "%d", rank);
    else snprintf(who, sizeof(who), "-");
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    char when[32] = "?";
    time_t sec = tv.tv_sec;
    if (localtime_r(&sec, &tm)) strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
    /* One fprintf per line so lines from threads do not interleave. */
    fprintf(log_file ? log_file : stderr, "%s:%d:%s [%s.%06ld] CCL %s %s: %s\n", log_host, (int)getpid(), who, when,
            (long)tv.tv_usec, level_names[level], subsys_name(subsys), msg);
}

void ccl__log_drops_total(unsigned subsys, int rank, const char *listener, int count) {
    if (count > CCL__DROPS_WARNED)
        CCL_WARN(subsys, rank, "%s: dropped %d connections that were not peers (%d not shown; CCL_DEBUG=INFO shows them)",
                 listener, count, count - CCL__DROPS_WARNED);
}
