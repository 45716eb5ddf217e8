/* A consumed confluent_kafka.Message read directly, without its accessors: its fields, and its
 * headers from librdkafka (rd_kafka_header_cnt/get_all) while Python has not converted them.
 * A suppressed record (half of all) then costs no Python object at all; through the accessors
 * it costs a headers list of 4 tuples, 4 names and 4 values, an offset, a partition and a
 * timestamp tuple (docs/decisions/008-compiled-per-record-path.md). The layout
 * is confluent_kafka.h's Message (confluent-kafka 2.16); message_refusal() checks it on a
 * constructed Message and finds librdkafka's two functions in the library the client loaded,
 * or says why not (router/native/_fastpath.c then uses the accessors). Included by _fastpath.c
 * only; tests/integration/test_direct_reads.py compares these reads with the accessors. */

#ifndef CUTOVER_MESSAGE_H
#define CUTOVER_MESSAGE_H

#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    PyObject *topic;
    PyObject *value;
    PyObject *key;
    PyObject *headers;     /* the converted list, once headers() was called; else NULL */
    void *c_headers;       /* librdkafka's rd_kafka_headers_t, until then; NULL if none */
    PyObject *error;
    int32_t partition;
    int64_t offset;
    int32_t leader_epoch;
    int64_t timestamp;
    int tstype;
    int64_t latency;
    int16_t delivery_count;
} CKMessage;

typedef size_t (*header_cnt_fn)(const void *);
typedef int (*header_get_all_fn)(const void *, size_t, const char **, const void **, size_t *);
static header_cnt_fn header_cnt;
static header_get_all_fn header_get_all;

/* The versions read from librdkafka's headers in one scan: raw value -> str (a partition's
 * records carry one or two versions). */
#define VERSION_CACHE 4
typedef struct {
    PyObject *raw[VERSION_CACHE], *ver[VERSION_CACHE];
    int n;
} VersionCache;

static void version_cache_clear(VersionCache *c) {
    for (int k = 0; k < c->n; k++) {
        Py_CLEAR(c->raw[k]);
        Py_CLEAR(c->ver[k]);
    }
    c->n = 0;
}

/* The version str of a raw version value (borrowed), from the cache, else from ``known``
 * (cutover.headers.KNOWN_VERSIONS: bytes -> str); NULL when unknown or on error. */
static PyObject *version_of(VersionCache *c, PyObject *known, const char *raw, size_t size) {
    for (int k = 0; k < c->n; k++) {
        PyObject *b = c->raw[k];
        if ((size_t)PyBytes_GET_SIZE(b) == size && memcmp(PyBytes_AS_STRING(b), raw, size) == 0)
            return c->ver[k];
    }
    PyObject *b = PyBytes_FromStringAndSize(raw, (Py_ssize_t)size);
    if (b == NULL) return NULL;
    PyObject *v = PyDict_GetItemWithError(known, b);
    if (v == NULL || c->n == VERSION_CACHE) {
        Py_DECREF(b);
        return v;  /* borrowed: known keeps it */
    }
    Py_INCREF(v);
    c->raw[c->n] = b;
    c->ver[c->n++] = v;
    return v;
}

/* The tagger's data layout over librdkafka's headers ``hdrs``, with the answers _fastpath.c's
 * recognize() gives over the converted list: 0 not the data layout (or a header name that is
 * not ASCII: Python decodes names, so the accessors decide those), 1 recognized (the version
 * and event time set). ``names`` are the header names version, event time, watermark, batch
 * and kind in UTF-8. */
