/* The planner's view of the machine: hwloc summaries (of this machine, an
 * XML file, a synthetic description), where ranks sit, and a ring that
 * crosses every host, package and NUMA boundary as few times as a ring
 * can. */
#define _GNU_SOURCE
#include <hwloc.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "plan/plan.h"
#include "util.h"

/* "pack:2 numa:2 core:4 pu:2": 16 cores, core k in package k / 8 and NUMA
 * node k / 4. */
static void check_two_sockets(const struct ccl__peer_info *me, int source) {
    const struct ccl__topo_summary *s = &me->topo;
    ck_assert_int_eq(s->source, source);
    ck_assert_int_eq(s->npackages, 2);
    ck_assert_int_eq(s->nnuma, 4);
    ck_assert_int_eq(s->machine_cores, 16);
    ck_assert_int_eq(s->ncores, 16);
    ck_assert_int_eq(s->npus, 32);
    ck_assert_int_eq(s->ncore_map, 16);
    ck_assert_int_eq(s->package, -1); /* it may run anywhere: no one package */
    ck_assert_int_eq(s->numa, -1);
    ck_assert_int_eq(s->core, -1);
    ck_assert_int_eq(s->binds, 1); /* a described machine is planned as pinned */
    for (int k = 0; k < 16; k++) {
        ck_assert_msg(s->core_package[k] == k / 8, "core %d in package %d", k, s->core_package[k]);
        ck_assert_msg(s->core_numa[k] == k / 4, "core %d in NUMA node %d", k, s->core_numa[k]);
    }
    ck_assert_int_eq(me->ncores, 32);
}

START_TEST(summary_synthetic) {
    struct ccl__peer_info me;
    char err[CCL__ERR_BYTES];
    ck_assert_int_eq(ccl__plan_machine_summary("pack:2 numa:2 core:4 pu:2", &me, err, sizeof err), CCL_OK);
    check_two_sockets(&me, CCL__TOPO_SYNTHETIC);
}
END_TEST

/* path: a mkstemp template, replaced by the file written. */
static void write_synthetic_xml(char *path, const char *description) {
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    hwloc_topology_t t;
    ck_assert_int_eq(hwloc_topology_init(&t), 0);
    ck_assert_int_eq(hwloc_topology_set_synthetic(t, description), 0);
    ck_assert_int_eq(hwloc_topology_load(t), 0);
    ck_assert_int_eq(hwloc_topology_export_xml(t, path, 0), 0);
    hwloc_topology_destroy(t);
}

START_TEST(summary_xml) {
    char path[] = "/tmp/ccl-topo-XXXXXX";
    write_synthetic_xml(path, "pack:2 numa:2 core:4 pu:2");
    struct ccl__peer_info me;
    char err[CCL__ERR_BYTES];
    ck_assert_int_eq(ccl__plan_machine_summary(path, &me, err, sizeof err), CCL_OK);
    check_two_sockets(&me, CCL__TOPO_XML);
    unlink(path);
}
END_TEST

/* This machine: the summary agrees with the affinity the process has. */
START_TEST(summary_this_machine) {
    struct ccl__peer_info me;
    char err[CCL__ERR_BYTES];
    ck_assert_int_eq(ccl__plan_machine_summary("", &me, err, sizeof err), CCL_OK);
    cpu_set_t mask;
    ck_assert_int_eq(sched_getaffinity(0, sizeof mask, &mask), 0);
    const struct ccl__topo_summary *s = &me.topo;
    ck_assert_int_eq(s->source, CCL__TOPO_MACHINE);
    ck_assert_int_eq(s->npus, CPU_COUNT(&mask));
    ck_assert_int_ge(s->npackages, 1);
    ck_assert_int_ge(s->nnuma, 1);
    ck_assert_int_ge(s->ncores, 1);
    ck_assert_int_le(s->ncores, s->machine_cores);
    ck_assert_int_eq(s->binds, 0); /* CCL_BIND=none */
    ck_assert_int_eq(s->ncore_map, s->ncores < CCL__TOPO_CORES ? s->ncores : CCL__TOPO_CORES);
}
END_TEST

/* Building the summary loads no GPU vendor's library: an OpenCL driver
 * listed for the OpenCL loader says so if it is loaded. (Where hwloc has
 * no OpenCL plugin, nothing would load it either way.) */
