/* The router's clients seen through librdkafka's public plugin and interceptor API (rdkafka.h),
 * not through another package's structs.
 *
 * The data consumer and the transactional producers are created by confluent-kafka with
 * ``plugin.library.paths`` = this extension's own file, which exports ``conf_init``
 * (router.native.compiled.client_tap gives the two properties). For each client:
 *
 * - ``on_conf_set`` accepts the property ``cutover.tap`` = the token of a ``Tap`` (a slot of
 *   the table below), so the client says which Python-side tap it is;
 * - ``on_new`` hands the client's ``rd_kafka_t *``: a producer's records are produced with
 *   rd_kafka_producev on it (_produce.h); ``on_destroy`` forgets it;
 * - ``on_consume`` (a consumer's) hands each record before confluent-kafka wraps it in a
 *   Message: when it is in the tagger's data layout, its partition, offset, timestamp, event
 *   time, version and a copy of its headers are kept in the tap's entries, found again by
 *   (topic, partition, offset) when the compiled run meets its Message (read through the
 *   Message's public accessors). A suppressed record (half of all) then costs no headers list,
 *   tuples or timestamp tuple (docs/decisions/008-compiled-per-record-path.md).
 *
 * librdkafka's functions are taken from the librdkafka that confluent-kafka's extension
 * loaded: dlopen(its file, RTLD_NOLOAD) and dlsym, which searches that object and the
 * libraries it depends on; the version they report must be the one confluent-kafka reports
 * (plugin_refusal). librdkafka's public ABI is all that is used: the functions and the public
 * rd_kafka_message_t below (rdkafka.h; unchanged since librdkafka 0.9).
 *
 * Threads. on_consume runs in the thread that calls consume(), with the interpreter's lock
 * released; the compiled run reads the entries with the lock, after consume() returned. The
 * tap records only in the thread that last called Tap.begin() (its ``owner``), and the run
 * reads entries only in that thread (tap_entries_here): the router's data thread does both
 * (router.worker.datapath.DataPath.step), so the two never overlap. begin() empties the
 * entries before each consume(): they are bounded by one consume's records (ENTRY_MAX, and
 * ARENA_MAX bytes of headers; past those a record is not kept and its Message is read
 * through the accessors). librdkafka may call on_consume for a record it then drops (a
 * partition positioned again); such an entry matches no Message and is never read.
 * Included by _fastpath.c only. */

#ifndef CUTOVER_PLUGIN_H
#define CUTOVER_PLUGIN_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

/* rdkafka.h's public types, as far as used here */
typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef struct rd_kafka_headers_s rd_kafka_headers_t;
typedef struct rd_kafka_message_s {
    int err;
    rd_kafka_topic_t *rkt;
    int32_t partition;
    void *payload;
    size_t len;
    void *key;
    size_t key_len;
    int64_t offset;
    void *_private;
} rd_kafka_message_t;
enum { CONF_UNKNOWN = -2, CONF_INVALID = -1, CONF_OK = 0 };  /* rd_kafka_conf_res_t */
#define ERR_INVALID_ARG (-186)                                 /* RD_KAFKA_RESP_ERR__INVALID_ARG */

typedef int on_conf_set_fn(rd_kafka_conf_t *, const char *, const char *, char *, size_t, void *);
typedef int on_conf_dup_fn(rd_kafka_conf_t *, const rd_kafka_conf_t *, size_t, const char **,
                           void *);
typedef int on_conf_destroy_fn(void *);
typedef int on_new_fn(rd_kafka_t *, const rd_kafka_conf_t *, void *, char *, size_t);
typedef int on_destroy_fn(rd_kafka_t *, void *);
typedef int on_consume_fn(rd_kafka_t *, rd_kafka_message_t *, void *);

