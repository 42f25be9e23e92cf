/* A fake libnvidia-ml.so.1 for tests: the real pynvml binding calls it as it would call NVML.
 *
 * Devices come from a key=value state file named by $FAKE_NVML_STATE. The file is re-read
 * whenever its inode, size or mtime changes, so a test advances time by rewriting it (write a
 * temp file, rename over: a new inode every time). Keys (GPU i, MIG instance j of GPU i):
 *
 *   driver=580.159.04            count=N            init_error=<code> (nvmlInit fails)
 *   gpu.i.uuid / name / pci_bus_id / power_limit_mw / util_gpu / util_mem / mem_total / mem_used
 *   gpu.i.power_mw / energy_mj / temp_c
 *   gpu.i.unsupported=power,energy,...   these calls return NVML_ERROR_NOT_SUPPORTED
 *                                        (util memory memory_v2 power energy temp procs putil mig
 *                                        power_limit handle)
 *   gpu.i.failing=power,...              these calls return NVML_ERROR_UNKNOWN (a transient fault)
 *   gpu.i.procs=pid:used_bytes,...       compute processes
 *   gpu.i.putil=pid:sm:mem:ts_us,...     the driver's latest process-utilization sample per pid
 *   gpu.i.gpm_supported=1  gpu.i.gpm.t=seconds  gpu.i.gpm.<metric id>=percent x seconds
 *                                        (cumulative: a metric over [s1, s2] is d(acc)/d(t))
 *   gpu.i.mig_mode=1  gpu.i.mig.count=M  gpu.i.mig.j.{uuid,name,gi_id,mem_total,mem_used,procs,gpm.*}
 *   gpu.i.gi_profiles=profile:slices,...  GPU-instance profiles the GPU offers (index → sliceCount;
 *                                        others are NOT_SUPPORTED, as is every one when unset)
 *   gpu.i.mig.j.gi_slices / ci_slices    nvmlDeviceGetAttributes of a MIG device (unset: NOT_SUPPORTED)
 *
 * Built twice: full, and with -DNO_GPM (no GPM symbols at all, like a pre-Hopper driver), so the
 * binding raises NVMLError_FunctionNotFound. fake_nvml_calls(name) counts calls for tests.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define OK 0
#define E_INVALID_ARGUMENT 2
#define E_NOT_SUPPORTED 3
#define E_NOT_FOUND 6
#define E_INSUFFICIENT_SIZE 7
#define E_UNKNOWN 999
#define MAXKV 1024
#define MAXDEV 16
#define MAXMIG 7
#define GPM_MAX 477

typedef struct { int gpu; int mig; } handle_t; /* mig = -1: the whole GPU */
typedef struct { char key[96]; char val[1024]; } kv_t;

static kv_t kvs[MAXKV];
static int nkv;
static struct stat last_st;
static handle_t gpus[MAXDEV];
static handle_t migs[MAXDEV][MAXMIG];

/* ---- call counters ---- */
static struct { const char *name; long n; } calls[64];
static void count_call(const char *name) {
    for (int i = 0; i < 64; i++) {
        if (calls[i].name == NULL) { calls[i].name = name; calls[i].n = 1; return; }
        if (strcmp(calls[i].name, name) == 0) { calls[i].n++; return; }
    }
}
long fake_nvml_calls(const char *name) {
    for (int i = 0; i < 64 && calls[i].name; i++)
        if (strcmp(calls[i].name, name) == 0) return calls[i].n;
    return 0;
}

/* ---- state ---- */
static void load_state(void) {
    const char *path = getenv("FAKE_NVML_STATE");
    struct stat st;
    if (!path || stat(path, &st) != 0) { nkv = 0; return; }
    if (st.st_ino == last_st.st_ino && st.st_size == last_st.st_size &&
        st.st_mtim.tv_sec == last_st.st_mtim.tv_sec && st.st_mtim.tv_nsec == last_st.st_mtim.tv_nsec)
        return;
    FILE *f = fopen(path, "r");
    if (!f) { nkv = 0; return; }
    char line[1200];
    nkv = 0;
    while (nkv < MAXKV && fgets(line, sizeof line, f)) {
        char *eq = strchr(line, '=');
        if (!eq || line[0] == '#') continue;
        *eq = 0;
        char *val = eq + 1;
        val[strcspn(val, "\r\n")] = 0;
        snprintf(kvs[nkv].key, sizeof kvs[nkv].key, "%.95s", line);
        snprintf(kvs[nkv].val, sizeof kvs[nkv].val, "%.1023s", val);
        nkv++;
    }
    fclose(f);
    last_st = st;
}

