/*
 * Memory and threads for ember-cpu.
 *
 * Allocator
 *   Every pointer handed out is 64-byte aligned (one cache line, one AVX-512 vector) and is
 *   preceded by a 64-byte block_header that records its size, so ember_cpu_free needs no size.
 *   - Small blocks (< 128 KiB) come from posix_memalign and go straight back to libc on free:
 *     glibc's arenas recycle them cheaply.  Larger ones glibc maps, unmaps and trims itself
 *     (its mmap and trim thresholds), so a block of that size freed and asked for again page
 *     faults afresh: in the demo's training step a 32x16x8x8 conv weight gradient, whose
 *     buffers are 18-600 KiB, took 720-830 us instead of 390-410.
 *   - Large blocks (>= 128 KiB) are mmapped directly.  A fresh mapping costs one page fault per
 *     4 KiB on first touch (~16k faults for 64 MiB), which dominates a simple kernel over the
 *     block, so freed large blocks go to a bounded reuse cache instead of munmap and are handed
 *     out again for a request of a similar size.  Capacities are rounded up to a size class
 *     (at most 1/8 above the request) so that requests of the same size share a class, and a
 *     request accepts any cached block no more than 1/8 larger than itself (best fit).
 *     The cache holds at most EMBER_CPU_CACHE_BYTES bytes (default 1 GiB, 0 disables it);
 *     inserting beyond that evicts the least recently cached blocks.
 *   Statistics are kept with atomics; the cache list is guarded by a mutex (only large
 *   allocations, which are rare and expensive anyway, take it).  Live bytes count what callers
 *   asked for; cached blocks count separately, at their full (rounded-up) capacity.
 *
 * Threads
 *   ONE threading layer: OpenMP.  The elementwise and reduction kernels are OpenMP loops, and
 *   OpenBLAS (a pthreads build) is pinned to one thread at load time; matmul.c splits gemm work
 *   across OpenMP threads itself, each thread calling single-threaded BLAS on its slice.
 *   Letting OpenBLAS run its own pool beside OpenMP's oversubscribes the cores: both pools spin
 *   after their work, and alternating a sgemm with an OpenMP loop ran 4-6x slower (numbers in
 *   plugins/cpu/NOTES-threads.md).  The count set here is process-wide, and every ember parallel
 *   region passes it (through common.h's ember_threads_for) as its num_threads.  OpenMP's own
 *   default only seeds it at load: omp_set_num_threads would change that default for the OS
 *   thread that called it alone, and kernels run on whichever Python thread calls them.
 */
#include <errno.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cblas.h>

#include "common.h"
#include "ember_cpu.h"

/* ---- allocator ------------------------------------------------------------------------------ */

#define ALIGNMENT 64
#define LARGE_MIN ((int64_t)1 << 17)
#define PAGE 4096
/* From this size on a block asks for 2 MiB pages (transparent huge pages, where the kernel keeps
 * them for regions that ask: "madvise" mode), as numpy does for its arrays: a stream over 64 MiB
 * crosses 16384 4 KiB pages, and the hardware prefetchers stop at each. */
#define HUGE_MIN ((int64_t)4 << 20)
#define HEADER_MAGIC 0x656d626572627566ull   /* "emberbuf" */
#define FREED_MAGIC 0x6672656564667265ull    /* written on free: catches double frees */
#define DEFAULT_CACHE_BYTES ((int64_t)1 << 30)

typedef struct block_header {
    uint64_t magic;
    int64_t nbytes;                    /* what the caller asked for                         */
    int64_t capacity;                  /* usable bytes from the returned pointer            */
    struct block_header *prev, *next;  /* reuse-cache links while cached (large only)      */
    int32_t large;                     /* 1: mmapped, the mapping starts PAGE before data  */
    char pad[ALIGNMENT - 44];
} block_header;

_Static_assert(sizeof(block_header) == ALIGNMENT, "the header must keep data 64-byte aligned");

