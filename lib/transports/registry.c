/* Every transport compiled in: adding one is a line here. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transports/transport.h"
#include "transports/shm/shm.h"
#include "transports/tcp/tcp.h"
#ifdef CCL_HAVE_IB
#include "transports/ib/ib.h"
#endif

const struct ccl__transport *const ccl__transports[] = {
    &ccl__transport_shm,
    &ccl__transport_tcp,
#ifdef CCL_HAVE_IB
    &ccl__transport_ib,
#endif
};
const int ccl__ntransports = (int)(sizeof(ccl__transports) / sizeof(ccl__transports[0]));

/* transport_mask has a bit per transport. */
_Static_assert(sizeof(ccl__transports) / sizeof(ccl__transports[0]) <= 32, "at most 32 transports");

const struct ccl__transport *ccl__transport_by_name(const char *name) {
    for (int i = 0; i < ccl__ntransports; i++)
        if (strcmp(ccl__transports[i]->name, name) == 0) return ccl__transports[i];
    return NULL;
}

int ccl__transport_index(const struct ccl__transport *t) {
    for (int i = 0; i < ccl__ntransports; i++)
        if (ccl__transports[i] == t) return i;
    return -1;
}

/* Every transport's knobs, read once per process as the library's own
 * are (core/params.c), so a bad value is warned about once. */
static void *process_knobs[sizeof(ccl__transports) / sizeof(ccl__transports[0])];
static pthread_once_t knobs_once = PTHREAD_ONCE_INIT;

static void knobs_read(void) {
    for (int t = 0; t < ccl__ntransports; t++)
        if ((process_knobs[t] = calloc(1, ccl__transports[t]->knobs_bytes)))
            ccl__transports[t]->knobs_load(process_knobs[t]);
}

const void *ccl__transport_knobs(const struct ccl__transport *t) {
    pthread_once(&knobs_once, knobs_read);
    int i = ccl__transport_index(t);
    return i >= 0 ? process_knobs[i] : NULL;
}

const char *ccl__transport_missing_why(const char *name) {
#ifndef CCL_HAVE_IB
    if (strcmp(name, "ib") == 0) return "; this build has no RDMA: build with libibverbs-dev installed";
#endif
    (void)name;
    return "";
}

void ccl__transport_names(char *buf, size_t n) {
    size_t o = 0;
    if (n) buf[0] = 0;
    for (int i = 0; i < ccl__ntransports && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? ", " : "", ccl__transports[i]->name);
}