START_TEST(summary_loads_no_opencl_driver) {
    char dir[] = "/tmp/ccl-icd-XXXXXX", icd[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(icd, sizeof icd, "%s/fake.icd", dir);
    FILE *f = fopen(icd, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "%s\n", CCL_TEST_FAKE_OPENCL_DRIVER);
    fclose(f);
    setenv("OCL_ICD_VENDORS", dir, 1);
    unsetenv("CCL_TEST_OPENCL_DRIVER_LOADED");
    struct ccl__peer_info me;
    char err[CCL__ERR_BYTES];
    ck_assert_int_eq(ccl__plan_machine_summary("", &me, err, sizeof err), CCL_OK);
    unlink(icd);
    rmdir(dir);
    ck_assert_msg(getenv("CCL_TEST_OPENCL_DRIVER_LOADED") == NULL,
                  "building the topology loaded the OpenCL drivers (hwloc's OpenCL plugin)");
}
END_TEST

static const char *const bad_files[] = {"pack:two", "/nonexistent/dir/and nonsense:3", "core:0"};

START_TEST(bad_topo_file) {
    struct ccl__peer_info me;
    char err[CCL__ERR_BYTES];
    ck_assert_int_eq(ccl__plan_machine_summary(bad_files[_i], &me, err, sizeof err), CCL_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(err, "CCL_TOPO_FILE=") && strstr(err, bad_files[_i]),
                  "the error does not name the setting: \"%s\"", err);
}
END_TEST

/* ---- RDMA devices by nearness ---- */

/* An RDMA adapter (a PCI device and its OpenFabrics OS device) as hwloc
 * XML, for hanging under a CPU-side object. */
static void adapter_xml(char *out, size_t n, int index, const char *name) {
    snprintf(out, n,
             "<object type=\"PCIDev\" gp_index=\"%d\" pci_busid=\"0000:%02x:00.0\" "
             "pci_type=\"0207 [15b3:1017] [15b3:0020] 00\" pci_link_speed=\"0.000000\">"
             "<object type=\"OSDev\" gp_index=\"%d\" name=\"%s\" osdev_type=\"%d\"/></object>\n",
             900 + 2 * index, index + 1, 901 + 2 * index, name, (int)HWLOC_OBJ_OSDEV_OPENFABRICS);
}

/* path: a mkstemp template, replaced by the file written: two packages of
 * two cores (CPUs 0-1 and 2-3), mlx5_0 in package 1, mlx5_1 in package 0,
 * and rxe0 on the machine as a whole (a device of no package, as a
 * soft-RoCE one is). */
static void write_adapters_xml(char *path) {
    hwloc_topology_t t;
    ck_assert_int_eq(hwloc_topology_init(&t), 0);
    ck_assert_int_eq(hwloc_topology_set_synthetic(t, "pack:2 numa:1 core:2 pu:1"), 0);
    ck_assert_int_eq(hwloc_topology_load(t), 0);
    char *xml;
    int len;
    ck_assert_int_eq(hwloc_topology_export_xmlbuffer(t, &xml, &len, 0), 0);
    size_t cap = (size_t)len + 4096, used = 0;
    char *doc = malloc(cap), dev[512];
    ck_assert_ptr_nonnull(doc);
    /* each device goes before the first object inside its parent (after
     * the parent's info lines, which come first) */
    const char *const parents[] = {"type=\"Machine\"", "type=\"Package\" os_index=\"0\"",
                                   "type=\"Package\" os_index=\"1\""};
    const char *const names[] = {"rxe0", "mlx5_1", "mlx5_0"};
    const char *from = xml;
    for (int k = 0; k < 3; k++) {
        const char *tag = strstr(from, parents[k]);
        ck_assert_ptr_nonnull(tag);
        const char *end = strstr(strchr(tag, '>'), "<object");
        ck_assert_ptr_nonnull(end);
        memcpy(doc + used, from, (size_t)(end - from));
        used += (size_t)(end - from);
        adapter_xml(dev, sizeof dev, k, names[k]);
        used += (size_t)snprintf(doc + used, cap - used, "%s", dev);
        from = end;
    }
    used += (size_t)snprintf(doc + used, cap - used, "%s", from);
    hwloc_free_xmlbuffer(t, xml);
    hwloc_topology_destroy(t);
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, doc, used), (ssize_t)used);
    close(fd);
    free(doc);
}

static const struct {
    const char *cpus, *want;
} nearest[] = {
    {"0-1", "mlx5_1,rxe0,mlx5_0"}, /* package 0: its own adapter, the machine's, then package 1's */
    {"3", "mlx5_0,rxe0,mlx5_1"},   /* one core of package 1 */
    {"2-3", "mlx5_0,rxe0,mlx5_1"},
    {"1-2", "rxe0,"},              /* spanning both packages: the machine's first, the two alike after it */
    {"0-3", "rxe0,"},
};

