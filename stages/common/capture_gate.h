// Keeps the data path's GPU work away from the step's CUDA graph capture. On the H200, NVDEC
// decoding beside the capture invalidated it ("operation failed due to a previous error during
// capture"; FFmpeg's cuvidMapVideoFrame reported CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) although
// the capture runs on a stream of its own in thread-local mode (docs/BENCHMARKS.md, "Versions 15
// to 21 on the H200"): the driver's decoder work is not confined to the reader's stream. So the
// threads that touch the GPU for the data path (VideoDecode's NVDEC readers, Augment on the GPU)
// hold the gate shared, and TrainStep holds it alone while it captures, once per run.
#pragma once

#include <oneapi/tbb/rw_mutex.h>

#include <mutex>
#include <shared_mutex>

namespace wam {

class CaptureGate {
 public:
  // oneTBB's rw_mutex prefers writers: once a capture waits, new GPU work waits behind it, so a
  // steady stream of decoding cannot starve the capture (glibc's rwlock, under std::shared_mutex,
  // prefers readers). It sleeps after a short spin, so waiting readers free their cores.
  using Mutex = tbb::rw_mutex;

  // Held around GPU work of the data path; blocks while a capture runs or waits.
  std::shared_lock<Mutex> gpu_work() { return std::shared_lock<Mutex>(mutex_); }
  // The same without waiting: the lock is empty (owns_lock() false) where gpu_work() would wait.
  std::shared_lock<Mutex> try_gpu_work() {
    return std::shared_lock<Mutex>(mutex_, std::try_to_lock);
  }
  // Held from the start of a capture to its end; waits for the GPU work under way to finish.
  std::unique_lock<Mutex> capture() { return std::unique_lock<Mutex>(mutex_); }

 private:
  Mutex mutex_;
};

// The process's gate: one per process, as a process trains on one GPU.
CaptureGate& capture_gate();

}  // namespace wam
