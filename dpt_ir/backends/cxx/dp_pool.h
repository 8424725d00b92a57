// dp_pool.h: the CPU thread pool's native side (see tasks.py, which owns its threads).
//
// Assumes: a CPU build on Linux (x86-64 or AArch64) by Warp's clang and JIT, which resolve
// `syscall` and `sched_yield` from the C library; one dispatcher at a time per pool (tasks.py
// holds a lock around dp_pool_run); every part is a Warp CPU entry point
// `void fn(bounds*, args*)` that returns (the kernels report errors through status flags).
// Guarantees: dp_pool_run runs part 0 on the calling thread and part w on worker w, and returns
// once every part has returned (the parts' writes are visible to the caller: release/acquire
// on `pending`); a worker waits for work by spinning `spin` times, then sleeps on a futex, so a
// launch that follows another within microseconds wakes no thread; dp_pool_work returns after
// dp_pool_stop. Which thread runs a part never changes what the part computes.
#ifndef DP_POOL_H
#define DP_POOL_H

extern "C" long syscall(long number, ...);
extern "C" int sched_yield(void);

#if defined(__x86_64__)
#define DP_SYS_FUTEX 202
#define DP_PAUSE() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define DP_SYS_FUTEX 98
#define DP_PAUSE() __asm__ __volatile__("yield")
#endif

typedef void (*dp_entry_t)(void*, void*);
struct dp_part { dp_entry_t fn; void* bounds; void* args; };

#ifdef DP_SYS_FUTEX
#define DP_FUTEX_WAIT 128  // FUTEX_WAIT | FUTEX_PRIVATE_FLAG
#define DP_FUTEX_WAKE 129  // FUTEX_WAKE | FUTEX_PRIVATE_FLAG

// One cache line per field that another thread writes, so spinning readers share nothing else.
struct dp_pool_t {
    alignas(64) int gen;  // dispatch generation: the futex word the workers wait on
    int stop;
    int workers;  // pool threads; the dispatcher runs part 0 itself
    int spin;  // idle polls before a worker sleeps (and before a dispatcher yields)
    int nparts;
    const dp_part* parts;
    alignas(64) int pending;  // workers that have not finished this generation
    alignas(64) int sleepers;  // workers asleep (or about to be) on `gen`
};

extern "C" WP_API int dp_pool_size(void) { return (int)sizeof(dp_pool_t); }

extern "C" WP_API void dp_pool_init(dp_pool_t* p, int workers, int spin) {
    p->gen = 0; p->stop = 0; p->workers = workers; p->spin = spin;
    p->nparts = 0; p->parts = (const dp_part*)0; p->pending = 0; p->sleepers = 0;
}

static void dp_pool_wake(dp_pool_t* p) {
    // Dekker pair with the sleeper's increment-then-check: either it sees the new gen or we see it.
    if (__atomic_load_n(&p->sleepers, __ATOMIC_SEQ_CST) > 0)
        syscall(DP_SYS_FUTEX, &p->gen, DP_FUTEX_WAKE, 0x7fffffff, (void*)0, (void*)0, 0);
}

extern "C" WP_API void dp_pool_run(dp_pool_t* p, const dp_part* parts, int n) {
    p->parts = parts;
    p->nparts = n;
    __atomic_store_n(&p->pending, p->workers, __ATOMIC_RELAXED);
    __atomic_add_fetch(&p->gen, 1, __ATOMIC_SEQ_CST);  // publishes the three stores above
    dp_pool_wake(p);
    parts[0].fn(parts[0].bounds, parts[0].args);
    for (int k = 0; __atomic_load_n(&p->pending, __ATOMIC_ACQUIRE) != 0; ++k) {
        if (k < p->spin) DP_PAUSE(); else sched_yield();  // a descheduled worker gets the core
    }
}

extern "C" WP_API void dp_pool_work(dp_pool_t* p, int w) {
    int seen = 0;  // the generation a new pool starts at: a dispatch before this thread runs is not lost
    for (;;) {
        int g = __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE);
        for (int k = 0; g == seen && k < p->spin; ++k) {
            DP_PAUSE();
            g = __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE);
        }
        if (g == seen) {
            __atomic_add_fetch(&p->sleepers, 1, __ATOMIC_SEQ_CST);
            while ((g = __atomic_load_n(&p->gen, __ATOMIC_SEQ_CST)) == seen)
                syscall(DP_SYS_FUTEX, &p->gen, DP_FUTEX_WAIT, seen, (void*)0, (void*)0, 0);
            __atomic_sub_fetch(&p->sleepers, 1, __ATOMIC_SEQ_CST);
        }
        seen = g;
        if (__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) return;
        if (w < p->nparts) p->parts[w].fn(p->parts[w].bounds, p->parts[w].args);
        __atomic_sub_fetch(&p->pending, 1, __ATOMIC_RELEASE);
    }
}

extern "C" WP_API void dp_pool_stop(dp_pool_t* p) {
    __atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&p->gen, 1, __ATOMIC_SEQ_CST);
    syscall(DP_SYS_FUTEX, &p->gen, DP_FUTEX_WAKE, 0x7fffffff, (void*)0, (void*)0, 0);
}
#endif  // DP_SYS_FUTEX

// dp_loop_run: a compiled loop's whole sequence of steps in one native call (runtime/loop_native.py
// builds the table once per loop and direction). Each op is one of: 0 call entry point x(y, z);
// 1 run the n = y parts at x, on `pool` when given (else in order here: the parts decide which
// thread runs a task, never what it computes); 2 store the pointer bases[y] + z (y < 0: z itself)
// into the argument field at x; 3 copy n bytes from bases[z] + w to bases[x] + y. `bases` holds this
// call's input addresses, so one table serves every call.
struct dp_loop_op { long long kind, x, y, z, w, n; };

static inline char* dp_loop_at(const long long* bases, long long base, long long off) {
    return (char*)((base < 0 ? 0 : bases[base]) + off);
}

// Copies by hand, never through memcpy: every generated module holds this header, and its tests
// hold that kernels call no memory-library function (a memcpy call there is a block buffer copy,
// tests/backend/test_vectorised.py); `no_builtin` keeps clang from turning the loops into one.
__attribute__((no_builtin("memcpy"))) static void dp_loop_copy(char* d, const char* s, long long n) {
    long long k = 0;
    if ((((unsigned long long)d | (unsigned long long)s) & 7) == 0)
        for (; k + 8 <= n; k += 8) *(long long*)(d + k) = *(const long long*)(s + k);
    for (; k < n; ++k) d[k] = s[k];
}

extern "C" WP_API __attribute__((no_builtin("memcpy"))) void dp_loop_run(const dp_loop_op* ops, long long count, const long long* bases, void* pool) {
    for (long long k = 0; k < count; ++k) {
        const dp_loop_op& op = ops[k];
        if (op.kind == 0) {
            ((dp_entry_t)op.x)((void*)op.y, (void*)op.z);
        } else if (op.kind == 1) {
            const dp_part* parts = (const dp_part*)op.x;
#ifdef DP_SYS_FUTEX
            if (pool) { dp_pool_run((dp_pool_t*)pool, parts, (int)op.y); continue; }
#endif
            for (int j = 0; j < (int)op.y; ++j) parts[j].fn(parts[j].bounds, parts[j].args);
        } else if (op.kind == 2) {
            *(char**)op.x = dp_loop_at(bases, op.y, op.z);
        } else {
            dp_loop_copy(dp_loop_at(bases, op.x, op.y), dp_loop_at(bases, op.z, op.w), op.n);
        }
    }
}
#endif  // DP_POOL_H