#define CALL(name) int r = 0; (void)r; count_call(name); load_state()

static const char *get(const char *key) {
    for (int i = 0; i < nkv; i++)
        if (strcmp(kvs[i].key, key) == 0) return kvs[i].val;
    return NULL;
}
static void prefix(const handle_t *h, char *out, size_t n) {
    if (h->mig < 0) snprintf(out, n, "gpu.%d.", h->gpu);
    else snprintf(out, n, "gpu.%d.mig.%d.", h->gpu, h->mig);
}
static const char *hget(const handle_t *h, const char *name) {
    char key[96], p[48];
    prefix(h, p, sizeof p);
    snprintf(key, sizeof key, "%s%s", p, name);
    return get(key);
}
static unsigned long long hnum(const handle_t *h, const char *name, unsigned long long dflt) {
    const char *v = hget(h, name);
    return v ? strtoull(v, NULL, 10) : dflt;
}
static int count(void) { const char *v = get("count"); return v ? atoi(v) : 0; }
static int valid(const handle_t *h) { return h && h->gpu >= 0 && h->gpu < count(); }
static int listed(const handle_t *h, const char *list_key, const char *feature) {
    const char *v = hget(h, list_key);
    if (v) {
        char list[1100];
        snprintf(list, sizeof list, ",%s,", v);
        char needle[64];
        snprintf(needle, sizeof needle, ",%s,", feature);
        if (strstr(list, needle)) return 1;
    }
    return 0;
}
/* The error a reading of `feature` returns: NOT_SUPPORTED or UNKNOWN as the state lists it. */
static int unsupported(const handle_t *h, const char *feature) {
    if (listed(h, "failing", feature)) return E_UNKNOWN;
    return listed(h, "unsupported", feature) ? E_NOT_SUPPORTED : OK;
}
static int copy_str(const char *src, char *dst, unsigned n) {
    if (!src) return E_NOT_SUPPORTED;
    if (strlen(src) + 1 > n) return E_INSUFFICIENT_SIZE;
    strcpy(dst, src);
    return OK;
}

/* ---- system ---- */
/* init_error=<nvmlReturn_t> makes initialisation fail (9: no driver loaded). */
int nvmlInit_v2(void) { CALL("nvmlInit_v2"); return get("init_error") ? atoi(get("init_error")) : OK; }
int nvmlInitWithFlags(unsigned flags) {
    CALL("nvmlInitWithFlags");
    (void)flags;
    return get("init_error") ? atoi(get("init_error")) : OK;
}
int nvmlShutdown(void) { CALL("nvmlShutdown"); return OK; }
const char *nvmlErrorString(int r) {
    switch (r) {
    case OK: return "Success";
    case E_NOT_SUPPORTED: return "Not Supported";
    case E_NOT_FOUND: return "Not Found";
    case E_INSUFFICIENT_SIZE: return "Insufficient Size";
    default: return "Unknown Error";
    }
}
int nvmlSystemGetDriverVersion(char *buf, unsigned n) {
    CALL("nvmlSystemGetDriverVersion");
    const char *v = get("driver");
    return copy_str(v ? v : "0.0", buf, n);
}
int nvmlDeviceGetCount_v2(unsigned *n) { CALL("nvmlDeviceGetCount_v2"); *n = (unsigned)count(); return OK; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, handle_t **out) {
    CALL("nvmlDeviceGetHandleByIndex_v2");
    if ((int)i >= count() || i >= MAXDEV) return E_INVALID_ARGUMENT;
    handle_t probe = {(int)i, -1};
    if ((r = unsupported(&probe, "handle"))) return r;
    gpus[i].gpu = (int)i; gpus[i].mig = -1;
    *out = &gpus[i];
    return OK;
}

