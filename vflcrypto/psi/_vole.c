/*
 * The arithmetic of silent VOLE (vflcrypto/psi/vole.py): multiplication in GF(2^128) and the
 * dual encoding of an expand-convolute code, each over a whole vector in one call with the
 * GIL released.
 *
 * GF(2^128): an element is 16 bytes, a little-endian 128-bit integer whose bit i is the
 * coefficient of X^i, modulo X^128 + X^7 + X^2 + X + 1. With PCLMULQDQ (checked at run time)
 * a product is four carry-less 64x64 multiplications and a two-step fold; without it, the
 * same product bit by bit (tests/test_vole.py checks both against Python integers).
 *
 * The code: the systematic expand-convolute code of Raghuraman, Rindal and Tanguy ("Expand-
 * Convolute Codes for Pseudorandom Correlation Generators from LPN", CRYPTO 2023) with
 * libOTe's ExConv7x24 parameters: the parity part d = e[m:N] is convolved twice (each row i
 * adds itself to the next 24 rows where a pseudorandom coefficient bit is set, and always to
 * row i + 25, cyclically), then every message row e[i], i < m, adds 7 rows of d chosen by the
 * expander. The coefficient bits and expander indices are public and come from the caller
 * (vole.py draws them from AES-CTR under a fixed public seed).
 *
 * The convolutions run with AVX-512F or AVX2 where the CPU has them (GCC/Clang function attributes,
 * so the file builds with plain -O3; chosen once at import, see convolve() below), else row by row;
 * the same bytes on every path (tests/test_vole.py). VFLCRYPTO_SIMD=0 (or "scalar") in the
 * environment at import forces the row-by-row path, VFLCRYPTO_SIMD=avx2 at most AVX2, as for
 * _blake2b.c; simd() names the path taken.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_simd.h"

#include "_aesni.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HAVE_X86 1
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_X86_SIMD 1
#else
#define HAVE_X86_SIMD 0
#endif

typedef struct {
    uint64_t lo, hi;
} blk;

/* ------------------------------------------------------------------ GF(2^128) */

static inline void clmul64_soft(uint64_t a, uint64_t b, uint64_t *lo, uint64_t *hi) {
    uint64_t l = 0, h = 0;
    for (int i = 0; i < 64; i++) {
        uint64_t mask = (uint64_t)0 - ((b >> i) & 1);
        l ^= (a << i) & mask;
        if (i)
            h ^= (a >> (64 - i)) & mask;
    }
    *lo = l;
    *hi = h;
}

/* r = (r3:r2:r1:r0) mod X^128 + X^7 + X^2 + X + 1, using X^128 = 0x87 */
static inline blk reduce256(uint64_t r0, uint64_t r1, uint64_t r2, uint64_t r3) {
    /* fold r3 (bits 192..255): r3 * X^192 = r3 * 0x87 * X^64 */
    uint64_t lo, hi;
    clmul64_soft(r3, 0x87, &lo, &hi);
    r1 ^= lo;
    r2 ^= hi;
    clmul64_soft(r2, 0x87, &lo, &hi);
    r0 ^= lo;
    r1 ^= hi;
    blk out = {r0, r1};
    return out;
}

static inline blk gf_mul_soft(blk a, blk b) {
    uint64_t l00, h00, l11, h11, l01, h01, l10, h10;
    clmul64_soft(a.lo, b.lo, &l00, &h00);
    clmul64_soft(a.hi, b.hi, &l11, &h11);
    clmul64_soft(a.lo, b.hi, &l01, &h01);
    clmul64_soft(a.hi, b.lo, &l10, &h10);
    uint64_t r0 = l00, r1 = h00 ^ l01 ^ l10, r2 = l11 ^ h01 ^ h10, r3 = h11;
    return reduce256(r0, r1, r2, r3);
}

