/* The CPUs a cgroup quota lets this process use (cgroup v2 cpu.max, v1
 * cpu.cfs_quota_us / cpu.cfs_period_us), for deciding whether ranks crowd
 * their CPUs. A container limited to 1 CPU on a 16-core machine has 16
 * cores in its affinity mask and one CPU's worth of time. */
#define _GNU_SOURCE
#include "plan/plan.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The quota in CPUs of one cgroup directory, or 0 for none. */
static double quota_at(const char *dir, int v2) {
    char path[2 * PATH_MAX + 64];
    double quota = 0, period = 0;
    if (v2) {
        snprintf(path, sizeof path, "%s/cpu.max", dir);
        FILE *f = fopen(path, "r");
        if (!f) return 0;
        char q[32] = "";
        if (fscanf(f, "%31s %lf", q, &period) == 2 && strcmp(q, "max") != 0) quota = strtod(q, NULL);
        fclose(f);
    } else {
        snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir);
        FILE *f = fopen(path, "r");
        if (!f) return 0;
        if (fscanf(f, "%lf", &quota) != 1) quota = 0;
        fclose(f);
        snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir);
        if (!(f = fopen(path, "r"))) return 0;
        if (fscanf(f, "%lf", &period) != 1) period = 0;
        fclose(f);
    }
    return quota > 0 && period > 0 ? quota / period : 0;
}

/* This process's cgroup path for the hierarchy that holds the cpu
 * controller (v1) or the unified one (v2). */
static int own_cgroup(int v2, char *out, size_t n) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return -1;
    char line[PATH_MAX + 64];
    int found = -1;
    while (found < 0 && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *ctl = strchr(line, ':'), *path = ctl ? strchr(ctl + 1, ':') : NULL;
        if (!path) continue;
        *path++ = 0;
        ctl++;
        int match = 0;
        if (v2) match = strcmp(line, "0") == 0 && *ctl == 0;
        else
            for (char *save = NULL, *tok = strtok_r(ctl, ",", &save); tok && !match; tok = strtok_r(NULL, ",", &save))
                match = strcmp(tok, "cpu") == 0;
        if (match) found = snprintf(out, n, "%s", path) < (int)n ? 0 : -1;
    }
    fclose(f);
    return found;
}

/* The smallest quota from the process's cgroup up to the mount's root. */
static double hierarchy_quota(const char *mount, const char *mount_root, int v2) {
    char cg[PATH_MAX];
    if (own_cgroup(v2, cg, sizeof cg) != 0) return 0;
    size_t rl = strlen(mount_root);
    const char *rel = cg;
    if (strcmp(mount_root, "/") != 0 && strncmp(cg, mount_root, rl) == 0) rel = cg + rl;
    char dir[2 * PATH_MAX + 8];
    snprintf(dir, sizeof dir, "%s%s", mount, strcmp(rel, "/") == 0 ? "" : rel);
    double best = 0;
    size_t ml = strlen(mount);
    for (;;) {
        double q = quota_at(dir, v2);
        if (q > 0 && (best == 0 || q < best)) best = q;
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < ml) break;
        *slash = 0;
    }
    return best;
}

int ccl__plan_cpu_quota(void) {
    FILE *f = fopen("/proc/self/mountinfo", "r");
    if (!f) return 0;
    char line[2 * PATH_MAX];
    double best = 0;
    while (fgets(line, sizeof line, f)) {
        char root[PATH_MAX], mount[PATH_MAX], fstype[64], super[512];
        const char *dash = strstr(line, " - ");
        if (!dash || sscanf(line, "%*s %*s %*s %4095s %4095s", root, mount) != 2 ||
            sscanf(dash + 3, "%63s %*s %511s", fstype, super) != 2)
            continue;
        int v2 = strcmp(fstype, "cgroup2") == 0, v1cpu = 0;
        if (strcmp(fstype, "cgroup") == 0)
            for (char *save = NULL, *tok = strtok_r(super, ",", &save); tok && !v1cpu; tok = strtok_r(NULL, ",", &save))
                v1cpu = strcmp(tok, "cpu") == 0;
        if (!v2 && !v1cpu) continue;
        double q = hierarchy_quota(mount, root, v2);
        if (q > 0 && (best == 0 || q < best)) best = q;
    }
    fclose(f);
    return best > 0 ? (int)ceil(best - 1e-9) : 0;
}
