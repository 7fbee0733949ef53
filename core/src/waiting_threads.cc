#include "waiting_threads.h"

#include <oneapi/tbb/task.h>

#include <exception>

namespace wam {

WaitingThreads::~WaitingThreads() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

void WaitingThreads::run(const std::function<void()>& work) {
  std::exception_ptr failure;
  // The callback runs on this thread once the task is suspended (oneTBB copies it onto the new
  // stack). The task may be resumed, and return from here, before the callback has returned: once
  // the job is queued, the callback touches nothing of this frame.
  oneapi::tbb::task::suspend([&](oneapi::tbb::task::suspend_point tag) {
    {
      std::lock_guard lock(mutex_);
      jobs_.push_back([&work, &failure, tag] {
        try {
          work();
        } catch (...) {
          failure = std::current_exception();
        }
        oneapi::tbb::task::resume(tag);
      });
      if (jobs_.size() > idle_ && threads_.size() < max_threads_) {
        threads_.emplace_back([this] { serve(); });
      }
    }
    ready_.notify_one();
  });
  if (failure) std::rethrow_exception(failure);
}

void WaitingThreads::serve() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mutex_);
      ++idle_;
      ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      --idle_;
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace wam
