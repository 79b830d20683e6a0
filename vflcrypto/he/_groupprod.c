/*
 * Per-group products of ciphertexts modulo an odd modulus: the histogram kernel of
 * SecureBoost and WOE (Paillier modulo n^2, Okamoto-Uchiyama modulo n), in Montgomery
 * arithmetic over GMP's mpn layer.
 *
 * Why: summing encrypted values is multiplying ciphertexts. In Python each step is a gmpy2
 * `a * c % m`: a multiplication, a division and two object allocations. Here each step is
 * GMP's multiplication (mpn_mul_n) and a Montgomery reduction by word-sized steps
 * (mpn_addmul_1), on limbs read straight from the wire format, with the GIL released so that
 * threads of one process can share the rows.
 *
 * GMP itself is not linked at build time: vflcrypto.he.native hands `init` the path of the
 * libgmp that gmpy2 already loaded (its wheel bundles one), and the functions are looked up
 * with dlsym. So the extension needs a C compiler and Python's headers, nothing else.
 *
 * The Montgomery domain is never entered: a group of k ciphertexts multiplied with k - 1
 * Montgomery steps is their product times R^-(k-1) (R = 2^(64 s)), and one more step with
 * R^k mod m (from a table of powers of R, computed once per call) removes that factor. The
 * result is the exact product modulo m, the same bytes as the Python kernel's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if ULONG_MAX != 0xFFFFFFFFFFFFFFFFUL
#error "this kernel assumes GMP's 64-bit limbs (unsigned long) of LP64 platforms"
#endif

typedef unsigned long limb_t;
typedef limb_t (*addmul_1_fn)(limb_t *, const limb_t *, long, limb_t);
typedef void (*mul_n_fn)(limb_t *, const limb_t *, const limb_t *, long);
typedef void (*sqr_fn)(limb_t *, const limb_t *, long);
typedef limb_t (*add_n_fn)(limb_t *, const limb_t *, const limb_t *, long);
typedef void (*tdiv_qr_fn)(limb_t *, limb_t *, long, const limb_t *, long, const limb_t *, long);

static addmul_1_fn gmp_addmul_1;
static mul_n_fn gmp_mul_n;
static sqr_fn gmp_sqr;
static add_n_fn gmp_add_n, gmp_sub_n;
static tdiv_qr_fn gmp_tdiv_qr;
static int ready;

typedef struct {
    long s;           /* limbs of the modulus */
    limb_t *m;        /* the modulus, little-endian limbs */
    limb_t minv;      /* -m^-1 mod 2^64 */
    limb_t *t;        /* 2s limbs of scratch */
} mont_t;

/* r = t * R^-1 mod m (r < R, t of 2s limbs is destroyed): GMP's redc_1 by its public calls (its own
 * assembly redc_1, an internal symbol, measured no faster here). */
static void redc(const mont_t *c, limb_t *r, limb_t *t) {
    long s = c->s;
    for (long i = 0; i < s; i++)
        t[i] = gmp_addmul_1(t + i, c->m, s, t[i] * c->minv);
    if (gmp_add_n(r, t + s, t, s))
        gmp_sub_n(r, r, c->m, s);
}

/* r = a * b * R^-1 mod m, r < R; r may alias a or b. */
static void mont_mul(const mont_t *c, limb_t *r, const limb_t *a, const limb_t *b) {
    if (a == b)
        gmp_sqr(c->t, a, c->s);
    else
        gmp_mul_n(c->t, a, b, c->s);
    redc(c, r, c->t);
}

static int geq(const limb_t *a, const limb_t *b, long s) {
    for (long i = s - 1; i >= 0; i--)
        if (a[i] != b[i])
            return a[i] > b[i];
    return 1;
}

/* big-endian bytes (len) -> s little-endian limbs; 0 if the value needs more than s limbs */
static int load(limb_t *out, const unsigned char *be, long len, long s) {
    long whole = len / 8 < s ? len / 8 : s; /* limbs read 8 bytes at a time from the end */
    for (long i = 0; i < whole; i++) {
        uint64_t v;
        memcpy(&v, be + len - 8 * (i + 1), 8);
        out[i] = (limb_t)__builtin_bswap64(v);
    }
    for (long i = whole; i < s; i++)
        out[i] = 0;
    for (long i = 0; i < len - 8 * whole; i++) { /* the leading bytes: a partial limb, or beyond s limbs */
        long pos = len - 1 - i; /* byte significance */
        if (be[i] == 0)
            continue;
        if (pos / 8 >= s)
            return 0;
        out[pos / 8] |= (limb_t)be[i] << (8 * (pos % 8));
    }
    return 1;
}