/* librdkafka's functions used here and in _produce.h, found by plugin_refusal() */
static struct {
    int (*add_on_conf_set)(rd_kafka_conf_t *, const char *, on_conf_set_fn *, void *);
    int (*add_on_conf_dup)(rd_kafka_conf_t *, const char *, on_conf_dup_fn *, void *);
    int (*add_on_conf_destroy)(rd_kafka_conf_t *, const char *, on_conf_destroy_fn *, void *);
    int (*add_on_new)(rd_kafka_conf_t *, const char *, on_new_fn *, void *);
    int (*add_on_destroy)(rd_kafka_t *, const char *, on_destroy_fn *, void *);
    int (*add_on_consume)(rd_kafka_t *, const char *, on_consume_fn *, void *);
    int (*message_headers)(const rd_kafka_message_t *, rd_kafka_headers_t **);
    int64_t (*message_timestamp)(const rd_kafka_message_t *, int *);
    size_t (*header_cnt)(const rd_kafka_headers_t *);
    int (*header_get_all)(const rd_kafka_headers_t *, size_t, const char **, const void **,
                          size_t *);
    const char *(*topic_name)(const rd_kafka_topic_t *);
    int (*producev)(rd_kafka_t *, ...);
    rd_kafka_headers_t *(*headers_new)(size_t);
    int (*header_add)(rd_kafka_headers_t *, const char *, ssize_t, const void *, ssize_t);
    void (*headers_destroy)(rd_kafka_headers_t *);
    int (*version)(void);
    rd_kafka_conf_t *(*conf_new)(void);
    int (*conf_set)(rd_kafka_conf_t *, const char *, const char *, char *, size_t);
    void (*conf_destroy)(rd_kafka_conf_t *);
} rk;
static const char *const rk_names[] = {
    "rd_kafka_conf_interceptor_add_on_conf_set", "rd_kafka_conf_interceptor_add_on_conf_dup",
    "rd_kafka_conf_interceptor_add_on_conf_destroy", "rd_kafka_conf_interceptor_add_on_new",
    "rd_kafka_interceptor_add_on_destroy", "rd_kafka_interceptor_add_on_consume",
    "rd_kafka_message_headers", "rd_kafka_message_timestamp", "rd_kafka_header_cnt",
    "rd_kafka_header_get_all", "rd_kafka_topic_name", "rd_kafka_producev",
    "rd_kafka_headers_new", "rd_kafka_header_add", "rd_kafka_headers_destroy",
    "rd_kafka_version", "rd_kafka_conf_new", "rd_kafka_conf_set", "rd_kafka_conf_destroy"};
#define RK_N ((int)(sizeof rk_names / sizeof rk_names[0]))
static int plugin_on = 0;   /* librdkafka's functions found: clients may load the plugin */

/* The header names of the tagger's data layout in UTF-8 (version, event time, watermark,
 * batch, kind): set by _fastpath.c's configure() before any client loads the plugin. */
static const char *layout_names[5];

/* One consumed record in the tagger's data layout, as on_consume saw it. Its headers are
 * in the tap's arena at [hdr_at, hdr_at + hdr_len): per header its name (NUL-terminated),
 * its value's size (int64_t, -1 for a null value), then the value. */
typedef struct {
    int64_t offset, timestamp, t;   /* t: the event time header's value */
    int32_t partition;
    uint32_t topic;                 /* index into the tap's topics */
    uint32_t hdr_at, hdr_len, ver_at, ver_len;
    uint32_t nhdr;
} Entry;

/* One kept header of an entry, read back from the arena: its name, its value (NULL for a null
 * value) and the value's size. */
typedef struct {
    const char *name;
    const char *value;
    size_t size;
} KeptHeader;

/* The kept header at *at (before the entry's end), read into h; *at moves past it. The one
 * reader of the layout on_consume writes. */
static inline void kept_header_next(const char **at, KeptHeader *h) {
    const char *p = *at;
    size_t nl = strlen(p) + 1;
    int64_t size;
    memcpy(&size, p + nl, sizeof size);
    h->name = p;
    h->value = size < 0 ? NULL : p + nl + sizeof size;
    h->size = size < 0 ? 0 : (size_t)size;
    *at = p + nl + sizeof size + h->size;
}

#define TAP_MAX 256                 /* taps alive at once (a worker has a few clients) */
#define ENTRY_MAX (1u << 20)        /* entries of one consume() at most */
#define ARENA_MAX (64u << 20)       /* bytes of their headers at most */
#define TOPIC_MAX 64

typedef struct {
    int busy;                       /* taken by a Tap, until its last reference is given up */
    int refs;                       /* the Tap object's, and its client's from on_new to on_destroy */
    unsigned gen;
    rd_kafka_t *rk;                 /* the client, from on_new until on_destroy */
    PyObject *client;               /* the Python client bound to it (no reference: cleared with rk) */
    int consumer;                   /* keeps entries of consumed records */
    pthread_t owner;                /* the thread that records and reads entries (Tap.begin) */
    int owned;
    Entry *ents;
    size_t n, cap;
    char *arena;
    size_t used, arena_cap;
    uint32_t *table;                /* open addressing: index + 1 into ents, 0 empty */
    size_t tmask;                   /* table size - 1 (a power of two, > 2 * cap) */
    size_t next;                    /* the entry after the last one found: tried first */
    const rd_kafka_topic_t *rkts[TOPIC_MAX];  /* topic handles seen, each with its name */
    char *topics[TOPIC_MAX];
    int ntopics;
    unsigned long long recorded, dropped, read;
} Tap;