START_TEST(rdma_nearest_first) {
    char path[] = "/tmp/ccl-topo-XXXXXX";
    write_adapters_xml(path);
    char got[128], err[CCL__ERR_BYTES];
    ck_assert_msg(ccl__plan_rdma_order(path, nearest[_i].cpus, got, sizeof got, err, sizeof err) == CCL_OK, "%s", err);
    const char *want = nearest[_i].want;
    size_t wl = strlen(want);
    if (want[wl - 1] == ',') /* the rest in either order: both packages' adapters */
        ck_assert_msg(strncmp(got, want, wl) == 0 && strlen(got) == strlen("rxe0,mlx5_1,mlx5_0") &&
                          strstr(got, "mlx5_0") && strstr(got, "mlx5_1"),
                      "cpus %s: devices in the order %s", nearest[_i].cpus, got);
    else
        ck_assert_msg(strcmp(got, want) == 0, "cpus %s: devices in the order %s, want %s", nearest[_i].cpus, got,
                      want);
    /* a list too short for every name keeps whole names only */
    char small[12];
    ck_assert_int_eq(ccl__plan_rdma_order(path, nearest[_i].cpus, small, sizeof small, err, sizeof err), CCL_OK);
    ck_assert_msg(strncmp(got, small, strlen(small)) == 0 && (got[strlen(small)] == ',' || !got[strlen(small)]),
                  "cut to %zu bytes: \"%s\" from \"%s\"", sizeof small, small, got);
    unlink(path);
}
END_TEST

START_TEST(rdma_order_without_devices) {
    char got[128] = "x", err[CCL__ERR_BYTES];
    ck_assert_int_eq(ccl__plan_rdma_order("pack:2 core:2 pu:1", "0", got, sizeof got, err, sizeof err), CCL_OK);
    ck_assert_str_eq(got, "");
    ck_assert_int_eq(ccl__plan_rdma_order("pack:2 core:2 pu:1", "zero", got, sizeof got, err, sizeof err),
                     CCL_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(err, "zero"), "the error does not name the list: \"%s\"", err);
}
END_TEST

/* ---- places and the ring, on hand-made peer tables ---- */

#define MAXR 64

struct table {
    int n;
    struct ccl__peer_info peers[MAXR];
    struct ccl__place places[MAXR];
    int ring[MAXR];
};

/* n ranks over `hosts` hosts, rank r on host r % hosts (a launcher that
 * deals ranks round robin), each bound by its launcher to one core: its
 * position on the host p = r / hosts goes to package p % pk, NUMA node
 * (p / pk) % nn of that package, so neighbours in rank order sit apart. */
static void dealt_table(struct table *T, int n, int hosts, int pk, int nn) {
    memset(T, 0, sizeof *T);
    T->n = n;
    for (int r = 0; r < n; r++) {
        struct ccl__peer_info *p = &T->peers[r];
        p->rank = r;
        snprintf(p->host_id, sizeof p->host_id, "host%d", r % hosts);
        snprintf(p->machine_id, sizeof p->machine_id, "host%d", r % hosts);
        int pos = r / hosts, pkg = pos % pk, numa = pkg * nn + (pos / pk) % nn;
        p->topo = (struct ccl__topo_summary){.source = CCL__TOPO_MACHINE, .npackages = (uint8_t)pk,
                                             .nnuma = (uint8_t)(pk * nn), .package = (int16_t)pkg,
                                             .numa = (int16_t)numa, .core = (int16_t)pos, .ncores = 1, .npus = 1};
    }
    ccl__plan_places(n, T->peers, T->places);
    ccl__plan_order(n, T->places, T->ring);
}

/* The fewest crossings a ring can make: it must enter and leave every
 * host once (H links when H > 1), every package of a host once inside
 * that host's run (P - 1 more links per host; the run's two ends are the
 * host crossings), every NUMA node of a package likewise. */
