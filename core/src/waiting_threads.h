// The threads behind Context::run_waiting: a worker thread that calls it suspends its task
// (oneTBB's resumable tasks) and goes on with the graph's other work, while one of these threads
// runs the wait and then resumes the task. Hand-written: oneTBB keeps no threads for blocking work
// (its own are the arena's, as many as the run's thread count) and the standard library has no
// pool. Part of the runtime; stages see only Context::run_waiting.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace wam {

class WaitingThreads {
 public:
  // A thread is started whenever a wait finds none idle, up to `max_threads` (the run's in-flight
  // limit: every sample inside the graph may be waiting at once), and kept for the next waits.
  explicit WaitingThreads(size_t max_threads) : max_threads_(max_threads == 0 ? 1 : max_threads) {}
  // Joins the threads. Every run() has returned by then: the graph waits for its tasks.
  ~WaitingThreads();
  WaitingThreads(const WaitingThreads&) = delete;
  WaitingThreads& operator=(const WaitingThreads&) = delete;

  // Runs `work` on one of the threads while the calling task, which must be a oneTBB task (a
  // graph node's body), is suspended; returns once `work` has, rethrowing what it threw.
  void run(const std::function<void()>& work);

 private:
  void serve();

  const size_t max_threads_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;  // at most one a suspended task: bounded by in-flight
  std::vector<std::thread> threads_;
  size_t idle_ = 0;  // threads waiting for a job
  bool stopping_ = false;
};

}  // namespace wam
