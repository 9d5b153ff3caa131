/* Coverage of a GCC-built extension, fed to atheris's libFuzzer.
 *
 * There is no clang here, so the decoders cannot be built with -fsanitize=fuzzer-no-link. GCC has the two
 * older SanitizerCoverage modes instead: -fsanitize-coverage=trace-pc (a call at every basic block) and
 * trace-cmp (a call at every comparison). This file, compiled WITHOUT those flags and linked into the same
 * shared object as the decoders, turns them into what libFuzzer reads:
 *
 * - trace-pc: each call marks the edge (previous block, this block), hashed AFL-style into 64 Ki 8-bit
 *   counters, registered with libFuzzer as an inline-8bit-counters module (with a matching PC table).
 * - trace-cmp: forwarded, by a tail call that keeps the caller's return address, to libFuzzer's own
 *   handlers, which learn the compared constants (table of recent compares, value profile).
 *
 * libFuzzer is found by path (BUDGETSCOPE_FUZZ_LIBFUZZER, set by fuzz/run.py to atheris's
 * core_with_libfuzzer module, already loaded when this library loads), never by a global symbol look-up:
 * the preloaded ASan runtime defines weak no-op versions of the same functions, and would win it. Without
 * the variable (a regression test loading the sanitizer build) the calls cost a counter update and nothing
 * is registered.
 *
 * Every definition is hidden, so the decoders' calls bind here at link time, not through the PLT.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

#define HIDDEN __attribute__((visibility("hidden")))
#define N_COUNTERS (1u << 16)

static uint8_t counters[N_COUNTERS] __attribute__((aligned(64)));
static uintptr_t pc_table[2 * N_COUNTERS]; /* (pc, flags) pairs; flags 0: none is a function entry */
static __thread uintptr_t prev_block;

HIDDEN void __sanitizer_cov_trace_pc(void) {
    uintptr_t pc = (uintptr_t)__builtin_return_address(0);
    uintptr_t block = (pc ^ (pc >> 17)) * 0x9E3779B97F4A7C15ull >> 40;
    counters[(block ^ prev_block) & (N_COUNTERS - 1)]++;
    prev_block = block >> 1; /* A->B and B->A differ */
}

typedef void (*Cmp1)(uint8_t, uint8_t);
typedef void (*Cmp2)(uint16_t, uint16_t);
typedef void (*Cmp4)(uint32_t, uint32_t);
typedef void (*Cmp8)(uint64_t, uint64_t);
typedef void (*Switch)(uint64_t, uint64_t *);

static Cmp1 cmp1, const_cmp1;
static Cmp2 cmp2, const_cmp2;
static Cmp4 cmp4, const_cmp4;
static Cmp8 cmp8, const_cmp8;
static Switch switch_;

HIDDEN void __sanitizer_cov_trace_cmp1(uint8_t a, uint8_t b) { if (cmp1) cmp1(a, b); }
HIDDEN void __sanitizer_cov_trace_cmp2(uint16_t a, uint16_t b) { if (cmp2) cmp2(a, b); }
HIDDEN void __sanitizer_cov_trace_cmp4(uint32_t a, uint32_t b) { if (cmp4) cmp4(a, b); }
HIDDEN void __sanitizer_cov_trace_cmp8(uint64_t a, uint64_t b) { if (cmp8) cmp8(a, b); }
HIDDEN void __sanitizer_cov_trace_const_cmp1(uint8_t a, uint8_t b) { if (const_cmp1) const_cmp1(a, b); }
HIDDEN void __sanitizer_cov_trace_const_cmp2(uint16_t a, uint16_t b) { if (const_cmp2) const_cmp2(a, b); }
HIDDEN void __sanitizer_cov_trace_const_cmp4(uint32_t a, uint32_t b) { if (const_cmp4) const_cmp4(a, b); }
HIDDEN void __sanitizer_cov_trace_const_cmp8(uint64_t a, uint64_t b) { if (const_cmp8) const_cmp8(a, b); }
HIDDEN void __sanitizer_cov_trace_switch(uint64_t v, uint64_t *cases) { if (switch_) switch_(v, cases); }
/* libFuzzer has no handlers for floating-point compares */
HIDDEN void __sanitizer_cov_trace_cmpf(float a, float b) { (void)a; (void)b; }
HIDDEN void __sanitizer_cov_trace_cmpd(double a, double b) { (void)a; (void)b; }

__attribute__((constructor)) static void attach(void) {
    const char *path = getenv("BUDGETSCOPE_FUZZ_LIBFUZZER");
    if (!path || !*path) return;
    void *lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (!lib) return;
    void (*counters_init)(uint8_t *, uint8_t *) = (void (*)(uint8_t *, uint8_t *))dlsym(lib, "__sanitizer_cov_8bit_counters_init");
    void (*pcs_init)(const uintptr_t *, const uintptr_t *) =
        (void (*)(const uintptr_t *, const uintptr_t *))dlsym(lib, "__sanitizer_cov_pcs_init");
    if (!counters_init || !pcs_init) return;
    for (uintptr_t k = 0; k < N_COUNTERS; k++) pc_table[2 * k] = (uintptr_t)&counters[k];
    counters_init(counters, counters + N_COUNTERS);
    pcs_init(pc_table, pc_table + 2 * N_COUNTERS);
    cmp1 = (Cmp1)dlsym(lib, "__sanitizer_cov_trace_cmp1");
    cmp2 = (Cmp2)dlsym(lib, "__sanitizer_cov_trace_cmp2");
    cmp4 = (Cmp4)dlsym(lib, "__sanitizer_cov_trace_cmp4");
    cmp8 = (Cmp8)dlsym(lib, "__sanitizer_cov_trace_cmp8");
    const_cmp1 = (Cmp1)dlsym(lib, "__sanitizer_cov_trace_const_cmp1");
    const_cmp2 = (Cmp2)dlsym(lib, "__sanitizer_cov_trace_const_cmp2");
    const_cmp4 = (Cmp4)dlsym(lib, "__sanitizer_cov_trace_const_cmp4");
    const_cmp8 = (Cmp8)dlsym(lib, "__sanitizer_cov_trace_const_cmp8");
    switch_ = (Switch)dlsym(lib, "__sanitizer_cov_trace_switch");
}