static void min_crossings(const struct table *T, struct ccl__crossings *want) {
    memset(want, 0, sizeof *want);
    int hosts = 0, seen_host[MAXR] = {0};
    int pk_of_host[MAXR][16] = {{0}}, numa_of_pkg[MAXR][16][16] = {{{0}}};
    for (int r = 0; r < T->n; r++) {
        const struct ccl__place *p = &T->places[r];
        if (!seen_host[p->host]++) hosts++;
        pk_of_host[p->host][p->package] = 1;
        numa_of_pkg[p->host][p->package][p->numa] = 1;
    }
    want->hosts = hosts > 1 ? hosts : 0;
    for (int h = 0; h < MAXR; h++) {
        int pk = 0;
        for (int k = 0; k < 16; k++) {
            if (!pk_of_host[h][k]) continue;
            pk++;
            int nn = 0;
            for (int m = 0; m < 16; m++) nn += numa_of_pkg[h][k][m];
            want->numa += nn - 1;
        }
        if (pk) want->packages += pk - 1;
    }
    /* A single host's ring closes on itself: its run wraps, one more
     * package (and NUMA) crossing where the ends meet. */
    if (hosts == 1) {
        want->packages += want->packages > 0;
        if (want->packages == 0) want->numa += want->numa > 0;
    }
}

static void check_ring(const struct table *T, const char *what) {
    int seen[MAXR] = {0};
    for (int i = 0; i < T->n; i++) {
        ck_assert_msg(T->ring[i] >= 0 && T->ring[i] < T->n && !seen[T->ring[i]]++, "%s: the ring is not a permutation",
                      what);
    }
    struct ccl__crossings got, want;
    ccl__plan_crossings(T->n, T->places, T->ring, &got);
    min_crossings(T, &want);
    ck_assert_msg(got.hosts == want.hosts && got.packages == want.packages && got.numa == want.numa,
                  "%s: the ring crosses %d hosts, %d packages, %d NUMA nodes; the least is %d, %d, %d", what, got.hosts,
                  got.packages, got.numa, want.hosts, want.packages, want.numa);
    /* Rank order would cross far more often (what the old ring did). */
    int order[MAXR];
    for (int i = 0; i < T->n; i++) order[i] = i;
    struct ccl__crossings naive;
    ccl__plan_crossings(T->n, T->places, order, &naive);
    ck_assert_int_ge(naive.hosts + naive.packages + naive.numa, got.hosts + got.packages + got.numa);
}

struct shape {
    int n, hosts, packages, numa_per_package;
};
static const struct shape shapes[] = {
    {16, 1, 2, 1}, {16, 1, 2, 2}, {32, 4, 2, 2}, {8, 2, 2, 1}, {12, 3, 2, 2}, {7, 1, 2, 2}, {64, 4, 2, 2}, {5, 5, 2, 2},
};

START_TEST(ring_crosses_least) {
    const struct shape *s = &shapes[_i];
    struct table *T = malloc(sizeof *T);
    dealt_table(T, s->n, s->hosts, s->packages, s->numa_per_package);
    char what[96];
    snprintf(what, sizeof what, "%d ranks, %d hosts of %d packages x %d NUMA nodes", s->n, s->hosts, s->packages,
             s->numa_per_package);
    check_ring(T, what);
    /* every host's ranks are one run of the ring */
    for (int i = 1; i < T->n; i++)
        for (int j = i + 1; j < T->n; j++)
            if (T->places[T->ring[j]].host == T->places[T->ring[i - 1]].host &&
                T->places[T->ring[i]].host != T->places[T->ring[i - 1]].host)
                ck_abort_msg("%s: host %d appears twice on the ring", what, T->places[T->ring[j]].host);
    free(T);
}
END_TEST

/* Unbound ranks that CCL_BIND will pin: the i-th rank of a machine goes to
 * the i-th core of its map, and the ring follows that. */
START_TEST(places_of_pinned_ranks) {
    struct table *T = malloc(sizeof *T);
    memset(T, 0, sizeof *T);
    T->n = 8;
    for (int r = 0; r < T->n; r++) {
        struct ccl__peer_info *p = &T->peers[r];
        snprintf(p->host_id, sizeof p->host_id, "h");
        snprintf(p->machine_id, sizeof p->machine_id, "h");
        struct ccl__topo_summary *s = &p->topo;
        s->source = CCL__TOPO_MACHINE, s->binds = 1, s->package = s->numa = s->core = -1, s->ncore_map = 4;
        /* a map whose cores alternate packages (as some BIOSes number them) */
        for (int k = 0; k < 4; k++) s->core_package[k] = (uint8_t)(k % 2), s->core_numa[k] = (uint8_t)(k % 2);
    }
    ccl__plan_places(T->n, T->peers, T->places);
    for (int r = 0; r < T->n; r++) {
        ck_assert_int_eq(T->places[r].core, r % 4);
        ck_assert_int_eq(T->places[r].package, r % 2);
    }
    ccl__plan_order(T->n, T->places, T->ring);
    check_ring(T, "8 ranks pinned over 4 cores of alternating packages");
    ck_assert_int_eq(T->places[T->ring[0]].package, 0);
    ck_assert_int_eq(T->places[T->ring[T->n - 1]].package, 1);
    free(T);
}
END_TEST

