/*
 * eg_host.h -- host mode (EG_HOST): runs a kernel over an emulated grid on one CPU thread, so
 * that g++ compiles and CI runs the very code the GPU runs.
 *
 * Blocks run one after another; the threads of a block run as cooperative fibers (ucontext), so
 * EG_SYNC_THREADS() (a block barrier) and the warp shuffles (EG_SHFL_DOWN / EG_SHFL_XOR: each
 * lane publishes its value, the warp meets, each lane reads its partner's, the warp meets again)
 * behave as on a GPU; __shared__ variables are function statics, shared by the block's fibers.
 * blockIdx, threadIdx, blockDim and gridDim are thread-locals the scheduler sets before it
 * resumes a fiber.  A barrier that some thread of the block never reaches aborts with a message
 * (on a GPU it would hang).
 */
#ifndef EG_HOST_H
#define EG_HOST_H

#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

struct eg_dim3 {
    unsigned x, y, z;
};
static thread_local eg_dim3 threadIdx, blockIdx, blockDim, gridDim;

#define EG_HOST_MAX_BLOCK 1024
#define EG_HOST_STACK (128 * 1024)

enum { EG_FIBER_RUNNABLE, EG_FIBER_AT_BLOCK_BARRIER, EG_FIBER_AT_WARP_BARRIER, EG_FIBER_DONE };

struct eg_fiber {
    ucontext_t context;
    int state;
};

struct eg_host_block {
    ucontext_t scheduler;
    eg_fiber fibers[EG_HOST_MAX_BLOCK];
    unsigned current;
    unsigned at_block_barrier;
    unsigned at_warp_barrier[EG_HOST_MAX_BLOCK / EG_WARP_SIZE];
    unsigned char exchange[EG_HOST_MAX_BLOCK][16];   /* one shuffle slot per thread */
    void (*body)(void *);
    void *closure;
};
static thread_local eg_host_block *eg_host;

static void eg_host_fiber_main() { eg_host->body(eg_host->closure); }

/* Wait until every thread of the scope (1: the block, 0: the caller's warp) has arrived. */
static void eg_host_barrier(bool block_scope)
{
    eg_host_block *h = eg_host;
    unsigned me = h->current, warp = me / EG_WARP_SIZE;
    unsigned first = block_scope ? 0 : warp * EG_WARP_SIZE;
    unsigned last = block_scope ? blockDim.x : (first + EG_WARP_SIZE < blockDim.x ? first + EG_WARP_SIZE : blockDim.x);
    unsigned *arrived = block_scope ? &h->at_block_barrier : &h->at_warp_barrier[warp];
    int waiting = block_scope ? EG_FIBER_AT_BLOCK_BARRIER : EG_FIBER_AT_WARP_BARRIER;
    if (++*arrived == last - first) {   /* the last to arrive releases the others */
        *arrived = 0;
        for (unsigned t = first; t < last; t++)
            if (h->fibers[t].state == waiting) h->fibers[t].state = EG_FIBER_RUNNABLE;
        return;
    }
    h->fibers[me].state = waiting;
    swapcontext(&h->fibers[me].context, &h->scheduler);
}

template <class T> static T eg_host_shuffle(T value, unsigned lane_of(unsigned lane, unsigned arg), unsigned arg)
{
    static_assert(sizeof(T) <= 16, "a shuffled value fits one slot");
    eg_host_block *h = eg_host;
    unsigned me = h->current, base = me - me % EG_WARP_SIZE, lane = lane_of(me % EG_WARP_SIZE, arg);
    memcpy(h->exchange[me], &value, sizeof(T));
    eg_host_barrier(false);
    T result = value;
    if (lane < EG_WARP_SIZE && base + lane < blockDim.x) memcpy(&result, h->exchange[base + lane], sizeof(T));
    eg_host_barrier(false);
    return result;
}
static inline unsigned eg_lane_down(unsigned lane, unsigned delta) { return lane + delta; }
static inline unsigned eg_lane_xor(unsigned lane, unsigned mask) { return lane ^ mask; }

#define EG_SHFL_DOWN(v, delta) eg_host_shuffle((v), eg_lane_down, (unsigned)(delta))
#define EG_SHFL_XOR(v, mask) eg_host_shuffle((v), eg_lane_xor, (unsigned)(mask))
#define EG_SYNC_THREADS() eg_host_barrier(true)

template <class F> static void eg_host_call(void *closure) { (*(F *)closure)(); }

/* Run `body` (the kernel called with its arguments) over grid x block threads. */
template <class F> static void eg_host_launch(unsigned grid, unsigned block, F body)
{
    if (grid == 0 || block == 0 || block > EG_HOST_MAX_BLOCK) {
        fprintf(stderr, "eg_host_launch: grid %u x block %u is not a valid launch\n", grid, block);
        abort();
    }
    eg_host_block *h = (eg_host_block *)calloc(1, sizeof(eg_host_block));
    char *stacks = (char *)malloc((size_t)block * EG_HOST_STACK);
    if (!h || !stacks) abort();
    eg_host_block *outer = eg_host;
    eg_host = h;
    h->body = eg_host_call<F>;
    h->closure = &body;
    gridDim = eg_dim3{grid, 1, 1};
    blockDim = eg_dim3{block, 1, 1};
    for (unsigned b = 0; b < grid; b++) {
        blockIdx = eg_dim3{b, 0, 0};
        for (unsigned t = 0; t < block; t++) {
            eg_fiber *f = &h->fibers[t];
            getcontext(&f->context);
            f->context.uc_stack.ss_sp = stacks + (size_t)t * EG_HOST_STACK;
            f->context.uc_stack.ss_size = EG_HOST_STACK;
            f->context.uc_link = &h->scheduler;
            makecontext(&f->context, eg_host_fiber_main, 0);
            f->state = EG_FIBER_RUNNABLE;
        }
        for (unsigned done = 0; done < block;) {
            bool progress = false;
            for (unsigned t = 0; t < block; t++) {
                if (h->fibers[t].state != EG_FIBER_RUNNABLE) continue;
                h->current = t;
                threadIdx = eg_dim3{t, 0, 0};
                swapcontext(&h->scheduler, &h->fibers[t].context);
                if (h->fibers[t].state == EG_FIBER_RUNNABLE) {   /* returned from the kernel */
                    h->fibers[t].state = EG_FIBER_DONE;
                    done++;
                }
                progress = true;
            }
            if (!progress) {
                fprintf(stderr, "eg_host_launch: block %u deadlocked: a barrier some of its threads never reach\n", b);
                abort();
            }
        }
    }
    eg_host = outer;
    free(stacks);
    free(h);
}

#endif /* EG_HOST_H */
