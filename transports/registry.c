#include <string.h>

#include "transports/transport.h"
#include "transports/shm/shm.h"
#include "transports/tcp/tcp.h"

const struct ccl__transport *const ccl__transports[CCL__NUM_TRANSPORTS] = {
    [CCL__TRANSPORT_SHM] = &ccl__transport_shm,
    [CCL__TRANSPORT_TCP] = &ccl__transport_tcp,
};

const struct ccl__transport *ccl__transport_by_name(const char *name) {
    for (int i = 0; i < CCL__NUM_TRANSPORTS; i++)
        if (ccl__transports[i] && strcmp(ccl__transports[i]->name, name) == 0) return ccl__transports[i];
    return NULL;
}
