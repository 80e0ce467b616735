/*
 * NCCL's environment, read as libccl's. A job tuned for NCCL sets
 * NCCL_DEBUG, NCCL_SOCKET_IFNAME, NCCL_ALGO and the like; where libccl has
 * the same setting, the NCCL variable sets the CCL one, when the library
 * is loaded (before libccl reads its settings) and only where the CCL
 * variable is not set already: a CCL_* variable always wins. Values are
 * translated to libccl's spelling; a value or part of one with no meaning
 * here is left out, and at NCCL_DEBUG=INFO a line on stderr says so. The
 * table and the translations are in docs/cuda.md.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "nccl_impl.h"

#define VALUE_BYTES 512

static int info_wanted(void) {
    const char *d = getenv("NCCL_DEBUG");
    return d && (strcasecmp(d, "INFO") == 0 || strcasecmp(d, "TRACE") == 0);
}

static void say_dropped(const char *var, const char *what) {
    if (info_wanted()) fprintf(stderr, "libccl-nccl: %s: %s has no meaning in libccl; left out\n", var, what);
}

/* NCCL_DEBUG: its levels are libccl's, but for VERSION (NCCL's version
 * line and warnings) and ABORT, which become WARN. */
static int debug(const char *var, const char *v, char *out) {
    static const char *const same[] = {"NONE", "WARN", "INFO", "TRACE"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
        if (strcasecmp(v, same[i]) == 0) return snprintf(out, VALUE_BYTES, "%s", same[i]), 0;
    if (strcasecmp(v, "VERSION") == 0 || strcasecmp(v, "ABORT") == 0) return snprintf(out, VALUE_BYTES, "WARN"), 0;
    say_dropped(var, v);
    return -1;
}

/* NCCL_DEBUG_SUBSYS: a comma list, ^ before it excluding. */
static int debug_subsys(const char *var, const char *v, char *out) {
    static const struct {
        const char *nccl, *ccl;
    } map[] = {{"INIT", "INIT"}, {"COLL", "COLL"},  {"P2P", "P2P"},       {"SHM", "SHM"},     {"NET", "NET"},
               {"ENV", "ENV"},   {"ALL", "ALL"},    {"BOOTSTRAP", "BOOT"}, {"GRAPH", "PLAN"}, {"TUNING", "PLAN"}};
    char buf[VALUE_BYTES], *save = NULL;
    size_t o = 0;
    int exclude = v[0] == '^';
    snprintf(buf, sizeof buf, "%s", v + exclude);
    if (exclude) out[o++] = '^';
    out[o] = 0;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        const char *to = NULL;
        for (size_t i = 0; i < sizeof map / sizeof map[0] && !to; i++)
            if (strcasecmp(tok, map[i].nccl) == 0) to = map[i].ccl;
        if (!to) {
            say_dropped(var, tok);
            continue;
        }
        o += (size_t)snprintf(out + o, VALUE_BYTES - o, "%s%s", o > (size_t)exclude ? "," : "", to);
        if (o >= VALUE_BYTES) return -1;
    }
    return o > (size_t)exclude ? 0 : -1;
}

/* NCCL_SOCKET_IFNAME and NCCL_IB_HCA: a list of names or prefixes, = for
 * exact names, ^ excluding. libccl takes one name: the first. */
static int first_name(const char *var, const char *v, char *out) {
    if (v[0] == '^') {
        say_dropped(var, "an exclusion list (^...)");
        return -1;
    }
    if (v[0] == '=') v++;
    size_t n = strcspn(v, ",");
    if (n == 0 || n >= VALUE_BYTES) return -1;
    memcpy(out, v, n);
    out[n] = 0;
    if (v[n]) say_dropped(var, "every name after the first");
    return 0;
}

static int copy(const char *var, const char *v, char *out) {
    (void)var;
    if (strlen(v) >= VALUE_BYTES) return -1;
    strcpy(out, v);
    return 0;
}

/* NCCL_ALGO: "Ring", "Tree,Ring", or per collective "allreduce:tree;
 * allgather:ring" (NCCL 2.24). libccl has ring and tree of NCCL's
 * algorithms; each collective gets the first of its list that libccl has,
 * and one with none is left to libccl's planner. */
static const char *algo_name(const char *list) {
    char buf[VALUE_BYTES], *save = NULL;
    snprintf(buf, sizeof buf, "%s", list);
    for (char *a = strtok_r(buf, ",", &save); a; a = strtok_r(NULL, ",", &save)) {
        if (strcasecmp(a, "ring") == 0) return "ring";
        if (strcasecmp(a, "tree") == 0) return "tree";
        say_dropped("NCCL_ALGO", a);
    }
    return NULL;
}

static int algo(const char *var, const char *v, char *out) {
    if (v[0] == '^') {
        say_dropped(var, "an exclusion list (^...)");
        return -1;
    }
    char buf[VALUE_BYTES], *save = NULL;
    size_t o = 0;
    out[0] = 0;
    snprintf(buf, sizeof buf, "%s", v);
    for (char *part = strtok_r(buf, ";", &save); part; part = strtok_r(NULL, ";", &save)) {
        char *colon = strchr(part, ':');
        const char *name = algo_name(colon ? colon + 1 : part);
        if (!name) continue;
        if (colon) *colon = 0;
        o += (size_t)snprintf(out + o, VALUE_BYTES - o, "%s%s%s%s", o ? "," : "", colon ? part : "", colon ? ":" : "",
                              name);
        if (o >= VALUE_BYTES) return -1;
    }
    return o ? 0 : -1;
}

static const struct {
    const char *nccl, *ccl;
    int (*translate)(const char *var, const char *v, char *out);
} table[] = {
    {"NCCL_DEBUG", "CCL_DEBUG", debug},
    {"NCCL_DEBUG_SUBSYS", "CCL_DEBUG_SUBSYS", debug_subsys},
    {"NCCL_DEBUG_FILE", "CCL_DEBUG_FILE", copy}, /* %h and %p are libccl's too */
    {"NCCL_SOCKET_IFNAME", "CCL_SOCKET_IFNAME", first_name},
    {"NCCL_IB_HCA", "CCL_IB_HCA", first_name},
    {"NCCL_IB_GID_INDEX", "CCL_IB_GID_INDEX", copy},
    {"NCCL_ALGO", "CCL_ALGO", algo},
};

/* Runs when the library is loaded, before any call can read libccl's
 * settings (a program sets its environment before it loads NCCL). */
__attribute__((constructor)) static void nccl_env_as_ccl(void) {
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const char *v = getenv(table[i].nccl), *mine = getenv(table[i].ccl);
        if (!v || !*v || (mine && *mine)) continue;
        char out[VALUE_BYTES];
        if (table[i].translate(table[i].nccl, v, out) == 0 && out[0]) {
            setenv(table[i].ccl, out, 1); /* unset or empty: ours to set */
            if (info_wanted()) fprintf(stderr, "libccl-nccl: %s=%s read as %s=%s\n", table[i].nccl, v, table[i].ccl, out);
        }
    }
}
