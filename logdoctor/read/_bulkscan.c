/* The compiled half of logdoctor/read/bulkscan.py: one pass over a block of raw log lines.
 *
 * bulkscan.py holds the pure-Python path that defines every result; this file must give exactly the same
 * (tests/test_bulkscan_native.py compiles it and compares them). Only the CPython C API is used, so any
 * C compiler builds it (hatch_build.py, tools/build_accelerator.py); without it the Python path runs.
 *
 *   scan(block, needles) -> (counts, tput, peak_usage, peak_queue, peak_running)
 *     counts[i]   == block.count(needles[i])            (non-overlapping, as bytes.count)
 *     tput        the values of _RX_TPUT.findall(block) as float(), packed native doubles
 *     peak_usage  max(map(float, _RX_USAGE.findall(block))) or None
 *     peak_queue / peak_running   max(map(int, findall)) or None
 *   bin_values(packed, den, bins) -> None
 *     bins[k] += 1 per value, k = -10**9 if v <= 0 else math.floor(math.log(v) / den)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_NEEDLES 48
#define MAX_NEEDLE_LEN 4096

enum { F_COUNT = 0, F_TPUT, F_USAGE, F_QUEUE, F_RUNNING };

/* the fixed prefixes of batches' figure regexes; `\\?/` in the throughput key is its two spellings */
static const struct { const char *text; int field; } FIELDS[] = {
    {"gen throughput (token/s): ", F_TPUT},
    {"gen throughput (token\\/s): ", F_TPUT},
    {"token usage: ", F_USAGE},
    {"#queue-req: ", F_QUEUE},
    {"#running-req: ", F_RUNNING},
};
#define N_FIELDS ((int)(sizeof(FIELDS) / sizeof(FIELDS[0])))

typedef struct {
    const unsigned char *s;
    Py_ssize_t len;
    Py_ssize_t anchor;     /* the needle is looked for at its rarest byte, not its first */
    uint64_t head, mask;   /* its first (up to) 8 bytes: most candidates fail on one word compare */
    int field;
    int next;              /* next needle sharing the anchor byte, -1 at the end */
} Needle;

#define SAMPLE_BYTES 65536

/* how often each byte occurs at the block's start (plus a small prior, so bytes the sample lacks still
 * rank as in log text): the rarest byte of a needle is where it is looked for */
static void byte_costs(const unsigned char *b, Py_ssize_t n, uint32_t cost[256])
{
    for (int c = 0; c < 256; c++) {
        uint32_t prior = 1;
        if (c == ' ') prior = 64;
        else if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z')) prior = 16;
        else if (c >= 'A' && c <= 'Z') prior = 4;
        cost[c] = prior;
    }
    if (n > SAMPLE_BYTES) n = SAMPLE_BYTES;
    for (Py_ssize_t i = 0; i < n; i++) cost[b[i]] += 8;
}

static inline uint64_t load64(const unsigned char *p)
{
    uint64_t w;
    memcpy(&w, p, sizeof(w));
    return w;
}

static inline int same_bytes(const unsigned char *p, const Needle *n, const unsigned char *e)
{
    if (e - p >= 8) {
        if ((load64(p) & n->mask) != n->head) return 0;
        return n->len <= 8 || memcmp(p + 8, n->s + 8, (size_t)(n->len - 8)) == 0;
    }
    return memcmp(p, n->s, (size_t)n->len) == 0;
}

static inline int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0
#define EXACT_DOUBLES 1
#else
#define EXACT_DOUBLES 0
#endif

static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12};

/* float() of `len` bytes of digits with at most one '.': when all digits fit 2**53 and the power of ten is
 * exact, one IEEE division is correctly rounded, as is CPython's strtod, so both give the same double */
static int to_double(const unsigned char *s, Py_ssize_t len, double *out)
{
    uint64_t m = 0;
    int nd = 0, nf = 0, dot = 0;
    for (Py_ssize_t i = 0; i < len; i++) {
        if (s[i] == '.') { dot = 1; continue; }
        if (nd < 19) m = m * 10 + (uint64_t)(s[i] - '0');
        nd++;
        nf += dot;
    }
    if (EXACT_DOUBLES && nd <= 15 && nf <= 12) {
        *out = (double)m / POW10[nf];
        return 0;
    }
    char buf[64];
    if (len >= (Py_ssize_t)sizeof(buf)) return -1;     /* cannot happen: at most 15 + 1 + 12 bytes */
    memcpy(buf, s, (size_t)len);
    buf[len] = '\0';
    double v = PyOS_string_to_double(buf, NULL, NULL);
    if (v == -1.0 && PyErr_Occurred()) return -1;
    *out = v;
    return 0;
}

/* _DECIMAL at q: ([0-9]{1,15}(?:\.[0-9]{1,12}(?![0-9])|(?!\.?[0-9]))); the length of the capture, 0 if none.
 * A shorter integer part never helps the regex (a digit would follow it), so only the whole run counts. */