static Tap taps[TAP_MAX];

static void tap_free_buffers(Tap *t) {
    free(t->ents);
    free(t->arena);
    free(t->table);
    for (int k = 0; k < t->ntopics; k++) free(t->topics[k]);
    t->ents = NULL;
    t->arena = NULL;
    t->table = NULL;
    t->n = t->cap = t->used = t->arena_cap = 0;
    t->tmask = 0;
    t->ntopics = 0;
}

/* a reference to the tap given up: its buffers are freed with the last one, and only then is
 * the slot free for another Tap */
static void tap_release(Tap *t) {
    if (__atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        tap_free_buffers(t);
        __atomic_store_n(&t->busy, 0, __ATOMIC_RELEASE);
    }
}

static uint64_t entry_hash(uint32_t topic, int32_t partition, int64_t offset) {
    uint64_t x = (uint64_t)offset * 0x9E3779B97F4A7C15ULL
        ^ ((uint64_t)(uint32_t)partition << 32 | topic) * 0xC2B2AE3D27D4EB4FULL;
    return x ^ (x >> 29);
}

static void table_put(Tap *t, size_t idx) {
    const Entry *e = &t->ents[idx];
    size_t h = entry_hash(e->topic, e->partition, e->offset) & t->tmask;
    for (;; h = (h + 1) & t->tmask) {
        uint32_t cur = t->table[h];
        if (cur == 0) break;
        const Entry *o = &t->ents[cur - 1];
        /* the same record again (read twice in one consume): the later entry, same bytes */
        if (o->offset == e->offset && o->partition == e->partition && o->topic == e->topic)
            break;
    }
    t->table[h] = (uint32_t)idx + 1;
}

/* room for one more entry: 0, or -1 (not kept) */
static int tap_grow(Tap *t) {
    if (t->n < t->cap) return 0;
    if (t->cap >= ENTRY_MAX) return -1;
    size_t cap = t->cap ? t->cap * 2 : 4096;
    Entry *ents = realloc(t->ents, cap * sizeof(Entry));
    if (ents == NULL) return -1;
    t->ents = ents;
    size_t tsize = 1;
    while (tsize < 2 * cap + 1) tsize <<= 1;
    uint32_t *table = calloc(tsize, sizeof(uint32_t));
    if (table == NULL) return -1;  /* ents grown; cap unchanged */
    free(t->table);
    t->table = table;
    t->tmask = tsize - 1;
    t->cap = cap;
    for (size_t k = 0; k < t->n; k++) table_put(t, k);
    return 0;
}

static int arena_reserve(Tap *t, size_t more) {
    if (t->used + more <= t->arena_cap) return 0;
    size_t cap = t->arena_cap ? t->arena_cap : 1u << 18;
    while (cap < t->used + more) cap *= 2;
    if (cap > ARENA_MAX) return -1;
    char *a = realloc(t->arena, cap);
    if (a == NULL) return -1;
    t->arena = a;
    t->arena_cap = cap;
    return 0;
}

/* The index of ``rkt``'s topic among the tap's (named once), or -1 */
static int tap_topic(Tap *t, const rd_kafka_topic_t *rkt) {
    const char *name = rk.topic_name(rkt);
    for (int k = 0; k < t->ntopics; k++)
        if (t->rkts[k] == rkt && strcmp(t->topics[k], name) == 0) return k;
    for (int k = 0; k < t->ntopics; k++)  /* another handle of a name seen */
        if (strcmp(t->topics[k], name) == 0) {
            t->rkts[k] = rkt;
            return k;
        }
    if (t->ntopics == TOPIC_MAX) return -1;
    char *copy = strdup(name);
    if (copy == NULL) return -1;
    t->rkts[t->ntopics] = rkt;
    t->topics[t->ntopics] = copy;
    return t->ntopics++;
}

/* on_consume: keep the record if it is in the tagger's data layout
 * (cutover.headers.data_envelope), with the answers _fastpath.c's recognize() gives over the
 * converted list: the last four headers are the version, event time, watermark and batch, the
 * last three's values digits, the version's not null, the event time's at most 18 digits, and
 * no other header has one of the tagger's names or a name that is not ASCII (Python decodes
 * names, so the accessors decide those). The headers are copied into the arena as they are
 * checked, in one pass; a record that is not in the layout gives its bytes back. */