static int recognize_c(VersionCache *c, PyObject *known, const char *const names[5],
                       const void *hdrs, PyObject **version, int64_t *t) {
    if (hdrs == NULL) return 0;
    size_t n = header_cnt(hdrs);
    if (n < 4) return 0;
    const char *name;
    const void *vals[4];
    size_t sizes[4];
    for (int k = 0; k < 4; k++) {
        if (header_get_all(hdrs, n - 4 + (size_t)k, &name, &vals[k], &sizes[k]) != 0) return 0;
        if (strcmp(name, names[k]) != 0) return 0;
    }
    for (int k = 1; k < 4; k++) {
        if (vals[k] == NULL || sizes[k] == 0) return 0;
        const char *p = vals[k];
        for (size_t j = 0; j < sizes[k]; j++)
            if (p[j] < '0' || p[j] > '9') return 0;
    }
    for (size_t j = 0; j + 4 < n; j++) {
        const void *val;
        size_t size;
        if (header_get_all(hdrs, j, &name, &val, &size) != 0) return 0;
        for (const char *p = name; *p; p++)
            if ((unsigned char)*p >= 0x80) return 0;
        for (int k = 0; k < 5; k++)
            if (strcmp(name, names[k]) == 0) return 0;
    }
    if (vals[0] == NULL) return 0;
    PyObject *v = version_of(c, known, vals[0], sizes[0]);
    if (v == NULL) {
        PyErr_Clear();  /* unknown, or a lookup error: not recognized, as recognize() */
        return 0;
    }
    if (sizes[1] > 18) return 0;  /* int() of more digits: interpreted */
    const char *p = vals[1];
    int64_t x = 0;
    for (size_t j = 0; j < sizes[1]; j++) x = x * 10 + (p[j] - '0');
    *version = v;
    *t = x;
    return 1;
}

/* librdkafka's functions ``names`` into ``found``, from ``lib`` (the path of the library the
 * client loaded, or None): None, or why not as a str; NULL on error. */
static PyObject *find_rdkafka(PyObject *lib, const char *const *names, void **found, int n) {
    if (lib == Py_None)
        return PyUnicode_FromString("librdkafka was not found among the loaded libraries");
    const char *path = PyUnicode_AsUTF8(lib);
    if (path == NULL) return NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (h == NULL) return PyUnicode_FromFormat("%s is not loaded", path);
    for (int k = 0; k < n; k++) found[k] = dlsym(h, names[k]);
    dlclose(h);  /* the client keeps it loaded */
    for (int k = 0; k < n; k++)
        if (found[k] == NULL) return PyUnicode_FromFormat("%s has no %s", path, names[k]);
    Py_RETURN_NONE;
}

/* Why ``sample`` (a Message of type ``mt`` constructed with topic, partition, offset,
 * timestamp and the headers list ``hlist``) cannot be read directly, as a str; or None, with
 * librdkafka's header functions found in ``lib`` (the path of the library the client loaded,
 * or None); NULL on error. */
static PyObject *message_refusal(PyTypeObject *mt, PyObject *sample, PyObject *topic,
                                 int partition, long long offset, long long timestamp,
                                 PyObject *hlist, PyObject *lib) {
    if (Py_TYPE(sample) != mt)
        return PyUnicode_FromString("the sample is not a confluent_kafka.Message");
    if (mt->tp_basicsize != (Py_ssize_t)sizeof(CKMessage))
        return PyUnicode_FromFormat("confluent_kafka.Message is %zd bytes, not %zd",
                                    mt->tp_basicsize, (Py_ssize_t)sizeof(CKMessage));
    CKMessage *m = (CKMessage *)sample;
    if (m->topic == NULL || !PyUnicode_CheckExact(m->topic)
        || PyUnicode_Compare(m->topic, topic) != 0 || m->headers != hlist
        || m->c_headers != NULL || m->error != NULL || m->partition != partition
        || m->offset != offset || m->timestamp != timestamp)
        return PyUnicode_FromString("confluent_kafka.Message's fields are not where expected");
    static const char *const names[2] = {"rd_kafka_header_cnt", "rd_kafka_header_get_all"};
    void *found[2];
    PyObject *missing = find_rdkafka(lib, names, found, 2);
    if (missing != Py_None) return missing;
    header_cnt = (header_cnt_fn)found[0];
    header_get_all = (header_get_all_fn)found[1];
    return missing;
}

#endif