/* Ranks per CPU in the model's shape: ranks pinned to a core each count
 * the distinct cores they sit on (2 ranks pinned to 2 cores: 1 per CPU,
 * though each may use one CPU; 8 pinned round robin to 2 cores: 4), ranks
 * free to use 2 CPUs count those (4 ranks: 2), and machines apart count
 * apart (2 machines of 2 pinned ranks on one core each: 2). */
static int shm_pairs(void *ctx, int a, int b) {
    (void)ctx, (void)a, (void)b;
    return -1;
}

/* Peer p on machine (and host) m: its topology read from the machine, one
 * package and NUMA node, on `core` (-1: not bound to one) with ncores to
 * use. */
static void machine_peer(struct ccl__peer_info *p, int m, int core, int ncores) {
    snprintf(p->host_id, sizeof p->host_id, "h%d", m);
    snprintf(p->machine_id, sizeof p->machine_id, "m%d", m);
    p->topo.source = CCL__TOPO_MACHINE, p->topo.package = p->topo.numa = 0;
    p->topo.core = (int16_t)core;
    p->ncores = ncores;
}

START_TEST(ranks_per_cpu) {
    static const struct {
        int n, machines, pinned_cores, ncores; /* pinned_cores 0: unpinned */
        double want;
    } cases[] = {{2, 1, 2, 2, 1}, {8, 1, 2, 2, 4}, {4, 1, 0, 2, 2}, {4, 2, 1, 2, 2}, {3, 1, 0, 4, 1}};
    struct table *T = malloc(sizeof *T);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memset(T, 0, sizeof *T);
        T->n = cases[c].n;
        int per = T->n / cases[c].machines;
        for (int r = 0; r < T->n; r++) {
            machine_peer(&T->peers[r], r / per, cases[c].pinned_cores ? (r % per) % cases[c].pinned_cores : -1,
                         cases[c].pinned_cores ? 1 : cases[c].ncores);
            T->ring[r] = r;
        }
        struct ccl__job_shape shape;
        ck_assert_int_eq(ccl__plan_shape(T->n, T->peers, T->ring, shm_pairs, NULL, &shape), 0);
        ck_assert_msg(shape.oversub == cases[c].want, "case %zu: %d ranks on %d machines: %.2f ranks per CPU, want %.2f",
                      c, T->n, cases[c].machines, shape.oversub, cases[c].want);
    }
    free(T);
}
END_TEST

/* The share of each window the direct path's rounds use: half the L2
 * caches of the cores the host's ranks run on, split among the ranks, in
 * a power of two from 512 KiB up to the mapped window; the smallest
 * CCL_DIRECT_WINDOW_BYTES any rank was given; the whole window when no
 * rank knows its caches. Every rank computes the same. */