#ifdef HAVE_X86
__attribute__((target("pclmul,sse2"))) static void gf_mul_many_clmul(const blk *a, const blk *b, size_t bstep,
                                                                    blk *out, size_t n) {
    const __m128i poly = _mm_set_epi64x(0, 0x87);
    for (size_t i = 0; i < n; i++) {
        __m128i x = _mm_loadu_si128((const __m128i *)&a[i]);
        __m128i y = _mm_loadu_si128((const __m128i *)&b[i * bstep]);
        __m128i p00 = _mm_clmulepi64_si128(x, y, 0x00);
        __m128i p11 = _mm_clmulepi64_si128(x, y, 0x11);
        __m128i mid = _mm_xor_si128(_mm_clmulepi64_si128(x, y, 0x10), _mm_clmulepi64_si128(x, y, 0x01));
        __m128i lo = _mm_xor_si128(p00, _mm_slli_si128(mid, 8)); /* bits 0..127 */
        __m128i hi = _mm_xor_si128(p11, _mm_srli_si128(mid, 8)); /* bits 128..255 */
        /* fold the top 64 bits (X^192 = 0x87 X^64), then the next 64 (X^128 = 0x87) */
        __m128i t = _mm_clmulepi64_si128(hi, poly, 0x01); /* hi.hi * 0x87: up to 71 bits, weight X^64 */
        hi = _mm_xor_si128(hi, _mm_srli_si128(t, 8));     /* its bits >= 64 land in hi.lo */
        lo = _mm_xor_si128(lo, _mm_slli_si128(t, 8));     /* its low 64 bits land in lo.hi */
        t = _mm_clmulepi64_si128(hi, poly, 0x00);         /* hi.lo * 0x87 */
        lo = _mm_xor_si128(lo, t);
        _mm_storeu_si128((__m128i *)&out[i], lo);
    }
}
#endif

static int have_clmul = -1;