/* ---- identity ---- */
int nvmlDeviceGetUUID(handle_t *h, char *buf, unsigned n) {
    CALL("nvmlDeviceGetUUID");
    return valid(h) ? copy_str(hget(h, "uuid"), buf, n) : E_INVALID_ARGUMENT;
}
int nvmlDeviceGetName(handle_t *h, char *buf, unsigned n) {
    CALL("nvmlDeviceGetName");
    return valid(h) ? copy_str(hget(h, "name"), buf, n) : E_INVALID_ARGUMENT;
}
typedef struct {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} pci_t;
int nvmlDeviceGetPciInfo_v3(handle_t *h, pci_t *p) {
    CALL("nvmlDeviceGetPciInfo_v3");
    if (!valid(h)) return E_INVALID_ARGUMENT;
    memset(p, 0, sizeof *p);
    const char *v = hget(h, "pci_bus_id");
    snprintf(p->busId, sizeof p->busId, "%s", v ? v : "");
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "%s", v ? v : "");
    return OK;
}
int nvmlDeviceGetPowerManagementLimit(handle_t *h, unsigned *mw) {
    CALL("nvmlDeviceGetPowerManagementLimit");
    if (!valid(h)) return E_INVALID_ARGUMENT;
    if (h->mig >= 0 || !hget(h, "power_limit_mw")) return E_NOT_SUPPORTED;
    if ((r = unsupported(h, "power_limit"))) return r;
    *mw = (unsigned)hnum(h, "power_limit_mw", 0);
    return OK;
}

/* ---- readings ---- */
typedef struct { unsigned gpu, memory; } util_t;
int nvmlDeviceGetUtilizationRates(handle_t *h, util_t *u) {
    CALL("nvmlDeviceGetUtilizationRates");
    if (!valid(h)) return E_INVALID_ARGUMENT;
    if (h->mig >= 0) return E_NOT_SUPPORTED;
    if ((r = unsupported(h, "util"))) return r;
    u->gpu = (unsigned)hnum(h, "util_gpu", 0);
    u->memory = (unsigned)hnum(h, "util_mem", 0);
    return OK;
}
typedef struct { unsigned long long total, free, used; } mem_t;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } mem2_t;
int nvmlDeviceGetMemoryInfo(handle_t *h, mem_t *m) {
    CALL("nvmlDeviceGetMemoryInfo");
    if (!valid(h)) return E_INVALID_ARGUMENT;
    if ((r = unsupported(h, "memory"))) return r;
    m->total = hnum(h, "mem_total", 0);
    m->used = hnum(h, "mem_used", 0);
    m->free = m->total - m->used;
    return OK;
}
int nvmlDeviceGetMemoryInfo_v2(handle_t *h, mem2_t *m) {
    CALL("nvmlDeviceGetMemoryInfo_v2");
    if (!valid(h)) return E_INVALID_ARGUMENT;
    if ((r = unsupported(h, "memory"))) return r;
    if ((r = unsupported(h, "memory_v2"))) return r;
    m->total = hnum(h, "mem_total", 0);
    m->used = hnum(h, "mem_used", 0);
    m->reserved = 0;
    m->free = m->total - m->used;
    return OK;
}
int nvmlDeviceGetPowerUsage(handle_t *h, unsigned *mw) {
    CALL("nvmlDeviceGetPowerUsage");
    if (!valid(h)) return E_INVALID_ARGUMENT;
    if (h->mig >= 0) return E_NOT_SUPPORTED;
    if ((r = unsupported(h, "power"))) return r;
    *mw = (unsigned)hnum(h, "power_mw", 0);
    return OK;
}
int nvmlDeviceGetTotalEnergyConsumption(handle_t *h, unsigned long long *mj) {
    CALL("nvmlDeviceGetTotalEnergyConsumption");
    if (!valid(h)) return E_INVALID_ARGUMENT;
    if (h->mig >= 0) return E_NOT_SUPPORTED;
    if ((r = unsupported(h, "energy"))) return r;
    *mj = hnum(h, "energy_mj", 0);
    return OK;
}
int nvmlDeviceGetTemperature(handle_t *h, unsigned sensor, unsigned *c) {
    CALL("nvmlDeviceGetTemperature");
    if (!valid(h)) return E_INVALID_ARGUMENT;
    if (sensor != 0 || h->mig >= 0) return E_NOT_SUPPORTED;
    if ((r = unsupported(h, "temp"))) return r;
    *c = (unsigned)hnum(h, "temp_c", 0);
    return OK;
}