START_TEST(direct_window_fits_the_caches) {
    static const struct {
        int n, ncores;
        uint32_t l2_kib;
        size_t mapped, want;
    } cases[] = {
        {2, 2, 2048, 2u << 20, 2u << 20},   /* 2 ranks: the whole window */
        {3, 2, 2048, 2u << 20, 512u << 10}, /* 683 KiB, down to a power of two */
        {4, 2, 2048, 2u << 20, 512u << 10},
        {8, 2, 2048, 2u << 20, 2u << 20},   /* 256 KiB would fit, under the least (512 KiB): the whole window */
        {4, 2, 1024, 2u << 20, 2u << 20},   /* 1 MiB L2 a core: 256 KiB, the same */
        {2, 2, 1024, 2u << 20, 2u << 20},   /* 2 ranks: the whole window */
        {4, 64, 1024, 2u << 20, 2u << 20},  /* 8 MiB fit: the mapped window */
        {4, 64, 1024, 8u << 20, 8u << 20},
        {4, 2, 0, 2u << 20, 2u << 20},      /* caches unknown */
        {4, 2, 2048, 256u << 10, 256u << 10}, /* never past the mapped window */
    };
    struct table *T = malloc(sizeof *T);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memset(T, 0, sizeof *T);
        for (int r = 0; r < cases[c].n; r++) {
            machine_peer(&T->peers[r], 0, -1, cases[c].ncores);
            T->peers[r].topo.l2_kib = cases[c].l2_kib;
        }
        for (int r = 0; r < cases[c].n; r++) {
            size_t got = ccl__plan_direct_window(cases[c].n, T->peers, r, cases[c].mapped);
            ck_assert_msg(got == cases[c].want, "case %zu, rank %d: %zu bytes, want %zu", c, r, got, cases[c].want);
        }
    }
    /* the smallest L2 of any rank counts */
    memset(T, 0, sizeof *T);
    for (int r = 0; r < 3; r++) machine_peer(&T->peers[r], 0, -1, 8), T->peers[r].topo.l2_kib = r ? 512 : 4096;
    ck_assert_uint_eq(ccl__plan_direct_window(3, T->peers, 0, 4u << 20), 512u << 10); /* 8 x 512 KiB / 6 */
    /* CCL_DIRECT_WINDOW_BYTES as the ranks' records carry it: the smallest
     * any rank was given, in whole pages, at least 64 KiB, within the
     * mapped window; the same on every rank whatever each was given */
    static const struct {
        uint32_t told[3];
        size_t mapped, want;
    } fixed[] = {{{300000, 300000, 300000}, 4u << 20, 299008}, {{0, 300000, 0}, 4u << 20, 299008},
                 {{300000, 0, 200000}, 4u << 20, 196608},      {{300000, 300000, 300000}, 128u << 10, 128u << 10},
                 {{1000, 0, 0}, 4u << 20, 64u << 10}};
    for (size_t c = 0; c < sizeof fixed / sizeof fixed[0]; c++) {
        memset(T, 0, sizeof *T);
        for (int r = 0; r < 3; r++) {
            machine_peer(&T->peers[r], 0, -1, 2);
            T->peers[r].topo.l2_kib = 2048;
            T->peers[r].direct_window_bytes = fixed[c].told[r];
        }
        for (int r = 0; r < 3; r++) {
            size_t got = ccl__plan_direct_window(3, T->peers, r, fixed[c].mapped);
            ck_assert_msg(got == fixed[c].want, "told %u, %u, %u; rank %d: %zu bytes, want %zu", fixed[c].told[0],
                          fixed[c].told[1], fixed[c].told[2], r, got, fixed[c].want);
        }
    }
    free(T);
}
END_TEST

/* The output size from which outputs are written past the caches: the
 * host's ranks' outputs together at 16 times the L2 of the cores they run
 * on (ranks beyond the cores share them); the smallest L2 counts; only
 * this rank's machine's ranks; never where a rank's L2 is unknown
 * (CCL_STREAM_OUTPUT_BYTES, which overrides it, is the correctness
 * matrices' way to stream every output). */
START_TEST(stream_output_bytes) {
    static const struct {
        int n, machines, ncores;
        uint32_t l2_kib;
        size_t want;
    } cases[] = {{2, 1, 2, 2048, 32u << 20}, {4, 1, 2, 2048, 16u << 20}, {8, 1, 2, 2048, 8u << 20},
                 {2, 1, 64, 2048, 32u << 20}, {8, 2, 2, 2048, 16u << 20}, {3, 1, 4, 1024, 16u << 20},
                 {2, 1, 2, 0, SIZE_MAX}};
    struct table *T = malloc(sizeof *T);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memset(T, 0, sizeof *T);
        for (int r = 0; r < cases[c].n; r++) {
            machine_peer(&T->peers[r], r % cases[c].machines, -1, cases[c].ncores);
            T->peers[r].topo.l2_kib = cases[c].l2_kib;
        }
        for (int r = 0; r < cases[c].n; r++) {
            size_t got = ccl__plan_stream_bytes(cases[c].n, T->peers, r);
            ck_assert_msg(got == cases[c].want, "case %zu, rank %d: %zu bytes, want %zu", c, r, got, cases[c].want);
        }
    }
    memset(T, 0, sizeof *T);
    for (int r = 0; r < 2; r++) machine_peer(&T->peers[r], 0, -1, 2), T->peers[r].topo.l2_kib = r ? 512 : 2048;
    ck_assert_uint_eq(ccl__plan_stream_bytes(2, T->peers, 0), 8u << 20); /* 16 x 2 x 512 KiB / 2 */
    free(T);
}
END_TEST