static void gf_mul_many(const blk *a, const blk *b, size_t bstep, blk *out, size_t n, int force_soft) {
#ifdef HAVE_X86
    if (have_clmul < 0) {
        __builtin_cpu_init();
        have_clmul = __builtin_cpu_supports("pclmul") ? 1 : 0;
    }
    if (have_clmul && !force_soft) {
        gf_mul_many_clmul(a, b, bstep, out, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        out[i] = gf_mul_soft(a[i], b[i * bstep]);
}

/* gf128_mul(a, b, soft=False) -> bytes: a and b hold n elements each, or b holds one (a scalar) */
static PyObject *py_gf128_mul(PyObject *self, PyObject *args) {
    Py_buffer a, b;
    int soft = 0;
    if (!PyArg_ParseTuple(args, "y*y*|p", &a, &b, &soft))
        return NULL;
    PyObject *out = NULL;
    if (a.len % 16 || (b.len != 16 && b.len != a.len)) {
        PyErr_SetString(PyExc_ValueError, "gf128_mul: a holds whole 16-byte elements and b as many, or one");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, a.len);
    if (!out)
        goto done;
    {
        size_t n = (size_t)a.len / 16, bstep = b.len == 16 ? 0 : 1;
        const blk *pa = (const blk *)a.buf, *pb = (const blk *)b.buf;
        blk *po = (blk *)PyBytes_AS_STRING(out);
        Py_BEGIN_ALLOW_THREADS gf_mul_many(pa, pb, bstep, po, n, soft);
        Py_END_ALLOW_THREADS
    }
done:
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    return out;
}

/* ------------------------------------------------------------------ expand-convolute code */

#define ACC 24

/* Steps start..size-1 of a convolution, one row at a time: the whole convolution on the scalar path,
 * and the last rows (where the additions wrap around to the first) after a SIMD kernel. */
static void convolve_rows(blk *x, size_t size, const uint8_t *coeff, size_t start) {
    /* row i adds itself to row i + 1 + k (cyclically) where bit k of its 3 coefficient bytes is
     * set, k < 24, and always to row i + 25 */
    for (size_t i = start; i < size; i++) {
        const blk xi = x[i];
        const uint32_t bits = (uint32_t)coeff[3 * i] | ((uint32_t)coeff[3 * i + 1] << 8) |
                              ((uint32_t)coeff[3 * i + 2] << 16);
        if (i + ACC + 1 < size) {
            blk *row = x + i + 1;
            for (int k = 0; k < ACC; k++) {
                const uint64_t mask = (uint64_t)0 - ((bits >> k) & 1);
                row[k].lo ^= xi.lo & mask;
                row[k].hi ^= xi.hi & mask;
            }
            x[i + ACC + 1].lo ^= xi.lo;
            x[i + ACC + 1].hi ^= xi.hi;
        } else {
            for (int k = 0; k <= ACC; k++) {
                if (k < ACC && !((bits >> k) & 1))
                    continue;
                size_t j = (i + 1 + (size_t)k) % size;
                x[j].lo ^= xi.lo;
                x[j].hi ^= xi.hi;
            }
        }
    }
}

/*
 * SIMD convolution. Row by row, each step is 25 masked 16-byte XORs into the rows just ahead, and
 * row i + 1 must have row i's contribution before it is read: ~20 ns a row (3.5 GHz). The kernels
 * keep a window of the rows ahead in vector registers instead (no store-to-load round trips on the
 * chain) and walk it in groups of steps aligned to the registers:
 *
 *   AVX-512: a group is 4 steps (rows i0..i0+3, i0 a multiple of 4); the window is rows
 *   i0..i0+31 in 8 zmm of 4 rows (W0..W7). Step t broadcasts row i0+t (lane t of W0, which already
 *   holds rows i0..i0+t-1's contributions) to all lanes and XORs it into the rows it reaches,
 *   i0+t+1..i0+t+25 (7 of the zmm), under a mask; then W0 is final and stored, the window moves on
 *   by one zmm and the next 4 rows are loaded. AVX2: the same with 2-step groups and 14 ymm of 2
 *   rows (rows i0..i0+27).
 *
 * The masks are vectors (all-ones or zero qwords, two per row) from rowmask[] below: byte j of the
 * step's 32-bit target mask (bit r: row i0+r gets row i0+t) selects 128 bytes covering rows
 * i0+8j..i0+8j+7, one ternary-logic op (w ^ (x & m)) per zmm, or AND + XOR per ymm: ~2.3 ns a row
 * with AVX-512, ~3.4 with AVX2. (Masked XORs under AVX-512 k registers take one kmov per zmm and
 * step, and those go one per cycle on port 5 with the broadcasts: ~2.8 ns a row.) The kernels stop
 * short of the end (their window must fit in the rows and no step may wrap around) and return how
 * many steps they did; convolve_rows() does the rest.
 */
#if HAVE_X86_SIMD
/* rowmask[b][2r], rowmask[b][2r + 1]: all ones if bit r of b is set (8 rows, 128 bytes); built at import */
static uint64_t rowmask[256][16] __attribute__((aligned(64)));

static void rowmask_init(void) {
    for (int b = 0; b < 256; b++)
        for (int q = 0; q < 16; q++)
            rowmask[b][q] = ((b >> (q / 2)) & 1) ? ~(uint64_t)0 : 0;
}

/* the rows a step reaches, relative to the row after it: its 24 coefficient bits and bit 24 (row + 25).
 * Reads 4 bytes: the kernels' steps all lie at least 25 rows before the end of the coefficients. */
static inline uint32_t step_targets(const uint8_t *p) {
    uint32_t w;
    memcpy(&w, p, 4);
    return (w & 0xFFFFFFu) | ((uint32_t)1 << ACC);
}

/* W ^= X & rowmask[b] (the 64-byte half `half` of the 128: rows 4 half..4 half+3 of the 8) */
#define TX512(W, X, b, half) \
    W = _mm512_ternarylogic_epi64(W, X, _mm512_load_si512((const void *)&rowmask[b][8 * (half)]), 0x78)

#define STEP512(W0, W1, W2, W3, W4, W5, W6, W7, p, t)                                                    \
    {                                                                                                  \
        const uint32_t r = step_targets((p) + 3 * (t)) << ((t) + 1); /* bit j: row i0 + j */          \
        const __m512i X = _mm512_shuffle_i64x2(W0, W0, 0x55 * (t));  /* row i0 + t in every lane */   \
        const unsigned b0 = r & 255, b1 = (r >> 8) & 255, b2 = (r >> 16) & 255, b3 = r >> 24;           \
        if ((t) < 3)                                                                                   \
            TX512(W0, X, b0, 0);                                                                       \
        TX512(W1, X, b0, 1);                                                                           \
        TX512(W2, X, b1, 0);                                                                           \
        TX512(W3, X, b1, 1);                                                                           \
        TX512(W4, X, b2, 0);                                                                           \
        TX512(W5, X, b2, 1);                                                                           \
        TX512(W6, X, b3, 0);                                                                           \
        if ((t) == 3)                                                                                  \
            TX512(W7, X, b3, 1);                                                                       \
    }

/* the 4 steps of the group at xr (coefficients at p), then W0 (rows xr..xr+3) is final: stored, and
 * reloaded with rows xr+32..xr+35, the window's next zmm (the caller rotates the names) */
#define GROUP512(W0, W1, W2, W3, W4, W5, W6, W7, p, xr)                                                  \
    {                                                                                                  \
        STEP512(W0, W1, W2, W3, W4, W5, W6, W7, p, 0)                                                  \
        STEP512(W0, W1, W2, W3, W4, W5, W6, W7, p, 1)                                                  \
        STEP512(W0, W1, W2, W3, W4, W5, W6, W7, p, 2)                                                  \
        STEP512(W0, W1, W2, W3, W4, W5, W6, W7, p, 3)                                                  \
        _mm512_storeu_si512((void *)(xr), W0);                                                         \
        W0 = _mm512_loadu_si512((const void *)((xr) + 32));                                            \
    }

__attribute__((target("avx512f"))) static size_t convolve_avx512(blk *x, size_t size, const uint8_t *c) {
    if (size < 64)
        return 0;
    __m512i W0 = _mm512_loadu_si512((const void *)x), W1 = _mm512_loadu_si512((const void *)(x + 4)),
            W2 = _mm512_loadu_si512((const void *)(x + 8)), W3 = _mm512_loadu_si512((const void *)(x + 12)),
            W4 = _mm512_loadu_si512((const void *)(x + 16)), W5 = _mm512_loadu_si512((const void *)(x + 20)),
            W6 = _mm512_loadu_si512((const void *)(x + 24)), W7 = _mm512_loadu_si512((const void *)(x + 28));
    /* 32 steps (8 groups, the window's names rotated once round) per pass; the last group of the last
     * pass (rows n-4..n-1) loads rows n+28..n+31 <= size-1, and its steps reach at most row n+24 */
    const size_t n = (size - 32) & ~(size_t)31;
    for (size_t k = 0; k < n; k += 32) {
        blk *xr = x + k;
        const uint8_t *p = c + 3 * k;
        GROUP512(W0, W1, W2, W3, W4, W5, W6, W7, p, xr)
        GROUP512(W1, W2, W3, W4, W5, W6, W7, W0, p + 12, xr + 4)
        GROUP512(W2, W3, W4, W5, W6, W7, W0, W1, p + 24, xr + 8)
        GROUP512(W3, W4, W5, W6, W7, W0, W1, W2, p + 36, xr + 12)
        GROUP512(W4, W5, W6, W7, W0, W1, W2, W3, p + 48, xr + 16)
        GROUP512(W5, W6, W7, W0, W1, W2, W3, W4, p + 60, xr + 20)
        GROUP512(W6, W7, W0, W1, W2, W3, W4, W5, p + 72, xr + 24)
        GROUP512(W7, W0, W1, W2, W3, W4, W5, W6, p + 84, xr + 28)
    }
    /* the window, rows n..n+31, back to memory */
    _mm512_storeu_si512((void *)(x + n), W0);
    _mm512_storeu_si512((void *)(x + n + 4), W1);
    _mm512_storeu_si512((void *)(x + n + 8), W2);
    _mm512_storeu_si512((void *)(x + n + 12), W3);
    _mm512_storeu_si512((void *)(x + n + 16), W4);
    _mm512_storeu_si512((void *)(x + n + 20), W5);
    _mm512_storeu_si512((void *)(x + n + 24), W6);
    _mm512_storeu_si512((void *)(x + n + 28), W7);
    return n;
}

/* W ^= X & rowmask[b] (the 32-byte quarter `q`: rows 2q, 2q+1 of the 8) */
#define TX256(W, X, b, q) \
    W = _mm256_xor_si256(W, _mm256_and_si256(X, _mm256_load_si256((const __m256i *)&rowmask[b][4 * (q)])))

__attribute__((target("avx2"))) static size_t convolve_avx2(blk *x, size_t size, const uint8_t *c) {
    if (size < 32)
        return 0;
    __m256i Y[14];
    for (int k = 0; k < 14; k++)
        Y[k] = _mm256_loadu_si256((const __m256i *)(x + 2 * k));
    size_t i0 = 0;
    /* a group of 2 steps (rows i0, i0+1; window rows i0..i0+27) loads rows i0+28, i0+29 */
    for (; i0 + 30 <= size; i0 += 2) {
        for (int t = 0; t < 2; t++) {
            const uint32_t r = step_targets(c + 3 * (i0 + (size_t)t)) << (t + 1);
            const __m256i X = _mm256_permute4x64_epi64(Y[0], t ? 0xEE : 0x44);
            const unsigned b0 = r & 255, b1 = (r >> 8) & 255, b2 = (r >> 16) & 255, b3 = r >> 24;
            if (t == 0)
                TX256(Y[0], X, b0, 0);
            TX256(Y[1], X, b0, 1);
            TX256(Y[2], X, b0, 2);
            TX256(Y[3], X, b0, 3);
            TX256(Y[4], X, b1, 0);
            TX256(Y[5], X, b1, 1);
            TX256(Y[6], X, b1, 2);
            TX256(Y[7], X, b1, 3);
            TX256(Y[8], X, b2, 0);
            TX256(Y[9], X, b2, 1);
            TX256(Y[10], X, b2, 2);
            TX256(Y[11], X, b2, 3);
            TX256(Y[12], X, b3, 0);
            if (t == 1)
                TX256(Y[13], X, b3, 1);
        }
        _mm256_storeu_si256((__m256i *)(x + i0), Y[0]);
        for (int k = 0; k < 13; k++)
            Y[k] = Y[k + 1];
        Y[13] = _mm256_loadu_si256((const __m256i *)(x + i0 + 28));
    }
    for (int k = 0; k < 14; k++)
        _mm256_storeu_si256((__m256i *)(x + i0 + 2 * (size_t)k), Y[k]);
    return i0;
}
#endif /* HAVE_X86_SIMD */

/* chosen once in PyInit: the SIMD kernel (NULL: row by row) and its name */
static size_t (*convolve_simd)(blk *, size_t, const uint8_t *) = NULL;
static const char *simd_name = "scalar";

static void convolve(blk *x, size_t size, const uint8_t *coeff) {
    const size_t done = convolve_simd ? convolve_simd(x, size, coeff) : 0;
    convolve_rows(x, size, coeff, done);
}

/* exconv_encode(e, m, index, coeff1, coeff2, weight): in place, e[:m] = the dual encoding of e */
static PyObject *py_exconv_encode(PyObject *self, PyObject *args) {
    Py_buffer e, idx, c1, c2;
    Py_ssize_t m, weight;
    if (!PyArg_ParseTuple(args, "w*ny*y*y*n", &e, &m, &idx, &c1, &c2, &weight))
        return NULL;
    PyObject *ret = NULL;
    size_t n = (size_t)e.len / 16;
    if (e.len % 16 || m <= 0 || (size_t)m >= n || weight <= 0) {
        PyErr_SetString(PyExc_ValueError, "exconv_encode: e holds N 16-byte elements, 0 < m < N, weight > 0");
        goto done;
    }
    size_t size = n - (size_t)m;
    if ((size_t)idx.len != (size_t)m * (size_t)weight * 4 || (size_t)c1.len != 3 * size ||
        (size_t)c2.len != 3 * size) {
        PyErr_SetString(PyExc_ValueError, "exconv_encode: index must hold m*weight uint32, each coefficient "
                                          "string 3*(N-m) bytes");
        goto done;
    }
    {
        const uint32_t *ix = (const uint32_t *)idx.buf;
        for (size_t i = 0; i < (size_t)m * (size_t)weight; i++)
            if (ix[i] >= size) {
                PyErr_SetString(PyExc_ValueError, "exconv_encode: an expander index is out of range");
                goto done;
            }
        blk *x = (blk *)e.buf;
        blk *d = x + m;
        Py_BEGIN_ALLOW_THREADS convolve(d, size, (const uint8_t *)c1.buf);
        convolve(d, size, (const uint8_t *)c2.buf);
        /* random reads over the whole parity part (16 MB at 10^6 outputs): bound by the cache-line fetches,
         * which out-of-order execution already overlaps; prefetching rows 2..24 outputs ahead measured no faster */
        for (size_t i = 0; i < (size_t)m; i++) {
            uint64_t lo = x[i].lo, hi = x[i].hi;
            const uint32_t *r = ix + i * (size_t)weight;
            for (Py_ssize_t k = 0; k < weight; k++) {
                lo ^= d[r[k]].lo;
                hi ^= d[r[k]].hi;
            }
            x[i].lo = lo;
            x[i].hi = hi;
        }
        Py_END_ALLOW_THREADS
    }
    Py_INCREF(Py_None);
    ret = Py_None;
done:
    PyBuffer_Release(&e);
    PyBuffer_Release(&idx);
    PyBuffer_Release(&c1);
    PyBuffer_Release(&c2);
    return ret;
}

/* ------------------------------------------------------------------ GGM trees (AES-NI) */

#ifdef HAVE_X86
/* aes_key and aes_schedule: _aesni.h */

/* children of `count` nodes read from src[j] into dst[2j], dst[2j+1]: AES_k0(s) ^ s, AES_k1(s) ^ s.
 * Walks j downwards, so src and dst may be the same buffer (dst[2j] >= src[j]). */
__attribute__((target("aes,sse2"))) static void ggm_level(const aes_key *k0, const aes_key *k1, const blk *src,
                                                          blk *dst, size_t count) {
    size_t j = count;
    while (j >= 4) {
        j -= 4;
        __m128i s[4], a[4], b[4];
        for (int u = 0; u < 4; u++) {
            s[u] = _mm_loadu_si128((const __m128i *)&src[j + u]);
            a[u] = _mm_xor_si128(s[u], k0->k[0]);
            b[u] = _mm_xor_si128(s[u], k1->k[0]);
        }
        for (int r = 1; r < 10; r++)
            for (int u = 0; u < 4; u++) {
                a[u] = _mm_aesenc_si128(a[u], k0->k[r]);
                b[u] = _mm_aesenc_si128(b[u], k1->k[r]);
            }
        for (int u = 3; u >= 0; u--) {
            a[u] = _mm_xor_si128(_mm_aesenclast_si128(a[u], k0->k[10]), s[u]);
            b[u] = _mm_xor_si128(_mm_aesenclast_si128(b[u], k1->k[10]), s[u]);
            _mm_storeu_si128((__m128i *)&dst[2 * (j + u) + 1], b[u]);
            _mm_storeu_si128((__m128i *)&dst[2 * (j + u)], a[u]);
        }
    }
    while (j > 0) {
        j--;
        __m128i s = _mm_loadu_si128((const __m128i *)&src[j]);
        __m128i a = _mm_xor_si128(s, k0->k[0]), b = _mm_xor_si128(s, k1->k[0]);
        for (int r = 1; r < 10; r++) {
            a = _mm_aesenc_si128(a, k0->k[r]);
            b = _mm_aesenc_si128(b, k1->k[r]);
        }
        a = _mm_xor_si128(_mm_aesenclast_si128(a, k0->k[10]), s);
        b = _mm_xor_si128(_mm_aesenclast_si128(b, k1->k[10]), s);
        _mm_storeu_si128((__m128i *)&dst[2 * j + 1], b);
        _mm_storeu_si128((__m128i *)&dst[2 * j], a);
    }
}
#endif

static int have_aes = -1;

static int aes_ok(void) {
#ifdef HAVE_X86
    if (have_aes < 0) {
        __builtin_cpu_init();
        have_aes = __builtin_cpu_supports("aes") ? 1 : 0;
    }
    return have_aes;
#else
    return 0;
#endif
}

static inline void xor_into(blk *acc, const blk *x) {
    acc->lo ^= x->lo;
    acc->hi ^= x->hi;
}

/* ggm_expand(seeds, depth, key0, key1) -> (leaves: bytearray, sums: bytes): every tree's 2^depth leaves, and per
 * tree and level (1..depth) the XOR of its left (even) and of its right (odd) nodes */
static PyObject *py_ggm_expand(PyObject *self, PyObject *args) {
    Py_buffer seeds, key0, key1;
    int depth;
    if (!PyArg_ParseTuple(args, "y*iy*y*", &seeds, &depth, &key0, &key1))
        return NULL;
    PyObject *leaves = NULL, *sums = NULL, *ret = NULL;
#ifdef HAVE_X86
    if (!aes_ok()) {
        PyErr_SetString(PyExc_RuntimeError, "ggm_expand: this CPU has no AES instructions");
        goto done;
    }
    if (seeds.len % 16 || depth < 1 || depth > 30 || key0.len != 16 || key1.len != 16) {
        PyErr_SetString(PyExc_ValueError, "ggm_expand: 16-byte seeds, 1 <= depth <= 30, 16-byte keys");
        goto done;
    }
    {
        size_t trees = (size_t)seeds.len / 16, width = (size_t)1 << depth;
        leaves = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(trees * width * 16));
        sums = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(trees * (size_t)depth * 2 * 16));
        if (!leaves || !sums)
            goto done;
        blk *out = (blk *)PyByteArray_AS_STRING(leaves), *sm = (blk *)PyBytes_AS_STRING(sums);
        const blk *sd = (const blk *)seeds.buf;
        aes_key k0, k1;
        aes_schedule((const uint8_t *)key0.buf, &k0);
        aes_schedule((const uint8_t *)key1.buf, &k1);
        Py_BEGIN_ALLOW_THREADS for (size_t t = 0; t < trees; t++) {
            blk *tree = out + t * width;
            tree[0] = sd[t];
            for (int lv = 0; lv < depth; lv++) {
                size_t count = (size_t)1 << lv;
                ggm_level(&k0, &k1, tree, tree, count);
                blk l = {0, 0}, r = {0, 0};
                for (size_t j = 0; j < 2 * count; j += 2) {
                    xor_into(&l, &tree[j]);
                    xor_into(&r, &tree[j + 1]);
                }
                sm[(t * (size_t)depth + (size_t)lv) * 2] = l;
                sm[(t * (size_t)depth + (size_t)lv) * 2 + 1] = r;
            }
        }
        Py_END_ALLOW_THREADS
    }
    ret = PyTuple_Pack(2, leaves, sums);
#else
    PyErr_SetString(PyExc_RuntimeError, "ggm_expand: AES instructions are only used on x86");
#endif
done:
    Py_XDECREF(leaves);
    Py_XDECREF(sums);
    PyBuffer_Release(&seeds);
    PyBuffer_Release(&key0);
    PyBuffer_Release(&key1);
    return ret;
}