static void store(unsigned char *be, long len, const limb_t *x, long s) {
    for (long i = 0; i < len; i++) {
        long pos = len - 1 - i;
        be[i] = pos / 8 < s ? (unsigned char)(x[pos / 8] >> (8 * (pos % 8))) : 0;
    }
}

static PyObject *init(PyObject *self, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path))
        return NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        PyErr_Format(PyExc_OSError, "cannot load %s: %s", path, dlerror());
        return NULL;
    }
    const int *bits = (const int *)dlsym(h, "__gmp_bits_per_limb");
    addmul_1_fn a = (addmul_1_fn)dlsym(h, "__gmpn_addmul_1");
    mul_n_fn mu = (mul_n_fn)dlsym(h, "__gmpn_mul_n");
    sqr_fn sq = (sqr_fn)dlsym(h, "__gmpn_sqr");
    add_n_fn ad = (add_n_fn)dlsym(h, "__gmpn_add_n");
    add_n_fn sb = (add_n_fn)dlsym(h, "__gmpn_sub_n");
    tdiv_qr_fn dv = (tdiv_qr_fn)dlsym(h, "__gmpn_tdiv_qr");
    if (!bits || !a || !mu || !sq || !ad || !sb || !dv) {
        PyErr_Format(PyExc_OSError, "%s lacks GMP's mpn functions", path);
        return NULL;
    }
    if (*bits != 64) {
        PyErr_Format(PyExc_OSError, "%s has %d-bit limbs, not 64", path, *bits);
        return NULL;
    }
    gmp_addmul_1 = a, gmp_mul_n = mu, gmp_sqr = sq, gmp_add_n = ad, gmp_sub_n = sb, gmp_tdiv_qr = dv;
    ready = 1;
    Py_RETURN_NONE;
}

/* Where the rows come from: a blob of big-endian fields of `width` bytes, or the limbs of
 * gmpy2 mpz objects (their GMP struct, read in place: no serialization). */
typedef struct {
    const unsigned char *blob;
    long width;
    limb_t *const *limbs;
    const int *sizes;
} rows_t;

/* row i into `row` (s limbs); 0 if it is not a value below the modulus */
static int fetch(const mont_t *c, const rows_t *src, long i, limb_t *row) {
    long s = c->s;
    if (src->blob) {
        if (!load(row, src->blob + i * src->width, src->width, s))
            return 0;
    } else {
        int n = src->sizes[i];
        if (n < 0 || n > s)
            return 0;
        memcpy(row, src->limbs[i], (size_t)n * sizeof(limb_t));
        memset(row + n, 0, (size_t)(s - n) * sizeof(limb_t));
    }
    return !geq(row, c->m, s);
}

/* The work of group_products without the GIL. Returns 0, or 1 if a ciphertext is not below
 * the modulus, -1 on a group index out of range, -2 when out of memory. */
