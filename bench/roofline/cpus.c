/* Which cpus the roofline may use, and pinning a process to one. */
#define _GNU_SOURCE
#include <sched.h>

#include "roofline.h"

int roofline_cpus(int *cpus, int max) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < max; c++)
        if (CPU_ISSET(c, &set)) cpus[n++] = c;
    return n;
}

void roofline_pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    (void)sched_setaffinity(0, sizeof set, &set); /* unpinned, the figure is the scheduler's */
}