/* ggm_punctured(got, alpha, depth, key0, key1) -> leaves (a bytearray): every leaf of each tree but alpha's
 * (left zero), from got[t][lv] = the XOR of the level-(lv+1) nodes on the side off alpha's path */
static PyObject *py_ggm_punctured(PyObject *self, PyObject *args) {
    Py_buffer got, alpha, key0, key1;
    int depth;
    if (!PyArg_ParseTuple(args, "y*y*iy*y*", &got, &alpha, &depth, &key0, &key1))
        return NULL;
    PyObject *leaves = NULL;
#ifdef HAVE_X86
    size_t trees = (size_t)alpha.len / 8;
    if (!aes_ok()) {
        PyErr_SetString(PyExc_RuntimeError, "ggm_punctured: this CPU has no AES instructions");
        goto done;
    }
    if (alpha.len % 8 || depth < 1 || depth > 30 || key0.len != 16 || key1.len != 16 ||
        (size_t)got.len != trees * (size_t)depth * 16) {
        PyErr_SetString(PyExc_ValueError, "ggm_punctured: int64 alpha per tree, depth 16-byte sums per tree");
        goto done;
    }
    {
        const int64_t *al = (const int64_t *)alpha.buf;
        size_t width = (size_t)1 << depth;
        for (size_t t = 0; t < trees; t++)
            if (al[t] < 0 || (size_t)al[t] >= width) {
                PyErr_SetString(PyExc_ValueError, "ggm_punctured: a punctured position is out of range");
                goto done;
            }
        leaves = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(trees * width * 16));
        if (!leaves)
            goto done;
        blk *out = (blk *)PyByteArray_AS_STRING(leaves);
        const blk *g = (const blk *)got.buf;
        aes_key k0, k1;
        aes_schedule((const uint8_t *)key0.buf, &k0);
        aes_schedule((const uint8_t *)key1.buf, &k1);
        Py_BEGIN_ALLOW_THREADS for (size_t t = 0; t < trees; t++) {
            blk *tree = out + t * width;
            const size_t a = (size_t)al[t];
            tree[0].lo = tree[0].hi = 0;
            for (int lv = 1; lv <= depth; lv++) {
                size_t count = (size_t)1 << (lv - 1);
                size_t parent = a >> (depth - lv + 1);
                ggm_level(&k0, &k1, tree, tree, count);
                tree[2 * parent].lo = tree[2 * parent].hi = 0;
                tree[2 * parent + 1].lo = tree[2 * parent + 1].hi = 0;
                size_t off = 1 - ((a >> (depth - lv)) & 1);
                blk s = g[t * (size_t)depth + (size_t)(lv - 1)];
                for (size_t j = off; j < 2 * count; j += 2)
                    xor_into(&s, &tree[j]);
                tree[2 * parent + off] = s;
            }
        }
        Py_END_ALLOW_THREADS
    }