static Py_ssize_t match_decimal(const unsigned char *q, const unsigned char *e)
{
    const unsigned char *d = q;
    while (d < e && is_digit(*d) && d - q <= 15) d++;
    Py_ssize_t ni = d - q;
    if (ni == 0 || ni > 15) return 0;
    if (d < e && *d == '.') {
        const unsigned char *f = d + 1;
        while (f < e && is_digit(*f) && f - (d + 1) <= 12) f++;
        Py_ssize_t nf = f - (d + 1);
        if (nf >= 1 && nf <= 12) return f - q;
        if (nf == 0) return ni;        /* `12.` then no digit: the second branch takes `12` */
        return 0;                      /* 13+ decimals: neither branch */
    }
    return ni;
}

/* ([0-9]{1,15})(?![0-9]) at q: the value, or -1 */
static long long match_int(const unsigned char *q, const unsigned char *e)
{
    const unsigned char *d = q;
    long long v = 0;
    while (d < e && is_digit(*d) && d - q <= 15) { v = v * 10 + (*d - '0'); d++; }
    Py_ssize_t n = d - q;
    return (n == 0 || n > 15) ? -1 : v;
}

typedef struct {
    double *vals;
    Py_ssize_t n, cap;
} Doubles;

static int push(Doubles *d, double v)
{
    if (d->n == d->cap) {
        Py_ssize_t cap = d->cap ? d->cap * 2 : 4096;
        double *p = PyMem_Realloc(d->vals, (size_t)cap * sizeof(double));
        if (p == NULL) { PyErr_NoMemory(); return -1; }
        d->vals = p;
        d->cap = cap;
    }
    d->vals[d->n++] = v;
    return 0;
}

static PyObject *scan(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    PyObject *needles_obj;
    if (!PyArg_ParseTuple(args, "y*O!:scan", &buf, &PyTuple_Type, &needles_obj)) return NULL;
    PyObject *result = NULL, *counts_obj = NULL;
    Needle nd[MAX_NEEDLES];
    Py_ssize_t counts[MAX_NEEDLES];
    const unsigned char *next_ok[MAX_NEEDLES];
    int head[256];
    unsigned char hit[256];
    Doubles tput = {NULL, 0, 0};
    Py_ssize_t n_count = PyTuple_GET_SIZE(needles_obj);
    if (n_count + N_FIELDS > MAX_NEEDLES) {
        PyErr_SetString(PyExc_ValueError, "too many needles");
        goto done;
    }
    const unsigned char *b = (const unsigned char *)buf.buf, *e = b + buf.len;
    uint32_t cost[256];
    byte_costs(b, buf.len, cost);
    for (int c = 0; c < 256; c++) { head[c] = -1; hit[c] = 0; }
    int total = (int)n_count + N_FIELDS;
    for (int i = 0; i < total; i++) {
        const unsigned char *s;
        Py_ssize_t len;
        int field;
        if (i < n_count) {
            PyObject *o = PyTuple_GET_ITEM(needles_obj, i);
            if (!PyBytes_Check(o) || PyBytes_GET_SIZE(o) == 0 || PyBytes_GET_SIZE(o) > MAX_NEEDLE_LEN) {
                PyErr_SetString(PyExc_ValueError, "needles must be non-empty bytes");
                goto done;
            }
            s = (const unsigned char *)PyBytes_AS_STRING(o);
            len = PyBytes_GET_SIZE(o);
            field = F_COUNT;
        } else {
            s = (const unsigned char *)FIELDS[i - n_count].text;
            len = (Py_ssize_t)strlen(FIELDS[i - n_count].text);
            field = FIELDS[i - n_count].field;
        }
        Py_ssize_t a = 0;
        for (Py_ssize_t j = 1; j < len; j++)
            if (cost[s[j]] < cost[s[a]]) a = j;
        unsigned char head8[8] = {0}, mask8[8] = {0};
        for (Py_ssize_t j = 0; j < len && j < 8; j++) { head8[j] = s[j]; mask8[j] = 0xff; }
        nd[i].head = load64(head8);
        nd[i].mask = load64(mask8);
        nd[i].s = s; nd[i].len = len; nd[i].anchor = a; nd[i].field = field;
        nd[i].next = head[s[a]];
        head[s[a]] = i;
        hit[s[a]] = 1;
        counts[i] = 0;
        next_ok[i] = NULL;
    }
    double peak_usage = 0.0;
    long long peak_queue = -1, peak_running = -1;
    int have_usage = 0;
    for (int i = 0; i < total; i++) next_ok[i] = b;
    for (const unsigned char *p = b; p < e; p++) {
        if (!hit[*p]) continue;
        for (int k = head[*p]; k >= 0; k = nd[k].next) {
            const Needle *n = &nd[k];
            const unsigned char *start = p - n->anchor;
            if (n->len == 1) { counts[k]++; continue; }
            if (start < b || n->len > e - start || !same_bytes(start, n, e)) continue;
            const unsigned char *q = start + n->len;
            switch (n->field) {
            case F_COUNT:
                if (start >= next_ok[k]) { counts[k]++; next_ok[k] = q; }
                break;
            case F_TPUT:
            case F_USAGE: {
                Py_ssize_t m = match_decimal(q, e);
                if (m == 0) break;
                double v;
                if (to_double(q, m, &v) < 0) goto done;
                if (n->field == F_TPUT) {
                    if (push(&tput, v) < 0) goto done;
                } else if (!have_usage || v > peak_usage) {
                    peak_usage = v;
                    have_usage = 1;
                }
                break;
            }
            case F_QUEUE: {
                long long v = match_int(q, e);
                if (v > peak_queue) peak_queue = v;
                break;
            }
            case F_RUNNING: {
                long long v = match_int(q, e);
                if (v > peak_running) peak_running = v;
                break;
            }
            }
        }
    }
    counts_obj = PyTuple_New(n_count);
    if (counts_obj == NULL) goto done;
    for (Py_ssize_t i = 0; i < n_count; i++) {
        PyObject *c = PyLong_FromSsize_t(counts[i]);
        if (c == NULL) goto done;
        PyTuple_SET_ITEM(counts_obj, i, c);
    }
    PyObject *tput_obj = PyBytes_FromStringAndSize((const char *)tput.vals, tput.n * (Py_ssize_t)sizeof(double));
    if (tput_obj == NULL) goto done;
    PyObject *u = have_usage ? PyFloat_FromDouble(peak_usage) : Py_NewRef(Py_None);
    PyObject *qo = peak_queue >= 0 ? PyLong_FromLongLong(peak_queue) : Py_NewRef(Py_None);
    PyObject *ro = peak_running >= 0 ? PyLong_FromLongLong(peak_running) : Py_NewRef(Py_None);
    if (u && qo && ro) result = PyTuple_Pack(5, counts_obj, tput_obj, u, qo, ro);
    Py_DECREF(tput_obj);
    Py_XDECREF(u);
    Py_XDECREF(qo);
    Py_XDECREF(ro);
done:
    Py_XDECREF(counts_obj);
    PyMem_Free(tput.vals);
    PyBuffer_Release(&buf);
    return result;
}