static int compute(mont_t *c, const rows_t *src, long width, long rows, const int64_t *keys,
                   long cols, long n_groups, unsigned char *out) {
    long s = c->s;
    int rc = -2;
    limb_t *acc = calloc((size_t)n_groups * s, sizeof(limb_t));
    long *count = calloc((size_t)n_groups, sizeof(long));
    limb_t *row = malloc((size_t)s * sizeof(limb_t));
    limb_t *table = NULL;
    if (!acc || !count || !row)
        goto done;
    for (long i = 0; i < rows; i++) {
        const int64_t *k = keys + i * cols;
        int loaded = 0;
        for (long j = 0; j < cols; j++) {
            int64_t g = k[j];
            if (g < 0) {
                if (g == -1)
                    continue;
                rc = -1;
                goto done;
            }
            if (g >= n_groups) {
                rc = -1;
                goto done;
            }
            if (!loaded) {
                if (!fetch(c, src, i, row)) {
                    rc = 1;
                    goto done;
                }
                loaded = 1;
            }
            limb_t *a = acc + g * s;
            if (count[g]++ == 0)
                memcpy(a, row, (size_t)s * sizeof(limb_t));
            else
                mont_mul(c, a, a, row);
        }
    }
    /* R^k for the groups of k >= 2 ciphertexts: the Montgomery form of R^(k-1) from a table
     * T[d][j] = (Montgomery form of R)^(j * 16^d), j = 1..15, one product per hex digit. */
    long maxe = 0;
    for (long g = 0; g < n_groups; g++)
        if (count[g] - 1 > maxe)
            maxe = count[g] - 1;
    long digits = 0;
    for (long e = maxe; e > 0; e >>= 4)
        digits++;
    if (digits) {
        table = malloc((size_t)digits * 16 * s * sizeof(limb_t));
        limb_t *num = calloc((size_t)(2 * s + 1), sizeof(limb_t));
        limb_t *q = malloc((size_t)(s + 2) * sizeof(limb_t));
        if (!table || !num || !q) {
            free(num), free(q);
            goto done;
        }
        num[2 * s] = 1; /* R^2 */
        gmp_tdiv_qr(q, table + 1 * s, 0, num, 2 * s + 1, c->m, s); /* T[0][1] = R^2 mod m */
        free(num), free(q);
        for (long d = 0; d < digits; d++) {
            limb_t *T = table + d * 16 * s;
            if (d > 0)
                mont_mul(c, T + 1 * s, T - 16 * s + 15 * s, T - 16 * s + 1 * s);
            for (long j = 2; j < 16; j++)
                mont_mul(c, T + j * s, T + (j - 1) * s, T + 1 * s);
        }
    }
    limb_t *y = row; /* reused as the correction factor */
    for (long g = 0; g < n_groups; g++) {
        limb_t *a = acc + g * s;
        if (count[g] == 0) {
            memset(a, 0, (size_t)s * sizeof(limb_t));
            a[0] = 1;
        } else if (count[g] >= 2) {
            long e = count[g] - 1;
            int first = 1;
            for (long d = 0; e > 0; d++, e >>= 4) {
                long j = e & 15;
                if (!j)
                    continue;
                if (first)
                    memcpy(y, table + (d * 16 + j) * s, (size_t)s * sizeof(limb_t)), first = 0;
                else
                    mont_mul(c, y, y, table + (d * 16 + j) * s);
            }
            mont_mul(c, a, a, y);
        }
        if (geq(a, c->m, s))
            gmp_sub_n(a, a, c->m, s);
        store(out + g * width, width, a, s);
    }
    rc = 0;
done:
    free(acc), free(count), free(row), free(table);
    return rc;
}

/* Modulus, checks, the GIL-free computation and the result (bytes, or None when a row is not
 * below the modulus) for both entry points. */
static PyObject *run(Py_buffer *mod, Py_ssize_t width, const rows_t *src, Py_ssize_t rows, Py_buffer *keys,
                     Py_ssize_t cols, Py_ssize_t n_groups) {
    PyObject *result = NULL;
    mont_t c = {0};
    if (width <= 0 || cols <= 0 || n_groups < 0 || keys->len != rows * cols * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "blob, keys, width and columns do not agree");
        return NULL;
    }
    long mlen = (long)mod->len;
    const unsigned char *mb = mod->buf;
    while (mlen > 0 && *mb == 0)
        mb++, mlen--;
    c.s = (mlen + 7) / 8;
    if (c.s == 0 || !(mb[mlen - 1] & 1) || mlen > width) {
        PyErr_SetString(PyExc_ValueError, "the modulus must be odd, nonzero and fit the width");
        return NULL;
    }
    c.m = malloc((size_t)c.s * sizeof(limb_t));
    c.t = malloc((size_t)2 * c.s * sizeof(limb_t));
    result = PyBytes_FromStringAndSize(NULL, n_groups * width);
    if (!c.m || !c.t || !result) {
        Py_CLEAR(result);
        PyErr_NoMemory();
        goto out;
    }
    load(c.m, mb, mlen, c.s);
    limb_t inv = 1; /* m^-1 mod 2^64 by Newton's iteration: 1, 2, 4, ... 64 correct bits */
    for (int i = 0; i < 6; i++)
        inv *= 2 - c.m[0] * inv;
    c.minv = -inv;
    int rc;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    Py_BEGIN_ALLOW_THREADS
    rc = compute(&c, src, width, rows, keys->buf, cols, n_groups, out);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        Py_CLEAR(result);
        if (rc == 1) {
            result = Py_None; /* not below the modulus: the caller's exact Python path decides */
            Py_INCREF(result);
        } else if (rc == -1) {
            PyErr_SetString(PyExc_ValueError, "a group index is out of range");
        } else {
            PyErr_NoMemory();
        }
    }
out:
    free(c.m), free(c.t);
    return result;
}