#else
    PyErr_SetString(PyExc_RuntimeError, "ggm_punctured: AES instructions are only used on x86");
#endif
done:
    PyBuffer_Release(&got);
    PyBuffer_Release(&alpha);
    PyBuffer_Release(&key0);
    PyBuffer_Release(&key1);
    return leaves;
}

static PyObject *py_has_aes(PyObject *self, PyObject *noargs) { return PyBool_FromLong(aes_ok()); }

static PyObject *py_has_clmul(PyObject *self, PyObject *noargs) {
#ifdef HAVE_X86
    if (have_clmul < 0) {
        __builtin_cpu_init();
        have_clmul = __builtin_cpu_supports("pclmul") ? 1 : 0;
    }
    return PyBool_FromLong(have_clmul);
#else
    Py_RETURN_FALSE;
#endif
}

static PyObject *py_simd(PyObject *self, PyObject *noargs) { return PyUnicode_FromString(simd_name); }

static PyMethodDef methods[] = {
    {"gf128_mul", py_gf128_mul, METH_VARARGS, "Elementwise (or by one scalar) product in GF(2^128)."},
    {"exconv_encode", py_exconv_encode, METH_VARARGS, "Dual encoding of the expand-convolute code, in place."},
    {"has_clmul", py_has_clmul, METH_NOARGS, "Whether the CPU's carry-less multiply is used."},
    {"simd", py_simd, METH_NOARGS,
     "simd() -> 'avx512', 'avx2' or 'scalar': how exconv_encode convolves here\n"
     "(chosen at import from the CPU; VFLCRYPTO_SIMD=0 at import forces 'scalar', =avx2 at most 'avx2')."},
    {"ggm_expand", py_ggm_expand, METH_VARARGS, "GGM trees from their seeds: leaves and level sums."},
    {"ggm_punctured", py_ggm_punctured, METH_VARARGS, "GGM trees but one leaf each, from the level sums."},
    {"has_aes", py_has_aes, METH_NOARGS, "Whether the CPU's AES instructions are used for the GGM trees."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_vole", "GF(2^128) and the expand-convolute code.",
                                    -1, methods};

PyMODINIT_FUNC PyInit__vole(void) {
    int cap = simd_cap(); /* _simd.h: VFLCRYPTO_SIMD */
#if HAVE_X86_SIMD
    __builtin_cpu_init();
    /* __builtin_cpu_supports also checks that the OS saves the vector registers (XCR0) */
    if (cap >= SIMD_AVX512 && __builtin_cpu_supports("avx512f"))
        convolve_simd = convolve_avx512, simd_name = "avx512";
    else if (cap >= SIMD_AVX2 && __builtin_cpu_supports("avx2"))
        convolve_simd = convolve_avx2, simd_name = "avx2";
    if (convolve_simd)
        rowmask_init();
#endif
    (void)cap;
    return PyModule_Create(&module);
}
