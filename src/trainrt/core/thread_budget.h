// The thread budget: how many threads the engine's parallel loops may use, the calling thread
// included (ThreadPool::global() honours it; thread_pool.h). The pool is sized to the cores this
// process may run on; the budget lowers what one loop takes, so that the engine follows the
// process's thread setting (RTModule passes torch.get_num_threads(), or TRAINRT_NUM_THREADS, at each
// engine call: 2 ranks on 2 cores under torchrun's OMP_NUM_THREADS=1 then run one engine thread
// each, not two). Workers beyond the budget sleep: they neither spin nor take chunks.
//
//   set_thread_budget(1);   // loops run on the calling thread alone
//   set_thread_budget(0);   // the whole pool (the default)
#pragma once

namespace trainrt {

// n <= 0 or above the pool's size: the whole pool. Safe to call between engine calls from any thread.
void set_thread_budget(int n);
int thread_budget();  // the threads a loop may use now (1 .. the pool's size)
// Whether the calling thread is running a chunk of a ThreadPool loop (a loop it starts runs serially).
bool inside_thread_pool_loop();

}  // namespace trainrt