static atomic_int_least64_t live_bytes, peak_bytes, live_count;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static block_header *cache_head, *cache_tail; /* head = most recently cached */
static int64_t cache_bytes;                   /* guarded by cache_lock           */
static int64_t cache_limit = DEFAULT_CACHE_BYTES;

static inline block_header *header_of(void *ptr) { return (block_header *)ptr - 1; }

static void note_alloc(int64_t nbytes) {
    int64_t now = atomic_fetch_add(&live_bytes, nbytes) + nbytes;
    int64_t peak = atomic_load(&peak_bytes);
    while (now > peak && !atomic_compare_exchange_weak(&peak_bytes, &peak, now)) {
    }
    atomic_fetch_add(&live_count, 1);
}

static void note_free(int64_t nbytes) {
    atomic_fetch_sub(&live_bytes, nbytes);
    atomic_fetch_sub(&live_count, 1);
}

/* Size class of a large request: rounded up to 1/8 of its power of two (never below a page),
 * so the rounding wastes at most 12.5% and equal requests land in equal classes. */
static int64_t large_class(int64_t nbytes) {
    int64_t pow2 = (int64_t)1 << (63 - __builtin_clzll((uint64_t)nbytes));
    int64_t granule = pow2 / 8 > PAGE ? pow2 / 8 : PAGE;
    return (nbytes + granule - 1) / granule * granule;
}

/* The mapping of a large block: one page in front holds the header in its last 64 bytes, so
 * the data itself starts page-aligned and a power-of-two request is not pushed up a class. */