static int on_consume(rd_kafka_t *client, rd_kafka_message_t *m, void *opaque) {
    (void)client;
    Tap *t = opaque;
    if (!t->owned || !pthread_equal(t->owner, pthread_self()) || m->err != 0 || m->rkt == NULL
        || layout_names[0] == NULL)
        return 0;
    rd_kafka_headers_t *hdrs;
    if (rk.message_headers(m, &hdrs) != 0) return 0;
    size_t n = rk.header_cnt(hdrs);
    if (n < 4) return 0;
    int topic = tap_topic(t, m->rkt);
    if (topic < 0 || tap_grow(t) < 0) {
        t->dropped++;
        return 0;
    }
    size_t start = t->used, ver_at = 0, ver_len = 0;
    int64_t et = 0;
    for (size_t k = 0; k < n; k++) {
        const char *name;
        const void *val;
        size_t size;
        if (rk.header_get_all(hdrs, k, &name, &val, &size) != 0) goto not_kept;
        if (k + 4 < n) {  /* the job's own headers */
            for (const char *p = name; *p; p++)
                if ((unsigned char)*p >= 0x80) goto not_kept;
            for (int j = 0; j < 5; j++)
                if (strcmp(name, layout_names[j]) == 0) goto not_kept;
        } else {          /* the envelope */
            size_t j = k + 4 - n;
            if (strcmp(name, layout_names[j]) != 0 || val == NULL) goto not_kept;
            if (j > 0) {
                const char *p = val;
                if (size == 0) goto not_kept;
                for (size_t i = 0; i < size; i++)
                    if (p[i] < '0' || p[i] > '9') goto not_kept;
            }
            if (j == 1) {
                if (size > 18) goto not_kept;  /* int() of more digits: interpreted */
                const char *p = val;
                for (size_t i = 0; i < size; i++) et = et * 10 + (p[i] - '0');
            }
        }
        size_t nl = strlen(name) + 1;
        if (arena_reserve(t, nl + sizeof(int64_t) + size) < 0) {
            t->dropped++;
            goto not_kept;
        }
        char *p = t->arena + t->used;
        memcpy(p, name, nl);
        int64_t sz = val == NULL ? -1 : (int64_t)size;
        memcpy(p + nl, &sz, sizeof sz);
        if (size) memcpy(p + nl + sizeof sz, val, size);
        if (k + 4 == n) {
            ver_at = t->used + nl + sizeof sz;
            ver_len = size;
        }
        t->used += nl + sizeof sz + size;
    }
    Entry *e = &t->ents[t->n];
    e->offset = m->offset;
    e->partition = m->partition;
    e->topic = (uint32_t)topic;
    e->timestamp = rk.message_timestamp(m, NULL);
    e->t = et;
    e->hdr_at = (uint32_t)start;
    e->hdr_len = (uint32_t)(t->used - start);
    e->ver_at = (uint32_t)ver_at;
    e->ver_len = (uint32_t)ver_len;
    e->nhdr = (uint32_t)n;
    table_put(t, t->n++);
    t->recorded++;
    return 0;
not_kept:
    t->used = start;
    return 0;
}

static int on_destroy(rd_kafka_t *client, void *opaque) {
    Tap *t = opaque;
    if (t->rk == client) {
        t->rk = NULL;
        t->client = NULL;
        tap_release(t);
    }
    return 0;
}

/* What a client's configuration says of its tap: the slot and generation of cutover.tap */
typedef struct {
    int slot;
    unsigned gen;
} ConfState;

static int add_conf_interceptors(rd_kafka_conf_t *conf, ConfState *st);

static int on_conf_set(rd_kafka_conf_t *conf, const char *name, const char *val, char *errstr,
                       size_t errstr_size, void *opaque) {
    (void)conf;
    if (strcmp(name, "cutover.tap") != 0) return CONF_UNKNOWN;
    ConfState *st = opaque;
    char *end;
    unsigned long slot = strtoul(val, &end, 10);
    unsigned long gen = *end == '.' ? strtoul(end + 1, &end, 10) : 0;
    if (*end != '\0' || slot >= TAP_MAX || taps[slot].gen != gen
        || __atomic_load_n(&taps[slot].refs, __ATOMIC_ACQUIRE) == 0) {
        snprintf(errstr, errstr_size, "cutover.tap %s is no tap of this process", val);
        return CONF_INVALID;
    }
    st->slot = (int)slot;
    st->gen = (unsigned)gen;
    return CONF_OK;
}