/* ---- processes ---- */
typedef struct { unsigned pid; unsigned long long usedGpuMemory; unsigned gi, ci; } proc_t;
/* Parses "a:b:c:d,..." into rows of up to 4 numbers; returns the number of rows. */
static int parse_rows(const char *v, unsigned long long rows[][4], int max) {
    int n = 0;
    while (v && *v && n < max) {
        char *end;
        for (int k = 0; k < 4; k++) rows[n][k] = 0;
        for (int k = 0; k < 4; k++) {
            rows[n][k] = strtoull(v, &end, 10);
            v = end;
            if (*v != ':') break;
            v++;
        }
        n++;
        if (*v == ',') v++; else break;
    }
    return n;
}
int nvmlDeviceGetComputeRunningProcesses_v3(handle_t *h, unsigned *cnt, proc_t *out) {
    CALL("nvmlDeviceGetComputeRunningProcesses_v3");
    if (!valid(h)) return E_INVALID_ARGUMENT;
    if ((r = unsupported(h, "procs"))) return r;
    unsigned long long rows[64][4];
    int n = parse_rows(hget(h, "procs"), rows, 64);
    if (n == 0) { *cnt = 0; return OK; }
    if (out == NULL || *cnt < (unsigned)n) { *cnt = (unsigned)n; return E_INSUFFICIENT_SIZE; }
    for (int i = 0; i < n; i++) {
        out[i].pid = (unsigned)rows[i][0];
        out[i].usedGpuMemory = rows[i][1];
        out[i].gi = out[i].ci = 0xFFFFFFFF;
    }
    *cnt = (unsigned)n;
    return OK;
}
typedef struct { unsigned pid; unsigned long long ts; unsigned sm, mem, enc, dec; } putil_t;
/* The driver's latest sample per process newer than `since` (µs); NOT_FOUND when none. */
int nvmlDeviceGetProcessUtilization(handle_t *h, putil_t *out, unsigned *cnt, unsigned long long since) {
    CALL("nvmlDeviceGetProcessUtilization");
    if (!valid(h)) return E_INVALID_ARGUMENT;
    if (h->mig >= 0) return E_NOT_SUPPORTED;
    if ((r = unsupported(h, "putil"))) return r;
    unsigned long long rows[64][4];
    int all = parse_rows(hget(h, "putil"), rows, 64), n = 0;
    for (int i = 0; i < all; i++)
        if (rows[i][3] > since) memcpy(rows[n++], rows[i], sizeof rows[i]);
    if (n == 0) return E_NOT_FOUND;
    if (out == NULL || *cnt < (unsigned)n) { *cnt = (unsigned)n; return E_INSUFFICIENT_SIZE; }
    for (int i = 0; i < n; i++) {
        out[i].pid = (unsigned)rows[i][0];
        out[i].sm = (unsigned)rows[i][1];
        out[i].mem = (unsigned)rows[i][2];
        out[i].ts = rows[i][3];
        out[i].enc = out[i].dec = 0;
    }
    *cnt = (unsigned)n;
    return OK;
}

