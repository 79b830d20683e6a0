/*
 * One pass over a simple CSV held in memory, and a byte-range gather: the alignment fast path's two
 * whole-file loops (protocols/align/fastcsv.py), which in numpy take about ten full passes over the
 * file's bytes and temporaries of several times its size.
 *
 * A "simple" CSV needs none of CSV's quoting rules: ASCII without NUL, CR or double quote, every line
 * ends with a newline, so commas and newlines are its whole structure. scan() checks the data lines
 * of such a file against the fast path's rules and returns, for each line, where it starts and ends
 * and the bytes of its ID field, packed; any broken rule gives None, and the caller reads the file
 * the csv module's way, which words the exact error. fastcsv.py keeps a numpy version of both calls
 * (used without this extension); tests/test_align_fastcsv.py checks the two agree.
 *
 * Both calls release the GIL and never write to their inputs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { PLAIN = 0, COMMA = 1, NEWLINE = 2, BAD = 3 };

static uint8_t CLASS[256]; /* filled at import: BAD for NUL, CR, '"' and every byte >= 0x80 */

/* The data lines of d[lo:len] (which ends with a newline): 0 when every line is non-empty, at most
 * `limit` bytes, has exactly `per` commas and a non-empty field k; else -1. Fills starts/ends (each
 * line's [start, end), end at its newline) and ids/offsets (field k of each line, packed). */
static int scan_lines(const uint8_t *d, Py_ssize_t lo, Py_ssize_t n, Py_ssize_t per, Py_ssize_t k, Py_ssize_t limit,
                      int64_t *starts, int64_t *ends, uint8_t *ids, int64_t *offsets) {
    const uint8_t *p = d + lo;
    int64_t off = 0;
    offsets[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *s = p, *first = s, *last = NULL;
        Py_ssize_t commas = 0;
        for (;; p++) {
            uint8_t c = CLASS[*p];
            if (c == PLAIN)
                continue;
            if (c == NEWLINE)
                break;
            if (c == BAD)
                return -1;
            commas++; /* a comma: field `commas` starts after it */
            if (commas == k)
                first = p + 1;
            else if (commas == k + 1)
                last = p;
        }
        if (p == s || p - s > limit || commas != per)
            return -1; /* a blank line, a line past the field limit, another field count */
        if (k == per)
            last = p;
        if (last == first)
            return -1; /* an empty ID */
        starts[i] = s - d, ends[i] = p - d;
        memcpy(ids + off, first, (size_t)(last - first));
        offsets[i + 1] = off += last - first;
        p++;
    }
    return 0;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer data;
    Py_ssize_t lo, per, k, limit;
    if (!PyArg_ParseTuple(args, "y*nnnn", &data, &lo, &per, &k, &limit))
        return NULL;
    PyObject *starts = NULL, *ends = NULL, *ids = NULL, *offsets = NULL, *result = NULL;
    const uint8_t *d = data.buf;
    Py_ssize_t len = data.len, n = 0;
    if (lo < 0 || lo > len || per < 0 || k < 0 || k > per || limit < 0) {
        PyErr_SetString(PyExc_ValueError, "0 <= lo <= len(data), 0 <= k <= per, limit >= 0");
        goto out;
    }
    if (lo == len || d[len - 1] != '\n') { /* no data line, or no newline at the end */
        result = Py_NewRef(Py_None);
        goto out;
    }
    Py_BEGIN_ALLOW_THREADS
    for (const uint8_t *p = d + lo; (p = memchr(p, '\n', (size_t)(d + len - p))) != NULL; p++)
        n++;
    Py_END_ALLOW_THREADS
    /* every line holds its newline: the IDs take at most len - lo - n bytes */
    if (!(starts = PyByteArray_FromStringAndSize(NULL, 8 * n)) || !(ends = PyByteArray_FromStringAndSize(NULL, 8 * n))
        || !(offsets = PyByteArray_FromStringAndSize(NULL, 8 * (n + 1)))
        || !(ids = PyBytes_FromStringAndSize(NULL, len - lo - n)))
        goto out;
    int rc;
    int64_t *o = (int64_t *)PyByteArray_AS_STRING(offsets);
    Py_BEGIN_ALLOW_THREADS
    rc = scan_lines(d, lo, n, per, k, limit, (int64_t *)PyByteArray_AS_STRING(starts),
                    (int64_t *)PyByteArray_AS_STRING(ends), (uint8_t *)PyBytes_AS_STRING(ids), o);
    Py_END_ALLOW_THREADS
    if (rc) {
        result = Py_NewRef(Py_None);
        goto out;
    }
    if (_PyBytes_Resize(&ids, (Py_ssize_t)o[n]) == 0)
        result = PyTuple_Pack(4, starts, ends, ids, offsets);
out:
    Py_XDECREF(starts), Py_XDECREF(ends), Py_XDECREF(ids), Py_XDECREF(offsets);
    PyBuffer_Release(&data);
    return result;
}

static PyObject *gather(PyObject *self, PyObject *args) {
    Py_buffer data, starts, lengths;
    if (!PyArg_ParseTuple(args, "y*y*y*", &data, &starts, &lengths))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = starts.len / 8, total = 0;
    const int64_t *s = starts.buf, *l = lengths.buf;
    if (starts.len % 8 || lengths.len != starts.len) {
        PyErr_SetString(PyExc_ValueError, "starts and lengths must be int64 arrays of one length");
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < 0 || l[i] < 0 || s[i] > data.len || l[i] > data.len - s[i]) {
            PyErr_Format(PyExc_ValueError, "range %zd [%lld, +%lld) is outside the %zd bytes", i, (long long)s[i],
                         (long long)l[i], data.len);
            goto out;
        }
        if (l[i] > PY_SSIZE_T_MAX - total) {
            PyErr_SetString(PyExc_OverflowError, "the ranges add up to more bytes than a bytes object holds");
            goto out;
        }
        total += (Py_ssize_t)l[i];
    }
    if (!(result = PyBytes_FromStringAndSize(NULL, total)))
        goto out;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(result);
    const uint8_t *d = data.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        memcpy(o, d + s[i], (size_t)l[i]), o += l[i];
    Py_END_ALLOW_THREADS
out:
    PyBuffer_Release(&data), PyBuffer_Release(&starts), PyBuffer_Release(&lengths);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(data, lo, per, k, limit) -> (starts, ends, ids, offsets) | None\n\n"
     "The data lines of data[lo:] when each is non-empty, at most limit bytes, plain (no NUL, CR, '\"' or\n"
     "byte >= 0x80), has exactly per commas and a non-empty field k; else None. starts, ends (each\n"
     "line's [start, end), end at its newline) and offsets (n + 1) are int64 bytearrays; ids is the\n"
     "fields k concatenated (bytes). None also when data[lo:] is empty or does not end with a newline."},
    {"gather", gather, METH_VARARGS,
     "gather(data, starts_int64, lengths_int64) -> bytes\n\n"
     "data[starts[i]:starts[i] + lengths[i]] for each i, concatenated."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_csvscan",
                                    "One-pass scan of a simple CSV, and a byte-range gather.", -1, methods};

PyMODINIT_FUNC PyInit__csvscan(void) {
    CLASS[','] = COMMA, CLASS['\n'] = NEWLINE;
    CLASS[0] = CLASS['\r'] = CLASS['"'] = BAD;
    for (int c = 0x80; c < 256; c++)
        CLASS[c] = BAD;
    return PyModule_Create(&module);
}