static int on_new(rd_kafka_t *client, const rd_kafka_conf_t *conf, void *opaque, char *errstr,
                  size_t errstr_size) {
    (void)conf;
    ConfState *st = opaque;
    if (st->slot < 0) return 0;
    Tap *t = &taps[st->slot];
    if (t->gen != st->gen || t->rk != NULL) {
        snprintf(errstr, errstr_size, "cutover.tap %d.%u is taken", st->slot, st->gen);
        return ERR_INVALID_ARG;
    }
    if (rk.add_on_destroy(client, "cutover", on_destroy, t) != 0
        || (t->consumer && rk.add_on_consume(client, "cutover", on_consume, t) != 0)) {
        snprintf(errstr, errstr_size, "cutover's interceptors were refused");
        return ERR_INVALID_ARG;
    }
    __atomic_add_fetch(&t->refs, 1, __ATOMIC_ACQ_REL);
    t->rk = client;
    return 0;
}

static int on_conf_destroy(void *opaque) {
    free(opaque);
    return 0;
}

static int on_conf_dup(rd_kafka_conf_t *new_conf, const rd_kafka_conf_t *old_conf,
                       size_t filter_cnt, const char **filter, void *opaque) {
    (void)old_conf;
    (void)filter_cnt;
    (void)filter;
    ConfState *st = malloc(sizeof *st);
    if (st == NULL) return ERR_INVALID_ARG;
    *st = *(ConfState *)opaque;
    return add_conf_interceptors(new_conf, st);
}

static int add_conf_interceptors(rd_kafka_conf_t *conf, ConfState *st) {
    if (rk.add_on_conf_destroy(conf, "cutover", on_conf_destroy, st) != 0) {
        free(st);
        return ERR_INVALID_ARG;
    }
    if (rk.add_on_conf_set(conf, "cutover", on_conf_set, st) != 0
        || rk.add_on_conf_dup(conf, "cutover", on_conf_dup, st) != 0
        || rk.add_on_new(conf, "cutover", on_new, st) != 0)
        return ERR_INVALID_ARG;
    return 0;
}

/* librdkafka's plugin entry point (plugin.library.paths) */
__attribute__((visibility("default"))) int conf_init(rd_kafka_conf_t *conf, void **plug_opaquep,
                                                     char *errstr, size_t errstr_size) {
    (void)plug_opaquep;
    if (!plugin_on) {
        snprintf(errstr, errstr_size, "cutover's plugin is off in this process");
        return ERR_INVALID_ARG;
    }
    ConfState *st = malloc(sizeof *st);
    if (st == NULL) return ERR_INVALID_ARG;
    st->slot = -1;
    st->gen = 0;
    int err = add_conf_interceptors(conf, st);
    if (err) snprintf(errstr, errstr_size, "cutover's interceptors were refused");
    return err;
}

/* Why clients cannot load the plugin, as a str; or None, with librdkafka's functions found
 * in ``client`` (the file of confluent-kafka's extension), its version the one
 * confluent-kafka reports (``version``), and a configuration given this file (``self``) as its
 * plugin and a cutover.tap accepting them (a librdkafka built without plugins refuses);
 * NULL on error. */
static PyObject *plugin_refusal(const char *client, int version, const char *self) {
    plugin_on = 0;
    void *h = dlopen(client, RTLD_NOW | RTLD_NOLOAD);
    if (h == NULL) return PyUnicode_FromFormat("%s is not loaded", client);
    void *found[RK_N];
    for (int k = 0; k < RK_N; k++) found[k] = dlsym(h, rk_names[k]);
    dlclose(h);  /* confluent-kafka keeps it loaded */
    for (int k = 0; k < RK_N; k++)
        if (found[k] == NULL)
            return PyUnicode_FromFormat("librdkafka has no %s (as loaded by %s)", rk_names[k],
                                        client);
    _Static_assert(sizeof rk == sizeof found, "one pointer per name");
    memcpy(&rk, found, sizeof rk);
    if (rk.version() != version)
        return PyUnicode_FromFormat("librdkafka found is version 0x%x, confluent-kafka reports "
                                    "0x%x", rk.version(), version);
    plugin_on = 1;
    char errstr[512] = "";
    rd_kafka_conf_t *conf = rk.conf_new();
    int res = conf == NULL ? CONF_INVALID
        : rk.conf_set(conf, "plugin.library.paths", self, errstr, sizeof errstr);
    if (res == CONF_OK)  /* no tap of that number: the plugin's own refusal */
        res = rk.conf_set(conf, "cutover.tap", "-1", errstr, sizeof errstr) == CONF_INVALID
            ? CONF_OK : CONF_UNKNOWN;
    if (conf != NULL) rk.conf_destroy(conf);
    if (res != CONF_OK) {
        plugin_on = 0;
        return PyUnicode_FromFormat("librdkafka does not load %s as its plugin: %s", self,
                                    errstr[0] ? errstr : "cutover.tap is unknown to it");
    }
    Py_RETURN_NONE;
}

#endif