/* ---- MIG ---- */
int nvmlDeviceGetMigMode(handle_t *h, unsigned *cur, unsigned *pending) {
    CALL("nvmlDeviceGetMigMode");
    if (!valid(h)) return E_INVALID_ARGUMENT;
    if (h->mig >= 0) return E_NOT_SUPPORTED;
    if ((r = unsupported(h, "mig"))) return r;
    *cur = *pending = (unsigned)hnum(h, "mig_mode", 0);
    return OK;
}
int nvmlDeviceGetMaxMigDeviceCount(handle_t *h, unsigned *n) {
    CALL("nvmlDeviceGetMaxMigDeviceCount");
    if (!valid(h)) return E_INVALID_ARGUMENT;
    if (h->mig >= 0) return E_NOT_SUPPORTED;
    if ((r = unsupported(h, "mig"))) return r;
    *n = hnum(h, "mig_mode", 0) ? 7 : 0;
    return OK;
}
int nvmlDeviceGetMigDeviceHandleByIndex(handle_t *h, unsigned j, handle_t **out) {
    CALL("nvmlDeviceGetMigDeviceHandleByIndex");
    if (!valid(h) || h->mig >= 0 || j >= MAXMIG) return E_INVALID_ARGUMENT;
    if (!hnum(h, "mig_mode", 0)) return E_NOT_SUPPORTED;
    if ((int)j >= (int)hnum(h, "mig.count", 0)) return E_NOT_FOUND;
    migs[h->gpu][j].gpu = h->gpu; migs[h->gpu][j].mig = (int)j;
    *out = &migs[h->gpu][j];
    return OK;
}
int nvmlDeviceIsMigDeviceHandle(handle_t *h, unsigned *is) {
    CALL("nvmlDeviceIsMigDeviceHandle");
    *is = h->mig >= 0;
    return OK;
}
int nvmlDeviceGetGpuInstanceId(handle_t *h, unsigned *id) {
    CALL("nvmlDeviceGetGpuInstanceId");
    if (!valid(h)) return E_INVALID_ARGUMENT;
    if (h->mig < 0) return E_NOT_SUPPORTED;
    *id = (unsigned)hnum(h, "gi_id", 0);
    return OK;
}
int nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle_t *h, handle_t **out) {
    CALL("nvmlDeviceGetDeviceHandleFromMigDeviceHandle");
    if (!valid(h) || h->mig < 0) return E_INVALID_ARGUMENT;
    gpus[h->gpu].gpu = h->gpu; gpus[h->gpu].mig = -1;
    *out = &gpus[h->gpu];
    return OK;
}

/* nvmlDeviceAttributes_t: engine counts, then the GPU- and compute-instance slice counts. */
typedef struct {
    unsigned multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount;
    unsigned sharedJpegCount, sharedOfaCount, gpuInstanceSliceCount, computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} attrs_t;
int nvmlDeviceGetAttributes_v2(handle_t *h, attrs_t *a) {
    CALL("nvmlDeviceGetAttributes_v2");
    if (!valid(h) || !a) return E_INVALID_ARGUMENT;
    if (h->mig < 0 || !hget(h, "gi_slices")) return E_NOT_SUPPORTED; /* MIG device handles only */
    memset(a, 0, sizeof *a);
    a->gpuInstanceSliceCount = (unsigned)hnum(h, "gi_slices", 0);
    a->computeInstanceSliceCount = (unsigned)hnum(h, "ci_slices", a->gpuInstanceSliceCount);
    a->memorySizeMB = hnum(h, "mem_total", 0) / 1000000;
    return OK;
}
/* nvmlGpuInstanceProfileInfo_v2_t */
typedef struct {
    unsigned version, id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount;
    unsigned copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
    char name[96];
} gi_profile_t;
int nvmlDeviceGetGpuInstanceProfileInfoV(handle_t *h, unsigned profile, gi_profile_t *info) {
    CALL("nvmlDeviceGetGpuInstanceProfileInfoV");
    if (!valid(h) || h->mig >= 0 || !info) return E_INVALID_ARGUMENT;
    unsigned long long rows[32][4];
    int n = parse_rows(hget(h, "gi_profiles"), rows, 32);
    for (int i = 0; i < n; i++) {
        if (rows[i][0] != profile) continue;
        unsigned version = info->version;
        memset(info, 0, sizeof *info);
        info->version = version;
        info->id = profile;
        info->sliceCount = (unsigned)rows[i][1];
        info->instanceCount = rows[i][1] ? (unsigned)(7 / rows[i][1]) : 0;
        return OK;
    }
    return E_NOT_SUPPORTED;
}

