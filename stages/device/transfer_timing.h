// What a host-to-device stage tells `wam-pipeline bench` about its copies, through the stage
// object rather than counter names: bench finds the transfer node by this interface.
#pragma once

#include <cstdint>

namespace wam::stages {

// Totals since open().
struct TransferTiming {
  int64_t staging_us = 0;    // host time packing batches into pinned buffers
  int64_t copy_us = 0;       // the copies' device time, from CUDA events
  int64_t pool_wait_us = 0;  // waiting for a free pinned buffer (flow control, not transfer)
  // waiting, after the copies were queued, for the device to release the buffer's previous batch
  // (its kernels were still queued): the copies' synchronisation less their own device time
  int64_t device_wait_us = 0;
  bool event_timed = false;  // staging_us and copy_us are measured (pinned mode on CUDA)
};

class TimedTransfer {
 public:
  virtual ~TimedTransfer() = default;
  virtual TransferTiming transfer_timing() const = 0;
};

}  // namespace wam::stages
