// x86 intrinsics for the CPU kernels, included once here so the GCC 12 workaround lives in one
// place. Kernels use GCC/Clang vector extensions and reach for intrinsics only where codegen
// needs pinning; on targets without AVX nothing is included.
#pragma once

#if defined(__AVX__) || defined(__AVX512F__)
// GCC 12's AVX-512 headers trip its own -Wmaybe-uninitialized (_mm512_undefined_*, GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