static PyObject *group_products(PyObject *self, PyObject *args) {
    Py_buffer mod, blob, keys;
    Py_ssize_t width, cols, n_groups;
    if (!ready) {
        PyErr_SetString(PyExc_RuntimeError, "call init(path of libgmp) first");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*ny*y*nn", &mod, &width, &blob, &keys, &cols, &n_groups))
        return NULL;
    PyObject *result = NULL;
    if (width <= 0 || blob.len % width) {
        PyErr_SetString(PyExc_ValueError, "blob, keys, width and columns do not agree");
    } else {
        rows_t src = {blob.buf, width, NULL, NULL};
        result = run(&mod, width, &src, blob.len / width, &keys, cols, n_groups);
    }
    PyBuffer_Release(&mod), PyBuffer_Release(&blob), PyBuffer_Release(&keys);
    return result;
}

/* gmpy2's mpz object: PyObject_HEAD, then GMP's mpz_t (alloc, size, limb pointer). The layout
 * is checked against the bytes path on a probe value by vflcrypto.he.native before use. */
typedef struct {
    PyObject_HEAD
    int alloc;
    int size;
    limb_t *d;
} mpz_view;

static PyObject *mpz_type;

static PyObject *set_mpz_type(PyObject *self, PyObject *type) {
    if (!PyType_Check(type)) {
        PyErr_SetString(PyExc_TypeError, "expected gmpy2.mpz");
        return NULL;
    }
    Py_XDECREF(mpz_type);
    Py_INCREF(type);
    mpz_type = type;
    Py_RETURN_NONE;
}

static PyObject *group_products_mpz(PyObject *self, PyObject *args) {
    Py_buffer mod, keys;
    Py_ssize_t width, cols, n_groups;
    PyObject *items;
    if (!ready || !mpz_type) {
        PyErr_SetString(PyExc_RuntimeError, "call init(path of libgmp) and set_mpz_type(gmpy2.mpz) first");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*nO!y*nn", &mod, &width, &PyList_Type, &items, &keys, &cols, &n_groups))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t rows = PyList_GET_SIZE(items);
    PyObject **held = PyMem_Malloc((size_t)(rows ? rows : 1) * sizeof(PyObject *));
    limb_t **limbs = PyMem_Malloc((size_t)(rows ? rows : 1) * sizeof(limb_t *));
    int *sizes = PyMem_Malloc((size_t)(rows ? rows : 1) * sizeof(int));
    Py_ssize_t taken = 0;
    if (!held || !limbs || !sizes) {
        PyErr_NoMemory();
        goto out;
    }
    for (; taken < rows; taken++) { /* references held while the GIL is released */
        PyObject *o = PyList_GET_ITEM(items, taken);
        if (Py_TYPE(o) != (PyTypeObject *)mpz_type) {
            result = Py_None; /* not an mpz: the caller's bytes or Python path */
            Py_INCREF(result);
            goto out;
        }
        Py_INCREF(o);
        held[taken] = o;
        limbs[taken] = ((mpz_view *)o)->d;
        sizes[taken] = ((mpz_view *)o)->size;
    }
    rows_t src = {NULL, width, limbs, sizes};
    result = run(&mod, width, &src, rows, &keys, cols, n_groups);
out:
    for (Py_ssize_t i = 0; i < taken; i++)
        Py_DECREF(held[i]);
    PyMem_Free(held), PyMem_Free(limbs), PyMem_Free(sizes);
    PyBuffer_Release(&mod), PyBuffer_Release(&keys);
    return result;
}

static PyMethodDef methods[] = {
    {"init", init, METH_VARARGS, "init(path): load GMP's mpn functions from the libgmp at path."},
    {"set_mpz_type", set_mpz_type, METH_O, "set_mpz_type(gmpy2.mpz): the type group_products_mpz reads."},
    {"group_products_mpz", group_products_mpz, METH_VARARGS,
     "group_products_mpz(modulus_be, width, list_of_mpz, keys_int64, cols, n_groups) -> bytes | None\n\n"
     "group_products on gmpy2 mpz values read in place; None also when an item is not an mpz."},
    {"group_products", group_products, METH_VARARGS,
     "group_products(modulus_be, width, blob, keys_int64, cols, n_groups) -> bytes | None\n\n"
     "Per-group products mod the odd modulus of the blob's big-endian width-byte values; keys\n"
     "(rows x cols, int64) name each row's group per column, -1 for none. Empty groups give 1.\n"
     "None when a value is not below the modulus. Releases the GIL."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_groupprod",
                                    "Per-group ciphertext products in Montgomery arithmetic over GMP.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__groupprod(void) { return PyModule_Create(&module); }
