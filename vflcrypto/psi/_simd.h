/*
 * How wide a SIMD path a C extension may take: the cap that VFLCRYPTO_SIMD sets at import. Each module
 * then asks the CPU (__builtin_cpu_supports, which also checks that the OS saves the vector registers)
 * for the widest path under the cap, and names it in its simd().
 */
#ifndef VFLCRYPTO_SIMD_H
#define VFLCRYPTO_SIMD_H

#include <stdlib.h>
#include <string.h>

enum { SIMD_SCALAR = 0, SIMD_AVX2 = 1, SIMD_AVX512 = 2 };

/* VFLCRYPTO_SIMD=0 (or "scalar"): the portable C only; "avx2": at most AVX2 (so the tests can check the
 * AVX2 path on an AVX-512 machine too); unset or anything else: the best there is */
static inline int simd_cap(void) {
    const char *env = getenv("VFLCRYPTO_SIMD");
    if (env && (strcmp(env, "0") == 0 || strcmp(env, "scalar") == 0))
        return SIMD_SCALAR;
    if (env && strcmp(env, "avx2") == 0)
        return SIMD_AVX2;
    return SIMD_AVX512;
}

#endif /* VFLCRYPTO_SIMD_H */