#ifndef NO_GPM
/* ---- GPM: an opaque sample holds a snapshot of the cumulative counters ---- */
typedef struct { long serial; int filled; handle_t who; double t; double acc[GPM_MAX]; char has[GPM_MAX]; } gpm_sample_t;
typedef struct { const char *shortName, *longName, *unit; } metric_info_t;
typedef struct { unsigned metricId; unsigned nvmlReturn; double value; metric_info_t info; } gpm_metric_t;
typedef struct {
    unsigned version, numMetrics;
    gpm_sample_t *sample1, *sample2;
    gpm_metric_t metrics[GPM_MAX];
} gpm_get_t;
static long gpm_serial;

int nvmlGpmQueryDeviceSupport(handle_t *h, unsigned *support /* {version, isSupportedDevice} */) {
    CALL("nvmlGpmQueryDeviceSupport");
    if (!valid(h)) return E_INVALID_ARGUMENT;
    support[1] = (unsigned)hnum(h, "gpm_supported", 0);
    return OK;
}
int nvmlGpmSampleAlloc(gpm_sample_t **out) {
    CALL("nvmlGpmSampleAlloc");
    *out = calloc(1, sizeof(gpm_sample_t));
    return *out ? OK : E_UNKNOWN;
}
int nvmlGpmSampleFree(gpm_sample_t *s) { CALL("nvmlGpmSampleFree"); free(s); return OK; }
static int gpm_fill(const handle_t *h, gpm_sample_t *s) {
    if (!hnum(h, "gpm_supported", 0)) return E_NOT_SUPPORTED;
    char p[48];
    prefix(h, p, sizeof p);
    strcat(p, "gpm.");
    size_t pl = strlen(p);
    memset(s->has, 0, sizeof s->has);
    s->t = 0;
    for (int i = 0; i < nkv; i++) {
        if (strncmp(kvs[i].key, p, pl) != 0) continue;
        const char *rest = kvs[i].key + pl;
        if (strcmp(rest, "t") == 0) { s->t = atof(kvs[i].val); continue; }
        int id = atoi(rest);
        if (id > 0 && id < GPM_MAX) { s->acc[id] = atof(kvs[i].val); s->has[id] = 1; }
    }
    s->who = *h;
    s->serial = ++gpm_serial; /* monotonically increasing, like the driver's timestamps */
    s->filled = 1;
    return OK;
}
int nvmlGpmSampleGet(handle_t *h, gpm_sample_t *s) {
    CALL("nvmlGpmSampleGet");
    if (!valid(h) || !s) return E_INVALID_ARGUMENT;
    if (h->mig >= 0) return E_NOT_SUPPORTED; /* MIG instances go through nvmlGpmMigSampleGet */
    return gpm_fill(h, s);
}
int nvmlGpmMigSampleGet(handle_t *h, unsigned gi, gpm_sample_t *s) {
    CALL("nvmlGpmMigSampleGet");
    if (!valid(h) || h->mig >= 0 || !s) return E_INVALID_ARGUMENT;
    int n = (int)hnum(h, "mig.count", 0);
    for (int j = 0; j < n && j < MAXMIG; j++) {
        handle_t m = {h->gpu, j};
        if (hnum(&m, "gi_id", 0) == gi) return gpm_fill(&m, s);
    }
    return E_NOT_FOUND;
}
int nvmlGpmMetricsGet(gpm_get_t *g) {
    CALL("nvmlGpmMetricsGet");
    if (g->version != 1) return 25; /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH */
    gpm_sample_t *a = g->sample1, *b = g->sample2;
    if (!a || !b || !a->filled || !b->filled || a->serial >= b->serial) return E_INVALID_ARGUMENT;
    if (a->who.gpu != b->who.gpu || a->who.mig != b->who.mig) return E_INVALID_ARGUMENT;
    double dt = b->t - a->t;
    for (unsigned i = 0; i < g->numMetrics && i < GPM_MAX; i++) {
        gpm_metric_t *m = &g->metrics[i];
        unsigned id = m->metricId;
        if (id >= GPM_MAX || !a->has[id] || !b->has[id]) { m->nvmlReturn = E_NOT_SUPPORTED; continue; }
        m->nvmlReturn = OK;
        m->value = dt > 0 ? (b->acc[id] - a->acc[id]) / dt : 0.0;
        m->info.shortName = m->info.longName = m->info.unit = NULL;
    }
    return OK;
}
#endif