/* The cores the model's shape sees: 8 ranks a launcher bound round robin
 * to 2 cores, in the ring the planner orders, load each core with one rank
 * receiving from the other core and three from their own; the same ranks
 * unbound leave the cores unknown. */
START_TEST(core_load_from_places) {
    struct table *T = malloc(sizeof *T);
    for (int bound = 0; bound < 2; bound++) {
        memset(T, 0, sizeof *T);
        T->n = 8;
        for (int r = 0; r < T->n; r++) machine_peer(&T->peers[r], 0, bound ? r % 2 : -1, bound ? 1 : 2);
        ccl__plan_places(T->n, T->peers, T->places);
        ccl__plan_order(T->n, T->places, T->ring);
        struct ccl__job_shape shape;
        ck_assert_int_eq(ccl__plan_shape(T->n, T->peers, T->ring, shm_pairs, NULL, &shape), 0);
        ck_assert_int_eq(shape.ring_core.cross, bound ? 1 : 0);
        ck_assert_int_eq(shape.ring_core.same, bound ? 3 : 0);
    }
    free(T);
}
END_TEST

/* ---- in real processes ---- */

/* Ranks bound by their "launcher" (setup) to CPU rank % 2: the ring puts
 * the ranks of each CPU together, the same on every rank. */
static void bind_to_cpu(int rank, int nranks, ccl_unique_id_t *id, void *arg) {
    (void)nranks, (void)id, (void)arg;
    util_pin_to_nth_cpu(rank % 2);
}

static int body_ring_follows_cores(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    cpu_set_t mask;
    sched_getaffinity(0, sizeof mask, &mask);
    char desc[512];
    EXPECT_OK(&t, ccl_comm_describe(comm, desc, sizeof desc));
    const char *ring = strstr(desc, "ring=");
    EXPECT(&t, ring != NULL, "describe has no ring: %s", desc);
    if (!ring) return t.fails;
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2 || CPU_COUNT(&mask) != 1) {
        fprintf(stderr, "[plan] fewer than 2 CPUs: the ring is rank order (%s)\n", ring);
        return t.fails;
    }
    char want[128] = "ring=";
    size_t o = 5;
    for (int parity = 0; parity < 2; parity++)
        for (int r = parity; r < nranks; r += 2) o += (size_t)snprintf(want + o, sizeof want - o, "%s%d", o > 5 ? "," : "", r);
    EXPECT(&t, strncmp(ring, want, o) == 0 && (ring[o] == ' ' || ring[o] == 0), "want %s, got %.*s", want, (int)o + 4,
           ring);
    if (rank == 0) fprintf(stderr, "[plan] ranks bound to CPU rank %% 2: %.*s\n", (int)o, ring);
    return t.fails;
}

START_TEST(ring_follows_launcher_binding) {
    const char *env = "CCL_BIND=core";
    struct harness_run run = {.nranks = 6, .transport = "shm", .env = env, .setup = bind_to_cpu,
                              .body = body_ring_follows_cores};
    util_run_clean(&run, 0, "6 ranks bound to CPU rank %% 2");
}
END_TEST

/* A bad CCL_TOPO_FILE on one rank fails every rank's init: that rank
 * with the reason, the others naming it. */
static int init_bad_topo(int rank, ccl_status_t st, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    const char *why = ccl_comm_last_error(NULL);
    if (rank == 2) {
        EXPECT(&t, st == CCL_ERR_INVALID_ARGUMENT, "init returned %s: %s", ccl_status_string(st), why);
        EXPECT(&t, strstr(why, "CCL_TOPO_FILE=pack:two") != NULL, "the error does not say why: \"%s\"", why);
    } else {
        EXPECT(&t, st == CCL_ERR_REMOTE, "init returned %s: %s", ccl_status_string(st), why);
        EXPECT(&t, strstr(why, "rank 2") != NULL, "the error does not name rank 2: \"%s\"", why);
    }
    return t.fails;
}

START_TEST(bad_topo_file_fails_every_rank) {
    const char *rank_env[HARNESS_MAX_RANKS] = {0};
    rank_env[2] = "CCL_TOPO_FILE=pack:two";
    struct harness_run run = {.nranks = 3, .rank_env = rank_env, .init_check = init_bad_topo};
    util_run_clean(&run, 0, "CCL_TOPO_FILE=pack:two on rank 2");
}
END_TEST

/* Ranks given different CCL_DIRECT_WINDOW_BYTES (one of them 64 KiB, one
 * none, one 1 MiB): they agree on the smallest, and a direct all-reduce of
 * many rounds is exact on every rank. */
