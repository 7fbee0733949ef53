// One value per worker thread for one stage instance: made on a thread's first use, freed with the
// instance. A function's thread_local would be shared by every instance of the stage in the
// process and outlive them all, keeping what it holds (open files, NVDEC sessions) until the
// thread ends. oneTBB's enumerable_thread_specific does the bookkeeping; this names the one use.
#pragma once

#include <oneapi/tbb/enumerable_thread_specific.h>

namespace wam {

template <class T>
class PerThread {
 public:
  // The calling thread's value, default-constructed on its first call.
  T& local() { return values_.local(); }

 private:
  tbb::enumerable_thread_specific<T> values_;
};

}  // namespace wam