static void *map_large(int64_t capacity) {
    char *map = mmap(NULL, (size_t)(capacity + PAGE), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    if (capacity >= HUGE_MIN) madvise(map, (size_t)(capacity + PAGE), MADV_HUGEPAGE);
#endif
    block_header *h = (block_header *)(map + PAGE) - 1;
    h->capacity = capacity;
    h->large = 1;
    return map + PAGE;
}

static void unmap_large(block_header *h) {
    munmap((char *)(h + 1) - PAGE, (size_t)(h->capacity + PAGE));
}

static void cache_unlink(block_header *h) {
    if (h->prev) h->prev->next = h->next; else cache_head = h->next;
    if (h->next) h->next->prev = h->prev; else cache_tail = h->prev;
    h->prev = h->next = NULL;
    cache_bytes -= h->capacity;
}

/* Best fit among cached blocks of capacity in [nbytes, nbytes * 9/8]; NULL when none. */
static block_header *cache_take(int64_t nbytes) {
    block_header *best = NULL;
    int64_t most = nbytes + nbytes / 8;
    pthread_mutex_lock(&cache_lock);
    for (block_header *h = cache_head; h; h = h->next)
        if (h->capacity >= nbytes && h->capacity <= most && (!best || h->capacity < best->capacity))
            best = h;
    if (best) cache_unlink(best);
    pthread_mutex_unlock(&cache_lock);
    return best;
}

/* Keeps a freed large block for reuse, evicting the oldest blocks to stay within the limit.
 * The evicted blocks are unmapped after the lock is released. */
static void cache_put(block_header *h) {
    block_header *evicted = NULL;
    pthread_mutex_lock(&cache_lock);
    if (h->capacity > cache_limit) {
        evicted = h;
        h->next = NULL;
    } else {
        while (cache_bytes + h->capacity > cache_limit) {
            block_header *old = cache_tail;
            cache_unlink(old);
            old->next = evicted;
            evicted = old;
        }
        h->prev = NULL;
        h->next = cache_head;
        if (cache_head) cache_head->prev = h; else cache_tail = h;
        cache_head = h;
        cache_bytes += h->capacity;
    }
    pthread_mutex_unlock(&cache_lock);
    while (evicted) {
        block_header *next = evicted->next;
        unmap_large(evicted);
        evicted = next;
    }
}

static void *alloc_large(int64_t nbytes) {
    block_header *h = cache_take(nbytes);
    if (h) return h + 1;
    int64_t capacity = large_class(nbytes);
    void *data = map_large(capacity);
    if (!data) {            /* the cache may be what exhausted memory: give it back and retry */
        ember_cpu_empty_cache();
        data = map_large(capacity);
    }
    return data;
}

static void *alloc_small(int64_t nbytes) {
    void *mem = NULL;
    if (posix_memalign(&mem, ALIGNMENT, (size_t)(ALIGNMENT + nbytes)) != 0) return NULL;
    block_header *h = mem;
    h->capacity = nbytes;
    h->large = 0;
    return h + 1;
}

void *ember_cpu_alloc(int64_t nbytes) {
    if (nbytes < 0 || nbytes > INT64_MAX / 2) return NULL;
    /* alloc(0) still gets its own small block: a unique, freeable, non-NULL pointer. */
    void *data = nbytes >= LARGE_MIN ? alloc_large(nbytes) : alloc_small(nbytes);
    if (!data) return NULL;
    block_header *h = header_of(data);
    h->magic = HEADER_MAGIC;
    h->nbytes = nbytes;
    h->prev = h->next = NULL;
    note_alloc(nbytes);
    return data;
}

void ember_cpu_free(void *ptr) {
    if (!ptr) return;
    block_header *h = header_of(ptr);
    /* A pointer this allocator did not hand out (or a double free) is a core bug; leaking it
     * is safer than corrupting the heap. */
    if (h->magic != HEADER_MAGIC) return;
    h->magic = FREED_MAGIC;
    note_free(h->nbytes);
    if (h->large) cache_put(h);
    else free(h);
}

void ember_cpu_memory_stats(int64_t *stats) {
    if (!stats) return;
    stats[0] = atomic_load(&live_bytes);
    stats[1] = atomic_load(&peak_bytes);
    pthread_mutex_lock(&cache_lock);
    stats[2] = cache_bytes;
    pthread_mutex_unlock(&cache_lock);
    stats[3] = atomic_load(&live_count);
}

void ember_cpu_empty_cache(void) {
    pthread_mutex_lock(&cache_lock);
    block_header *list = cache_head;
    cache_head = cache_tail = NULL;
    cache_bytes = 0;
    pthread_mutex_unlock(&cache_lock);
    while (list) {
        block_header *next = list->next;
        unmap_large(list);
        list = next;
    }
}

/* ---- threads -------------------------------------------------------------------------------- */

static atomic_int num_threads = 1;

void ember_cpu_set_num_threads(int n) {
    if (n < 1) n = 1;
    atomic_store(&num_threads, n);
    scipy_openblas_set_num_threads(1); /* ember drives BLAS from its own OpenMP threads */
}

int ember_cpu_get_num_threads(void) { return atomic_load(&num_threads); }

/* ---- load-time setup ------------------------------------------------------------------------ */

/* The non-negative integer in environment variable `name`, or `fallback` when it is unset or
 * unparsable (a knob set wrong keeps the tuned default rather than failing the import). */
int64_t ember_cpu_env_int64(const char *name, int64_t fallback) {
    const char *s = getenv(name);
    if (!s || !*s) return fallback;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < 0) return fallback;
    return (int64_t)v;
}

static int64_t thread_work = EMBER_THREAD_WORK_DEFAULT;

int64_t ember_cpu_thread_work(void) { return thread_work; }

/* Runs when the extension module is loaded, before any entry point: the default thread count
 * is OpenMP's (OMP_NUM_THREADS, else the number of cores), and OpenBLAS goes to one thread
 * before it ever wakes its own pool. */
__attribute__((constructor)) static void ember_cpu_runtime_init(void) {
    cache_limit = ember_cpu_env_int64("EMBER_CPU_CACHE_BYTES", DEFAULT_CACHE_BYTES);
    int64_t work = ember_cpu_env_int64("EMBER_CPU_THREAD_WORK", EMBER_THREAD_WORK_DEFAULT);
    thread_work = work < 1 ? 1 : work;
    ember_cpu_set_num_threads(omp_get_max_threads());
}