static int body_direct_rounds(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    size_t n = 300007; /* 1.2 MB of int32: 19 rounds of 64 KiB windows' areas, the last one short */
    int32_t *v = malloc(n * sizeof *v);
    if (!v) return 1;
    for (size_t i = 0; i < n; i++) v[i] = (int32_t)(i % 1009) * (rank + 1);
    EXPECT_OK(&t, ccl_all_reduce(v, v, n, CCL_INT32, CCL_SUM, comm));
    int32_t k = (int32_t)(nranks * (nranks + 1) / 2);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += v[i] != (int32_t)(i % 1009) * k;
    EXPECT(&t, bad == 0, "%zu of %zu elements wrong", bad, n);
    free(v);
    char d[2048] = "";
    EXPECT_OK(&t, ccl_comm_describe(comm, d, sizeof d));
    EXPECT(&t, strstr(d, "allreduce:direct") || strstr(d, "all_reduce:direct"), "the call did not run direct: %s", d);
    return t.fails;
}

START_TEST(direct_window_agreed) {
    const char *rank_env[HARNESS_MAX_RANKS] = {0};
    rank_env[0] = "CCL_DIRECT_WINDOW_BYTES=65536";
    rank_env[2] = "CCL_DIRECT_WINDOW_BYTES=1048576";
    struct harness_run run = {.nranks = 3, .transport = "shm", .env = "CCL_ALGO=allreduce:direct",
                              .rank_env = rank_env, .body = body_direct_rounds};
    util_run_clean(&run, 0, "CCL_DIRECT_WINDOW_BYTES 64 KiB on rank 0, 1 MiB on rank 2");
}
END_TEST

/* Every rank planning on a described 2-socket machine: collectives still
 * agree (the ring order is the same everywhere). */
static int body_all_reduce(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    int32_t v[7], want[7];
    for (int i = 0; i < 7; i++) v[i] = rank * 10 + i, want[i] = 10 * nranks * (nranks - 1) / 2 + nranks * i;
    EXPECT_OK(&t, ccl_all_reduce(v, v, 7, CCL_INT32, CCL_SUM, comm));
    for (int i = 0; i < 7; i++) EXPECT(&t, v[i] == want[i], "element %d: %d, want %d", i, v[i], want[i]);
    return t.fails;
}

START_TEST(described_machine_runs) {
    char path[] = "/tmp/ccl-topo-XXXXXX";
    write_synthetic_xml(path, "pack:2 numa:2 core:2 pu:1");
    char env[128];
    snprintf(env, sizeof env, "CCL_TOPO_FILE=%s CCL_ALGO=ring", path);
    struct harness_run run = {.nranks = 5, .env = env, .body = body_all_reduce};
    util_run_clean(&run, 0, "5 ranks on a described 2-socket machine");
    unlink(path);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("plan_topo");
    TCase *tc = tcase_create("summary");
    tcase_add_test(tc, summary_synthetic);
    tcase_add_test(tc, summary_xml);
    tcase_add_test(tc, summary_this_machine);
    tcase_add_test(tc, summary_loads_no_opencl_driver);
    tcase_add_loop_test(tc, bad_topo_file, 0, (int)(sizeof bad_files / sizeof bad_files[0]));
    tcase_add_loop_test(tc, rdma_nearest_first, 0, (int)(sizeof nearest / sizeof nearest[0]));
    tcase_add_test(tc, rdma_order_without_devices);
    suite_add_tcase(s, tc);
    tc = tcase_create("ring");
    tcase_add_loop_test(tc, ring_crosses_least, 0, (int)(sizeof shapes / sizeof shapes[0]));
    tcase_add_test(tc, places_of_pinned_ranks);
    tcase_add_test(tc, ranks_per_cpu);
    tcase_add_test(tc, direct_window_fits_the_caches);
    tcase_add_test(tc, direct_window_agreed);
    tcase_add_test(tc, stream_output_bytes);
    tcase_add_test(tc, core_load_from_places);
    suite_add_tcase(s, tc);
    util_add_loop_case(s, "ring_follows_launcher_binding", ring_follows_launcher_binding, 1, 60);
    util_add_loop_case(s, "bad_topo_file_fails_every_rank", bad_topo_file_fails_every_rank, 1, 60);
    util_add_loop_case(s, "described_machine_runs", described_machine_runs, 1, 60);
    return s;
}

int main(void) { return harness_main(suite()); }