#define BIN_LO (-4096)
#define BIN_HI 4096
#define NONPOSITIVE_BIN (-1000000000LL)

static int add_to(PyObject *bins, PyObject *key, Py_ssize_t n)
{
    if (key == NULL) return -1;
    PyObject *old = PyDict_GetItemWithError(bins, key);
    if (old == NULL && PyErr_Occurred()) { Py_DECREF(key); return -1; }
    Py_ssize_t have = 0;
    if (old != NULL) {
        have = PyLong_AsSsize_t(old);
        if (have == -1 && PyErr_Occurred()) { Py_DECREF(key); return -1; }
    }
    PyObject *val = PyLong_FromSsize_t(have + n);
    int rc = val == NULL ? -1 : PyDict_SetItem(bins, key, val);
    Py_XDECREF(val);
    Py_DECREF(key);
    return rc;
}

static PyObject *bin_values(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    double den;
    PyObject *bins;
    if (!PyArg_ParseTuple(args, "y*dO!:bin_values", &buf, &den, &PyDict_Type, &bins)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t *local = PyMem_Calloc(BIN_HI - BIN_LO, sizeof(Py_ssize_t));
    Py_ssize_t nonpositive = 0;
    if (local == NULL) { PyErr_NoMemory(); goto done; }
    Py_ssize_t n = buf.len / (Py_ssize_t)sizeof(double);
    const char *raw = (const char *)buf.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        double v;
        memcpy(&v, raw + i * (Py_ssize_t)sizeof(double), sizeof(double));
        if (!isfinite(v)) continue;   /* never stored: Quantiles keeps finite values only */
        if (v <= 0) { nonpositive++; continue; }
        double k = floor(log(v) / den);
        if (k >= BIN_LO && k < BIN_HI) local[(int)k - BIN_LO]++;
        else if (add_to(bins, PyLong_FromDouble(k), 1) < 0) goto done;
    }
    if (nonpositive && add_to(bins, PyLong_FromLongLong(NONPOSITIVE_BIN), nonpositive) < 0) goto done;
    for (int k = 0; k < BIN_HI - BIN_LO; k++)
        if (local[k] && add_to(bins, PyLong_FromLong((long)k + BIN_LO), local[k]) < 0) goto done;
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(local);
    PyBuffer_Release(&buf);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "Needle counts and batch figures of a block of raw lines, in one pass."},
    {"bin_values", bin_values, METH_VARARGS, "Add packed doubles to a log-histogram dict."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_bulkscan", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__bulkscan(void) { return PyModule_Create(&module); }
